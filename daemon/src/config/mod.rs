//! Settings: where repositories are, which are served, and every limit, each with why it exists.
//! [`Config`] is what the server runs with; [`Settings`] declares each setting once (its TOML
//! key, flag, variable, default and doc) and stacks the layers that give them.

use std::net::SocketAddr;
use std::path::PathBuf;

pub use sections::{LfsSettings, Limits, PackCacheSettings};

pub use settings::{Layers, Settings, SettingsError};

mod sections;
mod settings;

/// Which repositories under the base path may be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exports {
    /// Only those holding a `git-daemon-export-ok` file (git daemon's rule).
    DaemonExportOk,
    /// Every repository under the base path (`--export-all`).
    All,
    /// Exactly this git directory (the checkout `gixd serve` was started in).
    Only(PathBuf),
}

/// Which services are offered (git daemon's `--enable`/`--disable`): upload-pack on,
/// receive-pack and upload-archive off until enabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Services {
    pub upload_pack: bool,
    pub receive_pack: bool,
    pub upload_archive: bool,
}

impl Default for Services {
    fn default() -> Self {
        Services { upload_pack: true, receive_pack: false, upload_archive: false }
    }
}

impl Services {
    /// Switch a service by its name (`upload-pack`, `receive-pack`, `upload-archive`).
    pub fn set(&mut self, name: &str, on: bool) -> Result<(), ConfigError> {
        match name {
            "upload-pack" => self.upload_pack = on,
            "receive-pack" => self.receive_pack = on,
            "upload-archive" => self.upload_archive = on,
            other => return Err(ConfigError::UnknownService(other.to_owned())),
        }
        Ok(())
    }
}

/// A setting no configuration layer may give.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("unknown service '{0}' (known: upload-pack, receive-pack, upload-archive)")]
    UnknownService(String),
    #[error("{0}")]
    Tls(&'static str),
}

/// How a request path finds its repository, beyond the base path (git daemon's flags).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathRules {
    /// `--strict-paths`: the path must name the git directory exactly (no `.git` appended, no
    /// `/.git` looked into, no subdirectories of whitelisted directories).
    pub strict: bool,
    /// `--user-path[=dir]`: `~user/x` means `<user's home>/<dir>/x` — still only below the base
    /// path. `None`: `~user` paths are refused.
    pub user_path: Option<String>,
    /// Directories given on git daemon's command line: when any are given, only repositories in
    /// them (or, without `strict`, below them) are served.
    pub whitelist: Vec<PathBuf>,
}

/// How slowly a client may send, and over how long a wait that is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// Bytes per second of waiting, at least.
    pub min_rate: u64,
    /// The waiting time over which the rate is judged (a burst after a pause is fine).
    pub window: std::time::Duration,
}

/// The delta cache of a whole-history walk (a clone or fetch without a bitmap, the readable
/// set): it decodes every tree of the repository once, newest first by commit time, each the
/// base of older versions decoded soon after. Walked in that order the bases a walk needs fit in
/// less than git's 96 MiB (git.git clone without bitmap or commit-graph, server CPU and cgroup
/// peak: 64 MiB 9.0 s 155 MiB, 96 MiB 10.9 s 191 MiB; git daemon 8.6 s 197 MiB). Held only
/// while the walk runs ([`crate::repo::with_walk_cache`]).
pub(crate) const WALK_DELTA_BASE_CACHE: u64 = 64 << 20;

