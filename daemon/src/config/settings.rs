//! Every setting, declared once. A field of [`Settings`] (or of its `[limits]`, `[pack_cache]` and `[lfs]`
//! tables, in `sections`) is the setting: its name is the TOML key and the arg id, its attributes give the flag
//! and the `GIXD_*` variable, its `default_value` is the default (`--help` shows it from there)
//! and its doc is the help. Layers stack in one order — the declared defaults, the configuration
//! file, the environment, the command line (clap puts a flag above its variable) — by one
//! table merge ([`Settings::over`]), and [`Settings::resolve`] turns the stack into a [`Config`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, FromArgMatches};

use super::sections::{LfsSettings, Limits, PackCacheSettings, boolish};
use super::{Config, ConfigError, Exports, Lfs, LfsS3, PackCache, PathRules, Services};

/// The settings of `gixd serve` (and, with git daemon's defaults, of `gixd daemon`): the TOML
/// configuration file's keys, the flags and the variables. Every field is optional: a layer
/// says only what it gives. Unknown keys are errors, so a typo is reported rather than ignored.
#[derive(Debug, Default, Clone, PartialEq, Args, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Address to listen on for smart HTTP.
    #[arg(long, env = "GIXD_LISTEN", value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: Option<SocketAddr>,
    /// Also serve git:// on this address (git daemon's port is 9418).
    #[arg(long, env = "GIXD_GIT_LISTEN", value_name = "ADDR")]
    pub git_listen: Option<SocketAddr>,
    /// Also serve HTTPS on this address (with `tls_cert` and `tls_key`; without it, they serve
    /// HTTPS on 127.0.0.1:8443).
    #[arg(long, env = "GIXD_HTTPS_LISTEN", value_name = "ADDR")]
    pub https_listen: Option<SocketAddr>,
    /// The HTTPS certificate chain, PEM (in the file: relative to the file). Re-read on SIGHUP.
    #[arg(long, env = "GIXD_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The HTTPS private key, PEM: PKCS#8, PKCS#1 or SEC1 (in the file: relative to the file).
    /// Re-read on SIGHUP.
    #[arg(long, env = "GIXD_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Also serve SSH on this address: git over SSH with the users' public keys (`gixd key add`).
    #[arg(long, env = "GIXD_SSH_LISTEN", value_name = "ADDR")]
    pub ssh_listen: Option<SocketAddr>,
    /// The SSH host key (OpenSSH private key; in the file: relative to the file), made on first
    /// start when missing. Without it: `ssh_host_ed25519_key` beside the token file.
    #[arg(long, env = "GIXD_SSH_HOST_KEY", value_name = "FILE")]
    pub ssh_host_key: Option<PathBuf>,
    /// The SSH ciphers offered, as OpenSSH names them, comma-separated, in gixd's order of
    /// preference (an OpenSSH client is offered the first it lists; others pick). Without it:
    /// AES-GCM and AES-CTR on a CPU with AES instructions, else chacha20-poly1305 first. Naming
    /// AES-GCM alone refuses clients without it (JSch 0.1.55, libssh2 before 1.11).
    #[arg(long, env = "GIXD_SSH_CIPHERS", value_name = "NAMES", value_delimiter = ',')]
    pub ssh_ciphers: Option<Vec<String>>,
    /// Seconds transfers in flight may take to finish after SIGTERM or SIGINT before they are
    /// cancelled (the listeners stop at once).
    #[arg(long = "shutdown-grace", env = "GIXD_SHUTDOWN_GRACE", value_name = "SECONDS", default_value = "25")]
    pub shutdown_grace_secs: Option<u64>,
    /// Serve repositories below this directory (in the file: relative to the file). Without it,
    /// `gixd serve` serves the repository it is started in, or a demo repository it creates.
    #[arg(long, env = "GIXD_BASE_PATH", value_name = "DIR")]
    pub base_path: Option<PathBuf>,
    /// Serve every repository below the base path, not only those with git-daemon-export-ok.
    #[arg(long, env = "GIXD_EXPORT_ALL", value_name = "BOOL", value_parser = boolish(), num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false")]
    pub export_all: Option<bool>,
    /// The token state file. Without it: `gixd-tokens.toml` beside the configuration file, else
    /// `$GIXD_STATE_DIR/tokens.toml`, `$XDG_STATE_HOME/gixd/tokens.toml` or
    /// `~/.local/state/gixd/tokens.toml`.
    #[arg(long, env = "GIXD_TOKEN_FILE", value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Exported repositories may be read without a token.
    #[arg(long, env = "GIXD_ANONYMOUS_READ", value_name = "BOOL", value_parser = boolish(), num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "true")]
    pub anonymous_read: Option<bool>,
    /// A push to a missing repository creates it, for a token made with --create.
    #[arg(long, env = "GIXD_PUSH_TO_CREATE", value_name = "BOOL", value_parser = boolish(), num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false")]
    pub push_to_create: Option<bool>,
    /// Bytes per HTTP response frame (the in-flight window per transfer; at least 1).
    #[arg(long, env = "GIXD_STREAM_WINDOW", value_name = "BYTES", default_value = "262144")]
    pub stream_window: Option<usize>,
    /// Offer a service: upload-pack (on by default), receive-pack, upload-archive.
    #[arg(long, env = "GIXD_ENABLE", value_name = "SERVICE", value_delimiter = ',')]
    pub enable: Option<Vec<String>>,
    /// Stop offering a service.
    #[arg(long, env = "GIXD_DISABLE", value_name = "SERVICE", value_delimiter = ',')]
    pub disable: Option<Vec<String>>,
    /// Tell git:// clients why a path failed; without it every failure reads "access denied or
    /// repository not exported", as git daemon says without --informative-errors.
    #[arg(long, env = "GIXD_INFORMATIVE_ERRORS", value_name = "BOOL", value_parser = boolish(), num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "true")]
    pub informative_errors: Option<bool>,
    /// Paths must name the git directory exactly: no `.git` appended, no subdirectories of the
    /// whitelisted directories.
    #[arg(long, env = "GIXD_STRICT_PATHS", value_name = "BOOL", value_parser = boolish(), num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false")]
    pub strict_paths: Option<bool>,
    /// Serve `~user/x` from `<home>/<DIR>/x` (or `<home>/x` without a value); only homes below the
    /// base path are served. Without it, `~user` paths are refused.
    #[arg(long, env = "GIXD_USER_PATH", value_name = "DIR", num_args = 0..=1, require_equals = true,
          default_missing_value = "")]
    pub user_path: Option<String>,
    /// Most git:// connections at once, 0 for no limit beyond the transfer limit.
    #[arg(long, env = "GIXD_MAX_CONNECTIONS", value_name = "N", default_value = "0")]
    pub max_connections: Option<usize>,
    /// Repack every repository with a bitmap every this many seconds (at least 60). Without it:
    /// never (maintenance after pushes is `auto_maintenance`).
    #[arg(long = "maintenance-every", env = "GIXD_MAINTENANCE_EVERY", value_name = "SECONDS")]
    pub maintenance_interval_secs: Option<u64>,
    /// After pushes (and after a fetch finds a repository's refs moved by another writer), roll
    /// its small packs and loose objects up geometrically, or repack it with a new bitmap once
    /// enough objects are outside its bitmap (its value may follow as a separate
    /// argument, as it always could: `--auto-maintenance false`).
    #[arg(long, env = "GIXD_AUTO_MAINTENANCE", value_name = "BOOL", value_parser = boolish(), num_args = 0..=1,
          default_missing_value = "true", default_value = "true")]
    pub auto_maintenance: Option<bool>,
    /// Serve Prometheus metrics at http://ADDR/metrics.
    #[arg(long, env = "GIXD_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// One JSON line per request to this file (`-`: standard output; in the file: relative to it).
    #[arg(long, env = "GIXD_ACCESS_LOG", value_name = "FILE")]
    pub access_log: Option<PathBuf>,
    #[command(flatten)]
    #[serde(default, skip_serializing_if = "Limits::is_empty")]
    pub limits: Limits,
    #[command(flatten)]
    #[serde(default, skip_serializing_if = "PackCacheSettings::is_empty")]
    pub pack_cache: PackCacheSettings,
    #[command(flatten)]
    #[serde(default, skip_serializing_if = "LfsSettings::is_empty")]
    pub lfs: LfsSettings,
}

