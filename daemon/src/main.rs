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
    /// Serve repositories over smart HTTP.
    Serve(Serve),
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
    sizes: Sizes,
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GIXD_LOG").unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => match serve(args) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("gixd: {err}");
                std::process::ExitCode::FAILURE
            }
        },
        Command::Budget(sizes) => {
            let (line, warning) = sizes.apply(&mut Config::new(".".into()));
            println!("{line}");
            if let Some(warning) = warning {
                println!("warning: {warning}");
            }
            std::process::ExitCode::SUCCESS
        }
    }
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
    let (line, warning) = args.sizes.apply(&mut config);
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
            None => println!("gixd: serving http://{addr}/<repository>"),
        }
        server
            .run(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await?;
        Ok(())
    })
}
