//! Access control for smart HTTP: tokens and the grants they carry, and the decision per request.
//!
//! A token is random (160 bits), shown once when made, and stored only as its SHA-256 in the
//! state file (TOML, written atomically, mode 0600), with its user, a repository glob and read or
//! write. It arrives as the password of HTTP Basic (any user name) or as a Bearer token, and is
//! compared in constant time. The server re-reads the state file when it changes, so a revoked
//! token stops working at once.
//!
//! Rules: anyone may read an exported repository; reading an unexported one needs a token whose
//! glob matches it (404 otherwise: its existence is not revealed); pushing always needs a token
//! with write for it (401 without credentials, so git asks for them; 403 with a valid token that
//! may read but not write).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("could not read the token state file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the token state file {path} is not valid: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("could not write the token state file {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("SSH key: {0}")]
    Key(String),
}

/// One stored token: never the secret, only its hash.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Token {
    /// Short public id (for `gixd token revoke`).
    pub id: String,
    pub user: String,
    /// Repositories it grants, as a glob over the repository path (`*` matches anything).
    pub repos: String,
    /// Write (push) as well as read.
    pub write: bool,
    /// May also create repositories its glob matches, by pushing to them (push-to-create, when
    /// the server allows it); only with `write`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub create: bool,
    /// SHA-256 of the secret, hex.
    pub sha256: String,
    /// When it was made (seconds since the epoch).
    pub created: i64,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StateFile {
    #[serde(default, rename = "token")]
    tokens: Vec<Token>,
    #[serde(default, rename = "key", skip_serializing_if = "Vec::is_empty")]
    keys: Vec<Key>,
}

/// An SSH public key of a user, with a grant of its own as a token has (`gixd key add`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Key {
    /// Short public id (for `gixd key revoke`), from the same space as tokens' ids.
    pub id: String,
    pub user: String,
    /// Repositories it grants, as a token's glob.
    pub repos: String,
    /// Push as well as read.
    pub write: bool,
    /// The key as OpenSSH writes it, without its comment: `ssh-ed25519 AAAA…`.
    pub key: String,
    /// The comment it came with (`alice@laptop`), shown by `key list`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub comment: String,
    pub created: i64,
}

impl Key {
    /// What a request made with this key may do: a token's grant (no secret).
    pub fn grant(&self) -> Token {
        Token {
            id: self.id.clone(),
            user: self.user.clone(),
            repos: self.repos.clone(),
            write: self.write,
            create: false,
            sha256: String::new(),
            created: self.created,
        }
    }
}

/// The algorithm and base64 blob of an OpenSSH public key line (its comment dropped), and the
/// comment; `None` if it is not one.
pub fn openssh_key(line: &str) -> Option<(String, String)> {
    let mut fields = line.split_whitespace();
    let (algorithm, blob) = (fields.next()?, fields.next()?);
    let plausible = algorithm.starts_with("ssh-") || algorithm.starts_with("ecdsa-") || algorithm.starts_with("sk-");
    (plausible && blob.len() > 16).then(|| (format!("{algorithm} {blob}"), fields.collect::<Vec<_>>().join(" ")))
}

/// The tokens and keys of one state file.
#[derive(Debug, Default)]
pub struct TokenStore {
    pub path: PathBuf,
    pub tokens: Vec<Token>,
    pub keys: Vec<Key>,
}

