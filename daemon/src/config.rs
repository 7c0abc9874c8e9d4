//! Settings: where repositories are, which are served, and every limit, each with why it exists.

use std::net::SocketAddr;
use std::path::PathBuf;

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

#[derive(Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// Where git:// is served, if at all (git daemon's port is 9418).
    pub git_listen: Option<SocketAddr>,
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
    /// After pushes, a repository gets the maintenance it is due
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
    /// Bytes per HTTP response frame: the in-flight window between the pack writer and the
    /// socket. Larger means fewer wake-ups, smaller means less memory per transfer. Floored to 1.
    /// A pack cache reader is not bound by it: its frames are slices of the entry's mapped file
    /// (up to a 4 MiB window's end), which cost no memory per transfer.
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
    /// Upload-pack requests (each may generate a pack) in flight at once; more wait up to
    /// `transfer_queue_wait`, then get "busy, retry" instead of an unbounded pile of work.
    pub max_transfers: usize,
    /// Transfers of one repository in flight at once, of the `max_transfers` (0: no limit of
    /// its own): a fleet cloning one repository leaves slots for the others.
    pub max_transfers_per_repository: usize,
    /// Transfers from one client address in flight at once (0: no limit of its own): one host
    /// cannot take every slot.
    pub max_transfers_per_client: usize,
    pub transfer_queue_wait: std::time::Duration,
    /// How long a client may take to send its request head or body, or to accept the next frame
    /// of a response, before the transfer is dropped: a stalled client must not hold a thread.
    pub io_timeout: std::time::Duration,
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

impl PackCache {
    pub const DEFAULT_MEMORY: u64 = 64 << 20;
    pub const DEFAULT_DISK: u64 = 1 << 30;
    pub const DEFAULT_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(300);
}

impl Config {
    pub const DEFAULT_LISTEN: &'static str = "127.0.0.1:8080";
    pub const DEFAULT_STREAM_WINDOW: usize = 256 * 1024;

    pub fn new(base_path: PathBuf) -> Self {
        Config {
            listen: Self::DEFAULT_LISTEN.parse().expect("valid default"),
            git_listen: None,
            init_timeout: std::time::Duration::from_secs(30),
            base_path,
            exports: Exports::DaemonExportOk,
            paths: PathRules::default(),
            services: Services::default(),
            token_file: None,
            anonymous_read: true,
            push_to_create: false,
            maintenance_interval: None,
            auto_maintenance: true,
            max_connections: 0,
            informative_errors: true,
            stream_window: Self::DEFAULT_STREAM_WINDOW,
            max_request_body: 16 * 1024 * 1024,
            max_inflated_body: 64 * 1024 * 1024,
            max_push_bytes: 4 << 30,
            max_object_bytes: 256 << 20,
            max_wants: 100_000,
            max_haves: 100_000,
            worker_threads: 1,
            blocking_threads: 4,
            max_transfers: 2,
            max_transfers_per_repository: 0,
            max_transfers_per_client: 0,
            transfer_queue_wait: std::time::Duration::from_secs(5),
            io_timeout: std::time::Duration::from_secs(120),
            progress_interval: std::time::Duration::from_secs(1),
            min_receive_rate: 1024,
            metrics_listen: None,
            access_log: None,
            pack_cache: None,
        }
    }

    /// Size the threads and transfers for `effective` CPUs: a worker per CPU, two transfers per
    /// CPU (a transfer also waits on its client), and blocking threads for those plus the short
    /// tasks beside them (advertisements, repository lookups).
    pub fn size_for(&mut self, effective: usize) {
        let effective = effective.max(1);
        self.worker_threads = effective;
        self.max_transfers = 2 * effective;
        self.blocking_threads = self.max_transfers + 2;
    }

