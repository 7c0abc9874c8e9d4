//! Settings: where repositories are, which are served, and every limit, each with why it exists.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use crate::tap::Tap;

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
        Services {
            upload_pack: true,
            receive_pack: false,
            upload_archive: false,
        }
    }
}

impl Services {
    /// Switch a service by its name (`upload-pack`, `receive-pack`, `upload-archive`).
    pub fn set(&mut self, name: &str, on: bool) -> Result<(), String> {
        match name {
            "upload-pack" => self.upload_pack = on,
            "receive-pack" => self.receive_pack = on,
            "upload-archive" => self.upload_archive = on,
            other => return Err(format!("unknown service '{other}' (known: upload-pack, receive-pack, upload-archive)")),
        }
        Ok(())
    }
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
    /// Most git:// connections at once (git daemon's `--max-connections`; 0: no limit beyond
    /// the transfer limit). One more is told so and closed.
    pub max_connections: usize,
    /// git:// errors say what went wrong (no such repository, not exported); without it, every
    /// path failure reads "access denied or repository not exported", as git daemon says
    /// without `--informative-errors`, so a prober learns nothing.
    pub informative_errors: bool,
    /// Bytes per HTTP response frame: the in-flight window between the pack writer and the
    /// socket. Larger means fewer wake-ups, smaller means less memory per transfer. Floored to 1.
    pub stream_window: usize,
    /// Largest request body read as sent (gzip or not): a negotiation is wants and haves, so
    /// anything near this is not a git client.
    pub max_request_body: usize,
    /// Largest request body after gzip inflation: caps a gzip bomb at a size we can afford.
    pub max_inflated_body: usize,
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
    pub transfer_queue_wait: std::time::Duration,
    /// How long a client may take to send its request head or body, or to accept the next frame
    /// of a response, before the transfer is dropped: a stalled client must not hold a thread.
    pub io_timeout: std::time::Duration,
    /// Sees every exchange (request, response bytes, pack statistics): for the wire suite and
    /// diagnostics. `None` costs nothing.
    pub tap: Option<Arc<dyn Tap>>,
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
            max_connections: 0,
            informative_errors: true,
            stream_window: Self::DEFAULT_STREAM_WINDOW,
            max_request_body: 16 * 1024 * 1024,
            max_inflated_body: 64 * 1024 * 1024,
            max_wants: 100_000,
            max_haves: 100_000,
            worker_threads: 1,
            blocking_threads: 4,
            max_transfers: 2,
            transfer_queue_wait: std::time::Duration::from_secs(5),
            io_timeout: std::time::Duration::from_secs(120),
            tap: None,
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

    /// The window actually used: 0 would accept no byte ever and hang the transfer.
    pub fn effective_stream_window(&self) -> usize {
        self.stream_window.max(1)
    }
}
