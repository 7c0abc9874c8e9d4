//! The `gixd` command line. `gixd serve` with no flags serves the repository it was started in
//! (or a demo repository) at http://127.0.0.1:8080/ and prints the URL to clone.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use gixd::config::{Config, Exports, Overrides};

/// `gixd --version`: ours, gitoxide's, and the patches built in.
const VERSION: &str =
    concat!(env!("CARGO_PKG_VERSION"), " (gix ", env!("GIXD_GIX_VERSION"), "; patches: ", env!("GIXD_PATCHES"), ")");

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
    /// Make, list and revoke access tokens (HTTP: the token is the password).
    Token {
        #[command(subcommand)]
        command: TokenCmd,
    },
    /// Create and list the repositories below a base path.
    Repo {
        #[command(subcommand)]
        command: RepoCmd,
    },
    /// Validate a configuration file and say exactly what is wrong with it.
    CheckConfig { file: PathBuf },
    /// Repack a repository into one pack with a reverse index and a bitmap (what git's
    /// `repack -adb` gives), in-process; nothing unreachable is deleted.
    Maintenance {
        /// The repository (its git directory or work tree).
        repo: PathBuf,
        /// Roll the small packs up instead, as git's `repack --geometric=2 -d` (what `gixd serve`
        /// runs after pushes); the big pack and its bitmap stay.
        #[arg(long)]
        geometric: bool,
    },
}

/// Where the tokens are: the configuration's token file, or the one given, or the default.
#[derive(clap::Args)]
struct TokenStoreArg {
    /// The configuration file whose token file to use.
    #[arg(long, conflicts_with = "token_file")]
    config: Option<PathBuf>,
    /// The token state file [default: $GIXD_STATE_DIR/tokens.toml, $XDG_STATE_HOME/gixd/tokens.toml
    /// or ~/.local/state/gixd/tokens.toml].
    #[arg(long, env = "GIXD_TOKEN_FILE")]
    token_file: Option<PathBuf>,
}

impl TokenStoreArg {
    fn path(&self) -> Result<PathBuf, Box<dyn std::error::Error>> {
        if let Some(path) = &self.token_file {
            return Ok(path.clone());
        }
        if let Some(file) = &self.config {
            let overrides =
                gixd::config::File::load(file)?.overrides(file.parent().unwrap_or(std::path::Path::new(".")));
            return Ok(overrides.token_file.expect("a config file always names a token file"));
        }
        Ok(gixd::config::default_token_file())
    }
}

#[derive(Subcommand)]
enum TokenCmd {
    /// Make a token: it is printed once; only its hash is stored.
    Add {
        #[arg(long)]
        user: String,
        /// Repositories it grants (a glob over repository paths; `*` matches anything).
        #[arg(long, default_value = "*")]
        repo: String,
        /// Allow pushing as well as reading.
        #[arg(long)]
        write: bool,
        /// Allow creating the repositories the glob matches by pushing to them (with --write;
        /// the server must allow push-to-create).
        #[arg(long, requires = "write")]
        create: bool,
        #[command(flatten)]
        store: TokenStoreArg,
    },
    /// List tokens (never their secrets).
    List {
        #[command(flatten)]
        store: TokenStoreArg,
    },
    /// Revoke tokens by id.
    Revoke {
        #[arg(required = true)]
        ids: Vec<String>,
        #[command(flatten)]
        store: TokenStoreArg,
    },
}

/// Where the repositories are: the base path given, or the configuration's.
#[derive(clap::Args)]
struct BaseArg {
    /// The directory of repositories.
    #[arg(long, env = "GIXD_BASE_PATH", conflicts_with = "config")]
    base_path: Option<PathBuf>,
    /// The configuration file whose base path to use.
    #[arg(long)]
    config: Option<PathBuf>,
}

impl BaseArg {
    fn path(&self) -> Result<PathBuf, Box<dyn std::error::Error>> {
        if let Some(path) = &self.base_path {
            return Ok(path.clone());
        }
        let Some(file) = &self.config else { return Err("give --base-path (or GIXD_BASE_PATH) or --config".into()) };
        let overrides = gixd::config::File::load(file)?.overrides(file.parent().unwrap_or(std::path::Path::new(".")));
        overrides.base_path.ok_or_else(|| format!("{} names no base_path", file.display()).into())
    }
}