impl TokenStore {
    /// Load `path`; a missing file is an empty store.
    pub fn load(path: &Path) -> Result<TokenStore, AuthError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(source) => return Err(AuthError::Read { path: path.to_owned(), source }),
        };
        let state: StateFile =
            toml::from_str(&text).map_err(|e| AuthError::Parse { path: path.to_owned(), message: e.to_string() })?;
        Ok(TokenStore { path: path.to_owned(), tokens: state.tokens, keys: state.keys })
    }

    /// Write the store atomically (a temporary file renamed over the old one), readable by the
    /// owner only.
    pub fn save(&self) -> Result<(), AuthError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let write_err = |source| AuthError::Write { path: self.path.clone(), source };
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(write_err)?;
        }
        let text = toml::to_string(&StateFile { tokens: self.tokens.clone(), keys: self.keys.clone() })
            .expect("tokens serialize");
        let tmp = self.path.with_extension(format!("tmp-{}", std::process::id()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(write_err)?;
        file.write_all(b"# gixd tokens: hashes only; manage with `gixd token add|list|revoke`.\n")
            .map_err(write_err)?;
        file.write_all(text.as_bytes()).map_err(write_err)?;
        file.sync_all().map_err(write_err)?;
        std::fs::rename(&tmp, &self.path).map_err(write_err)
    }

    /// Make a token; returns it and its secret (shown once, never stored).
    pub fn add(&mut self, user: &str, repos: &str, write: bool) -> std::io::Result<(Token, String)> {
        self.add_creating(user, repos, write, false)
    }

    /// [`TokenStore::add`], and with `create` (and `write`) it may also create repositories.
    pub fn add_creating(
        &mut self,
        user: &str,
        repos: &str,
        write: bool,
        create: bool,
    ) -> std::io::Result<(Token, String)> {
        let secret = format!("gixd_{}", hex(&random::<20>()?));
        let id = hex(&random::<4>()?);
        let token = Token {
            id,
            user: user.to_owned(),
            repos: repos.to_owned(),
            write,
            create: create && write,
            sha256: sha256_hex(secret.as_bytes()),
            created: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0),
        };
        self.tokens.push(token.clone());
        Ok((token, secret))
    }

    /// Remove the token or key with `id`; false if there is none.
    pub fn revoke(&mut self, id: &str) -> bool {
        let before = self.tokens.len() + self.keys.len();
        self.tokens.retain(|t| t.id != id);
        self.keys.retain(|k| k.id != id);
        self.tokens.len() + self.keys.len() != before
    }

    /// Add an SSH public key (an OpenSSH line, `ssh-ed25519 AAAA… comment`) for `user`; an
    /// error if it is not one or is stored already.
    pub fn add_key(&mut self, user: &str, repos: &str, write: bool, line: &str) -> Result<Key, AuthError> {
        let (key, comment) =
            openssh_key(line).ok_or_else(|| AuthError::Key("not an OpenSSH public key line".into()))?;
        if let Some(known) = self.keys.iter().find(|k| k.key == key) {
            return Err(AuthError::Key(format!("this key is stored already (id {}, user {})", known.id, known.user)));
        }
        let id = hex(&random::<4>().map_err(|e| AuthError::Key(e.to_string()))?);
        let created =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
        let key = Key { id, user: user.to_owned(), repos: repos.to_owned(), write, key, comment, created };
        self.keys.push(key.clone());
        Ok(key)
    }

    /// The stored key that is `key` (`algorithm base64`, as [`openssh_key`] gives it).
    /// `gixd key list`'s table: each key's id, user, grant and the start of the key.
    pub fn keys_table(&self) -> String {
        let mut out = format!("{:<10} {:<16} {:<6} {:<24} key\n", "id", "user", "access", "repositories");
        for k in &self.keys {
            let short: String = k.key.chars().take(40).collect();
            let access = if k.write { "write" } else { "read" };
            out.push_str(&format!("{:<10} {:<16} {access:<6} {:<24} {short}… {}\n", k.id, k.user, k.repos, k.comment));
        }
        out
    }

    /// Remove the keys with these ids; none is removed when one of them names no key.
    pub fn revoke_keys(&mut self, ids: &[String]) -> Result<(), String> {
        let missing: Vec<&str> =
            ids.iter().filter(|id| !self.keys.iter().any(|k| &k.id == *id)).map(String::as_str).collect();
        if !missing.is_empty() {
            return Err(format!("no key with id {}", missing.join(", ")));
        }
        for id in ids {
            self.revoke(id);
        }
        Ok(())
    }

    pub fn find_key(&self, key: &str) -> Option<&Key> {
        self.keys.iter().find(|k| k.key == key)
    }

    /// The token whose secret this is. Every stored hash is compared, each in constant time.
    pub fn verify(&self, secret: &str) -> Option<&Token> {
        let presented = sha256_hex(secret.as_bytes());
        let mut found = None;
        for token in &self.tokens {
            if constant_time_eq(presented.as_bytes(), token.sha256.as_bytes()) {
                found = Some(token);
            }
        }
        found
    }
}

/// Equal in time independent of where they differ (lengths are not secret: both are hex SHA-256).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

/// SHA-256 of `data`, lowercase hex.
pub(crate) fn sha256_hex(data: &[u8]) -> String {
    let mut hasher = gix_hash::hasher(gix_hash::Kind::Sha256);
    hasher.update(data);
    hasher.try_finalize().expect("no collision detection for sha256").to_hex().to_string()
}

/// `bytes` as lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn random<const N: usize>() -> std::io::Result<[u8; N]> {
    let mut buf = [0u8; N];
    let mut filled = 0;
    while filled < N {
        // SAFETY: getrandom writes at most the given length into the buffer it is given.
        let n = unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), N - filled, 0) };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        filled += n as usize;
    }
    Ok(buf)
}

/// `*` matches any run of characters (slashes included); everything else matches itself.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            pi += 1;
            mark = ti;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