/// A setting no layer may give, or a file that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// What a command line gives, as two layers: what its arguments' declared defaults say (a
/// subcommand may declare its own, as `gixd daemon` does git daemon's) and what its flags and
/// variables give. The configuration file goes between them ([`Layers::with_file`]).
#[derive(Debug, Default, Clone)]
pub struct Layers {
    pub defaults: Settings,
    pub given: Settings,
}

impl Layers {
    /// Split `parsed` (the settings `matches` parsed into) by where each value came from.
    pub fn from_matches(matches: &ArgMatches, parsed: &Settings) -> Layers {
        let table = to_table(parsed);
        let (mut defaults, mut given) = (toml::Table::new(), toml::Table::new());
        for id in matches.ids() {
            let Some(value) = lookup(&table, id.as_str()) else { continue };
            let layer = match matches.value_source(id.as_str()) {
                Some(ValueSource::DefaultValue) => &mut defaults,
                _ => &mut given,
            };
            insert(layer, id.as_str(), value.clone());
        }
        let mut given = from_table(given).expect("values clap parsed deserialize");
        given.pack_cache.implied_by(false);
        Layers { defaults: from_table(defaults).expect("values clap parsed deserialize"), given }
    }

    /// Every layer stacked: the flags and variables over `file` over the declared defaults.
    pub fn with_file(self, file: Settings) -> Settings {
        self.given.over(&file).over(&self.defaults)
    }
}