#[derive(Subcommand)]
enum RepoCmd {
    /// Create a bare repository below the base path (hooks off, objects checked on push).
    Create {
        /// Its path below the base path (`team/app` makes `team/app.git`).
        path: String,
        #[arg(long, value_parser = ["sha1", "sha256"], default_value = "sha1")]
        object_format: String,
        /// Anyone may read it (writes git daemon's export marker).
        #[arg(long)]
        public: bool,
        #[arg(long)]
        description: Option<String>,
        #[command(flatten)]
        base: BaseArg,
    },
    /// List the repositories below the base path: format, public or private, size.
    List {
        #[command(flatten)]
        base: BaseArg,
    },
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
    /// Transfers of one repository in flight before "busy, retry" (0: no limit of its own) [default: 0].
    #[arg(long, env = "GIXD_MAX_TRANSFERS_PER_REPOSITORY")]
    max_transfers_per_repository: Option<usize>,
    /// Transfers from one client address in flight before "busy, retry" (0: no limit of its own) [default: 0].
    #[arg(long, env = "GIXD_MAX_TRANSFERS_PER_CLIENT")]
    max_transfers_per_client: Option<usize>,
    /// Seconds a request waits for a transfer slot before "busy, retry" [default: 5].
    #[arg(long, env = "GIXD_QUEUE_WAIT")]
    queue_wait: Option<u64>,
}

impl Sizes {
    fn overrides(&self) -> Overrides {
        Overrides {
            worker_threads: self.worker_threads,
            blocking_threads: self.blocking_threads,
            max_transfers: self.max_transfers,
            max_transfers_per_repository: self.max_transfers_per_repository,
            max_transfers_per_client: self.max_transfers_per_client,
            transfer_queue_wait: self.queue_wait.map(std::time::Duration::from_secs),
            ..Overrides::default()
        }
    }
}

#[derive(clap::Args)]
struct Serve {
    /// A TOML configuration file (see `gixd check-config`); flags given here win over it.
    #[arg(long, env = "GIXD_CONFIG")]
    config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:8080].
    #[arg(long, env = "GIXD_LISTEN")]
    listen: Option<SocketAddr>,
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
    /// Bytes per HTTP response frame (the in-flight window per transfer) [default: 262144].
    #[arg(long, env = "GIXD_STREAM_WINDOW")]
    stream_window: Option<usize>,
    /// The token state file [default: beside --config, else as `gixd token` says].
    #[arg(long, env = "GIXD_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// Exported repositories need a token too.
    #[arg(long)]
    no_anonymous_read: bool,
    /// A push to a missing repository creates it, for a token made with --create.
    #[arg(long, env = "GIXD_PUSH_TO_CREATE")]
    push_to_create: bool,
    /// Repack every repository with a bitmap every this many seconds (opt-in; at least 60).
    #[arg(long, value_name = "SECONDS", env = "GIXD_MAINTENANCE_EVERY")]
    maintenance_every: Option<u64>,
    /// After pushes, roll a repository's small packs up geometrically, or repack it with a new
    /// bitmap once enough objects are outside its bitmap [default: true].
    #[arg(long, value_name = "BOOL", env = "GIXD_AUTO_MAINTENANCE")]
    auto_maintenance: Option<bool>,
    #[command(flatten)]
    limits: LimitFlags,
    #[command(flatten)]
    daemon: DaemonFlags,
    #[command(flatten)]
    sizes: Sizes,
    #[command(flatten)]
    operations: OperationFlags,
}

/// What an operator watches and what repeated clones share.
#[derive(clap::Args)]
struct OperationFlags {
    /// Serve Prometheus metrics at http://ADDR/metrics.
    #[arg(long, value_name = "ADDR", env = "GIXD_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// One JSON line per request to this file (`-`: standard output).
    #[arg(long, value_name = "FILE", env = "GIXD_ACCESS_LOG")]
    access_log: Option<PathBuf>,
    /// Share one generated pack among identical fetches (the single-flight pack cache; off by default).
    #[arg(long, env = "GIXD_PACK_CACHE")]
    pack_cache: bool,
    /// Bytes of cached responses held in memory [default: 64 MiB]; implies --pack-cache.
    #[arg(long, value_name = "BYTES", env = "GIXD_PACK_CACHE_MEMORY")]
    pack_cache_memory: Option<u64>,
    /// Where responses that do not fit in memory go (unlinked files); implies --pack-cache.
    #[arg(long, value_name = "DIR", env = "GIXD_PACK_CACHE_DIR")]
    pack_cache_dir: Option<PathBuf>,
    /// Bytes of finished responses kept on disk [default: 1 GiB]; implies --pack-cache.
    #[arg(long, value_name = "BYTES", env = "GIXD_PACK_CACHE_DISK")]
    pack_cache_disk: Option<u64>,
    /// Seconds a finished response is kept [default: 300]; implies --pack-cache.
    #[arg(long, value_name = "SECONDS", env = "GIXD_PACK_CACHE_SECS")]
    pack_cache_secs: Option<u64>,
}

