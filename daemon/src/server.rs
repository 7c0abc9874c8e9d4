//! The server: a runtime built explicitly, its listeners (bound, or passed by a service manager:
//! socket activation), each handed to its transport's accept loop, and the stop: accepting ends,
//! connections drain within the grace, what is left is cancelled ([`crate::lifecycle`]); a reload
//! takes new certificates and tokens ([`Reloader`]).
//! Also [`spawn`], which runs a whole server on a thread of its own (for tests and embedding).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

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
        let addresses = crate::session::Addresses {
            http: listener.local_addr().ok(),
            https: https.as_ref().and_then(|(l, _)| l.local_addr().ok()),
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
            state: Arc::new(State { addresses, ..State::new(config, repos, options.tap, maintenance)? }),
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
            tokio::spawn(crate::transport::git::accept(git, self.state.clone()));
        }
        if let Some((listener, tls)) = self.https {
            tokio::spawn(tls::accept(listener, self.state.clone(), tls));
        }
        if let Some((listener, config, _)) = self.ssh {
            tokio::spawn(crate::transport::ssh::accept(listener, self.state.clone(), config));
        }
        if let Some(metrics) = self.metrics_listener {
            tokio::spawn(http::serve_metrics(metrics, self.state.clone()));
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
        tokio::spawn(http::accept(self.listener, self.state));
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
        // Everything else takes effect at the next start: named field by field.
        let changed = self.state.config.changed_in(new);
        let later = changed.into_iter().filter(|field| !["tls_cert", "tls_key"].contains(field));
        out.need_restart.extend(later.map(str::to_owned));
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