    /// The sizes, as the startup line states them.
    pub fn sizes(&self) -> String {
        format!(
            "workers {}, blocking threads {}, transfers in flight {}",
            self.worker_threads, self.blocking_threads, self.max_transfers
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

/// The TOML configuration file (`gixd serve --config FILE`). Every key is optional: what it
/// leaves out keeps its embedded default, and a flag given on the command line wins over it.
/// Unknown keys are errors, so a typo is reported rather than ignored.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    pub listen: Option<SocketAddr>,
    pub git_listen: Option<SocketAddr>,
    pub base_path: Option<PathBuf>,
    pub export_all: Option<bool>,
    /// Relative to the configuration file's directory. Default: `gixd-tokens.toml` beside it.
    pub token_file: Option<PathBuf>,
    pub anonymous_read: Option<bool>,
    pub push_to_create: Option<bool>,
    pub stream_window: Option<usize>,
    /// Services offered on git:// besides the defaults (`upload-pack`, `receive-pack`,
    /// `upload-archive`); `disable` takes them away.
    pub enable: Option<Vec<String>>,
    pub disable: Option<Vec<String>>,
    pub informative_errors: Option<bool>,
    pub strict_paths: Option<bool>,
    pub user_path: Option<String>,
    pub max_connections: Option<usize>,
    /// Seconds between maintenance runs over every repository (absent: none).
    pub maintenance_interval_secs: Option<u64>,
    /// Maintenance after pushes (default true).
    pub auto_maintenance: Option<bool>,
    pub metrics_listen: Option<SocketAddr>,
    /// Relative to the configuration file's directory; `-`: standard output.
    pub access_log: Option<PathBuf>,
    pub limits: Option<Limits>,
    pub pack_cache: Option<PackCacheFile>,
}

/// `[pack_cache]`: present (even empty) turns the cache on; each key as [`PackCache`] says.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackCacheFile {
    pub memory_bytes: Option<u64>,
    /// Relative to the configuration file's directory.
    pub dir: Option<PathBuf>,
    pub disk_bytes: Option<u64>,
    pub max_age_secs: Option<u64>,
}

/// `[limits]`: sizes and times, each as its `Config` field says.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub max_request_body: Option<usize>,
    pub max_inflated_body: Option<usize>,
    pub max_push_bytes: Option<u64>,
    pub max_object_bytes: Option<usize>,
    pub max_wants: Option<usize>,
    pub max_haves: Option<usize>,
    pub max_transfers: Option<usize>,
    pub max_transfers_per_repository: Option<usize>,
    pub max_transfers_per_client: Option<usize>,
    pub worker_threads: Option<usize>,
    pub blocking_threads: Option<usize>,
    pub io_timeout_secs: Option<u64>,
    pub init_timeout_secs: Option<u64>,
    pub queue_wait_secs: Option<u64>,
    pub min_receive_rate: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

impl File {
    /// Parse `path`; the error names the file, the line and the key.
    pub fn load(path: &std::path::Path) -> Result<File, FileError> {
        let text = std::fs::read_to_string(path).map_err(|source| FileError::Read { path: path.to_owned(), source })?;
        toml::from_str(&text)
            .map_err(|e| FileError::Invalid { path: path.to_owned(), message: e.to_string().trim_end().to_owned() })
    }