impl OperationFlags {
    fn overrides(&self) -> Overrides {
        Overrides {
            metrics_listen: self.metrics_listen,
            access_log: self.access_log.clone(),
            pack_cache: self.pack_cache.then_some(true),
            pack_cache_memory: self.pack_cache_memory,
            pack_cache_dir: self.pack_cache_dir.clone(),
            pack_cache_disk: self.pack_cache_disk,
            pack_cache_max_age: self.pack_cache_secs.map(std::time::Duration::from_secs),
            ..Overrides::default()
        }
    }
}

/// Request limits (the configuration file's `[limits]`).
#[derive(clap::Args)]
struct LimitFlags {
    /// Largest request body as sent [default: 16 MiB].
    #[arg(long, value_name = "BYTES")]
    max_request_body: Option<usize>,
    /// Largest request body after gzip [default: 64 MiB].
    #[arg(long, value_name = "BYTES")]
    max_inflated_body: Option<usize>,
    /// Largest pack one push may send [default: 4 GiB].
    #[arg(long, value_name = "BYTES")]
    max_push_bytes: Option<u64>,
    /// Largest object a push may carry, by its inflated size [default: 256 MiB].
    #[arg(long, value_name = "BYTES")]
    max_object_bytes: Option<usize>,
    /// Slowest a client may send while gixd waits for it, in bytes per second [default: 1024].
    #[arg(long, value_name = "BYTES")]
    min_receive_rate: Option<u64>,
    /// Most want lines per request [default: 100000].
    #[arg(long, value_name = "N")]
    max_wants: Option<usize>,
    /// Most have lines per request [default: 100000].
    #[arg(long, value_name = "N")]
    max_haves: Option<usize>,
}