#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// Where git:// is served, if at all (git daemon's port is 9418).
    pub git_listen: Option<SocketAddr>,
    /// Where HTTPS is served ([`crate::transport::tls`]), with `tls`; `None`: not served.
    pub https_listen: Option<SocketAddr>,
    /// The certificate chain HTTPS presents (PEM), re-read on SIGHUP; with `tls_key`.
    pub tls_cert: Option<PathBuf>,
    /// Its private key (PEM).
    pub tls_key: Option<PathBuf>,
    /// Where SSH is served ([`crate::transport::ssh`]); `None`: not served.
    pub ssh_listen: Option<SocketAddr>,
    /// The SSH host key's file; `None`: `ssh_host_ed25519_key` beside the token file.
    pub ssh_host_key: Option<PathBuf>,
    /// The SSH ciphers offered ([`crate::transport::ssh::ciphers`]); empty: this CPU's fastest.
    pub ssh_ciphers: Vec<String>,
    /// How long transfers in flight may take to finish once the server is told to stop (SIGTERM,
    /// SIGINT) before what is left is cancelled ([`crate::lifecycle`]).
    pub shutdown_grace: std::time::Duration,
    /// How long a git:// client may take to send its request line: a connection that never
    /// says what it wants must not hold a thread.
    pub init_timeout: std::time::Duration,
    /// Repositories are looked up below this directory, never outside it.
    pub base_path: PathBuf,
    pub exports: Exports,
    pub paths: PathRules,
    pub services: Services,
    /// The token state file (`gixd token …` writes it); `None`: no tokens, so unexported
    /// repositories are not readable over HTTP and nobody can push over HTTP.
    pub token_file: Option<PathBuf>,
    /// Exported repositories may be read without a token.
    pub anonymous_read: bool,
    /// A push over HTTP to a repository that does not exist creates it (private, SHA-1) when
    /// the pusher's token may create it (`gixd token add --write --create`). Off by default.
    pub push_to_create: bool,
    /// Opt-in: repack every repository below the base path into one pack with a bitmap this
    /// often ([`crate::maintenance`]). `None`: never.
    pub maintenance_interval: Option<std::time::Duration>,
    /// After pushes, and after a fetch finds its refs moved by another writer, a repository gets
    /// the maintenance it is due
    /// ([`crate::maintenance::geometric::due`]): its small packs rolled up geometrically, or, once
    /// enough objects are outside its bitmap, a full repack with a new one. On by default.
    pub auto_maintenance: bool,
    /// Most git:// connections at once (git daemon's `--max-connections`; 0: no limit beyond
    /// the transfer limit). One more is told so and closed.
    pub max_connections: usize,
    /// git:// errors say what went wrong (no such repository, not exported); without it, every
    /// path failure reads "access denied or repository not exported", as git daemon says
    /// without `--informative-errors`, so a prober learns nothing.
    pub informative_errors: bool,
    /// Bytes per HTTP response frame: the most of a response handed to the connection at once
    /// (slices of the transfer buffers or the pack cache, no copy: one frame in the body's
    /// channel and one being written). Larger means fewer wake-ups. Floored to 1.
    pub stream_window: usize,
    /// Largest request body read as sent (gzip or not): a negotiation is wants and haves, so
    /// anything near this is not a git client.
    pub max_request_body: usize,
    /// Largest request body after gzip inflation: caps a gzip bomb at a size we can afford.
    pub max_inflated_body: usize,
    /// Largest pack one push may send: beyond it the push is refused and nothing is kept.
    pub max_push_bytes: u64,
    /// The largest object a push may carry, by its declared (inflated) size, refused before it is
    /// allocated: a zlib bomb of a few hundred KB can declare half a gigabyte.
    pub max_object_bytes: usize,
    /// Most `want` lines one request may carry: one per ref a client can ask for, with room.
    pub max_wants: usize,
    /// Most `have` lines one request may carry (stateless HTTP re-sends the common ones).
    pub max_haves: usize,
    /// Threads serving connections (tokio workers): one per CPU the budget really has.
    pub worker_threads: usize,
    /// Blocking threads, all started up front and kept: repository reads and pack generation
    /// run on them, so a transfer never creates a thread.
    pub blocking_threads: usize,
    /// Transfer slots: requests negotiating, selecting and writing a pack at once (CPU work;
    /// what they wrote is sent from the transfer buffers without a slot). More wait in a queue
    /// of `max_queued`, up to `transfer_queue_wait`, then get "busy, retry".
    pub max_transfers: usize,
    /// Requests waiting for a transfer slot at once; one more is refused "busy, retry".
    pub max_queued: usize,
    /// Bytes of written, unread responses held in memory, all transfers together.
    pub buffer_memory_bytes: u64,
    /// Where responses past `buffer_memory_bytes` wait for their readers (unlinked files).
    pub spill_dir: PathBuf,
    /// Bytes of responses in `spill_dir`, all transfers together.
    pub spill_bytes: u64,
    /// Bytes the delta caches of walks (fetches without a bitmap) may hold, all together
    /// ([`crate::repo::with_walk_cache`]): 64 MiB per transfer slot, within a quarter of the
    /// memory gixd may use.
    pub walk_cache_bytes: u64,
    /// Transfers of one repository in flight at once, of the `max_transfers` (0: no limit of
    /// its own): a fleet cloning one repository leaves slots for the others.
    pub max_transfers_per_repository: usize,
    /// Transfers from one client address in flight at once (0: no limit of its own): one host
    /// cannot take every slot.
    pub max_transfers_per_client: usize,
    /// The longest a queued request waits for a slot; zero: as long as its client stays.
    pub transfer_queue_wait: std::time::Duration,
    /// How long a client may take to send its request head or body, or to accept the next frame
    /// of a response, before the transfer is dropped: a stalled client must not hold a thread.
    pub io_timeout: std::time::Duration,
    /// How long a repository's cached state outlives its last use ([`crate::repo::cache`]); zero:
    /// kept for the process's life.
    pub cache_idle: std::time::Duration,
    /// git's pace for a running progress line ("Enumerating objects: N", "Counting objects:
    /// 45% (450/1000)"): at most one this often. One second, as git; the tests set it to zero
    /// to see every line a long transfer would show.
    pub progress_interval: std::time::Duration,
    /// The slowest a client may send a request or a push (bytes per second of the server's
    /// waiting, judged over `init_timeout` of waiting): per-read timeouts alone let a client that
    /// sends a byte every few seconds hold a connection and a transfer slot for ever.
    pub min_receive_rate: u64,
    /// Where Prometheus scrapes `/metrics` ([`crate::metrics`]); `None`: not served.
    pub metrics_listen: Option<SocketAddr>,
    /// The access log's file, `-` for standard output ([`crate::access_log`]); `None`: none.
    pub access_log: Option<PathBuf>,
    /// The single-flight pack cache ([`crate::pack_cache`]); `None` (the default, as Gitaly's):
    /// every fetch generates its own pack.
    pub pack_cache: Option<PackCache>,
    /// Git LFS ([`crate::service::lfs`]).
    pub lfs: Lfs,
}