/// A repository path as grants name it: no leading or trailing slash, no `.git` suffix.
pub fn repo_key(path: &str) -> String {
    let trimmed = path.trim_matches('/');
    let trimmed = trimmed.strip_suffix("/.git").unwrap_or(trimmed);
    trimmed.strip_suffix(".git").unwrap_or(trimmed).to_owned()
}

/// Who is asking.
#[derive(Debug, Clone)]
pub enum Identity {
    Anonymous,
    User(Token),
    /// Credentials that match no token (wrong, revoked, malformed).
    Invalid,
}

impl Identity {
    pub fn user(&self) -> Option<&str> {
        match self {
            Identity::User(t) => Some(&t.user),
            _ => None,
        }
    }
}

/// The answer for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// 401 with `WWW-Authenticate: Basic`: credentials needed (or the ones given are not valid).
    Unauthorized,
    /// 403: known and may read, may not write.
    Forbidden,
    /// 404: as if the repository did not exist.
    NotFound,
}

/// Decide a request for the repository `key` (exported or not) wanting read or write.
pub fn decide(identity: &Identity, key: &str, exported: bool, anonymous_read: bool, write: bool) -> Decision {
    let public = exported && anonymous_read;
    match identity {
        Identity::Invalid => Decision::Unauthorized,
        Identity::Anonymous if write => Decision::Unauthorized,
        Identity::Anonymous => {
            if public {
                Decision::Allow
            } else {
                Decision::NotFound
            }
        }
        Identity::User(token) => {
            let granted = glob_match(&token.repos, key);
            match (write, granted) {
                (false, true) => Decision::Allow,
                (false, false) if public => Decision::Allow,
                (false, false) => Decision::NotFound,
                (true, true) if token.write => Decision::Allow,
                (true, true) => Decision::Forbidden,
                (true, false) if public => Decision::Forbidden,
                (true, false) => Decision::NotFound,
            }
        }
    }
}

/// Whether `identity` may create the repository `key` by pushing to it (its token writes and
/// creates, and its glob matches).
pub fn may_create(identity: &Identity, key: &str) -> bool {
    matches!(identity, Identity::User(token) if token.write && token.create && glob_match(&token.repos, key))
}

/// The secret in an `Authorization` header: Basic's password, or a Bearer token. `Err` for a
/// header that is there but malformed.
/// An `Authorization` header that is there but neither Basic nor Bearer, or not decodable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed Authorization header")]
pub struct MalformedCredentials;

pub fn credentials(header: Option<&str>) -> Result<Option<String>, MalformedCredentials> {
    let Some(value) = header else { return Ok(None) };
    let value = value.trim();
    if let Some(token) = value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer ")) {
        return Ok(Some(token.trim().to_owned()));
    }
    if let Some(encoded) = value.strip_prefix("Basic ").or_else(|| value.strip_prefix("basic ")) {
        let decoded = base64_decode(encoded.trim()).ok_or(MalformedCredentials)?;
        let text = String::from_utf8(decoded).map_err(|_| MalformedCredentials)?;
        let (_, password) = text.split_once(':').ok_or(MalformedCredentials)?;
        return Ok(Some(password.to_owned()));
    }
    Err(MalformedCredentials)
}