impl LimitFlags {
    fn overrides(&self) -> Overrides {
        Overrides {
            max_request_body: self.max_request_body,
            max_inflated_body: self.max_inflated_body,
            max_push_bytes: self.max_push_bytes,
            max_object_bytes: self.max_object_bytes,
            min_receive_rate: self.min_receive_rate,
            max_wants: self.max_wants,
            max_haves: self.max_haves,
            ..Overrides::default()
        }
    }
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
    /// What the flags given say; a boolean flag that is absent says nothing.
    fn overrides(&self) -> Overrides {
        let secs = std::time::Duration::from_secs;
        let services = self
            .enable
            .iter()
            .map(|n| (n.clone(), true))
            .chain(self.disable.iter().map(|n| (n.clone(), false)))
            .collect();
        Overrides {
            services,
            io_timeout: self.timeout.map(secs),
            init_timeout: self.init_timeout.map(secs),
            max_connections: self.max_connections,
            informative_errors: self.informative_errors.then_some(true),
            strict_paths: self.strict_paths.then_some(true),
            user_path: self.user_path.clone(),
            ..Overrides::default()
        }
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
    #[command(flatten)]
    operations: OperationFlags,
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
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GIXD_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level)),
        )
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Serve(args) => serve(args),
        Command::Daemon(args) => daemon(args),
        Command::Token { command } => token(command),
        Command::Repo { command } => repo(command),
        Command::CheckConfig { file } => check_config(&file),
        Command::Maintenance { repo, geometric } => {
            let git_dir = if repo.join(".git").is_dir() { repo.join(".git") } else { repo };
            let report = if geometric {
                gixd::maintenance::geometric::run(&git_dir).map(|r| r.unwrap_or_default())
            } else {
                gixd::maintenance::run(&git_dir)
            };
            report
                .map(|r| {
                    println!(
                        "{}: {} objects in {} ({} stored whole before, now deltas), {} commit bitmaps; removed {} pack(s) and {} loose object(s) now in it; {} loose ref(s) packed",
                        git_dir.display(),
                        r.objects,
                        r.pack.display(),
                        r.deltas_computed,
                        r.bitmaps,
                        r.packs_removed,
                        r.loose_removed,
                        r.refs_packed
                    )
                })
                .map_err(Into::into)
        }
        Command::Budget(sizes) => budget(&sizes),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("gixd: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `gixd repo create|list`.
fn repo(command: RepoCmd) -> Result<(), Box<dyn std::error::Error>> {
    match command {
        RepoCmd::Create { path, object_format, public, description, base } => {
            let object_hash = if object_format == "sha256" { gix_hash::Kind::Sha256 } else { gix_hash::Kind::Sha1 };
            let options = gixd::repo::create::Options { object_hash, public, description };
            let made = gixd::repo::create::create(&base.path()?, &path, &options)?;
            println!("{}", made.display());
        }
        RepoCmd::List { base } => {
            let base = base.path()?;
            println!("{:<40} {:<8} {:<8} {:>12}", "repository", "format", "access", "bytes");
            for listed in gixd::repo::listing::list(&base) {
                let format = match &listed.format {
                    Ok(format) => (*format).to_owned(),
                    Err(reason) => format!("unsupported: {reason}"),
                };
                let access = if listed.public { "public" } else { "private" };
                println!("{:<40} {:<8} {:<8} {:>12}", listed.name, format, access, listed.bytes);
            }
        }
    }
    Ok(())
}

/// `gixd budget`: the sizes `serve` would take here, and why.
fn budget(sizes: &Sizes) -> Result<(), Box<dyn std::error::Error>> {
    let (_, line, warning) = resolve_for_budget(Config::new(".".into()), sizes.overrides())?;
    println!("{line}");
    if let Some(warning) = warning {
        println!("warning: {warning}");
    }
    Ok(())
}

fn daemon(args: Daemon) -> Result<(), Box<dyn std::error::Error>> {
    let _ = args.reuseaddr;
    let http = args.http_listen;
    // git daemon's own defaults, below its flags: 32 connections, terse errors.
    let defaults = Overrides {
        exports: Some(if args.export_all { Exports::All } else { Exports::DaemonExportOk }),
        git_listen: Some(SocketAddr::new(args.listen, args.port)),
        max_connections: Some(32),
        informative_errors: Some(false),
        whitelist: Some(args.directories.clone()),
        // Without --http-listen the HTTP listener takes a free loopback port nobody is told about.
        listen: Some(http.unwrap_or_else(|| "127.0.0.1:0".parse().expect("valid"))),
        ..Overrides::default()
    };
    let flags = args.sizes.overrides().over(args.daemon.overrides()).over(args.operations.overrides());
    run(Config::new(args.base_path), flags.over(defaults), None, http.is_some())
}

fn serve(args: Serve) -> Result<(), Box<dyn std::error::Error>> {
    let file = match &args.config {
        Some(path) => load_config(path)?,
        None => Overrides::default(),
    };
    let flags = Overrides {
        listen: args.listen,
        git_listen: args.git_listen,
        base_path: args.base_path,
        exports: args.export_all.then_some(Exports::All),
        stream_window: args.stream_window,
        token_file: args.token_file,
        anonymous_read: args.no_anonymous_read.then_some(false),
        push_to_create: args.push_to_create.then_some(true),
        maintenance_interval: args.maintenance_every.map(std::time::Duration::from_secs),
        auto_maintenance: args.auto_maintenance,
        ..Overrides::default()
    };
    let mut layers = flags
        .over(args.limits.overrides())
        .over(args.daemon.overrides())
        .over(args.sizes.overrides())
        .over(args.operations.overrides())
        .over(file);
    if layers.token_file.is_none() {
        layers.token_file = Some(gixd::config::default_token_file());
    }
    let url_path = if layers.base_path.is_none() {
        // No base path anywhere: serve the checkout gixd runs in, or a demo repository.
        let cwd = std::env::current_dir()?;
        let data_dir = std::env::temp_dir().join("gixd");
        std::fs::create_dir_all(&data_dir)?;
        let default = gixd::demo::default_repository(&cwd, &data_dir)?;
        layers.base_path = Some(default.base_path);
        layers.exports = Some(default.exports);
        Some(default.url_path)
    } else {
        None
    };
    run(Config::new(".".into()), layers, url_path, true)
}

/// The configuration file's settings, refused with every problem named when it has any.
fn load_config(path: &std::path::Path) -> Result<Overrides, Box<dyn std::error::Error>> {
    let file = gixd::config::File::load(path)?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let problems = file.problems(dir);
    if !problems.is_empty() {
        return Err(format!("{}:\n  {}", path.display(), problems.join("\n  ")).into());
    }
    Ok(file.overrides(dir))
}

fn token(command: TokenCmd) -> Result<(), Box<dyn std::error::Error>> {
    use gixd::auth::TokenStore;
    match command {
        TokenCmd::Add { user, repo, write, create, store } => {
            let path = store.path()?;
            let mut tokens = TokenStore::load(&path)?;
            let (token, secret) = tokens.add_creating(&user, &repo, write, create)?;
            tokens.save()?;
            println!("{secret}");
            eprintln!(
                "token {} for {} ({}, repositories '{}') stored in {}; the secret above is shown only now",
                token.id,
                token.user,
                match (token.write, token.create) {
                    (true, true) => "read, push and create",
                    (true, false) => "read and push",
                    _ => "read",
                },
                token.repos,
                path.display()
            );
        }
        TokenCmd::List { store } => {
            let path = store.path()?;
            let tokens = TokenStore::load(&path)?;
            println!("{:<10} {:<16} {:<6} {:<24} created", "id", "user", "access", "repositories");
            for t in &tokens.tokens {
                println!(
                    "{:<10} {:<16} {:<6} {:<24} {}",
                    t.id,
                    t.user,
                    if t.write { "write" } else { "read" },
                    t.repos,
                    t.created
                );
            }
        }
        TokenCmd::Revoke { ids, store } => {
            let path = store.path()?;
            let mut tokens = TokenStore::load(&path)?;
            let mut missing = Vec::new();
            for id in &ids {
                if !tokens.revoke(id) {
                    missing.push(id.clone());
                }
            }
            tokens.save()?;
            if !missing.is_empty() {
                return Err(format!("no token with id {}", missing.join(", ")).into());
            }
            eprintln!("revoked {}", ids.join(", "));
        }
    }
    Ok(())
}

fn check_config(path: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let config = load_config(path)?.resolve(Config::new(".".into()), 1)?;
    println!(
        "{}: ok (listen {}, git:// {}, base path {}, tokens in {})",
        path.display(),
        config.listen,
        config.git_listen.map_or("off".to_owned(), |a| a.to_string()),
        config.base_path.display(),
        config.token_file.as_deref().map_or("-".into(), |p| p.display().to_string())
    );
    Ok(())
}

/// `layers` resolved on `defaults` for the CPU budget gixd really has, with the line that says
/// which sizes it chose and why (and a warning, if the budget calls for one).
fn resolve_for_budget(
    defaults: Config,
    layers: Overrides,
) -> Result<(Config, String, Option<String>), gixd::config::ConfigError> {
    let budget = gixd::budget::read();
    let config = layers.resolve(defaults, budget.effective())?;
    let (line, warning) = budget.describe(&config.sizes());
    Ok((config, line, warning))
}

/// Resolve the layers for the budget, and serve.
fn run(
    defaults: Config,
    layers: Overrides,
    url_path: Option<String>,
    announce_http: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let (config, line, warning) = resolve_for_budget(defaults, layers)?;
    tracing::info!("{line}");
    if let Some(warning) = warning {
        tracing::warn!("{warning}");
    }
    let rt = gixd::server::runtime(&config)?;
    rt.block_on(async move {
        let server = gixd::server::Server::bind(config).await?;
        let addr = server.local_addr();
        // Where it serves, for whoever started it. A stdout closed meanwhile (a supervisor or a
        // test that read what it needed) is no reason to stop serving: `println!` would panic.
        let announce = |line: String| {
            use std::io::Write;
            let _ = writeln!(std::io::stdout(), "{line}");
        };
        if let Some(git) = server.git_addr() {
            announce(format!("gixd: serving git://{git}/<repository>"));
        }
        match url_path {
            Some(path) => {
                announce(format!("gixd: serving http://{addr}/{path}\n  try: git clone http://{addr}/{path}"))
            }
            None if announce_http => announce(format!("gixd: serving http://{addr}/<repository>")),
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
