//! The `gixd` command line. `gixd serve` with no flags serves the repository it was started in
//! (or a demo repository) at http://127.0.0.1:8080/ and prints the URL to clone.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use gixd::config::{Config, Exports};

/// `gixd --version`: ours, gitoxide's, and the patches built in.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (gix ",
    env!("GIXD_GIX_VERSION"),
    "; patches: ",
    env!("GIXD_PATCHES"),
    ")"
);

/// A git server on gitoxide.
#[derive(Parser)]
#[command(name = "gixd", version = VERSION)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve repositories over smart HTTP (and git:// with --git-listen).
    Serve(Serve),
    /// Serve git:// like `git daemon`, with its flags (and smart HTTP with --http-listen).
    Daemon(Daemon),
    /// Print the CPU budget gixd reads from the kernel and the sizes it would choose.
    Budget(Sizes),
}

/// Thread and transfer sizes; each defaults to what the CPU budget allows.
#[derive(clap::Args)]
struct Sizes {
    /// Runtime worker threads [default: effective CPUs].
    #[arg(long, env = "GIXD_WORKER_THREADS")]
    worker_threads: Option<usize>,
    /// Blocking threads, all started up front [default: transfers + 2].
    #[arg(long, env = "GIXD_BLOCKING_THREADS")]
    blocking_threads: Option<usize>,
    /// Upload-pack requests in flight before "busy, retry" [default: 2 × effective CPUs].
    #[arg(long, env = "GIXD_MAX_TRANSFERS")]
    max_transfers: Option<usize>,
    /// Seconds a request waits for a transfer slot before "busy, retry" [default: 5].
    #[arg(long, env = "GIXD_QUEUE_WAIT")]
    queue_wait: Option<u64>,
}

impl Sizes {
    /// Size `config` for the budget, then apply the overrides; returns the startup line and warning.
    fn apply(&self, config: &mut Config) -> (String, Option<String>) {
        let budget = gixd::budget::read();
        config.size_for(budget.effective());
        if let Some(n) = self.max_transfers {
            config.max_transfers = n.max(1);
            config.blocking_threads = config.max_transfers + 2;
        }
        if let Some(n) = self.worker_threads {
            config.worker_threads = n.max(1);
        }
        if let Some(n) = self.blocking_threads {
            config.blocking_threads = n.max(config.max_transfers + 1);
        }
        if let Some(secs) = self.queue_wait {
            config.transfer_queue_wait = std::time::Duration::from_secs(secs);
        }
        budget.describe(&config.sizes())
    }
}

#[derive(clap::Args)]
struct Serve {
    /// Address to listen on.
    #[arg(long, default_value = Config::DEFAULT_LISTEN, env = "GIXD_LISTEN")]
    listen: SocketAddr,
    /// Also serve git:// on this address (git daemon's port is 9418).
    #[arg(long, env = "GIXD_GIT_LISTEN")]
    git_listen: Option<SocketAddr>,
    /// Serve repositories below this directory. Without it, gixd serves the repository it is
    /// started in, or a demo repository it creates.
    #[arg(long, env = "GIXD_BASE_PATH")]
    base_path: Option<PathBuf>,
    /// Serve every repository below the base path, not only those with git-daemon-export-ok.
    #[arg(long)]
    export_all: bool,
    /// Bytes per HTTP response frame (the in-flight window per transfer).
    #[arg(long, default_value_t = Config::DEFAULT_STREAM_WINDOW, env = "GIXD_STREAM_WINDOW")]
    stream_window: usize,
    #[command(flatten)]
    daemon: DaemonFlags,
    #[command(flatten)]
    sizes: Sizes,
}

/// git daemon's flags that gixd shares between `serve` and `daemon`.
#[derive(clap::Args)]
struct DaemonFlags {
    /// Offer a service: upload-pack (on by default), receive-pack, upload-archive.
    #[arg(long, value_name = "SERVICE")]
    enable: Vec<String>,
    /// Stop offering a service.
    #[arg(long, value_name = "SERVICE")]
    disable: Vec<String>,
    /// Seconds a client may stay silent (or not read) during a request [default: 120].
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<u64>,
    /// Seconds a git:// client has to send its request line [default: 30].
    #[arg(long, value_name = "SECONDS")]
    init_timeout: Option<u64>,
    /// Most git:// connections at once, 0 for no limit [serve: 0; daemon: 32, as git daemon].
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// Tell git:// clients why a path failed (serve: always; daemon: only with this flag).
    #[arg(long)]
    informative_errors: bool,
    /// Paths must name the git directory exactly: no `.git` appended, no subdirectories of the
    /// whitelisted directories.
    #[arg(long)]
    strict_paths: bool,
    /// Serve `~user/x` from `<home>/<DIR>/x` (or `<home>/x` without a value); only homes below the
    /// base path are served.
    #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = "")]
    user_path: Option<String>,
    /// Log every connection and request (info); without it `daemon` logs warnings only.
    #[arg(long)]
    verbose: bool,
}

