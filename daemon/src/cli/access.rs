//! `gixd token`, `gixd key`, `gixd keys` and `gixd ssh-host-key`: who may read and push, as
//! tokens (HTTP) and SSH keys, kept in the token file the configuration names.

use std::path::PathBuf;

use clap::Subcommand;

use crate::config::Layers;

use super::serve::assemble;

/// Where the tokens are: the configuration's token file, or the one given, or the default.
#[derive(clap::Args)]
pub struct TokenStoreArg {
    /// The configuration file whose token file to use.
    #[arg(long, conflicts_with = "token_file")]
    pub config: Option<PathBuf>,
    /// The token state file [default: $GIXD_STATE_DIR/tokens.toml, $XDG_STATE_HOME/gixd/tokens.toml
    /// or ~/.local/state/gixd/tokens.toml].
    #[arg(long, env = "GIXD_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
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
pub enum TokenCmd {
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
pub enum KeyCmd {
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

pub fn token(command: TokenCmd) -> Result<(), Box<dyn std::error::Error>> {
    use crate::auth::TokenStore;
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

pub fn key(command: KeyCmd) -> Result<(), Box<dyn std::error::Error>> {
    use crate::auth::TokenStore;
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

/// `gixd keys`: the authorized_keys line of the key `typed` (`%t`, `%k`), or of every key.
pub fn keys(config_path: &std::path::Path, typed: Option<(String, String)>) -> Result<(), Box<dyn std::error::Error>> {
    let config_path = std::path::absolute(config_path)?;
    let tokens = assemble(Some(&config_path), &Layers::default())?.token_file.expect("assembled with a token file");
    let store = crate::auth::TokenStore::load(&tokens)?;
    let wanted = typed.map(|(kind, blob)| format!("{kind} {blob}"));
    let gixd = std::env::current_exe()?;
    print!("{}", crate::transport::shell::authorized_keys(&store, &gixd, &config_path, wanted.as_deref()));
    Ok(())
}

pub fn ssh_host_key(path: Option<PathBuf>, store: &TokenStoreArg) -> Result<(), Box<dyn std::error::Error>> {
    let path = match path {
        Some(path) => path,
        None => store.path()?.parent().unwrap_or(std::path::Path::new(".")).join("ssh_host_ed25519_key"),
    };
    let keys = crate::transport::ssh::host_keys(&path)?;
    for (key, path) in keys.iter().zip([path.clone(), crate::transport::ssh::ecdsa_path(&path)]) {
        println!("{} {}", crate::transport::ssh::fingerprint(key), path.display());
    }
    Ok(())
}
