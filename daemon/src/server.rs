//! The server: a runtime built explicitly, its listeners (bound, or passed by a service manager:
//! socket activation), the accept loops — HTTP/1.1 with keep-alive, HTTPS (HTTP/1.1 or HTTP/2),
//! git:// — and the stop: accepting ends, connections drain within the grace, what is left is
//! cancelled ([`crate::lifecycle`]); a reload takes new certificates and tokens ([`Reloader`]).
//! Also [`spawn`], which runs a whole server on a thread of its own (for tests and embedding).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::lifecycle::{Life, Phase};
use crate::transport::tls::{self, Tls};

use crate::config::Config;
use crate::repo::Repos;
use crate::session::State;
use crate::transport::http;

/// A bound, not yet running server.
pub struct Server {
    listener: TcpListener,
    git_listener: Option<TcpListener>,
    https: Option<(TcpListener, Arc<Tls>)>,
    /// The SSH listener, its configuration (with the host key), and the key's fingerprint.
    ssh: Option<(TcpListener, Arc<crate::transport::ssh::Offers>, String)>,
    metrics_listener: Option<TcpListener>,
    state: Arc<State>,
    /// What pushes ask of maintenance, with `Config::auto_maintenance`.
    maintenance_asks: Option<tokio::sync::mpsc::UnboundedReceiver<std::path::PathBuf>>,
}

/// What a server is started with beyond its configuration.
#[derive(Default, Clone)]
pub struct Options {
    /// An observer of whole exchanges ([`crate::tap`]).
    pub tap: Option<Arc<dyn crate::tap::Tap>>,
}

impl Server {
    pub async fn bind(config: Config) -> std::io::Result<Server> {
        Self::bind_with(config, Options::default()).await
    }