/// Standard base64 (with padding), as HTTP Basic uses it.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let s = s.trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes() {
        let v = ALPHABET.iter().position(|a| *a == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// The token store as the server sees it: reloaded when the file changes.
pub struct Access {
    pub path: Option<PathBuf>,
    pub anonymous_read: bool,
    cached: Mutex<(Option<std::time::SystemTime>, std::sync::Arc<TokenStore>)>,
}

impl Access {
    pub fn new(path: Option<PathBuf>, anonymous_read: bool) -> Access {
        Access { path, anonymous_read, cached: Mutex::new((None, std::sync::Arc::new(TokenStore::default()))) }
    }

    fn store(&self) -> std::sync::Arc<TokenStore> {
        let Some(path) = &self.path else { return std::sync::Arc::new(TokenStore::default()) };
        let mtime = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        let mut cached = self.cached.lock().expect("not poisoned");
        if cached.0 != mtime || mtime.is_none() {
            match TokenStore::load(path) {
                Ok(store) => *cached = (mtime, std::sync::Arc::new(store)),
                Err(err) => {
                    // A broken state file must not open the doors: no token is valid then.
                    tracing::error!(%err, "token state unreadable: every token is refused");
                    *cached = (None, std::sync::Arc::new(TokenStore::default()));
                }
            }
        }
        cached.1.clone()
    }

    /// Read the token file again now (SIGHUP). A file that does not parse keeps the tokens read
    /// before (until it changes again), and the error says why; returns how many tokens there are.
    pub fn reload(&self) -> Result<usize, AuthError> {
        let Some(path) = &self.path else { return Ok(0) };
        let mtime = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        let mut cached = self.cached.lock().expect("not poisoned");
        match TokenStore::load(path) {
            Ok(store) => {
                let n = store.tokens.len();
                *cached = (mtime, std::sync::Arc::new(store));
                Ok(n)
            }
            Err(err) => {
                cached.0 = mtime;
                Err(err)
            }
        }
    }

    /// Who holds this SSH public key (`algorithm base64`): the user of a stored key, with its
    /// grant; `Invalid` for any other key.
    /// Who holds the key with this id: `gixd shell --key`, under OpenSSH, which checked the key
    /// itself (a key revoked since is refused).
    pub fn identify_key_id(&self, id: &str) -> Identity {
        match self.store().keys.iter().find(|k| k.id == id) {
            Some(key) => Identity::User(key.grant()),
            None => Identity::Invalid,
        }
    }

    pub fn identify_key(&self, key: &str) -> Identity {
        match self.store().find_key(key) {
            Some(key) => Identity::User(key.grant()),
            None => Identity::Invalid,
        }
    }

    /// Who sent a request with this `Authorization` header.
    pub fn identify(&self, authorization: Option<&str>) -> Identity {
        match credentials(authorization) {
            Ok(None) => Identity::Anonymous,
            Ok(Some(secret)) => match self.store().verify(&secret) {
                Some(token) => Identity::User(token.clone()),
                None => Identity::Invalid,
            },
            Err(MalformedCredentials) => Identity::Invalid,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_repository_paths() {
        assert!(glob_match("*", "team/app"));
        assert!(glob_match("team/*", "team/app"));
        assert!(!glob_match("team/*", "other/app"));
        assert!(glob_match("app", "app"));
        assert!(!glob_match("app", "app2"));
        assert!(glob_match("*/docs", "a/b/docs"));
        assert_eq!(repo_key("/team/app.git/"), "team/app");
        assert_eq!(repo_key("/x/.git"), "x");
    }

    #[test]
    fn decisions_follow_the_rules() {
        let token = |repos: &str, write: bool| {
            Identity::User(Token {
                id: "i".into(),
                user: "u".into(),
                repos: repos.into(),
                write,
                create: write,
                sha256: String::new(),
                created: 0,
            })
        };
        // anonymous
        assert_eq!(decide(&Identity::Anonymous, "r", true, true, false), Decision::Allow);
        assert_eq!(decide(&Identity::Anonymous, "r", false, true, false), Decision::NotFound);
        assert_eq!(decide(&Identity::Anonymous, "r", true, true, true), Decision::Unauthorized);
        assert_eq!(decide(&Identity::Invalid, "r", true, true, false), Decision::Unauthorized);
        // read grant
        assert_eq!(decide(&token("r", false), "r", false, true, false), Decision::Allow);
        assert_eq!(decide(&token("r", false), "r", true, true, true), Decision::Forbidden);
        assert_eq!(decide(&token("other", false), "r", false, true, false), Decision::NotFound);
        assert_eq!(decide(&token("other", true), "r", false, true, true), Decision::NotFound);
        // write grant
        assert_eq!(decide(&token("*", true), "r", false, true, true), Decision::Allow);
        // creating: a token that writes and creates, its glob matching
        assert!(may_create(&token("team/*", true), "team/new"));
        assert!(!may_create(&token("team/*", true), "other/new"));
        assert!(!may_create(&token("team/*", false), "team/new"));
        assert!(!may_create(&Identity::Anonymous, "team/new"));
    }

    #[test]
    fn credentials_come_from_basic_or_bearer() {
        assert_eq!(credentials(None), Ok(None));
        assert_eq!(credentials(Some("Bearer abc")), Ok(Some("abc".into())));
        // "user:secret"
        assert_eq!(credentials(Some("Basic dXNlcjpzZWNyZXQ=")), Ok(Some("secret".into())));
        assert_eq!(credentials(Some("Basic !!!")), Err(MalformedCredentials));
        assert_eq!(credentials(Some("Digest x")), Err(MalformedCredentials));
    }

    #[test]
    fn tokens_verify_by_hash_and_stop_when_revoked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.toml");
        let mut store = TokenStore::load(&path).unwrap();
        let (token, secret) = store.add("alice", "*", true).unwrap();
        store.save().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains(&secret), "the secret itself is never stored");
        let store = TokenStore::load(&path).unwrap();
        assert_eq!(store.verify(&secret).map(|t| t.id.clone()), Some(token.id.clone()));
        assert!(store.verify("gixd_wrong").is_none());
        let mut store = store;
        assert!(store.revoke(&token.id));
        assert!(store.verify(&secret).is_none());
    }
}
