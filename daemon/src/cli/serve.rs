//! `gixd serve`, `gixd daemon`, `gixd shell`, `gixd budget` and `gixd check-config`: the
//! configuration assembled one way for each of them and for a reload ([`assemble`]), sized for
//! the CPU and memory budget gixd has, and served.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::ArgMatches;

use crate::config::{Config, Layers, Limits, Settings};

/// `gixd budget`'s flags: the limits (sizes among them) `serve` takes.
#[derive(clap::Args)]
pub struct Budget {
    #[command(flatten)]
    pub limits: Limits,
}

/// `gixd serve`: every setting ([`Settings`]), from the configuration file, the environment and
/// these flags.
#[derive(clap::Args)]
pub struct Serve {
    /// A TOML configuration file (see `gixd check-config`); variables and flags win over it.
    #[arg(long, env = "GIXD_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub settings: Settings,
}

/// `git daemon`'s command line, served by gixd: git daemon's flags are settings' flags
/// ([`daemon_command`] gives them git daemon's defaults).
#[derive(clap::Args)]
pub struct Daemon {
    /// Address to listen on for git:// (all interfaces by default, as git daemon).
    #[arg(id = "git_host", long = "listen", value_name = "HOST", default_value = "0.0.0.0")]
    pub listen: std::net::IpAddr,
    /// git:// port.
    #[arg(long, default_value_t = 9418)]
    pub port: u16,
    /// Accepted for git daemon compatibility: the listener always reuses the address.
    #[arg(long)]
    pub reuseaddr: bool,
    /// Log every connection and request (info); without it `daemon` logs warnings only.
    #[arg(long)]
    pub verbose: bool,
    #[command(flatten)]
    pub settings: Settings,
    /// Only repositories in these directories (below them, without --strict-paths) are served.
    #[arg(value_name = "DIRECTORY")]
    pub directories: Vec<PathBuf>,
}

/// `gixd budget`: the sizes `serve` would take here, and why.
pub fn budget(args: Budget, matches: &ArgMatches) -> Result<(), Box<dyn std::error::Error>> {
    let layers = Layers::from_matches(matches, &Settings { limits: args.limits, ..Settings::default() });
    let (_, line, warning) = resolve_for_budget(&layers.with_file(Settings::default()))?;
    println!("{line}");
    if let Some(warning) = warning {
        println!("warning: {warning}");
    }
    Ok(())
}

pub fn daemon(args: Daemon, matches: &ArgMatches) -> Result<(), Box<dyn std::error::Error>> {
    let _ = args.reuseaddr;
    let mut layers = Layers::from_matches(matches, &args.settings);
    let announce_http = layers.given.listen.is_some();
    layers.given.git_listen.get_or_insert(SocketAddr::new(args.listen, args.port));
    let (mut config, line, warning) = resolve_for_budget(&assemble(None, &layers)?)?;
    config.paths.whitelist = args.directories;
    run(config, &line, warning, None, announce_http, None)
}

pub fn serve(args: Serve, matches: &ArgMatches) -> Result<(), Box<dyn std::error::Error>> {
    let layers = Layers::from_matches(matches, &args.settings);
    let mut settings = assemble(args.config.as_deref(), &layers)?;
    // No base path anywhere: serve the checkout gixd runs in, or a demo repository.
    let demo = match &settings.base_path {
        Some(_) => None,
        None => {
            let data_dir = std::env::temp_dir().join("gixd");
            std::fs::create_dir_all(&data_dir)?;
            let demo = crate::demo::default_repository(&std::env::current_dir()?, &data_dir)?;
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
pub type Reread = Box<dyn Fn() -> Result<Config, Box<dyn std::error::Error>> + Send>;

/// A reload (SIGHUP): the configuration read again (`reread`; without one, the one in use) and
/// given to the server, systemd told while it lasts. A configuration that does not parse keeps
/// every setting in use.
pub fn reload(reloader: &crate::server::Reloader, reread: Option<&Reread>, current: &Config) {
    use crate::lifecycle::notify;
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
pub fn assemble(file: Option<&std::path::Path>, layers: &Layers) -> Result<Settings, Box<dyn std::error::Error>> {
    let file = match file {
        Some(path) => load_config(path)?,
        None => Settings::default(),
    };
    let mut settings = layers.clone().with_file(file);
    settings.token_file.get_or_insert_with(crate::config::default_token_file);
    Ok(settings)
}

/// The configuration file's settings, refused with every problem named when it has any.
pub fn load_config(path: &std::path::Path) -> Result<Settings, Box<dyn std::error::Error>> {
    let file = Settings::load(path)?;
    let problems = file.problems();
    if !problems.is_empty() {
        return Err(format!("{}:\n  {}", path.display(), problems.join("\n  ")).into());
    }
    Ok(file)
}

/// `gixd shell`: the command sshd was asked for, served for the key `key`; its exit status.
pub fn shell(config_path: &std::path::Path, key: &str) -> Result<u8, Box<dyn std::error::Error>> {
    let settings = assemble(Some(config_path), &Layers::default())?;
    if settings.base_path.is_none() {
        return Err(format!("{} names no base_path", config_path.display()).into());
    }
    let (config, _, _) = resolve_for_budget(&settings)?;
    Ok(crate::transport::shell::run(config, key)?)
}

pub fn check_config(path: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
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
pub fn resolve_for_budget(settings: &Settings) -> Result<(Config, String, Option<String>), crate::config::ConfigError> {
    let budget = crate::budget::read();
    let config = settings.resolve_within(budget.effective(), budget.memory)?;
    let (line, warning) = budget.describe(&config.sizes());
    Ok((config, line, warning))
}

/// Serve `config`, after saying which sizes it runs with.
pub fn run(
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
    let rt = crate::server::runtime(&config)?;
    let served = rt.block_on(async move {
        let current = config.clone();
        let server = crate::server::Server::bind(config).await?;
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
        let mut signals = crate::lifecycle::Signals::new()?;
        server
            .run(async move {
                while signals.next().await == crate::lifecycle::Signal::Reload {
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
