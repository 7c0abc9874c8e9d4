//! What one request and the whole server share, whatever the transport: the server's state
//! (repositories, limits, access, transfer slots, the tap), a request's context as the protocol
//! and push layers see it, the protocol version it asked for, and what a tap is told. Neutral
//! ground: transports build these, protocols and push read them.

use std::sync::Arc;

use crate::config::Config;
use crate::repo::{Repos, Served};

/// What every request handler shares.
pub struct State {
    pub repos: Repos,
    /// What selection keeps per repository (bitmap, pack files, readable set).
    pub caches: crate::select::Caches,
    pub config: Config,
    pub access: crate::auth::Access,
    /// One permit per transfer in flight (`Config::max_transfers`).
    pub transfers: Arc<tokio::sync::Semaphore>,
    /// Transfers in flight per repository and per client address.
    pub shares: Arc<Shares>,
    /// An observer of whole exchanges (the wire suite's snapshots), a server option: nothing
    /// is copied without one.
    pub tap: Option<Arc<dyn Tap>>,
    pub metrics: Arc<crate::metrics::Metrics>,
    pub access_log: Option<crate::access_log::AccessLog>,
    pub pack_cache: Option<crate::pack_cache::PackCache>,
    /// The transfer buffers: private pack-cache entries every upload-pack response is written
    /// into and sent from, so a slow reader holds buffer space, not a slot or a thread.
    pub buffers: crate::pack_cache::PackCache,
    /// Requests waiting for a transfer slot now (at most `Config::max_queued`).
    pub queued: std::sync::atomic::AtomicUsize,
    /// Where a push asks for its repository's maintenance (`service::maintenance`); `None`: no
    /// maintenance after pushes.
    pub maintenance: Option<tokio::sync::mpsc::UnboundedSender<std::path::PathBuf>>,
    /// Serving, draining or cancelled, and the work in flight a stop waits for.
    pub life: Arc<crate::lifecycle::Life>,
    /// One permit per LFS upload in flight (`Config::lfs`), taken in the pipeline only.
    pub lfs_uploads: Arc<tokio::sync::Semaphore>,
    /// Where the HTTP(S) listeners are bound (a port 0 in the configuration made concrete).
    pub addresses: Addresses,
    /// Where LFS objects are kept (each repository's `lfs/`, or a bucket).
    pub lfs: crate::lfs::Backend,
}

/// The addresses the server's HTTP and HTTPS listeners are bound to, once bound.
#[derive(Debug, Clone, Copy, Default)]
pub struct Addresses {
    pub http: Option<std::net::SocketAddr>,
    pub https: Option<std::net::SocketAddr>,
}

/// A transfer slot (one of `Config::max_transfers`), counted in the metrics while held.
pub struct Slot {
    _permit: tokio::sync::OwnedSemaphorePermit,
    metrics: Arc<crate::metrics::Metrics>,
    /// How long the request waited in the queue for it.
    pub waited: std::time::Duration,
}

/// Allocations of a megabyte or more (a clone's object list, a walk's tables) are mapped apart and
/// unmapped when freed. glibc's default raises that threshold to the largest block freed so far
/// (up to 32 MiB), and then keeps such blocks in each blocking thread's arena after they are
/// freed: 8 bitmapped clones of a 420 000-object repository left 94 MiB held by an idle gixd
/// and peaked at 168 MiB, where the same requests one after another need a tenth of it.
pub fn give_large_allocations_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: a tuning call, made at start before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

/// The CPU work of a transfer ended: what it allocated and freed goes back to the system now.
/// glibc keeps freed small blocks in the thread's arena, and the response's own allocations made
/// last (its ranges, its buffers' records) sit above them until it is sent, so a selection's
/// worth of freed memory (13.5 MiB for a clone of a 420 000-object repository) stayed resident
/// for as long as the client took to read; `malloc_trim` hands back every free page, wherever it
/// lies in the arenas.
fn give_freed_memory_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: no arguments but the pad; glibc locks its arenas itself.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Every half of `idle`, drop what the repositories nobody asked for in `idle` keep cached
/// (`Config::cache_idle`), and give the memory back.
pub async fn forget_idle_caches(state: Arc<State>, idle: std::time::Duration) {
    let tick = (idle / 2).max(std::time::Duration::from_millis(500));
    loop {
        tokio::time::sleep(tick).await;
        let Some(cutoff) = std::time::Instant::now().checked_sub(idle) else { continue };
        let state = state.clone();
        let _ = tokio::task::spawn_blocking(move || {
            let swept = state.repos.forget_unused(cutoff) + state.caches.forget_unused(cutoff);
            state.metrics.cached_values.set(swept.kept as i64);
            if swept.forgotten > 0 {
                give_freed_memory_back();
            }
        })
        .await;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.metrics.transfers_in_flight.dec();
        give_freed_memory_back();
    }
}