impl Settings {
    /// The declared defaults (what `--help` shows), as a layer.
    pub fn defaults() -> &'static Settings {
        static DEFAULTS: OnceLock<Settings> = OnceLock::new();
        DEFAULTS.get_or_init(|| {
            let command = Settings::augment_args(clap::Command::new("gixd")).mut_args(|arg| arg.env(None::<&str>));
            let matches = command.try_get_matches_from(["gixd"]).expect("the declared defaults parse");
            Settings::from_arg_matches(&matches).expect("the declared defaults parse")
        })
    }

    /// Parse a configuration file: paths in it are relative to its directory, the token file is
    /// `gixd-tokens.toml` beside it unless it names one, and a `[pack_cache]` table turns the
    /// cache on. The error names the file, the line and the key.
    pub fn load(path: &Path) -> Result<Settings, SettingsError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| SettingsError::Read { path: path.to_owned(), source })?;
        let mut settings = Settings::parse(&text).map_err(|e| SettingsError::Invalid {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        for p in [
            &mut settings.base_path,
            &mut settings.pack_cache.dir,
            &mut settings.limits.spill_dir,
            &mut settings.tls_cert,
            &mut settings.tls_key,
            &mut settings.ssh_host_key,
            &mut settings.lfs.s3_secret_access_key_file,
        ]
        .into_iter()
        .flatten()
        {
            *p = dir.join(&*p);
        }
        if let Some(log) = &mut settings.access_log
            && log.as_os_str() != "-"
        {
            *log = dir.join(&*log);
        }
        settings.token_file = Some(dir.join(settings.token_file.take().unwrap_or_else(|| "gixd-tokens.toml".into())));
        Ok(settings)
    }

    /// A configuration file's text (paths as they stand); a `[pack_cache]` table turns the cache on.
    pub fn parse(text: &str) -> Result<Settings, toml::de::Error> {
        let mut settings: Settings = toml::from_str(text)?;
        let has_cache_table = toml::from_str::<toml::Table>(text).is_ok_and(|t| t.contains_key("pack_cache"));
        settings.pack_cache.implied_by(has_cache_table);
        Ok(settings)
    }

    /// What is wrong beyond the syntax: each problem, one line each.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(base) = self.base_path.as_ref().filter(|b| !b.is_dir()) {
            out.push(format!("base_path: {} is not a directory", base.display()));
        }
        let mut services = Services::default();
        for (key, names, on) in [("enable", &self.enable, true), ("disable", &self.disable, false)] {
            for name in names.iter().flatten() {
                if let Err(e) = services.set(name, on) {
                    out.push(format!("{key}: {e}"));
                }
            }
        }
        if self.stream_window == Some(0) {
            out.push("stream_window: must be at least 1".into());
        }
        // Port 0 is a new port each time, never the same address twice.
        let fixed = |a: &Option<SocketAddr>| a.filter(|a| a.port() != 0);
        if fixed(&self.listen).is_some() && fixed(&self.listen) == fixed(&self.git_listen) {
            out.push("listen and git_listen: the same address twice".into());
        }
        if fixed(&self.https_listen).is_some()
            && (fixed(&self.https_listen) == fixed(&self.listen)
                || fixed(&self.https_listen) == fixed(&self.git_listen))
        {
            out.push("https_listen: the same address as another listener".into());
        }
        match (&self.lfs.s3_bucket, &self.lfs.s3_endpoint) {
            (Some(_), None) => out.push("lfs.s3_bucket: given without lfs.s3_endpoint".into()),
            (None, Some(_)) => out.push("lfs.s3_endpoint: given without lfs.s3_bucket".into()),
            (Some(_), Some(url)) if !(url.starts_with("http://") || url.starts_with("https://")) => {
                out.push(format!("lfs.s3_endpoint: '{url}' is not an http:// or https:// URL"))
            }
            _ => {}
        }
        match (&self.tls_cert, &self.tls_key) {
            (Some(_), None) => out.push("tls_cert: given without tls_key".into()),
            (None, Some(_)) => out.push("tls_key: given without tls_cert".into()),
            _ => {}
        }
        if self.https_listen.is_some() && self.tls_cert.is_none() {
            out.push("https_listen: needs tls_cert and tls_key".into());
        }
        for (key, path) in [("tls_cert", &self.tls_cert), ("tls_key", &self.tls_key)] {
            if let Some(path) = path.as_ref().filter(|p| !p.is_file()) {
                out.push(format!("{key}: {} is not a file", path.display()));
            }
        }
        let limits = &self.limits;
        for (key, value) in [
            ("max_transfers", limits.max_transfers),
            ("worker_threads", limits.worker_threads),
            ("max_wants", limits.max_wants),
        ] {
            if value == Some(0) {
                out.push(format!("limits.{key}: must be at least 1"));
            }
        }
        if let Some(dir) = self.pack_cache.dir.as_ref().filter(|d| !d.is_dir()) {
            out.push(format!("pack_cache.dir: {} is not a directory", dir.display()));
        }
        if let Some(dir) = limits.spill_dir.as_ref().filter(|d| !d.is_dir()) {
            out.push(format!("limits.spill_dir: {} is not a directory", dir.display()));
        }
        if let Some(path) = &self.token_file
            && path.parent().is_some_and(|p| !p.as_os_str().is_empty() && !p.is_dir())
        {
            out.push(format!("token_file: the directory of {} does not exist", path.display()));
        }
        out
    }

    /// `self` stacked on `below`: what `self` gives wins, what it leaves out keeps `below`'s.
    /// A service `self` switches (on or off) is switched as `self` says, whatever `below` said.
    pub fn over(&self, below: &Settings) -> Settings {
        let mut merged = to_table(below);
        merge(&mut merged, to_table(self));
        from_table(merged).expect("two valid layers merge into valid settings")
    }

    /// The configuration these settings give, over the declared defaults, with the sizes no
    /// layer fixed derived for `effective_cpus` (a worker per CPU, two transfers per CPU,
    /// blocking threads for the transfers plus two), each floored where a value would stop the
    /// server working.
    pub fn resolve(&self, effective_cpus: usize) -> Result<Config, ConfigError> {
        self.resolve_within(effective_cpus, None)
    }

    /// [`Self::resolve`] for a process that may use `memory` bytes (its cgroup's limit), when
    /// one is set: the transfer buffers' memory then fits within it ([`Config::size_for`]).
    pub fn resolve_within(&self, effective_cpus: usize, memory: Option<u64>) -> Result<Config, ConfigError> {
        let s = self.over(Settings::defaults());
        let (limits, cache) = (&s.limits, &s.pack_cache);
        let secs = Duration::from_secs;
        let at_least_a_second = |d: u64| secs(d.max(1));
        let mut services = Services::default();
        for name in s.enable.iter().flatten() {
            services.set(name, true)?;
        }
        for name in s.disable.iter().flatten() {
            services.set(name, false)?;
        }
        let mut config = Config {
            listen: declared(s.listen),
            git_listen: s.git_listen,
            https_listen: match (&s.tls_cert, &s.tls_key) {
                (Some(_), Some(_)) => Some(s.https_listen.unwrap_or_else(|| ([127, 0, 0, 1], 8443).into())),
                _ => s.https_listen,
            },
            tls_cert: s.tls_cert.clone(),
            tls_key: s.tls_key.clone(),
            ssh_listen: s.ssh_listen,
            ssh_host_key: s.ssh_host_key.clone(),
            ssh_ciphers: s.ssh_ciphers.clone().unwrap_or_default(),
            shutdown_grace: secs(declared(s.shutdown_grace_secs)),
            init_timeout: at_least_a_second(declared(limits.init_timeout_secs)),
            base_path: s.base_path.clone().unwrap_or_else(|| ".".into()),
            exports: if declared(s.export_all) { Exports::All } else { Exports::DaemonExportOk },
            paths: PathRules {
                strict: declared(s.strict_paths),
                user_path: s.user_path.clone(),
                whitelist: Vec::new(),
            },
            services,
            token_file: s.token_file.clone(),
            anonymous_read: declared(s.anonymous_read),
            push_to_create: declared(s.push_to_create),
            maintenance_interval: s.maintenance_interval_secs.map(|d| secs(d.max(60))),
            auto_maintenance: declared(s.auto_maintenance),
            max_connections: declared(s.max_connections),
            informative_errors: declared(s.informative_errors),
            stream_window: declared(s.stream_window),
            max_request_body: declared(limits.max_request_body),
            max_inflated_body: declared(limits.max_inflated_body),
            max_push_bytes: declared(limits.max_push_bytes),
            max_object_bytes: declared(limits.max_object_bytes),
            max_wants: declared(limits.max_wants).max(1),
            max_haves: declared(limits.max_haves).max(1),
            worker_threads: 1,
            blocking_threads: 1,
            max_transfers: 1,
            max_transfers_per_repository: declared(limits.max_transfers_per_repository),
            max_transfers_per_client: declared(limits.max_transfers_per_client),
            transfer_queue_wait: secs(declared(limits.queue_wait_secs)),
            max_queued: 0,
            buffer_memory_bytes: 0,
            spill_dir: limits.spill_dir.clone().unwrap_or_else(super::default_spill_dir),
            spill_bytes: declared(limits.spill_bytes),
            walk_cache_bytes: 0,
            io_timeout: at_least_a_second(declared(limits.io_timeout_secs)),
            cache_idle: secs(declared(limits.cache_idle_secs)),
            progress_interval: secs(1),
            min_receive_rate: declared(limits.min_receive_rate),
            metrics_listen: s.metrics_listen,
            access_log: s.access_log.clone(),
            lfs: Lfs {
                enabled: declared(s.lfs.enabled),
                max_object_bytes: declared(s.lfs.max_object_bytes),
                max_repository_bytes: declared(s.lfs.max_repository_bytes),
                max_uploads: declared(s.lfs.max_uploads).max(1),
                url: s.lfs.url.as_ref().map(|u| u.trim_end_matches('/').to_owned()),
                s3: LfsS3 {
                    bucket: s.lfs.s3_bucket.clone(),
                    endpoint: s.lfs.s3_endpoint.clone(),
                    region: declared(s.lfs.s3_region.clone()),
                    prefix: s.lfs.s3_prefix.clone().unwrap_or_default(),
                    path_style: declared(s.lfs.s3_path_style),
                    access_key_id: s.lfs.s3_access_key_id.clone(),
                    secret_access_key_file: s.lfs.s3_secret_access_key_file.clone(),
                },
            },
            pack_cache: cache.enabled.unwrap_or(false).then(|| PackCache {
                memory_bytes: declared(cache.memory_bytes),
                dir: cache.dir.clone(),
                disk_bytes: declared(cache.disk_bytes),
                max_age: secs(declared(cache.max_age_secs)),
            }),
        };
        // Sizes last: each one no layer gave follows from the budget and from the others.
        config.size_for(effective_cpus, memory);
        if let Some(n) = limits.worker_threads {
            config.worker_threads = n.max(1);
        }
        if let Some(n) = limits.max_transfers {
            config.max_transfers = n.max(1);
            config.blocking_threads = config.max_transfers + 2;
        }
        config.size_walk_caches(memory);
        if let Some(n) = limits.queue_length {
            config.max_queued = n;
        }
        if let Some(n) = limits.buffer_memory_bytes {
            config.buffer_memory_bytes = n;
        }
        if let Some(n) = limits.blocking_threads {
            config.blocking_threads = n.max(config.max_transfers + 1);
        }
        Ok(config)
    }
}