/// Git LFS's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lfs {
    pub enabled: bool,
    /// Largest object an upload may store.
    pub max_object_bytes: u64,
    /// Most LFS bytes a repository may hold; 0: no limit.
    pub max_repository_bytes: u64,
    /// Uploads at once, server-wide.
    pub max_uploads: usize,
    /// Where clients reach the server (no trailing slash); `None`: each request's scheme and host.
    pub url: Option<String>,
    /// The S3-compatible bucket objects are kept in (with a bucket named); default: each
    /// repository's `lfs/`.
    pub s3: LfsS3,
}

/// Where an S3-compatible bucket is and how requests to it are signed ([`crate::lfs::s3`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LfsS3 {
    pub bucket: Option<String>,
    pub endpoint: Option<String>,
    pub region: String,
    pub prefix: String,
    pub path_style: bool,
    pub access_key_id: Option<String>,
    pub secret_access_key_file: Option<PathBuf>,
}

/// The PEM files HTTPS is served with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// What the pack cache keeps, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackCache {
    /// Bytes of responses held in memory, all entries together.
    pub memory_bytes: u64,
    /// Where an entry that does not fit in memory goes (unlinked files); `None`: it stays in
    /// memory while it is generated and is not kept afterwards.
    pub dir: Option<PathBuf>,
    /// Bytes of finished entries kept on disk.
    pub disk_bytes: u64,
    /// How long a finished entry is kept.
    pub max_age: std::time::Duration,
}