    /// What is wrong beyond the syntax: each problem, one line each.
    pub fn problems(&self, dir: &std::path::Path) -> Vec<String> {
        let mut out = Vec::new();
        match &self.base_path {
            Some(base) if !dir.join(base).is_dir() => {
                out.push(format!("base_path: {} is not a directory", dir.join(base).display()))
            }
            _ => {}
        }
        let mut services = Services::default();
        for name in self.enable.iter().flatten() {
            if let Err(e) = services.set(name, true) {
                out.push(format!("enable: {e}"));
            }
        }
        for name in self.disable.iter().flatten() {
            if let Err(e) = services.set(name, false) {
                out.push(format!("disable: {e}"));
            }
        }
        if self.stream_window == Some(0) {
            out.push("stream_window: must be at least 1".into());
        }
        if self.listen.is_some() && self.listen == self.git_listen {
            out.push("listen and git_listen: the same address twice".into());
        }
        if let Some(limits) = &self.limits {
            for (key, value) in [
                ("max_transfers", limits.max_transfers),
                ("worker_threads", limits.worker_threads),
                ("max_wants", limits.max_wants),
            ] {
                if value == Some(0) {
                    out.push(format!("limits.{key}: must be at least 1"));
                }
            }
        }
        if let Some(cache_dir) = self.pack_cache.as_ref().and_then(|c| c.dir.as_ref())
            && !dir.join(cache_dir).is_dir()
        {
            out.push(format!("pack_cache.dir: {} is not a directory", dir.join(cache_dir).display()));
        }
        if let Some(token_file) = &self.token_file {
            let path = dir.join(token_file);
            if path.parent().is_some_and(|p| !p.as_os_str().is_empty() && !p.is_dir()) {
                out.push(format!("token_file: the directory of {} does not exist", path.display()));
            }
        }
        out
    }

    /// What the file sets (paths made relative to `dir`, the file's directory): the layer
    /// below the command line's flags in [`Overrides::resolve`].
    pub fn overrides(&self, dir: &std::path::Path) -> Overrides {
        let secs = std::time::Duration::from_secs;
        let limits = self.limits.as_ref();
        let mut services = Vec::new();
        services.extend(self.enable.iter().flatten().map(|name| (name.clone(), true)));
        services.extend(self.disable.iter().flatten().map(|name| (name.clone(), false)));
        Overrides {
            listen: self.listen,
            git_listen: self.git_listen,
            base_path: self.base_path.as_ref().map(|b| dir.join(b)),
            exports: self.export_all.map(|all| if all { Exports::All } else { Exports::DaemonExportOk }),
            token_file: Some(dir.join(self.token_file.clone().unwrap_or_else(|| "gixd-tokens.toml".into()))),
            anonymous_read: self.anonymous_read,
            push_to_create: self.push_to_create,
            stream_window: self.stream_window,
            services,
            informative_errors: self.informative_errors,
            strict_paths: self.strict_paths,
            user_path: self.user_path.clone(),
            max_connections: self.max_connections,
            maintenance_interval: self.maintenance_interval_secs.map(secs),
            auto_maintenance: self.auto_maintenance,
            max_request_body: limits.and_then(|l| l.max_request_body),
            max_inflated_body: limits.and_then(|l| l.max_inflated_body),
            max_push_bytes: limits.and_then(|l| l.max_push_bytes),
            max_object_bytes: limits.and_then(|l| l.max_object_bytes),
            max_wants: limits.and_then(|l| l.max_wants),
            max_haves: limits.and_then(|l| l.max_haves),
            min_receive_rate: limits.and_then(|l| l.min_receive_rate),
            worker_threads: limits.and_then(|l| l.worker_threads),
            blocking_threads: limits.and_then(|l| l.blocking_threads),
            max_transfers: limits.and_then(|l| l.max_transfers),
            max_transfers_per_repository: limits.and_then(|l| l.max_transfers_per_repository),
            max_transfers_per_client: limits.and_then(|l| l.max_transfers_per_client),
            transfer_queue_wait: limits.and_then(|l| l.queue_wait_secs).map(secs),
            io_timeout: limits.and_then(|l| l.io_timeout_secs).map(secs),
            init_timeout: limits.and_then(|l| l.init_timeout_secs).map(secs),
            metrics_listen: self.metrics_listen,
            access_log: self.access_log.as_ref().map(|p| if p.as_os_str() == "-" { p.clone() } else { dir.join(p) }),
            pack_cache: self.pack_cache.is_some().then_some(true),
            pack_cache_memory: self.pack_cache.as_ref().and_then(|c| c.memory_bytes),
            pack_cache_dir: self.pack_cache.as_ref().and_then(|c| c.dir.as_ref().map(|d| dir.join(d))),
            pack_cache_disk: self.pack_cache.as_ref().and_then(|c| c.disk_bytes),
            pack_cache_max_age: self.pack_cache.as_ref().and_then(|c| c.max_age_secs).map(secs),
            ..Overrides::default()
        }
    }
}

/// Settings given by one layer of configuration — the configuration file, then the command
/// line's flags and environment — each `None` (or empty) where that layer says nothing.
/// Precedence lives here and nowhere else: [`Overrides::over`] stacks a layer on another,
/// [`Overrides::resolve`] applies the stack to the embedded defaults and sizes what is left for
/// the CPU budget, last.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub listen: Option<SocketAddr>,
    pub git_listen: Option<SocketAddr>,
    pub base_path: Option<PathBuf>,
    pub exports: Option<Exports>,
    pub token_file: Option<PathBuf>,
    pub anonymous_read: Option<bool>,
    pub push_to_create: Option<bool>,
    pub stream_window: Option<usize>,
    /// Services switched on (`true`) or off, in the order given; a later switch wins.
    pub services: Vec<(String, bool)>,
    pub informative_errors: Option<bool>,
    pub strict_paths: Option<bool>,
    pub user_path: Option<String>,
    pub whitelist: Option<Vec<PathBuf>>,
    pub max_connections: Option<usize>,
    pub maintenance_interval: Option<std::time::Duration>,
    pub auto_maintenance: Option<bool>,
    pub max_request_body: Option<usize>,
    pub max_inflated_body: Option<usize>,
    pub max_push_bytes: Option<u64>,
    pub max_object_bytes: Option<usize>,
    pub max_wants: Option<usize>,
    pub max_haves: Option<usize>,
    pub min_receive_rate: Option<u64>,
    pub worker_threads: Option<usize>,
    pub blocking_threads: Option<usize>,
    pub max_transfers: Option<usize>,
    pub max_transfers_per_repository: Option<usize>,
    pub max_transfers_per_client: Option<usize>,
    pub transfer_queue_wait: Option<std::time::Duration>,
    pub io_timeout: Option<std::time::Duration>,
    pub init_timeout: Option<std::time::Duration>,
    pub metrics_listen: Option<SocketAddr>,
    pub access_log: Option<PathBuf>,
    /// The pack cache turned on (`Some(true)`: `--pack-cache`, a `[pack_cache]` table); giving
    /// any of its sizes turns it on as well.
    pub pack_cache: Option<bool>,
    pub pack_cache_memory: Option<u64>,
    pub pack_cache_dir: Option<PathBuf>,
    pub pack_cache_disk: Option<u64>,
    pub pack_cache_max_age: Option<std::time::Duration>,
}

