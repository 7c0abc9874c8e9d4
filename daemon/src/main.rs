//! The `gixd` command line. `gixd serve` with no flags serves the repository it was started in
//! (or a demo repository) at http://127.0.0.1:8080/ and prints the URL to clone.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use gixd::config::{Config, Exports};

/// A git server on gitoxide.
#[derive(Parser)]
#[command(name = "gixd", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve repositories over smart HTTP.
    Serve(Serve),
}

#[derive(clap::Args)]
struct Serve {
    /// Address to listen on.
    #[arg(long, default_value = Config::DEFAULT_LISTEN, env = "GIXD_LISTEN")]
    listen: SocketAddr,
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
    config.exports = exports;
    config.stream_window = args.stream_window;

    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rt = gixd::server::runtime(workers, 4 * workers)?;
    rt.block_on(async move {
        let server = gixd::server::Server::bind(config).await?;
        let addr = server.local_addr();
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
