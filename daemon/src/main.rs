//! The `gixd` command line. `gixd serve` with no flags serves the repository it was started in
//! (or a demo repository) at http://127.0.0.1:8080/ and prints the URL to clone.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand};
use gixd::config::{Config, Layers, Limits, Settings};

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
    Budget(Budget),
    /// Make, list and revoke access tokens (HTTP: the token is the password).
    Token {
        #[command(subcommand)]
        command: TokenCmd,
    },
    /// Add, list and remove users' SSH public keys (SSH: `--ssh-listen`).
    Key {
        #[command(subcommand)]
        command: KeyCmd,
    },
    /// Serve one git command under OpenSSH: the forced command of a user's key (reads
    /// SSH_ORIGINAL_COMMAND and GIT_PROTOCOL; stdin and stdout are the client).
    Shell {
        /// The configuration file gixd serves with (its base path, token file and limits).
        #[arg(long, env = "GIXD_CONFIG")]
        config: PathBuf,
        /// The key's id (`gixd key list`): its user and grant are the request's.
        #[arg(long)]
        key: String,
    },
    /// For OpenSSH's AuthorizedKeysCommand: the authorized_keys line of the key given (`%t %k`),
    /// forcing `gixd shell` for it; with no key, every key's line (an authorized_keys file).
    Keys {
        /// The configuration file `gixd shell` is to serve with (its token file holds the keys).
        #[arg(long, env = "GIXD_CONFIG")]
        config: PathBuf,
        /// The key's type, as sshd's `%t` gives it (`ssh-ed25519`).
        #[arg(requires = "blob")]
        key_type: Option<String>,
        /// The key, base64, as sshd's `%k` gives it.
        blob: Option<String>,
    },
    /// Print the SSH host keys' fingerprints (made when missing), for users' known_hosts.
    SshHostKey {
        /// The host key file [default: ssh_host_ed25519_key beside the token file].
        #[arg(long, env = "GIXD_SSH_HOST_KEY")]
        path: Option<PathBuf>,
        #[command(flatten)]
        store: TokenStoreArg,
    },
    /// Create and list the repositories below a base path.
    Repo {
        #[command(subcommand)]
        command: RepoCmd,
    },
    /// Validate a configuration file and say exactly what is wrong with it.
    CheckConfig { file: PathBuf },
    /// Repack a repository into one pack with a reverse index and a bitmap (what git's
    /// `repack -adb` gives), in-process; what no ref reaches goes into a cruft pack (git's, with
    /// `.mtimes`) and is removed once older than the repository's `gc.pruneExpire` (two weeks).
    /// A repository that is one pack holding only reachable objects keeps it (its bitmap is
    /// written beside it).
    Maintenance {
        /// The repository (its git directory or work tree).
        repo: PathBuf,
        /// Roll the small packs up instead, as git's `repack --geometric=2 -d` (what `gixd serve`
        /// runs after pushes); the big pack and its bitmap stay.
        #[arg(long)]
        geometric: bool,
        /// Search every delta anew (git's `gc --aggressive`, `repack -adf`) with the repository's
        /// `pack.window` and `pack.depth` (10 and 50): a smaller pack, for more CPU.
        #[arg(long, conflicts_with = "geometric")]
        aggressive: bool,
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
        Ok(assemble(self.config.as_deref(), &Layers::default())?.token_file.expect("assembled with a token file"))
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

#[derive(Subcommand)]
enum KeyCmd {
    /// Add a user's SSH public key (an OpenSSH `.pub` file), with a grant as a token's.
    Add {
        #[arg(long)]
        user: String,
        /// The public key file (`id_ed25519.pub`).
        #[arg(long)]
        key_file: PathBuf,
        /// Repositories it grants (a glob over repository paths; `*` matches anything).
        #[arg(long, default_value = "*")]
        repo: String,
        /// Allow pushing as well as reading.
        #[arg(long)]
        write: bool,
        #[command(flatten)]
        store: TokenStoreArg,
    },
    /// List the keys.
    List {
        #[command(flatten)]
        store: TokenStoreArg,
    },
    /// Remove keys by id.
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
        Settings::load(file)?.base_path.ok_or_else(|| format!("{} names no base_path", file.display()).into())
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
        /// Where its refs are kept: loose files and packed-refs, or reftable (git 3.0's default).
        #[arg(long, value_parser = ["files", "reftable"], default_value = "files")]
        ref_format: String,
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

/// `gixd budget`'s flags: the limits (sizes among them) `serve` takes.
#[derive(clap::Args)]
struct Budget {
    #[command(flatten)]
    limits: Limits,
}

/// `gixd serve`: every setting ([`Settings`]), from the configuration file, the environment and
/// these flags.
#[derive(clap::Args)]
struct Serve {
    /// A TOML configuration file (see `gixd check-config`); variables and flags win over it.
    #[arg(long, env = "GIXD_CONFIG")]
    config: Option<PathBuf>,
    #[command(flatten)]
    settings: Settings,
}

/// `git daemon`'s command line, served by gixd: git daemon's flags are settings' flags
/// ([`daemon_command`] gives them git daemon's defaults).
#[derive(clap::Args)]
struct Daemon {
    /// Address to listen on for git:// (all interfaces by default, as git daemon).
    #[arg(id = "git_host", long = "listen", value_name = "HOST", default_value = "0.0.0.0")]
    listen: std::net::IpAddr,
    /// git:// port.
    #[arg(long, default_value_t = 9418)]
    port: u16,
    /// Accepted for git daemon compatibility: the listener always reuses the address.
    #[arg(long)]
    reuseaddr: bool,
    /// Log every connection and request (info); without it `daemon` logs warnings only.
    #[arg(long)]
    verbose: bool,
    #[command(flatten)]
    settings: Settings,
    /// Only repositories in these directories (below them, without --strict-paths) are served.
    #[arg(value_name = "DIRECTORY")]
    directories: Vec<PathBuf>,
}

/// The command line, with `gixd daemon`'s own declared defaults: git daemon's (32 connections,
/// terse errors, a base path required) and smart HTTP only where `--http-listen` says.
fn daemon_command() -> clap::Command {
    Cli::command().mut_subcommand("daemon", |daemon| {
        daemon
            .mut_arg("listen", |arg| {
                arg.long("http-listen")
                    .env(None::<&str>)
                    .default_value("127.0.0.1:0")
                    .help("Also serve smart HTTP on this address (without it: a loopback port nobody is told of)")
            })
            .mut_arg("git_listen", |arg| arg.hide(true))
            .mut_arg("base_path", |arg| {
                arg.required(true)
                    .help("Repository paths are relative to this directory (required: gixd never serves `/`)")
            })
            .mut_arg("max_connections", |arg| arg.default_value("32"))
            .mut_arg("informative_errors", |arg| arg.default_value("false"))
    })
}

fn main() -> std::process::ExitCode {
    gixd::session::give_large_allocations_back();
    let matches = daemon_command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let sub = matches.subcommand().map(|(_, m)| m.clone()).unwrap_or_default();
    // git daemon is quiet unless --verbose; `serve` tells what it does.
    let level = match &cli.command {
        Command::Daemon(d) if !d.verbose => "warn",
        // Its stderr is the git user's terminal: what it serves is in the access log.
        Command::Shell { .. } => "off",
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
        Command::Serve(args) => serve(args, &sub),
        Command::Daemon(args) => daemon(args, &sub),
        Command::Token { command } => token(command),
        Command::Key { command } => key(command),
        Command::SshHostKey { path, store } => ssh_host_key(path, &store),
        Command::Shell { config, key } => match shell(&config, &key) {
            Ok(status) => return std::process::ExitCode::from(status),
            Err(err) => Err(err),
        },
        Command::Keys { config, key_type, blob } => keys(&config, key_type.zip(blob)),
        Command::Repo { command } => repo(command),
        Command::CheckConfig { file } => check_config(&file),
        Command::Maintenance { repo, geometric, aggressive } => {
            let git_dir = if repo.join(".git").is_dir() { repo.join(".git") } else { repo };
            let report = if geometric {
                gixd::maintenance::geometric::run(&git_dir).map(|r| r.unwrap_or_default())
            } else if aggressive {
                gixd::maintenance::aggressive(&git_dir)
            } else {
                gixd::maintenance::run(&git_dir)
            };
            report
                .map(|r| {
                    let (dir, pack) = (git_dir.display(), r.pack.display());
                    println!(
                        "{dir}: {} objects in {pack} ({} deltas found by the search), {} commit bitmaps; removed {} pack(s) and {} loose object(s) now in it; {} loose ref(s) packed; {} unreachable object(s) kept, {} expired",
                        r.objects, r.deltas_computed, r.bitmaps, r.packs_removed, r.loose_removed, r.refs_packed, r.unreachable_kept, r.pruned
                    )
                })
                .map_err(Into::into)
        }
        Command::Budget(args) => budget(args, &sub),
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
        RepoCmd::Create { path, object_format, ref_format, public, description, base } => {
            let object_hash = if object_format == "sha256" { gix_hash::Kind::Sha256 } else { gix_hash::Kind::Sha1 };
            let reftable = ref_format == "reftable";
            let options = gixd::repo::create::Options { object_hash, public, description, reftable };
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
fn budget(args: Budget, matches: &ArgMatches) -> Result<(), Box<dyn std::error::Error>> {
    let layers = Layers::from_matches(matches, &Settings { limits: args.limits, ..Settings::default() });
    let (_, line, warning) = resolve_for_budget(&layers.with_file(Settings::default()))?;
    println!("{line}");
    if let Some(warning) = warning {
        println!("warning: {warning}");
    }
    Ok(())
}

fn daemon(args: Daemon, matches: &ArgMatches) -> Result<(), Box<dyn std::error::Error>> {
    let _ = args.reuseaddr;
    let mut layers = Layers::from_matches(matches, &args.settings);
    let announce_http = layers.given.listen.is_some();
    layers.given.git_listen.get_or_insert(SocketAddr::new(args.listen, args.port));
    let (mut config, line, warning) = resolve_for_budget(&assemble(None, &layers)?)?;
    config.paths.whitelist = args.directories;
    run(config, &line, warning, None, announce_http, None)
}

fn serve(args: Serve, matches: &ArgMatches) -> Result<(), Box<dyn std::error::Error>> {
    let layers = Layers::from_matches(matches, &args.settings);
    let mut settings = assemble(args.config.as_deref(), &layers)?;
    // No base path anywhere: serve the checkout gixd runs in, or a demo repository.
    let demo = match &settings.base_path {
        Some(_) => None,
        None => {
            let data_dir = std::env::temp_dir().join("gixd");
            std::fs::create_dir_all(&data_dir)?;
            let demo = gixd::demo::default_repository(&std::env::current_dir()?, &data_dir)?;
            settings.base_path = Some(demo.base_path.clone());
            Some(demo)
        }
    };
    let (mut config, line, warning) = resolve_for_budget(&settings)?;
    let demo_exports = demo.as_ref().map(|demo| demo.exports.clone());
    let url_path = demo.map(|demo| {
        config.exports = demo.exports;
        demo.url_path
    });
    // SIGHUP: the same layers over the configuration file read anew.
    let (config_path, base_path) = (args.config.clone(), settings.base_path.clone());
    let reread = move || -> Result<Config, Box<dyn std::error::Error>> {
        let mut settings = assemble(config_path.as_deref(), &layers)?;
        if settings.base_path.is_none() {
            settings.base_path = base_path.clone();
        }
        let (mut config, _, _) = resolve_for_budget(&settings)?;
        if let Some(exports) = &demo_exports {
            config.exports = exports.clone();
        }
        Ok(config)
    };
    run(config, &line, warning, url_path, true, Some(Box::new(reread)))
}

/// How a running server reads its configuration again (SIGHUP).
type Reread = Box<dyn Fn() -> Result<Config, Box<dyn std::error::Error>> + Send>;

/// A reload (SIGHUP): the configuration read again (`reread`; without one, the one in use) and
/// given to the server, systemd told while it lasts. A configuration that does not parse keeps
/// every setting in use.
fn reload(reloader: &gixd::server::Reloader, reread: Option<&Reread>, current: &Config) {
    use gixd::lifecycle::notify;
    use sd_notify::NotifyState;
    match NotifyState::monotonic_usec_now() {
        Ok(now) => notify(&[NotifyState::Reloading, now]),
        Err(_) => notify(&[NotifyState::Reloading]),
    }
    let new = match reread {
        Some(reread) => reread().unwrap_or_else(|err| {
            // Its settings stay; the token file and the certificate they name are read again.
            tracing::error!(%err, "reload: the configuration does not parse; every setting in use stays");
            current.clone()
        }),
        None => current.clone(),
    };
    {
        {
            let done = reloader.reload(&new);
            tracing::info!(tokens = ?done.tokens, "reloaded: tokens and TLS certificate read again");
            for err in &done.errors {
                tracing::error!(%err, "reload");
            }
            if !done.need_restart.is_empty() {
                tracing::warn!(
                    settings = %done.need_restart.join(", "),
                    "reload: these settings changed and take effect at the next start only"
                );
            }
        }
    }
    notify(&[NotifyState::Ready]);
}

/// The settings a command runs with, assembled one way for every command and for a reload: the
/// command line's flags and variables over the configuration file `file` (none: nothing) over
/// the declared defaults, the token file at its default place unless one is named.
fn assemble(file: Option<&std::path::Path>, layers: &Layers) -> Result<Settings, Box<dyn std::error::Error>> {
    let file = match file {
        Some(path) => load_config(path)?,
        None => Settings::default(),
    };
    let mut settings = layers.clone().with_file(file);
    settings.token_file.get_or_insert_with(gixd::config::default_token_file);
    Ok(settings)
}

/// The configuration file's settings, refused with every problem named when it has any.
fn load_config(path: &std::path::Path) -> Result<Settings, Box<dyn std::error::Error>> {
    let file = Settings::load(path)?;
    let problems = file.problems();
    if !problems.is_empty() {
        return Err(format!("{}:\n  {}", path.display(), problems.join("\n  ")).into());
    }
    Ok(file)
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

fn key(command: KeyCmd) -> Result<(), Box<dyn std::error::Error>> {
    use gixd::auth::TokenStore;
    match command {
        KeyCmd::Add { user, key_file, repo, write, store } => {
            let path = store.path()?;
            let mut keys = TokenStore::load(&path)?;
            let line = std::fs::read_to_string(&key_file).map_err(|e| format!("{}: {e}", key_file.display()))?;
            let key = keys.add_key(&user, &repo, write, line.trim())?;
            keys.save()?;
            println!("{}", key.id);
            eprintln!(
                "key {} for {} ({}, repositories '{}') stored in {}",
                key.id,
                key.user,
                if key.write { "read and push" } else { "read" },
                key.repos,
                path.display()
            );
        }
        KeyCmd::List { store } => print!("{}", TokenStore::load(&store.path()?)?.keys_table()),
        KeyCmd::Revoke { ids, store } => {
            let path = store.path()?;
            let mut keys = TokenStore::load(&path)?;
            keys.revoke_keys(&ids)?;
            keys.save()?;
            eprintln!("revoked {}", ids.join(", "));
        }
    }
    Ok(())
}

/// `gixd shell`: the command sshd was asked for, served for the key `key`; its exit status.
fn shell(config_path: &std::path::Path, key: &str) -> Result<u8, Box<dyn std::error::Error>> {
    let settings = assemble(Some(config_path), &Layers::default())?;
    if settings.base_path.is_none() {
        return Err(format!("{} names no base_path", config_path.display()).into());
    }
    let (config, _, _) = resolve_for_budget(&settings)?;
    Ok(gixd::transport::shell::run(config, key)?)
}

/// `gixd keys`: the authorized_keys line of the key `typed` (`%t`, `%k`), or of every key.
fn keys(config_path: &std::path::Path, typed: Option<(String, String)>) -> Result<(), Box<dyn std::error::Error>> {
    let config_path = std::path::absolute(config_path)?;
    let tokens = assemble(Some(&config_path), &Layers::default())?.token_file.expect("assembled with a token file");
    let store = gixd::auth::TokenStore::load(&tokens)?;
    let wanted = typed.map(|(kind, blob)| format!("{kind} {blob}"));
    let gixd = std::env::current_exe()?;
    print!("{}", gixd::transport::shell::authorized_keys(&store, &gixd, &config_path, wanted.as_deref()));
    Ok(())
}

fn ssh_host_key(path: Option<PathBuf>, store: &TokenStoreArg) -> Result<(), Box<dyn std::error::Error>> {
    let path = match path {
        Some(path) => path,
        None => store.path()?.parent().unwrap_or(std::path::Path::new(".")).join("ssh_host_ed25519_key"),
    };
    let keys = gixd::transport::ssh::host_keys(&path)?;
    for (key, path) in keys.iter().zip([path.clone(), gixd::transport::ssh::ecdsa_path(&path)]) {
        println!("{} {}", gixd::transport::ssh::fingerprint(key), path.display());
    }
    Ok(())
}

fn check_config(path: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let config = assemble(Some(path), &Layers::default())?.resolve(1)?;
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

/// `settings` resolved for the CPU and memory budget gixd really has, with the line that says which sizes it
/// chose and why (and a warning, if the budget calls for one).
fn resolve_for_budget(settings: &Settings) -> Result<(Config, String, Option<String>), gixd::config::ConfigError> {
    let budget = gixd::budget::read();
    let config = settings.resolve_within(budget.effective(), budget.memory)?;
    let (line, warning) = budget.describe(&config.sizes());
    Ok((config, line, warning))
}

/// Serve `config`, after saying which sizes it runs with.
fn run(
    config: Config,
    line: &str,
    warning: Option<String>,
    url_path: Option<String>,
    announce_http: bool,
    reread: Option<Reread>,
) -> Result<(), Box<dyn std::error::Error>> {
    tracing::info!("{line}");
    if let Some(warning) = warning {
        tracing::warn!("{warning}");
    }
    let rt = gixd::server::runtime(&config)?;
    let served = rt.block_on(async move {
        let current = config.clone();
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
        if let Some(https) = server.https_addr() {
            announce(format!("gixd: serving https://{https}/<repository>"));
        }
        if let Some((ssh, fingerprint)) = server.ssh_addr() {
            announce(format!("gixd: serving ssh://{ssh}/<repository> (host key {fingerprint})"));
        }
        let reloader = server.reloader();
        let mut signals = gixd::lifecycle::Signals::new()?;
        server
            .run(async move {
                while signals.next().await == gixd::lifecycle::Signal::Reload {
                    reload(&reloader, reread.as_ref(), &current);
                }
            })
            .await?;
        Ok::<_, Box<dyn std::error::Error>>(())
    });
    // Blocking work a cancelled transfer left (a pack writer between two writes, a push
    // removing its quarantine) gets a moment to end; the idle pool's threads go at once.
    rt.shutdown_timeout(std::time::Duration::from_secs(10));
    served
}