    pub async fn bind_with(config: Config, options: Options) -> std::io::Result<Server> {
        crate::repo::set_walk_cache_budget(config.walk_cache_bytes);
        let repos = Repos::new(&config.base_path, config.exports.clone())?.with_rules(config.paths.clone())?;
        // Pushes, maintenance runs and repository creations a killed gixd left half-done: their
        // quarantines, scratch and hidden directories go now, and the locks they held with them.
        // One walk of the base path finds the repositories and the directories above them.
        let below = crate::repo::listing::below(repos.base(), 6);
        let (mut stale, mut leftovers) = (0, 0);
        for git_dir in &below.repositories {
            stale += crate::push::quarantine::clean_stale(&git_dir.join("objects"));
            leftovers += crate::maintenance::clean_after_kill(git_dir);
        }
        if stale > 0 {
            tracing::warn!(stale, "removed quarantines of interrupted pushes");
        }
        crate::repo::create::clean_stale(&below.directories);
        if leftovers > 0 {
            tracing::warn!(leftovers, "removed what interrupted maintenance runs left");
        }
        let listener = match inherited("http")? {
            Some(listener) => listener,
            None => TcpListener::bind(config.listen).await?,
        };
        let git_listener = match (inherited("git")?, config.git_listen) {
            (Some(listener), _) => Some(listener),
            (None, Some(addr)) => Some(TcpListener::bind(addr).await?),
            (None, None) => None,
        };
        let https_listener = match (inherited("https")?, config.https_listen) {
            (Some(listener), _) => Some(listener),
            (None, Some(addr)) => Some(TcpListener::bind(addr).await?),
            (None, None) => None,
        };
        let invalid = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, e);
        let https = match (https_listener, config.tls().map_err(|e| invalid(e.to_string()))?) {
            (Some(listener), Some(files)) => {
                let tls = Tls::new(&files).map_err(|e| invalid(e.to_string()))?;
                Some((listener, Arc::new(tls)))
            }
            (Some(_), None) => return Err(invalid("HTTPS needs tls_cert and tls_key".into())),
            (None, _) => None,
        };
        let ssh_listener = match (inherited("ssh")?, config.ssh_listen) {
            (Some(listener), _) => Some(listener),
            (None, Some(addr)) => Some(TcpListener::bind(addr).await?),
            (None, None) => None,
        };
        let ssh = match ssh_listener {
            Some(listener) => {
                let keys = crate::transport::ssh::host_keys(&config.ssh_host_key_path())?;
                let fingerprint = keys.iter().map(crate::transport::ssh::fingerprint).collect::<Vec<_>>().join(", ");
                let ciphers = crate::transport::ssh::ciphers(&config.ssh_ciphers)?;
                let offered = ciphers.iter().map(|c| c.as_ref()).collect::<Vec<_>>().join(", ");
                let named = !config.ssh_ciphers.is_empty();
                let offers = crate::transport::ssh::Offers::new(keys, config.io_timeout, ciphers, named);
                tracing::info!(ciphers = %offered, openssh = %offers.ranked(), "SSH ciphers offered (to an OpenSSH client: the first of `openssh` it lists)");
                Some((listener, Arc::new(offers), fingerprint))
            }
            None => None,
        };
        let metrics_listener = match config.metrics_listen {
            Some(addr) => Some(TcpListener::bind(addr).await?),
            None => None,
        };
        let (maintenance, maintenance_asks) = match config.auto_maintenance {
            true => {
                let (asks, asked) = crate::service::maintenance::channel();
                (Some(asks), Some(asked))
            }
            false => (None, None),
        };
        Ok(Server {
            maintenance_asks,
            listener,
            git_listener,
            https,
            ssh,
            metrics_listener,
            state: Arc::new(State::new(config, repos, options.tap, maintenance)?),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener has an address")
    }

    /// Where `/metrics` is served, if it is.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_listener.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Where git:// is served, if it is.
    pub fn git_addr(&self) -> Option<SocketAddr> {
        self.git_listener.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Where HTTPS is served, if it is.
    pub fn https_addr(&self) -> Option<SocketAddr> {
        self.https.as_ref().and_then(|(l, _)| l.local_addr().ok())
    }

    /// Where SSH is served, if it is, and its host key's fingerprint.
    pub fn ssh_addr(&self) -> Option<(SocketAddr, String)> {
        self.ssh.as_ref().and_then(|(l, _, fingerprint)| Some((l.local_addr().ok()?, fingerprint.clone())))
    }

    /// What applies a configuration read anew to this server while it runs.
    pub fn reloader(&self) -> Reloader {
        Reloader { state: self.state.clone(), tls: self.https.as_ref().map(|(_, tls)| tls.clone()) }
    }

    /// Serve until `shutdown` completes, then stop within the configured shutdown grace.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
        let grace = self.state.config.shutdown_grace;
        self.run_with_grace(shutdown, grace).await
    }

    /// Serve until `shutdown` completes; then accept no more, let the work in flight finish for
    /// up to `grace`, and cancel what is left.
    pub async fn run_with_grace(
        self,
        shutdown: impl Future<Output = ()>,
        grace: std::time::Duration,
    ) -> std::io::Result<()> {
        if let Some(git) = self.git_listener {
            tokio::spawn(accept_git(git, self.state.clone()));
        }
        if let Some((listener, tls)) = self.https {
            tokio::spawn(accept_https(listener, self.state.clone(), tls));
        }
        if let Some((listener, config, _)) = self.ssh {
            tokio::spawn(accept_ssh(listener, self.state.clone(), config));
        }
        if let Some(metrics) = self.metrics_listener {
            tokio::spawn(serve_metrics(metrics, self.state.clone()));
        }
        if let Some(every) = self.state.config.maintenance_interval {
            tokio::spawn(crate::service::maintenance::on_the_clock(self.state.clone(), every));
        }
        if !self.state.config.cache_idle.is_zero() {
            tokio::spawn(crate::session::forget_idle_caches(self.state.clone(), self.state.config.cache_idle));
        }
        if let Some(asks) = self.maintenance_asks {
            tokio::spawn(crate::service::maintenance::after_pushes(self.state.clone(), asks));
        }
        // The accept loop runs on a worker, not on the thread that drives this future: a
        // connection's task then starts on the worker that accepted it, with no hand-over to
        // another thread (and no wake-up of one) per connection.
        let life = self.state.life.clone();
        tokio::spawn(accept_http(self.listener, self.state));
        crate::lifecycle::notify(&[sd_notify::NotifyState::Ready]);
        shutdown.await;
        // Cancelled work stops at its next write or read; a few seconds see it gone.
        life.stop(grace, std::time::Duration::from_secs(5)).await;
        Ok(())
    }
}

/// Applies a configuration read anew (SIGHUP) to a running server: what can change live changes
/// (the token file is read again, the TLS certificate and key are read again, from new paths if
/// they moved), and what needs a restart is named.
#[derive(Clone)]
pub struct Reloader {
    state: Arc<State>,
    tls: Option<Arc<Tls>>,
}

/// What a reload did.
#[derive(Debug, Default)]
pub struct Reloaded {
    /// Tokens in the token file now (`None`: it did not parse; the old ones stay).
    pub tokens: Option<usize>,
    /// Errors of the parts that kept their old state.
    pub errors: Vec<String>,
    /// Settings the new configuration changes that take effect only at the next start.
    pub need_restart: Vec<String>,
}

impl Reloader {
    pub fn reload(&self, new: &crate::config::Config) -> Reloaded {
        let mut out = Reloaded::default();
        match self.state.access.reload() {
            Ok(n) => out.tokens = Some(n),
            Err(err) => out.errors.push(format!("tokens: {err} (the tokens read before stay)")),
        }
        match (&self.tls, new.tls()) {
            (Some(tls), Ok(Some(files))) => {
                if let Err(err) = tls.reload(&files) {
                    out.errors.push(format!("{err} (the certificate in use stays)"));
                }
            }
            (_, Err(err)) => out.errors.push(format!("{err} (the certificate in use stays)")),
            (None, Ok(None)) => {}
            _ => out.need_restart.push("tls_cert, tls_key (HTTPS on or off)".into()),
        }
        // Everything else: compared field by field as the configuration prints it.
        let mut live = self.state.config.clone();
        (live.tls_cert, live.tls_key) = (new.tls_cert.clone(), new.tls_key.clone());
        let (was, now) = (format!("{live:#?}"), format!("{new:#?}"));
        let was: std::collections::HashSet<&str> = was.lines().collect();
        for line in now.lines().filter(|l| !was.contains(l)) {
            if let Some((key, _)) = line.trim().split_once(':')
                && !out.need_restart.iter().any(|k| k == key)
            {
                out.need_restart.push(key.to_owned());
            }
        }
        out
    }
}

/// A listening socket the service manager passed under `name` (`LISTEN_FDS`, `LISTEN_FDNAMES`:
/// `http`, `https`, `git`; a single unnamed one is HTTP), taken at most once per process.
fn inherited(name: &str) -> std::io::Result<Option<TcpListener>> {
    use std::os::fd::FromRawFd;
    static PASSED: std::sync::Mutex<Option<Vec<(String, std::net::TcpListener)>>> = std::sync::Mutex::new(None);
    let mut passed = PASSED.lock().unwrap_or_else(|e| e.into_inner());
    let passed = match &mut *passed {
        Some(passed) => passed,
        none => {
            let fds: Vec<(std::os::fd::RawFd, String)> = sd_notify::listen_fds_with_names()?.collect();
            let single = fds.len() == 1;
            let listeners = fds
                .into_iter()
                .map(|(fd, named)| {
                    let named = if single && (named.is_empty() || named == "unknown") { "http".into() } else { named };
                    // SAFETY: the service manager passed this descriptor to this process for it to
                    // own (LISTEN_PID is ours); it is taken once, here.
                    (named, unsafe { std::net::TcpListener::from_raw_fd(fd) })
                })
                .collect();
            none.insert(listeners)
        }
    };
    let Some(at) = passed.iter().position(|(n, _)| n == name) else { return Ok(None) };
    let (_, listener) = passed.remove(at);
    listener.set_nonblocking(true)?;
    tracing::info!(name, addr = ?listener.local_addr().ok(), "serving on a socket passed by the service manager");
    Ok(Some(TcpListener::from_std(listener)?))
}

/// Drive one HTTP connection (`$conn`, a hyper connection future) to its end. When `$until`
/// completes (the server drains; an HTTP/2 connection idles), the requests in flight finish and
/// the connection closes (an idle one at once), or is dropped when `$settled` completes first;
/// when the server is cancelled, it is dropped.
macro_rules! drive {
    ($life:expr, $conn:expr, $peer:expr, $until:expr) => {
        drive!($life, $conn, $peer, $until, std::future::pending::<()>())
    };
    ($life:expr, $conn:expr, $peer:expr, $until:expr, $settled:expr) => {{
        let conn = $conn;
        tokio::pin!(conn);
        let ended = tokio::select! {
            ended = conn.as_mut() => Some(ended),
            () = $until => None,
        };
        let ended = match ended {
            Some(ended) => Some(ended),
            None => {
                conn.as_mut().graceful_shutdown();
                // A peer that does not take part in the close (an HTTP/2 client that never
                // answers the closing PING) is dropped once `$settled` completes.
                let closed = async {
                    tokio::select! {
                        ended = conn.as_mut() => Some(ended),
                        () = $settled => None,
                    }
                };
                $life.unless_cancelled(closed).await.flatten()
            }
        };
        if let Some(Err(err)) = ended {
            tracing::debug!(peer = %$peer, %err, "connection ended with an error");
        }
    }};
}

/// The next connection on `listener`, until the server drains (`None`). A failure (out of file
/// descriptors and the like) is reported, and accepting goes on after a pause.
async fn accept(listener: &TcpListener, transport: &str, life: &Life) -> Option<(tokio::net::TcpStream, SocketAddr)> {
    loop {
        tokio::select! {
            biased;
            () = life.reached(Phase::Draining) => return None,
            accepted = listener.accept() => match accepted {
                Ok(conn) => return Some(conn),
                Err(err) => {
                    tracing::warn!(%err, transport, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
        }
    }
}

/// Serve smart HTTP on `listener`, a task per connection.
async fn accept_http(listener: TcpListener, state: Arc<State>) {
    while let Some((stream, peer)) = accept(&listener, "http", &state.life).await {
        // Responses leave in few, large writes; small ones (an ACK round, a short reply) must
        // not wait for the client's delayed ACK.
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let header_timeout = state.config.io_timeout;
        tokio::spawn(async move {
            let (_busy, life) = (state.life.busy(), state.life.clone());
            let service = service_fn(move |req| http::handle(state.clone(), peer, req));
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.keep_alive(true).timer(TokioTimer::new()).header_read_timeout(header_timeout);
            drive!(
                life,
                builder.serve_connection(TokioIo::new(crate::transport::zero_copy::Stream::new(stream)), service),
                peer,
                life.reached(Phase::Draining)
            );
        });
    }
}

/// Serve HTTPS on `listener`, a task per connection: the TLS handshake within the init timeout,
/// then HTTP/1.1 or HTTP/2 as ALPN chose, into the same handler as plain HTTP.
async fn accept_https(listener: TcpListener, state: Arc<State>, tls: Arc<Tls>) {
    while let Some((stream, peer)) = accept(&listener, "https", &state.life).await {
        let _ = stream.set_nodelay(true);
        let (state, tls) = (state.clone(), tls.clone());
        tokio::spawn(async move {
            let (_busy, life) = (state.life.busy(), state.life.clone());
            let handshake = tokio::time::timeout(state.config.init_timeout, tls.acceptor().accept(stream));
            let stream = match life.unless_cancelled(handshake).await {
                Some(Ok(Ok(stream))) => stream,
                Some(Ok(Err(err))) => return tracing::debug!(%peer, %err, "TLS handshake failed"),
                Some(Err(_)) => return tracing::info!(%peer, "TLS handshake did not end within the init timeout"),
                None => return,
            };
            let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
            let io_timeout = state.config.io_timeout;
            // HTTP/2 has no header-read timeout to close an idle connection: one with no request
            // in flight (its response body sent) for the I/O timeout is closed.
            let activity = Arc::new(Activity::new());
            let requests = activity.clone();
            let service = service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                let (state, in_flight) = (state.clone(), requests.enter());
                req.extensions_mut().insert(http::Transport("https"));
                async move {
                    let response = http::handle(state, peer, req).await?;
                    // In flight until its body is sent (or dropped).
                    Ok::<_, std::convert::Infallible>(response.map(|body| {
                        use http_body_util::BodyExt;
                        body.map_frame(move |frame| {
                            let _ = &in_flight;
                            frame
                        })
                        .boxed()
                    }))
                }
            });
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            builder = if h2 { builder.http2_only() } else { builder.http1_only() };
            builder.http1().keep_alive(true).timer(TokioTimer::new()).header_read_timeout(io_timeout);
            builder
                .http2()
                .timer(TokioTimer::new())
                .max_concurrent_streams(tls::H2_MAX_STREAMS)
                .max_header_list_size(tls::H2_MAX_HEADER_LIST)
                .max_pending_accept_reset_streams(tls::H2_MAX_PENDING_RESETS)
                .max_local_error_reset_streams(tls::H2_MAX_ERROR_RESETS)
                .keep_alive_interval(None);
            let until = async {
                tokio::select! {
                    () = life.reached(Phase::Draining) => {}
                    () = activity.idle_for(io_timeout), if h2 => {}
                }
            };
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            drive!(life, conn, peer, until, tokio::time::sleep(io_timeout));
        });
    }
}

/// `GET /metrics` (the Prometheus text) on a listener of its own; anything else is a 404.
async fn serve_metrics(listener: TcpListener, state: Arc<State>) {
    while let Some((stream, _)) = accept(&listener, "metrics", &state.life).await {
        let state = state.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let state = state.clone();
                async move { Ok::<_, std::convert::Infallible>(http::metrics_response(&state, req.uri().path())) }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

/// Serve SSH on `listener`, a task per connection ([`crate::transport::ssh`]).
async fn accept_ssh(listener: TcpListener, state: Arc<State>, offers: Arc<crate::transport::ssh::Offers>) {
    let unauthenticated = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    while let Some((stream, peer)) = accept(&listener, "ssh", &state.life).await {
        let (state, offers, unauthenticated) = (state.clone(), offers.clone(), unauthenticated.clone());
        tokio::spawn(async move {
            let _busy = state.life.busy();
            crate::transport::ssh::serve(state, offers, stream, peer, unauthenticated).await;
        });
    }
}

/// The requests of one connection: how many are in flight, and when the last one ended.
struct Activity {
    in_flight: std::sync::atomic::AtomicUsize,
    last: std::sync::Mutex<std::time::Instant>,
}

/// One request in flight on a connection, until dropped.
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        *self.0.last.lock().unwrap_or_else(|e| e.into_inner()) = std::time::Instant::now();
        self.0.in_flight.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Activity {
    fn new() -> Self {
        Activity { in_flight: Default::default(), last: std::sync::Mutex::new(std::time::Instant::now()) }
    }

    fn enter(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        InFlight(self.clone())
    }

    /// Resolves once no request was in flight for `limit`.
    async fn idle_for(&self, limit: std::time::Duration) {
        loop {
            let since = self.last.lock().unwrap_or_else(|e| e.into_inner()).elapsed();
            let busy = self.in_flight.load(std::sync::atomic::Ordering::SeqCst) > 0;
            if !busy && since >= limit {
                return;
            }
            // A request in flight ends at some point and stamps `last`: look again a limit later.
            tokio::time::sleep(if busy { limit } else { limit - since }).await;
        }
    }
}

/// git:// connections: past `max_connections` one is told so and closed; each takes a transfer
/// slot (or is told the server is busy) and runs on a blocking thread of the pool.
async fn accept_git(listener: TcpListener, state: Arc<State>) {
    let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    while let Some((stream, peer)) = accept(&listener, "git://", &state.life).await {
        let state = state.clone();
        let limit = state.config.max_connections;
        let guard = ConnectionCount::enter(&open);
        if limit > 0 && guard.count > limit {
            tracing::warn!(%peer, limit, "git:// connection refused: too many connections");
            // Told why, then closed gently: the request line it already sent is read and dropped
            // first, or the close would reset the connection and lose the message.
            tokio::spawn(async move {
                let _guard = guard;
                let mut stream = stream;
                crate::transport::git::refuse(&mut stream, "too many connections, try again later").await;
            });
            continue;
        }
        tokio::spawn(async move {
            let _guard = guard;
            let (_busy, life) = (state.life.busy(), state.life.clone());
            life.unless_cancelled(serve_git(state, stream, peer)).await;
        });
    }
}

/// One git:// connection: its request line, then the service it asks for.
async fn serve_git(state: Arc<State>, stream: tokio::net::TcpStream, peer: SocketAddr) {
    let mut stream = stream;
    // The request line arrives whole within init_timeout, before the connection takes a
    // thread or a transfer slot: idle or trickling connections cost neither.
    let line =
        match tokio::time::timeout(state.config.init_timeout, crate::transport::git::read_request_line(&mut stream))
            .await
        {
            Ok(Ok(Some(line))) => line,
            Ok(Ok(None)) => {
                return crate::transport::git::refuse(&mut stream, "expected a request line: git-upload-pack /path")
                    .await;
            }
            Ok(Err(_)) => return, // hung up
            Err(_) => {
                tracing::info!(%peer, "git:// request line did not arrive in time");
                return crate::transport::git::refuse(
                    &mut stream,
                    "timed out waiting for a request line: git-upload-pack /path",
                )
                .await;
            }
        };
    crate::transport::git::serve(state, stream, line).await;
}

/// One open git:// connection, counted while it lives.
struct ConnectionCount {
    open: Arc<std::sync::atomic::AtomicUsize>,
    /// Connections open with this one.
    count: usize,
}

impl ConnectionCount {
    fn enter(open: &Arc<std::sync::atomic::AtomicUsize>) -> Self {
        let count = open.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        ConnectionCount { open: open.clone(), count }
    }
}

impl Drop for ConnectionCount {
    fn drop(&mut self) {
        self.open.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The runtime gixd serves on, sized explicitly (never `#[tokio::main]`'s defaults): the
/// configured workers, and a blocking pool whose threads are all started now and kept, so that
/// serving a transfer creates no thread.
pub fn runtime(config: &Config) -> std::io::Result<tokio::runtime::Runtime> {
    let blocking = config.blocking_threads.max(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.worker_threads.max(1))
        .max_blocking_threads(blocking)
        .thread_keep_alive(std::time::Duration::from_secs(365 * 24 * 3600))
        .thread_name("gixd")
        .enable_all()
        .build()?;
    // Occupy every blocking slot at once, so the pool starts all its threads; they then idle.
    let all_started = Arc::new(std::sync::Barrier::new(blocking + 1));
    let tasks: Vec<_> = (0..blocking)
        .map(|_| {
            let all_started = all_started.clone();
            rt.spawn_blocking(move || {
                all_started.wait();
            })
        })
        .collect();
    all_started.wait();
    rt.block_on(async {
        for task in tasks {
            let _ = task.await;
        }
    });
    Ok(rt)
}

/// A server running on its own thread and runtime; stops when dropped.
pub struct Running {
    pub addr: SocketAddr,
    pub git_addr: Option<SocketAddr>,
    pub https_addr: Option<SocketAddr>,
    pub ssh_addr: Option<SocketAddr>,
    pub metrics_addr: Option<SocketAddr>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Start a server for `config` (use port 0 to let the system pick) on a thread of its own.
pub fn spawn(config: Config) -> std::io::Result<Running> {
    spawn_with(config, Options::default())
}

/// [`spawn`] with [`Options`].
pub fn spawn_with(config: Config, options: Options) -> std::io::Result<Running> {
    let rt = runtime(&config)?;
    let server = rt.block_on(Server::bind_with(config, options))?;
    let addr = server.local_addr();
    let git_addr = server.git_addr();
    let https_addr = server.https_addr();
    let ssh_addr = server.ssh_addr().map(|(addr, _)| addr);
    let metrics_addr = server.metrics_addr();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    // Dropped, it cancels what is in flight at once: a test's server goes with its test.
    let thread = std::thread::Builder::new().name("gixd-server".into()).spawn(move || {
        let _ = rt.block_on(server.run_with_grace(
            async {
                let _ = rx.await;
            },
            std::time::Duration::ZERO,
        ));
        rt.shutdown_timeout(std::time::Duration::from_secs(5));
    })?;
    Ok(Running { addr, git_addr, https_addr, ssh_addr, metrics_addr, shutdown: Some(tx), thread: Some(thread) })
}

impl Running {
    pub fn url(&self, repo: &str) -> String {
        format!("http://{}/{}", self.addr, repo.trim_start_matches('/'))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
