//! The server: a runtime built explicitly, the accept loop, HTTP/1.1 connections with keep-alive,
//! and graceful shutdown. Also [`spawn`], which runs a whole server on a thread of its own (for
//! tests and embedding).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::config::Config;
use crate::repo::Repos;
use crate::session::State;
use crate::transport::http;

/// A bound, not yet running server.
pub struct Server {
    listener: TcpListener,
    git_listener: Option<TcpListener>,
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
        let listener = TcpListener::bind(config.listen).await?;
        let git_listener = match config.git_listen {
            Some(addr) => Some(TcpListener::bind(addr).await?),
            None => None,
        };
        let transfers = Arc::new(tokio::sync::Semaphore::new(config.max_transfers.max(1)));
        let shares = Arc::new(crate::session::Shares::new(&config));
        let metrics_listener = match config.metrics_listen {
            Some(addr) => Some(TcpListener::bind(addr).await?),
            None => None,
        };
        let access_log = match &config.access_log {
            Some(path) => Some(crate::access_log::AccessLog::open(path)?),
            None => None,
        };
        let pack_cache = config.pack_cache.clone().map(crate::pack_cache::PackCache::new);
        let (config_buffers, io_timeout) = (config.buffers(), config.io_timeout);
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
            metrics_listener,
            state: Arc::new(State {
                repos,
                caches: Default::default(),
                access: crate::auth::Access::new(config.token_file.clone(), config.anonymous_read),
                config,
                transfers,
                shares,
                tap: options.tap,
                metrics: Arc::new(crate::metrics::Metrics::new()),
                access_log,
                pack_cache,
                buffers: crate::pack_cache::PackCache::with_stall(config_buffers, io_timeout),
                queued: Default::default(),
                maintenance,
            }),
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

    /// Accept connections until `shutdown` completes.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
        if let Some(git) = self.git_listener {
            tokio::spawn(accept_git(git, self.state.clone()));
        }
        if let Some(metrics) = self.metrics_listener {
            tokio::spawn(serve_metrics(metrics, self.state.clone()));
        }
        if let Some(every) = self.state.config.maintenance_interval {
            tokio::spawn(crate::service::maintenance::on_the_clock(self.state.clone(), every));
        }
        if let Some(asks) = self.maintenance_asks {
            tokio::spawn(crate::service::maintenance::after_pushes(self.state.clone(), asks));
        }
        // The accept loop runs on a worker, not on the thread that drives this future: a
        // connection's task then starts on the worker that accepted it, with no hand-over to
        // another thread (and no wake-up of one) per connection.
        let accepting = tokio::spawn(accept_http(self.listener, self.state));
        shutdown.await;
        accepting.abort();
        Ok(())
    }
}

/// The next connection on `listener`. A failure (out of file descriptors and the like) is
/// reported, and accepting goes on after a pause.
async fn accept(listener: &TcpListener, transport: &str) -> (tokio::net::TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(conn) => return conn,
            Err(err) => {
                tracing::warn!(%err, transport, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// Serve smart HTTP on `listener`, a task per connection.
async fn accept_http(listener: TcpListener, state: Arc<State>) {
    loop {
        let (stream, peer) = accept(&listener, "http").await;
        // Responses leave in few, large writes; small ones (an ACK round, a short reply) must
        // not wait for the client's delayed ACK.
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let header_timeout = state.config.io_timeout;
        tokio::spawn(async move {
            let service = service_fn(move |req| http::handle(state.clone(), peer, req));
            if let Err(err) = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(TokioIo::new(crate::transport::zero_copy::Stream::new(stream)), service)
                .await
            {
                tracing::debug!(%peer, %err, "connection ended with an error");
            }
        });
    }
}

/// `GET /metrics` (the Prometheus text) on a listener of its own; anything else is a 404.
async fn serve_metrics(listener: TcpListener, state: Arc<State>) {
    loop {
        let (stream, _) = accept(&listener, "metrics").await;
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

/// git:// connections: past `max_connections` one is told so and closed; each takes a transfer
/// slot (or is told the server is busy) and runs on a blocking thread of the pool.
async fn accept_git(listener: TcpListener, state: Arc<State>) {
    let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    loop {
        let (stream, peer) = accept(&listener, "git://").await;
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
            let mut stream = stream;
            // The request line arrives whole within init_timeout, before the connection takes a
            // thread or a transfer slot: idle or trickling connections cost neither.
            let line = match tokio::time::timeout(
                state.config.init_timeout,
                crate::transport::git::read_request_line(&mut stream),
            )
            .await
            {
                Ok(Ok(Some(line))) => line,
                Ok(Ok(None)) => {
                    return crate::transport::git::refuse(
                        &mut stream,
                        "expected a request line: git-upload-pack /path",
                    )
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
        });
    }
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
    let metrics_addr = server.metrics_addr();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new().name("gixd-server".into()).spawn(move || {
        let _ = rt.block_on(server.run(async {
            let _ = rx.await;
        }));
        rt.shutdown_timeout(std::time::Duration::from_secs(5));
    })?;
    Ok(Running { addr, git_addr, metrics_addr, shutdown: Some(tx), thread: Some(thread) })
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
