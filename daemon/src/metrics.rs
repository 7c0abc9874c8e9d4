//! What the server counts, for Prometheus: requests by service, protocol version and status,
//! bytes sent, pack-generation CPU, the pack cache's hits, joins and misses, transfers in flight
//! and queued (with the most in flight at once and the waits in the queue), the transfer buffers'
//! bytes in memory and on disk, push outcomes, maintenance runs, and requests per repository (bounded: past
//! [`MAX_REPOSITORIES`] names, the rest count as `_other`). Kept with `prometheus-client`; the
//! text is served on a listener of its own (`--metrics-listen`, [`crate::server`]).

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Repository names given a label of their own; later ones share `_other`, so a client naming
/// random paths cannot grow the exposition without bound.
pub const MAX_REPOSITORIES: usize = 200;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub service: String,
    pub version: String,
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServiceLabel {
    pub service: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HeldLabel {
    pub held: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RepositoryLabels {
    pub repository: String,
    pub service: String,
}

pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    bytes_out: Family<ServiceLabel, Counter>,
    pack_generations: Counter,
    pack_cpu_seconds: Counter<f64, AtomicU64>,
    pack_cache: Family<OutcomeLabel, Counter>,
    pub transfers_in_flight: Gauge,
    pub transfers_queued: Gauge,
    pub cached_values: Gauge,
    transfers_in_flight_max: Gauge,
    transfers_waited: Counter,
    queue_wait: Histogram,
    buffer_bytes: Family<HeldLabel, Gauge>,
    spill_bytes: Counter,
    ranged_bytes: Counter,
    pushes: Family<OutcomeLabel, Counter>,
    maintenance_runs: Family<OutcomeLabel, Counter>,
    repository_requests: Family<RepositoryLabels, Counter>,
    named: Mutex<HashSet<String>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("gixd");
        let m = Metrics {
            registry: Registry::default(),
            requests: Family::default(),
            bytes_out: Family::default(),
            pack_generations: Counter::default(),
            pack_cpu_seconds: Counter::default(),
            pack_cache: Family::default(),
            transfers_in_flight: Gauge::default(),
            transfers_queued: Gauge::default(),
            cached_values: Gauge::default(),
            transfers_in_flight_max: Gauge::default(),
            transfers_waited: Counter::default(),
            // 1 ms to about 9 minutes.
            queue_wait: Histogram::new(exponential_buckets(0.001, 4.0, 10)),
            buffer_bytes: Family::default(),
            spill_bytes: Counter::default(),
            ranged_bytes: Counter::default(),
            pushes: Family::default(),
            maintenance_runs: Family::default(),
            repository_requests: Family::default(),
            named: Mutex::new(HashSet::new()),
        };
        registry.register("requests", "Requests answered, by service, protocol version and status", m.requests.clone());
        registry.register("bytes_out", "Response bytes sent, by service", m.bytes_out.clone());
        registry.register(
            "pack_generations",
            "Packs generated (a cache hit or join generates none)",
            m.pack_generations.clone(),
        );
        registry.register(
            "pack_generation_cpu_seconds",
            "CPU time of the requests that generated a pack",
            m.pack_cpu_seconds.clone(),
        );
        registry.register("pack_cache", "Pack cache lookups, by outcome (hit, join, miss)", m.pack_cache.clone());
        registry.register("transfers_in_flight", "Transfers holding a transfer slot", m.transfers_in_flight.clone());
        registry.register("transfers_queued", "Transfers waiting for a transfer slot", m.transfers_queued.clone());
        registry.register(
            "repository_cached_values",
            "Values kept per repository (ref snapshots, bitmaps, pack lists, commit-graphs, decoded \
             commits), counted as the idle ones are dropped",
            m.cached_values.clone(),
        );
        registry.register(
            "transfers_in_flight_max",
            "The most transfers that held a slot at once since the start",
            m.transfers_in_flight_max.clone(),
        );
        registry.register(
            "transfers_waited",
            "Transfers that found every slot taken and waited in the queue",
            m.transfers_waited.clone(),
        );
        registry.register(
            "transfer_queue_wait_seconds",
            "How long transfers waited for their slot (0 for a free one)",
            m.queue_wait.clone(),
        );
        registry.register(
            "transfer_buffer_bytes",
            "Bytes of responses written and not yet sent, by where they are held (memory, disk)",
            m.buffer_bytes.clone(),
        );
        registry.register(
            "transfer_spill_bytes",
            "Bytes of responses written to the spill directory since the start",
            m.spill_bytes.clone(),
        );
        registry.register(
            "transfer_ranged_bytes",
            "Bytes of responses kept as ranges of pack files since the start (sent from the files, never copied)",
            m.ranged_bytes.clone(),
        );
        registry.register("pushes", "Pushes, by outcome (ok, refused, failed)", m.pushes.clone());
        registry.register(
            "maintenance_runs",
            "Maintenance runs, by outcome (repacked, skipped, failed)",
            m.maintenance_runs.clone(),
        );
        registry.register(
            "repository_requests",
            "Requests per repository and service (the first names seen; later ones as _other)",
            m.repository_requests.clone(),
        );
        Metrics { registry, ..m }
    }

    /// One answered request.
    pub fn request(&self, service: &str, version: &str, status: &str, repository: Option<&str>) {
        self.requests
            .get_or_create(&RequestLabels { service: service.into(), version: version.into(), status: status.into() })
            .inc();
        if let Some(name) = repository {
            let repository = {
                let mut named = self.named.lock().expect("not poisoned");
                if named.contains(name) || (named.len() < MAX_REPOSITORIES && named.insert(name.to_owned())) {
                    name.to_owned()
                } else {
                    "_other".to_owned()
                }
            };
            self.repository_requests.get_or_create(&RepositoryLabels { repository, service: service.into() }).inc();
        }
    }

    pub fn bytes_out(&self, service: &str, bytes: u64) {
        self.bytes_out.get_or_create(&ServiceLabel { service: service.into() }).inc_by(bytes);
    }

    /// A pack was generated, costing `cpu` seconds of the thread that made it.
    /// A transfer found every slot taken and joined the queue.
    pub fn queued(&self) {
        self.transfers_waited.inc();
    }

    /// A transfer took a slot after waiting `waited` (zero: one was free).
    pub fn slot_taken(&self, waited: std::time::Duration) {
        let now = self.transfers_in_flight.inc() + 1;
        let mut max = self.transfers_in_flight_max.get();
        while now > max {
            match self.transfers_in_flight_max.inner().compare_exchange(
                max,
                now,
                std::sync::atomic::Ordering::SeqCst,
                std::sync::atomic::Ordering::SeqCst,
            ) {
                Ok(_) => break,
                Err(seen) => max = seen,
            }
        }
        self.queue_wait.observe(waited.as_secs_f64());
    }

    /// What the transfer buffers hold now, and what they spilled and kept as ranges since the
    /// start (totals: the counters move to them).
    pub fn buffered(&self, memory: u64, disk: u64, spilled: u64, ranged: u64) {
        for (held, bytes) in [("memory", memory), ("disk", disk)] {
            self.buffer_bytes.get_or_create(&HeldLabel { held: held.into() }).set(bytes as i64);
        }
        for (counter, total) in [(&self.spill_bytes, spilled), (&self.ranged_bytes, ranged)] {
            counter.inc_by(total.saturating_sub(counter.get()));
        }
    }

    pub fn generated(&self, cpu: f64) {
        self.pack_generations.inc();
        self.pack_cpu_seconds.inc_by(cpu);
    }

    pub fn cache(&self, outcome: &str) {
        self.pack_cache.get_or_create(&OutcomeLabel { outcome: outcome.into() }).inc();
    }

    pub fn push(&self, outcome: &str) {
        self.pushes.get_or_create(&OutcomeLabel { outcome: outcome.into() }).inc();
    }

    pub fn maintenance(&self, outcome: &str) {
        self.maintenance_runs.get_or_create(&OutcomeLabel { outcome: outcome.into() }).inc();
    }

    /// The exposition, in the text format Prometheus scrapes.
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String");
        out
    }
}

/// CPU time the calling thread has used, in seconds (`CLOCK_THREAD_CPUTIME_ID`): a request's
/// blocking work runs on one thread from start to end.
pub fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a timespec to write into.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_labels_stop_growing_past_the_bound() {
        let m = Metrics::new();
        for i in 0..MAX_REPOSITORIES + 50 {
            m.request("git-upload-pack", "2", "200", Some(&format!("r{i}.git")));
        }
        let text = m.render();
        let repository_lines = text.lines().filter(|l| l.starts_with("gixd_repository_requests_total{")).count();
        assert_eq!(repository_lines, MAX_REPOSITORIES + 1, "each named repository and one _other");
        assert!(text.contains("repository=\"_other\"") && text.contains("} 50"), "{text}");
    }
}
