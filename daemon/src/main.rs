//! The `gixd` command line. `gixd serve` with no flags serves the repository it was started in
//! (or a demo repository) at http://127.0.0.1:8080/ and prints the URL to clone.

use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use gixd::cli::{access, mirror, repos, serve};

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
    Serve(serve::Serve),
    /// Serve git:// like `git daemon`, with its flags (and smart HTTP with --http-listen).
    Daemon(serve::Daemon),
    /// Print the CPU budget gixd reads from the kernel and the sizes it would choose.
    Budget(serve::Budget),
    /// Make, list and revoke access tokens (HTTP: the token is the password).
    Token {
        #[command(subcommand)]
        command: access::TokenCmd,
    },
    /// Add, list and remove users' SSH public keys (SSH: `--ssh-listen`).
    Key {
        #[command(subcommand)]
        command: access::KeyCmd,
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
        store: access::TokenStoreArg,
    },
    /// Create and list the repositories below a base path.
    Repo {
        #[command(subcommand)]
        command: repos::RepoCmd,
    },
    /// Pull mirrors: repositories that follow an upstream (add, sync, list).
    Mirror {
        #[command(subcommand)]
        command: mirror::MirrorCmd,
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
        Command::Serve(args) => serve::serve(args, &sub),
        Command::Daemon(args) => serve::daemon(args, &sub),
        Command::Token { command } => access::token(command),
        Command::Key { command } => access::key(command),
        Command::SshHostKey { path, store } => access::ssh_host_key(path, &store),
        Command::Shell { config, key } => match serve::shell(&config, &key) {
            Ok(status) => return std::process::ExitCode::from(status),
            Err(err) => Err(err),
        },
        Command::Keys { config, key_type, blob } => access::keys(&config, key_type.zip(blob)),
        Command::Repo { command } => repos::repo(command),
        Command::Mirror { command } => mirror::mirror(command),
        Command::CheckConfig { file } => serve::check_config(&file),
        Command::Maintenance { repo, geometric, aggressive } => repos::maintenance(repo, geometric, aggressive),
        Command::Budget(args) => serve::budget(args, &sub),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("gixd: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}