impl Overrides {
    /// `self` stacked on `below`: what `self` sets wins, what it leaves out keeps `below`'s.
    pub fn over(self, below: Overrides) -> Overrides {
        macro_rules! pick {
            ($($field:ident),* $(,)?) => { Overrides { $( $field: self.$field.or(below.$field), )* services: below.services.into_iter().chain(self.services).collect() } };
        }
        pick!(
            listen,
            git_listen,
            base_path,
            exports,
            token_file,
            anonymous_read,
            push_to_create,
            stream_window,
            informative_errors,
            strict_paths,
            user_path,
            whitelist,
            max_connections,
            maintenance_interval,
            auto_maintenance,
            max_request_body,
            max_inflated_body,
            max_push_bytes,
            max_object_bytes,
            max_wants,
            max_haves,
            min_receive_rate,
            worker_threads,
            blocking_threads,
            max_transfers,
            max_transfers_per_repository,
            max_transfers_per_client,
            transfer_queue_wait,
            io_timeout,
            init_timeout,
            metrics_listen,
            access_log,
            pack_cache,
            pack_cache_memory,
            pack_cache_dir,
            pack_cache_disk,
            pack_cache_max_age,
        )
    }

    /// `defaults` with every setting given here applied, then the sizes no layer fixed derived
    /// for `effective_cpus` (a worker per CPU, two transfers per CPU, blocking threads for the
    /// transfers plus two) and floored where a value would stop the server working.
    pub fn resolve(&self, mut config: Config, effective_cpus: usize) -> Result<Config, ConfigError> {
        macro_rules! set {
            ($($field:ident),* $(,)?) => { $( if let Some(v) = self.$field.clone() { config.$field = v; } )* };
        }
        set!(
            listen,
            base_path,
            exports,
            anonymous_read,
            push_to_create,
            auto_maintenance,
            stream_window,
            informative_errors,
            max_connections,
            max_request_body,
            max_inflated_body
        );
        set!(
            max_push_bytes,
            max_object_bytes,
            min_receive_rate,
            transfer_queue_wait,
            max_transfers_per_repository,
            max_transfers_per_client
        );
        if self.git_listen.is_some() {
            config.git_listen = self.git_listen;
        }
        if self.token_file.is_some() {
            config.token_file = self.token_file.clone();
        }
        if self.metrics_listen.is_some() {
            config.metrics_listen = self.metrics_listen;
        }
        if self.access_log.is_some() {
            config.access_log = self.access_log.clone();
        }
        let cache_given = self.pack_cache_memory.is_some()
            || self.pack_cache_dir.is_some()
            || self.pack_cache_disk.is_some()
            || self.pack_cache_max_age.is_some();
        if self.pack_cache.unwrap_or(cache_given) {
            config.pack_cache = Some(PackCache {
                memory_bytes: self.pack_cache_memory.unwrap_or(PackCache::DEFAULT_MEMORY),
                dir: self.pack_cache_dir.clone(),
                disk_bytes: self.pack_cache_disk.unwrap_or(PackCache::DEFAULT_DISK),
                max_age: self.pack_cache_max_age.unwrap_or(PackCache::DEFAULT_MAX_AGE),
            });
        }
        if self.maintenance_interval.is_some() {
            config.maintenance_interval = self.maintenance_interval.map(|d| d.max(std::time::Duration::from_secs(60)));
        }
        for (name, on) in &self.services {
            config.services.set(name, *on)?;
        }
        if let Some(strict) = self.strict_paths {
            config.paths.strict = strict;
        }
        if self.user_path.is_some() {
            config.paths.user_path = self.user_path.clone();
        }
        if let Some(dirs) = &self.whitelist {
            config.paths.whitelist = dirs.clone();
        }
        let at_least_a_second = |d: std::time::Duration| d.max(std::time::Duration::from_secs(1));
        if let Some(d) = self.io_timeout {
            config.io_timeout = at_least_a_second(d);
        }
        if let Some(d) = self.init_timeout {
            config.init_timeout = at_least_a_second(d);
        }
        if let Some(n) = self.max_wants {
            config.max_wants = n.max(1);
        }
        if let Some(n) = self.max_haves {
            config.max_haves = n.max(1);
        }
        // Sizes last: each one no layer gave follows from the budget and from the others.
        config.size_for(effective_cpus);
        if let Some(n) = self.worker_threads {
            config.worker_threads = n.max(1);
        }
        if let Some(n) = self.max_transfers {
            config.max_transfers = n.max(1);
            config.blocking_threads = config.max_transfers + 2;
        }
        if let Some(n) = self.blocking_threads {
            config.blocking_threads = n.max(config.max_transfers + 1);
        }
        Ok(config)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> Overrides {
        toml::from_str::<File>(text).expect("valid").overrides(std::path::Path::new("/etc/gixd"))
    }

    #[test]
    fn a_flag_wins_over_the_file_and_an_absent_flag_keeps_the_files_value() {
        let file = file("strict_paths = true\nuser_path = \"pub\"\nmax_connections = 7\n[limits]\nmax_wants = 10\n");
        let flags = Overrides { max_connections: Some(3), ..Overrides::default() };
        let config = flags.over(file).resolve(Config::new("/srv".into()), 2).unwrap();
        assert_eq!(config.max_connections, 3);
        assert!(config.paths.strict);
        assert_eq!(config.paths.user_path.as_deref(), Some("pub"));
        assert_eq!(config.max_wants, 10);
        assert_eq!(config.token_file.as_deref(), Some(std::path::Path::new("/etc/gixd/gixd-tokens.toml")));
    }

    #[test]
    fn sizes_no_layer_gives_follow_the_cpu_budget_and_each_other() {
        let none = Overrides::default().resolve(Config::new("/srv".into()), 3).unwrap();
        assert_eq!((none.worker_threads, none.max_transfers, none.blocking_threads), (3, 6, 8));
        let transfers = file("[limits]\nmax_transfers = 4\n").resolve(Config::new("/srv".into()), 3).unwrap();
        assert_eq!((transfers.worker_threads, transfers.max_transfers, transfers.blocking_threads), (3, 4, 6));
        let too_few =
            Overrides { blocking_threads: Some(1), ..Overrides::default() }.over(file("[limits]\nmax_transfers = 4\n"));
        assert_eq!(
            too_few.resolve(Config::new("/srv".into()), 1).unwrap().blocking_threads,
            5,
            "a thread beside the transfers"
        );
    }

    #[test]
    fn service_switches_apply_in_order_across_layers() {
        let file = file("enable = [\"receive-pack\", \"upload-archive\"]\n");
        let flags = Overrides { services: vec![("receive-pack".into(), false)], ..Overrides::default() };
        let config = flags.over(file).resolve(Config::new("/srv".into()), 1).unwrap();
        assert_eq!(config.services, Services { upload_pack: true, receive_pack: false, upload_archive: true });
        let unknown = Overrides { services: vec![("frobnicate".into(), true)], ..Overrides::default() };
        assert!(
            unknown.resolve(Config::new("/srv".into()), 1).err().is_some_and(|e| e.to_string().contains("frobnicate"))
        );
    }

    #[test]
    fn the_pack_cache_is_off_unless_a_layer_turns_it_on_and_its_sizes_stack_like_the_rest() {
        let off = Overrides::default().resolve(Config::new("/srv".into()), 1).unwrap();
        assert_eq!(off.pack_cache, None);
        let on = file("access_log = \"-\"\n[pack_cache]\nmemory_bytes = 10\ndir = \"cache\"\n")
            .resolve(Config::new("/srv".into()), 1)
            .unwrap();
        let cache = on.pack_cache.unwrap();
        assert_eq!((cache.memory_bytes, cache.dir.as_deref()), (10, Some(std::path::Path::new("/etc/gixd/cache"))));
        assert_eq!((cache.disk_bytes, cache.max_age), (PackCache::DEFAULT_DISK, PackCache::DEFAULT_MAX_AGE));
        assert_eq!(
            on.access_log.as_deref(),
            Some(std::path::Path::new("-")),
            "standard output is not a path below the file"
        );
        let flag = Overrides { pack_cache_disk: Some(5), ..Overrides::default() }
            .resolve(Config::new("/srv".into()), 1)
            .unwrap();
        assert_eq!(
            flag.pack_cache.map(|c| (c.memory_bytes, c.disk_bytes)),
            Some((PackCache::DEFAULT_MEMORY, 5)),
            "a size given turns it on"
        );
        let missing = toml::from_str::<File>("[pack_cache]\ndir = \"nowhere\"\n")
            .unwrap()
            .problems(std::path::Path::new("/nonexistent"));
        assert!(missing.iter().any(|p| p.starts_with("pack_cache.dir")), "{missing:?}");
    }
}