/// Why no slot was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoSlot {
    /// The queue holds `Config::max_queued` requests already.
    QueueFull,
    /// Waited `Config::transfer_queue_wait` in the queue.
    Waited,
}

impl State {
    /// What every transfer of a server shares, for `config`: the repositories, access, transfer
    /// slots and shares, the caches and buffers, the metrics and the access log; pushes ask for
    /// maintenance on `maintenance` when given.
    pub fn new(
        config: Config,
        repos: Repos,
        tap: Option<Arc<dyn Tap>>,
        maintenance: Option<tokio::sync::mpsc::UnboundedSender<std::path::PathBuf>>,
    ) -> std::io::Result<State> {
        let access_log = match &config.access_log {
            Some(path) => Some(crate::access_log::AccessLog::open(path)?),
            None => None,
        };
        let (buffers, io_timeout) = (config.buffers(), config.io_timeout);
        let lfs = crate::lfs::Backend::new(&config.lfs, repos.base()).map_err(std::io::Error::other)?;
        Ok(State {
            lfs,
            repos,
            caches: Default::default(),
            access: crate::auth::Access::new(config.token_file.clone(), config.anonymous_read),
            transfers: Arc::new(tokio::sync::Semaphore::new(config.max_transfers.max(1))),
            shares: Arc::new(crate::session::Shares::new(&config)),
            tap,
            metrics: Arc::new(crate::metrics::Metrics::new()),
            access_log,
            pack_cache: config.pack_cache.clone().map(crate::pack_cache::PackCache::new),
            buffers: crate::pack_cache::PackCache::with_stall(buffers, io_timeout),
            queued: Default::default(),
            maintenance,
            life: crate::lifecycle::Life::new(),
            lfs_uploads: Arc::new(tokio::sync::Semaphore::new(config.lfs.max_uploads.max(1))),
            addresses: Addresses::default(),
            config,
        })
    }

    /// A transfer slot, after a place in the queue: waiting as long as the caller waits (a
    /// transport drops this future when its client goes), up to `transfer_queue_wait` when that
    /// is set; refused at once when the queue is full.
    pub async fn slot(&self) -> Result<Slot, NoSlot> {
        use std::sync::atomic::Ordering::SeqCst;
        // A free slot needs no place in the queue.
        if let Ok(permit) = self.transfers.clone().try_acquire_owned() {
            return Ok(self.slot_from(permit, None));
        }
        let started = std::time::Instant::now();
        if self.queued.fetch_add(1, SeqCst) >= self.config.max_queued {
            self.queued.fetch_sub(1, SeqCst);
            return Err(NoSlot::QueueFull);
        }
        /// Leaves the queue however the wait ends (also when the future is dropped).
        struct Queued<'a>(&'a State);
        impl Drop for Queued<'_> {
            fn drop(&mut self) {
                self.0.queued.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                self.0.metrics.transfers_queued.dec();
            }
        }
        self.metrics.transfers_queued.inc();
        self.metrics.queued();
        let queued = Queued(self);
        let acquire = self.transfers.clone().acquire_owned();
        let permit = match self.config.transfer_queue_wait {
            wait if wait.is_zero() => acquire.await.ok(),
            wait => tokio::time::timeout(wait, acquire).await.ok().and_then(Result::ok),
        };
        drop(queued);
        let permit = permit.ok_or(NoSlot::Waited)?;
        Ok(self.slot_from(permit, Some(started)))
    }

    /// The slot of `permit`, taken at once or after queueing since `queued`.
    fn slot_from(&self, permit: tokio::sync::OwnedSemaphorePermit, queued: Option<std::time::Instant>) -> Slot {
        let waited = queued.map_or(std::time::Duration::ZERO, |since| since.elapsed());
        self.metrics.slot_taken(waited);
        Slot { _permit: permit, metrics: self.metrics.clone(), waited }
    }

    /// The context of a request for `served` by `pusher` (or anonymous), counted in `tally`.
    pub fn context<'a>(&'a self, served: &'a Served, pusher: Option<&'a str>, tally: &'a Tally) -> Context<'a> {
        Context {
            repos: &self.repos,
            caches: &self.caches,
            served,
            config: &self.config,
            pusher,
            tally,
            life: &self.life,
            maintenance: self.maintenance.as_ref(),
            lfs: &self.lfs,
        }
    }

    /// A request is over: counted in the metrics and written to the access log.
    pub fn finished(&self, record: crate::access_log::Record) {
        let version = record.version.map_or("-".to_owned(), |v| v.to_string());
        self.metrics.request(&record.service, &version, &record.status, record.repository.as_deref());
        self.metrics.bytes_out(&record.service, record.bytes);
        if let Some(log) = &self.access_log {
            log.write(record);
        }
    }
}