/// A setting with a `default_value` in its declaration, after the defaults layer.
#[track_caller]
fn declared<T>(value: Option<T>) -> T {
    value.expect("a setting with a declared default has a value once the defaults are stacked under it")
}

fn to_table(settings: &Settings) -> toml::Table {
    match toml::Value::try_from(settings) {
        Ok(toml::Value::Table(table)) => table,
        other => unreachable!("settings serialize to a table: {other:?}"),
    }
}

fn from_table(table: toml::Table) -> Result<Settings, toml::de::Error> {
    toml::Value::Table(table).try_into()
}

/// The value at a dotted key (`limits.max_haves`).
fn lookup<'a>(table: &'a toml::Table, key: &str) -> Option<&'a toml::Value> {
    match key.split_once('.') {
        Some((table_key, rest)) => lookup(table.get(table_key)?.as_table()?, rest),
        None => table.get(key),
    }
}

fn insert(table: &mut toml::Table, key: &str, value: toml::Value) {
    match key.split_once('.') {
        Some((table_key, rest)) => {
            let inner = table.entry(table_key).or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if let toml::Value::Table(inner) = inner {
                insert(inner, rest, value);
            }
        }
        None => {
            table.insert(key.to_owned(), value);
        }
    }
}

/// `above` over `below`, key by key into the tables. The service lists stack as switches: a
/// service `above` names in either list leaves `below`'s lists, then `above`'s lists are added.
fn merge(below: &mut toml::Table, above: toml::Table) {
    const SWITCHES: [&str; 2] = ["enable", "disable"];
    let switched: Vec<toml::Value> =
        SWITCHES.iter().filter_map(|key| above.get(*key).and_then(toml::Value::as_array)).flatten().cloned().collect();
    for key in SWITCHES {
        if let Some(toml::Value::Array(list)) = below.get_mut(key) {
            list.retain(|name| !switched.contains(name));
        }
    }
    for (key, value) in above {
        match (below.get_mut(&key), value) {
            (Some(toml::Value::Table(inner)), toml::Value::Table(value)) => merge(inner, value),
            (Some(toml::Value::Array(list)), toml::Value::Array(value)) if SWITCHES.contains(&key.as_str()) => {
                list.extend(value)
            }
            (_, value) => {
                below.insert(key, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Settings' command line with no variable read (the test's environment is not the server's).
    fn command() -> clap::Command {
        Settings::augment_args(clap::Command::new("gixd")).mut_args(|arg| arg.env(None::<&str>))
    }

    fn flags(args: &[&str]) -> Result<Layers, clap::Error> {
        let matches = command().try_get_matches_from(std::iter::once("gixd").chain(args.iter().copied()))?;
        let parsed = Settings::from_arg_matches(&matches)?;
        Ok(Layers::from_matches(&matches, &parsed))
    }

    fn file(text: &str) -> Settings {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gixd.toml");
        std::fs::write(&path, text).unwrap();
        let mut settings = Settings::load(&path).expect("valid");
        // Paths in the file are relative to it; the tests compare them below a fixed directory.
        let relocate = |p: &mut Option<PathBuf>| {
            if let Some(path) = p
                && let Ok(below) = path.strip_prefix(dir.path())
            {
                *path = Path::new("/etc/gixd").join(below);
            }
        };
        relocate(&mut settings.base_path);
        relocate(&mut settings.token_file);
        relocate(&mut settings.pack_cache.dir);
        relocate(&mut settings.limits.spill_dir);
        relocate(&mut settings.access_log);
        settings
    }

    fn resolved(layers: Layers, file: Settings) -> Config {
        layers.with_file(file).resolve(3).expect("resolves")
    }

    /// The TOML keys a table of [`Settings`] has, as serde names them when refusing an unknown one.
    fn toml_keys(table: &str) -> Vec<String> {
        let text = if table.is_empty() { "not_a_key = 1\n".to_owned() } else { format!("[{table}]\nnot_a_key = 1\n") };
        let message = toml::from_str::<Settings>(&text).unwrap_err().to_string();
        let listed = message.split("expected one of ").nth(1).expect("serde lists the keys").lines().next().unwrap();
        listed
            .split(", ")
            .map(|key| key.trim_matches('`').to_owned())
            .map(|key| if table.is_empty() { key } else { format!("{table}.{key}") })
            .collect()
    }

    #[test]
    fn every_toml_key_has_its_flag_and_variable_and_every_flag_its_key() {
        let command = command();
        let ids: Vec<String> = command.get_arguments().map(|arg| arg.get_id().to_string()).collect();
        let keys: Vec<String> = ["", "limits", "pack_cache", "lfs"]
            .iter()
            .flat_map(|t| toml_keys(t))
            .filter(|k| !["limits", "pack_cache", "lfs"].contains(&k.as_str()))
            .collect();
        let mut sorted_keys = keys.clone();
        sorted_keys.sort();
        let mut sorted_ids = ids.clone();
        sorted_ids.sort();
        assert_eq!(sorted_keys, sorted_ids, "each TOML key is an argument's id, and each argument a key");
        let with_env = Settings::augment_args(clap::Command::new("gixd"));
        for arg in with_env.get_arguments() {
            let id = arg.get_id();
            assert!(arg.get_long().is_some(), "{id}: no flag");
            let env = arg.get_env().and_then(|e| e.to_str()).unwrap_or_default();
            assert!(env.starts_with("GIXD_"), "{id}: no GIXD_ variable");
        }
    }

    #[test]
    fn every_flag_changes_what_is_served_and_its_toml_key_does_the_same() {
        let default = format!("{:?}", resolved(Layers::default(), Settings::default()));
        for arg in command().get_arguments() {
            let (id, long) = (arg.get_id().as_str(), arg.get_long().unwrap());
            let tried = ["7", "false", "true", "127.0.0.1:1", "receive-pack", "upload-pack", "x"].into_iter().find_map(
                |value| {
                    let layers = flags(&[&format!("--{long}={value}")]).ok()?;
                    let config = layers.clone().with_file(Settings::default()).resolve(3).ok()?;
                    (format!("{config:?}") != default).then_some((value, layers, config))
                },
            );
            let Some((value, layers, by_flag)) = tried else { panic!("--{long}: no value changes the configuration") };
            let mut table = toml::Table::new();
            insert(&mut table, id, lookup(&to_table(&layers.given), id).expect("given").clone());
            let by_file = Settings::parse(&toml::to_string(&table).unwrap()).expect(id);
            assert_eq!(
                format!("{:?}", by_file.resolve(3).unwrap()),
                format!("{by_flag:?}"),
                "{id} = {value} in the file and --{long}={value} serve the same"
            );
        }
    }

    #[test]
    fn the_defaults_help_shows_are_the_ones_in_force() {
        let default = format!("{:?}", resolved(Layers::default(), Settings::default()));
        // A pack cache size given turns the cache on: its defaults are compared with it on.
        let cache_on = format!("{:?}", resolved(flags(&["--pack-cache"]).unwrap(), Settings::default()));
        let help = command().render_long_help().to_string();
        let mut checked = 0;
        for arg in command().get_arguments() {
            let Some(value) = arg.get_default_values().first().and_then(|v| v.to_str()) else { continue };
            let long = arg.get_long().unwrap();
            assert!(help.contains(&format!("[default: {value}]")), "--{long}: help shows its default");
            let given = resolved(flags(&[&format!("--{long}={value}")]).unwrap(), Settings::default());
            let expected = if arg.get_id().as_str().starts_with("pack_cache.") { &cache_on } else { &default };
            assert_eq!(&format!("{given:?}"), expected, "--{long}={value} (its declared default) changes nothing");
            checked += 1;
        }
        assert!(checked > 20, "{checked} declared defaults");
    }

    #[test]
    fn a_flag_wins_over_the_file_and_an_absent_flag_keeps_the_files_value() {
        let file = file("strict_paths = true\nuser_path = \"pub\"\nmax_connections = 7\n[limits]\nmax_wants = 10\n");
        let config = resolved(flags(&["--max-connections=3"]).unwrap(), file);
        assert_eq!(config.max_connections, 3);
        assert!(config.paths.strict, "the declared default (false) does not reset the file's value");
        assert_eq!(config.paths.user_path.as_deref(), Some("pub"));
        assert_eq!(config.max_wants, 10);
        assert_eq!(config.token_file.as_deref(), Some(Path::new("/etc/gixd/gixd-tokens.toml")));
    }

    #[test]
    fn auto_maintenance_takes_its_value_as_a_separate_argument_as_it_always_could() {
        assert!(!resolved(flags(&["--auto-maintenance", "false"]).unwrap(), Settings::default()).auto_maintenance);
        assert!(!resolved(flags(&["--auto-maintenance=no"]).unwrap(), Settings::default()).auto_maintenance);
        assert!(resolved(flags(&["--auto-maintenance"]).unwrap(), Settings::default()).auto_maintenance);
    }

    #[test]
    fn sizes_no_layer_gives_follow_the_cpu_budget_and_each_other() {
        let none = Settings::default().resolve(3).unwrap();
        assert_eq!((none.worker_threads, none.max_transfers, none.blocking_threads), (3, 3, 5));
        assert_eq!((none.max_queued, none.buffer_memory_bytes), (192, 3 * (64 << 20)));
        let transfers = file("[limits]\nmax_transfers = 4\n").resolve(3).unwrap();
        assert_eq!((transfers.worker_threads, transfers.max_transfers, transfers.blocking_threads), (3, 4, 6));
        let too_few = flags(&["--blocking-threads=1"]).unwrap().with_file(file("[limits]\nmax_transfers = 4\n"));
        assert_eq!(too_few.resolve(1).unwrap().blocking_threads, 5, "a thread beside the transfers");
    }

    #[test]
    fn the_buffers_memory_fits_within_a_memory_limit_unless_a_layer_sets_it() {
        let roomy = Settings::default().resolve_within(3, Some(8 << 30)).unwrap();
        assert_eq!(roomy.buffer_memory_bytes, 3 * (64 << 20), "a limit far above the CPUs' share changes nothing");
        let tight = Settings::default().resolve_within(3, Some(256 << 20)).unwrap();
        assert_eq!(tight.buffer_memory_bytes, 64 << 20, "a quarter of the limit");
        let set = file("[limits]\nbuffer_memory_bytes = 1000\n").resolve_within(3, Some(256 << 20)).unwrap();
        assert_eq!(set.buffer_memory_bytes, 1000);
    }

    #[test]
    fn service_switches_apply_in_order_across_layers() {
        let file = || file("enable = [\"receive-pack\", \"upload-archive\"]\ndisable = [\"upload-pack\"]\n");
        let config = resolved(flags(&["--disable=receive-pack", "--enable=upload-pack"]).unwrap(), file());
        assert_eq!(config.services, Services { upload_pack: true, receive_pack: false, upload_archive: true });
        let unknown = flags(&["--enable=frobnicate"]).unwrap().with_file(Settings::default());
        assert!(unknown.resolve(1).err().is_some_and(|e| e.to_string().contains("frobnicate")));
    }

    #[test]
    fn the_pack_cache_is_off_unless_a_layer_turns_it_on_and_its_sizes_stack_like_the_rest() {
        assert_eq!(Settings::default().resolve(1).unwrap().pack_cache, None);
        let declared = &Settings::defaults().pack_cache;
        let on = file("access_log = \"-\"\n[pack_cache]\nmemory_bytes = 10\ndir = \"cache\"\n").resolve(1).unwrap();
        let cache = on.pack_cache.unwrap();
        assert_eq!((cache.memory_bytes, cache.dir.as_deref()), (10, Some(Path::new("/etc/gixd/cache"))));
        assert_eq!(
            (Some(cache.disk_bytes), Some(cache.max_age.as_secs())),
            (declared.disk_bytes, declared.max_age_secs)
        );
        assert_eq!(on.access_log.as_deref(), Some(Path::new("-")), "standard output is not a path below the file");
        assert!(file("[pack_cache]\n").resolve(1).unwrap().pack_cache.is_some(), "an empty table turns it on");
        assert!(file("[pack_cache]\nenabled = false\nmemory_bytes = 1\n").resolve(1).unwrap().pack_cache.is_none());
        let flag = resolved(flags(&["--pack-cache-disk=5"]).unwrap(), Settings::default());
        assert_eq!(
            flag.pack_cache.map(|c| (Some(c.memory_bytes), c.disk_bytes)),
            Some((declared.memory_bytes, 5)),
            "a size given turns it on"
        );
        let off = resolved(flags(&["--pack-cache=false"]).unwrap(), file("[pack_cache]\n"));
        assert_eq!(off.pack_cache, None, "a flag turns the file's cache off");
        let missing = toml::from_str::<Settings>("[pack_cache]\ndir = \"/nonexistent/nowhere\"\n").unwrap().problems();
        assert!(missing.iter().any(|p| p.starts_with("pack_cache.dir")), "{missing:?}");
    }

    #[test]
    fn an_lfs_bucket_needs_its_endpoint_and_an_endpoint_its_bucket_and_a_url_scheme() {
        let problems = |text: &str| toml::from_str::<Settings>(text).unwrap().problems();
        assert_eq!(problems("[lfs]\ns3_bucket = \"b\"\n"), ["lfs.s3_bucket: given without lfs.s3_endpoint"]);
        assert_eq!(problems("[lfs]\ns3_endpoint = \"http://s3\"\n"), ["lfs.s3_endpoint: given without lfs.s3_bucket"]);
        let ftp = problems("[lfs]\ns3_bucket = \"b\"\ns3_endpoint = \"ftp://s3\"\n");
        assert!(ftp.len() == 1 && ftp[0].contains("not an http:// or https:// URL"), "{ftp:?}");
        assert!(problems("[lfs]\ns3_bucket = \"b\"\ns3_endpoint = \"https://s3\"\n").is_empty());
        let config =
            file("[lfs]\ns3_bucket = \"b\"\ns3_endpoint = \"https://s3\"\ns3_secret_access_key_file = \"k\"\n")
                .resolve(2)
                .unwrap();
        assert_eq!(config.lfs.s3.bucket.as_deref(), Some("b"));
        assert!(config.lfs.s3.secret_access_key_file.unwrap().is_absolute(), "relative to the file");
        assert!(config.lfs.s3.path_style && config.lfs.s3.region == "us-east-1", "the declared defaults");
    }
}