impl Config {
    /// The settings whose values differ in `other`, by name (a reload names those it cannot
    /// apply). Every field is listed: a new setting that is not would not compile.
    pub fn changed_in(&self, other: &Config) -> Vec<&'static str> {
        macro_rules! changed {
            ($($field:ident),*) => {{
                let Config { $($field),* } = self;
                let mut changed = Vec::new();
                $(if *$field != other.$field {
                    changed.push(stringify!($field));
                })*
                changed
            }};
        }
        changed!(
            listen,
            git_listen,
            https_listen,
            tls_cert,
            tls_key,
            ssh_listen,
            ssh_host_key,
            ssh_ciphers,
            shutdown_grace,
            init_timeout,
            base_path,
            exports,
            paths,
            services,
            token_file,
            anonymous_read,
            push_to_create,
            maintenance_interval,
            auto_maintenance,
            max_connections,
            informative_errors,
            stream_window,
            max_request_body,
            max_inflated_body,
            max_push_bytes,
            max_object_bytes,
            max_wants,
            max_haves,
            worker_threads,
            blocking_threads,
            max_transfers,
            max_queued,
            buffer_memory_bytes,
            spill_dir,
            spill_bytes,
            walk_cache_bytes,
            max_transfers_per_repository,
            max_transfers_per_client,
            transfer_queue_wait,
            io_timeout,
            cache_idle,
            progress_interval,
            min_receive_rate,
            metrics_listen,
            access_log,
            pack_cache,
            lfs
        )
    }
    /// The configuration every setting's declared default gives ([`Settings`]), serving
    /// `base_path`, sized for one CPU.
    pub fn new(base_path: PathBuf) -> Self {
        Settings { base_path: Some(base_path), ..Settings::default() }
            .resolve(1)
            .expect("the declared defaults resolve")
    }

    /// Size the threads, transfers and buffers for `effective` CPUs: a worker per CPU, a transfer
    /// slot per CPU (a slot is CPU work: its client's reading is done from the buffers), blocking
    /// threads for those plus the short tasks beside them (advertisements, repository lookups),
    /// a queue of 64 per CPU (a CI fleet's burst waits instead of failing its jobs; a queued
    /// request costs its connection and its request body), and 64 MiB of buffered responses per
    /// CPU in memory (about what a slot writes while a fast client reads along; slow clients'
    /// packs go to the spill directory) — at most a quarter of `memory`, the memory gixd may use
    /// when its cgroup limits it (the rest is the slots' work: walks, delta caches, the packs'
    /// pages). A bitmapped clone's pack is no part of it: it is sent from the pack file.
    pub fn size_for(&mut self, effective: usize, memory: Option<u64>) {
        let effective = effective.max(1);
        self.worker_threads = effective;
        self.max_transfers = effective;
        self.blocking_threads = self.max_transfers + 2;
        self.max_queued = 64 * effective;
        self.buffer_memory_bytes = 64 << 20;
        self.buffer_memory_bytes *= effective as u64;
        if let Some(memory) = memory {
            self.buffer_memory_bytes = self.buffer_memory_bytes.min(memory / 4);
        }
    }

    /// The walks' delta caches for the transfer slots there are: one walk's cap each
    /// ([`WALK_DELTA_BASE_CACHE`]), within a quarter of `memory` when gixd's memory
    /// is limited.
    pub fn size_walk_caches(&mut self, memory: Option<u64>) {
        self.walk_cache_bytes = WALK_DELTA_BASE_CACHE * self.max_transfers as u64;
        if let Some(memory) = memory {
            self.walk_cache_bytes = self.walk_cache_bytes.min(memory / 4);
        }
    }

    /// The certificate and key HTTPS is served with: both, or neither.
    pub fn tls(&self) -> Result<Option<TlsFiles>, ConfigError> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Ok(Some(TlsFiles { cert: cert.clone(), key: key.clone() })),
            (None, None) => Ok(None),
            _ => Err(ConfigError::Tls("tls_cert and tls_key go together: give both or neither")),
        }
    }

    /// The SSH host key's file, as given or beside the token file.
    pub fn ssh_host_key_path(&self) -> PathBuf {
        self.ssh_host_key.clone().unwrap_or_else(|| {
            let state = self.token_file.as_deref().and_then(|f| f.parent()).unwrap_or(std::path::Path::new("."));
            state.join("ssh_host_ed25519_key")
        })
    }

    /// The transfer buffers' budgets, as pack-cache settings for its private entries.
    pub fn buffers(&self) -> PackCache {
        PackCache {
            memory_bytes: self.buffer_memory_bytes,
            dir: Some(self.spill_dir.clone()),
            disk_bytes: self.spill_bytes,
            max_age: std::time::Duration::ZERO,
        }
    }

    /// The sizes, as the startup line states them.
    pub fn sizes(&self) -> String {
        format!(
            "workers {}, blocking threads {}, transfer slots {}, queue {}, walks' delta caches {} MiB, buffers {} MiB in memory, {} MiB in {}",
            self.worker_threads,
            self.blocking_threads,
            self.max_transfers,
            self.max_queued,
            self.walk_cache_bytes >> 20,
            self.buffer_memory_bytes >> 20,
            self.spill_bytes >> 20,
            self.spill_dir.display()
        )
    }

    /// How request bytes must arrive ([`crate::transport::pace`]): judged over `init_timeout`.
    pub fn pace(&self) -> Pace {
        Pace { min_rate: self.min_receive_rate, window: self.init_timeout }
    }

    /// How a push's bytes must arrive: judged over `io_timeout`, since a client may compress its
    /// pack for a while before the first byte of it leaves.
    pub fn push_pace(&self) -> Pace {
        Pace { min_rate: self.min_receive_rate, window: self.io_timeout }
    }

    /// The window actually used: 0 would accept no byte ever and hang the transfer.
    pub fn effective_stream_window(&self) -> usize {
        self.stream_window.max(1)
    }
}
/// Where tokens live without a configuration file: `$GIXD_STATE_DIR/tokens.toml`, else
/// `$XDG_STATE_HOME/gixd/tokens.toml`, else `~/.local/state/gixd/tokens.toml`.
pub fn default_token_file() -> PathBuf {
    if let Some(dir) = std::env::var_os("GIXD_STATE_DIR") {
        return PathBuf::from(dir).join("tokens.toml");
    }
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME") {
        return PathBuf::from(dir).join("gixd/tokens.toml");
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".local/state/gixd/tokens.toml")
}

/// Where transfer buffers spill without a setting: `/var/tmp` (on disk where `/tmp` is a tmpfs,
/// which would put the spilled bytes back in memory), else the system's temporary directory.
pub fn default_spill_dir() -> PathBuf {
    let var_tmp = PathBuf::from("/var/tmp");
    if var_tmp.is_dir() { var_tmp } else { std::env::temp_dir() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reload_names_each_changed_setting_and_no_other() {
        let was = Config::new("/srv/git".into());
        assert!(was.changed_in(&was.clone()).is_empty());
        let mut now = was.clone();
        now.max_transfers += 1;
        now.services.receive_pack = !now.services.receive_pack;
        now.io_timeout *= 2;
        assert_eq!(was.changed_in(&now), ["services", "max_transfers", "io_timeout"]);
    }
}