/// What one request needs from the server.
pub struct Context<'a> {
    pub repos: &'a Repos,
    pub caches: &'a crate::select::Caches,
    pub served: &'a Served,
    pub config: &'a Config,
    /// Who is pushing (the token's user), for the reflog and the log; `None`: anonymous.
    pub pusher: Option<&'a str>,
    /// What the request asked for, counted where it is parsed (the access log's figures).
    pub tally: &'a Tally,
    /// The server's phase: a push cancelled by a stop moves no ref.
    pub life: &'a crate::lifecycle::Life,
    /// Where a request asks for its repository's maintenance (`service::maintenance`); `None`:
    /// the server runs none.
    pub maintenance: Option<&'a tokio::sync::mpsc::UnboundedSender<std::path::PathBuf>>,
    /// Where LFS objects are kept (a push's pointers are checked against them).
    pub lfs: &'a crate::lfs::Backend,
}

/// What the codecs ([`crate::protocol`]) need of a request: the limits they enforce as they
/// parse, and the tally they count into — not its repository, caches or configuration, which
/// they reach only through what the service gives them.
#[derive(Clone, Copy)]
pub struct Bounds<'a> {
    pub max_wants: usize,
    pub max_haves: usize,
    pub max_request_body: usize,
    pub tally: &'a Tally,
}

impl Context<'_> {
    /// What the codecs take of this context.
    pub fn bounds(&self) -> Bounds<'_> {
        let config = self.config;
        Bounds {
            max_wants: config.max_wants,
            max_haves: config.max_haves,
            max_request_body: config.max_request_body,
            tally: self.tally,
        }
    }
}

/// Counts of one request, filled in by the protocol layer as it parses.
#[derive(Debug, Default)]
pub struct Tally {
    pub wants: std::sync::atomic::AtomicUsize,
    pub haves: std::sync::atomic::AtomicUsize,
}

impl Tally {
    pub fn asked(&self, wants: usize, haves: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        self.wants.fetch_add(wants, Relaxed);
        self.haves.fetch_add(haves, Relaxed);
    }

    pub fn counts(&self) -> (usize, usize) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.wants.load(Relaxed), self.haves.load(Relaxed))
    }
}

/// The protocol a client asked for (HTTP `Git-Protocol` header, git:// extra parameters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// v0 and v1 (v1 is v0 with a `version 1` line in front of the advertisement).
    V0,
    V1,
    V2,
}

impl Version {
    /// The number git gives it (`0`, `1`, `2`).
    pub fn number(self) -> u8 {
        match self {
            Version::V0 => 0,
            Version::V1 => 1,
            Version::V2 => 2,
        }
    }

    /// Parse `version=N` out of colon-separated parameters; the highest version we speak wins.
    pub fn from_params(params: &str) -> Version {
        let mut version = Version::V0;
        for p in params.split(':') {
            match p.trim() {
                "version=2" => version = Version::V2,
                "version=1" if version == Version::V0 => version = Version::V1,
                _ => {}
            }
        }
        version
    }
}