impl DaemonFlags {
    fn apply(&self, config: &mut Config) -> Result<(), String> {
        for service in &self.enable {
            config.services.set(service, true)?;
        }
        for service in &self.disable {
            config.services.set(service, false)?;
        }
        if let Some(secs) = self.timeout {
            config.io_timeout = std::time::Duration::from_secs(secs.max(1));
        }
        if let Some(secs) = self.init_timeout {
            config.init_timeout = std::time::Duration::from_secs(secs.max(1));
        }
        if let Some(n) = self.max_connections {
            config.max_connections = n;
        }
        config.paths.strict = self.strict_paths;
        config.paths.user_path = self.user_path.clone();
        Ok(())
    }
}

/// `git daemon`'s command line, served by gixd.
#[derive(clap::Args)]
struct Daemon {
    /// Repository paths are relative to this directory (required: gixd never serves `/`).
    #[arg(long, value_name = "DIR")]
    base_path: PathBuf,
    /// Serve every repository, not only those with git-daemon-export-ok.
    #[arg(long)]
    export_all: bool,
    /// Address to listen on for git:// (all interfaces by default, as git daemon).
    #[arg(long, value_name = "HOST", default_value = "0.0.0.0")]
    listen: std::net::IpAddr,
    /// git:// port.
    #[arg(long, default_value_t = 9418)]
    port: u16,
    /// Also serve smart HTTP on this address.
    #[arg(long, value_name = "ADDR")]
    http_listen: Option<SocketAddr>,
    /// Accepted for git daemon compatibility: the listener always reuses the address.
    #[arg(long)]
    reuseaddr: bool,
    #[command(flatten)]
    daemon: DaemonFlags,
    #[command(flatten)]
    sizes: Sizes,
    /// Only repositories in these directories (below them, without --strict-paths) are served.
    #[arg(value_name = "DIRECTORY")]
    directories: Vec<PathBuf>,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // git daemon is quiet unless --verbose; `serve` tells what it does.
    let level = match &cli.command {
        Command::Daemon(d) if !d.daemon.verbose => "warn",
        _ => "info",
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("GIXD_LOG").unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level)))
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Serve(args) => serve(args),
        Command::Daemon(args) => daemon(args),
        Command::Budget(sizes) => {
            let (line, warning) = sizes.apply(&mut Config::new(".".into()));
            println!("{line}");
            if let Some(warning) = warning {
                println!("warning: {warning}");
            }
            Ok(())
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("gixd: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn daemon(args: Daemon) -> Result<(), Box<dyn std::error::Error>> {
    let mut config = Config::new(args.base_path);
    config.exports = if args.export_all { Exports::All } else { Exports::DaemonExportOk };
    config.git_listen = Some(SocketAddr::new(args.listen, args.port));
    config.max_connections = 32;
    config.informative_errors = args.daemon.informative_errors;
    config.paths.whitelist = args.directories;
    args.daemon.apply(&mut config)?;
    let _ = args.reuseaddr;
    let http = args.http_listen;
    // Without --http-listen the HTTP listener takes a free loopback port nobody is told about.
    config.listen = http.unwrap_or_else(|| "127.0.0.1:0".parse().expect("valid"));
    run(config, args.sizes, None, http.is_some())
}

fn serve(args: Serve) -> Result<(), Box<dyn std::error::Error>> {
    let (base_path, exports, url_path) = match args.base_path {
        Some(base) => (base, if args.export_all { Exports::All } else { Exports::DaemonExportOk }, None),
        None => {
            let cwd = std::env::current_dir()?;
            let data_dir = std::env::temp_dir().join("gixd");
            std::fs::create_dir_all(&data_dir)?;
            let default = gixd::demo::default_repository(&cwd, &data_dir)?;
            (default.base_path, default.exports, Some(default.url_path))
        }
    };
    let mut config = Config::new(base_path);
    config.listen = args.listen;
    config.git_listen = args.git_listen;
    config.exports = exports;
    config.stream_window = args.stream_window;
    args.daemon.apply(&mut config)?;
    run(config, args.sizes, url_path, true)
}

fn run(mut config: Config, sizes: Sizes, url_path: Option<String>, announce_http: bool) -> Result<(), Box<dyn std::error::Error>> {
    let (line, warning) = sizes.apply(&mut config);
    tracing::info!("{line}");
    if let Some(warning) = warning {
        tracing::warn!("{warning}");
    }
    let rt = gixd::server::runtime(&config)?;
    rt.block_on(async move {
        let server = gixd::server::Server::bind(config).await?;
        let addr = server.local_addr();
        if let Some(git) = server.git_addr() {
            println!("gixd: serving git://{git}/<repository>");
        }
        match url_path {
            Some(path) => println!("gixd: serving http://{addr}/{path}\n  try: git clone http://{addr}/{path}"),
            None if announce_http => println!("gixd: serving http://{addr}/<repository>"),
            None => {}
        }
        server
            .run(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await?;
        Ok(())
    })
}