/// One request and its complete response.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// The repository as the client named it.
    pub repo: String,
    /// `info/refs` or `git-upload-pack`.
    pub service: &'static str,
    pub version: Version,
    pub request: Vec<u8>,
    pub response: Vec<u8>,
    /// The pack sent, if any.
    pub pack: Option<crate::pack::Stats>,
}

pub trait Tap: Send + Sync {
    fn exchange(&self, exchange: Exchange);
}

/// Transfers in flight per repository and per client address, beside the global slots
/// (`Config::max_transfers_per_repository`, `Config::max_transfers_per_client`; 0: no limit).
/// Counted while a [`Share`] lives; past a limit a transfer is refused at once, not queued.
#[derive(Debug, Default)]
pub struct Shares {
    per_repository: usize,
    per_client: usize,
    counts: std::sync::Mutex<std::collections::HashMap<ShareKey, usize>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum ShareKey {
    Repository(std::path::PathBuf),
    Client(std::net::IpAddr),
}

/// Which limit refused a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Busy {
    Repository,
    Client,
}

impl Busy {
    /// What the client is told (HTTP 503 with `Retry-After`, git:// `ERR`).
    pub fn message(self) -> &'static str {
        match self {
            Busy::Repository => "server busy: too many transfers of this repository in flight, retry shortly",
            Busy::Client => "server busy: too many transfers from your address in flight, retry shortly",
        }
    }
}

/// One transfer's place in the counts of its repository and its client; given back on drop.
#[derive(Debug)]
pub struct Share {
    shares: Arc<Shares>,
    keys: Vec<ShareKey>,
}

impl Shares {
    pub fn new(config: &Config) -> Self {
        Shares {
            per_repository: config.max_transfers_per_repository,
            per_client: config.max_transfers_per_client,
            counts: Default::default(),
        }
    }

    /// A place for a transfer of the repository at `git_dir` from `client` (unknown: no
    /// per-client count), or the limit it would pass.
    pub fn enter(self: &Arc<Self>, git_dir: &std::path::Path, client: Option<std::net::IpAddr>) -> Result<Share, Busy> {
        let mut keys = Vec::with_capacity(2);
        if self.per_repository > 0 {
            keys.push((ShareKey::Repository(git_dir.to_owned()), self.per_repository, Busy::Repository));
        }
        if let (Some(ip), true) = (client, self.per_client > 0) {
            keys.push((ShareKey::Client(ip), self.per_client, Busy::Client));
        }
        let mut counts = self.counts.lock().expect("not poisoned");
        for (key, limit, busy) in &keys {
            if counts.get(key).copied().unwrap_or(0) >= *limit {
                return Err(*busy);
            }
        }
        for (key, _, _) in &keys {
            *counts.entry(key.clone()).or_insert(0) += 1;
        }
        Ok(Share { shares: self.clone(), keys: keys.into_iter().map(|(key, _, _)| key).collect() })
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut counts = self.shares.counts.lock().expect("not poisoned");
        for key in &self.keys {
            if let Some(n) = counts.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repository_or_a_client_past_its_limit_is_refused_and_a_finished_transfer_gives_its_place_back() {
        let mut config = Config::new("/srv".into());
        config.max_transfers_per_repository = 2;
        config.max_transfers_per_client = 1;
        let shares = Arc::new(Shares::new(&config));
        let (a, b) = (std::path::Path::new("/srv/a.git"), std::path::Path::new("/srv/b.git"));
        let (one, two): (std::net::IpAddr, std::net::IpAddr) =
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let first = shares.enter(a, Some(one)).unwrap();
        assert_eq!(shares.enter(b, Some(one)).unwrap_err(), Busy::Client, "one transfer per client");
        let second = shares.enter(a, Some(two)).unwrap();
        assert_eq!(shares.enter(a, None).unwrap_err(), Busy::Repository, "two per repository");
        let other = shares.enter(b, None).unwrap();
        drop(first);
        let again = shares.enter(a, Some(one)).expect("its place is free again");
        drop((second, other, again));
        assert!(shares.counts.lock().unwrap().is_empty(), "nothing left counted");
        let unlimited = Arc::new(Shares::new(&Config::new("/srv".into())));
        let many: Vec<Share> = (0..100).map(|_| unlimited.enter(a, Some(one)).unwrap()).collect();
        assert_eq!(many.len(), 100);
    }
}
