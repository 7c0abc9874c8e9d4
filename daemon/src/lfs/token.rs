//! Short-lived LFS credentials for SSH users (`git-lfs-authenticate`): a token naming the key it
//! was issued to, the repository, the operation and when it expires, signed (HMAC-SHA256) with a
//! secret of the server's kept beside the token file, so the process that issues it (`gixd shell`
//! under OpenSSH, or the in-process SSH server) and the one that checks it (HTTP) need share
//! nothing but that file. The key is looked up again when the token is used: a key removed
//! since is refused with its token.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use super::api::Operation;
use crate::auth::hex;

/// What a token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    pub key_id: String,
    /// The repository as grants name it ([`crate::auth::repo_key`]).
    pub repo: String,
    pub operation: Operation,
    /// Seconds since the epoch.
    pub expires: u64,
}

const PREFIX: &str = "gixd-lfs";

/// Where the signing secret of the token file `token_file` lies.
pub fn secret_path(token_file: &Path) -> PathBuf {
    token_file.with_extension("lfs-secret")
}

/// The signing secret at `path`, made (32 random bytes, readable by its owner only) when missing.
pub fn secret(path: &Path) -> io::Result<[u8; 32]> {
    loop {
        match std::fs::File::open(path) {
            Ok(mut file) => {
                let mut bytes = Vec::new();
                file.read_to_end(&mut bytes)?;
                return bytes
                    .try_into()
                    .map_err(|_| io::Error::other(format!("{}: not a 32-byte secret", path.display())));
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(err),
        }
        let fresh: [u8; 32] = crate::auth::random()?;
        let temp = path.with_extension(format!("lfs-secret.{}", std::process::id()));
        {
            use std::os::unix::fs::OpenOptionsExt;
            let mut file =
                std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&temp)?;
            file.write_all(&fresh)?;
            file.sync_all()?;
        }
        // Linked in only if no other process made one meanwhile (theirs is then read).
        let linked = std::fs::hard_link(&temp, path);
        let _ = std::fs::remove_file(&temp);
        match linked {
            Ok(()) => return Ok(fresh),
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(err) => return Err(err),
        }
    }
}

fn op_name(operation: Operation) -> &'static str {
    match operation {
        Operation::Download => "download",
        Operation::Upload => "upload",
    }
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

/// The token for `claims`, signed with `secret`.
pub fn issue(secret: &[u8; 32], claims: &Claims) -> String {
    let body = format!(
        "{PREFIX}.{}.{}.{}.{}",
        claims.expires,
        op_name(claims.operation),
        hex(claims.key_id.as_bytes()),
        hex(claims.repo.as_bytes())
    );
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
    let tag = ring::hmac::sign(&key, body.as_bytes());
    format!("{body}.{}", hex(tag.as_ref()))
}

/// Whether `text` is one of these tokens at all (it may still be forged or expired).
pub fn is_token(text: &str) -> bool {
    text.starts_with(PREFIX) && text.as_bytes().get(PREFIX.len()) == Some(&b'.')
}

/// Why a token is not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    #[error("the LFS credentials are not valid")]
    Invalid,
    #[error("the LFS credentials have expired: run the command again")]
    Expired,
}

/// The claims of `token` if `secret` signed it and it has not expired at `now`.
pub fn verify(secret: &[u8; 32], token: &str, now: u64) -> Result<Claims, Rejected> {
    let (body, tag) = token.rsplit_once('.').ok_or(Rejected::Invalid)?;
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
    ring::hmac::verify(&key, body.as_bytes(), &unhex(tag).ok_or(Rejected::Invalid)?).map_err(|_| Rejected::Invalid)?;
    let mut parts = body.split('.');
    let (Some(PREFIX), Some(expires), Some(op), Some(key_id), Some(repo), None) =
        (parts.next(), parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Rejected::Invalid);
    };
    let text = |hexed: &str| unhex(hexed).and_then(|b| String::from_utf8(b).ok()).ok_or(Rejected::Invalid);
    let operation = match op {
        "download" => Operation::Download,
        "upload" => Operation::Upload,
        _ => return Err(Rejected::Invalid),
    };
    let claims = Claims {
        key_id: text(key_id)?,
        repo: text(repo)?,
        operation,
        expires: expires.parse().map_err(|_| Rejected::Invalid)?,
    };
    if claims.expires <= now {
        return Err(Rejected::Expired);
    }
    Ok(claims)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_holds_its_claims_until_it_expires_and_nothing_changed_in_it_passes() {
        let dir = tempfile::tempdir().unwrap();
        let secret = super::secret(&dir.path().join("s")).unwrap();
        assert_eq!(super::secret(&dir.path().join("s")).unwrap(), secret, "made once, then read");
        let claims =
            Claims { key_id: "k1".into(), repo: "team/app".into(), operation: Operation::Upload, expires: 1000 };
        let token = issue(&secret, &claims);
        assert!(is_token(&token));
        assert_eq!(verify(&secret, &token, 999), Ok(claims.clone()));
        assert_eq!(verify(&secret, &token, 1000), Err(Rejected::Expired));
        let other = super::secret(&dir.path().join("other")).unwrap();
        assert_eq!(verify(&other, &token, 0), Err(Rejected::Invalid), "another server's secret");
        // Any claim changed (here: download made upload, a later expiry) breaks the signature.
        let download = issue(&secret, &Claims { operation: Operation::Download, ..claims.clone() });
        let forged = download.replacen(".download.", ".upload.", 1);
        assert_eq!(verify(&secret, &forged, 0), Err(Rejected::Invalid));
        let later = token.replacen(".1000.", ".9999.", 1);
        assert_eq!(verify(&secret, &later, 0), Err(Rejected::Invalid));
        assert_eq!(verify(&secret, "gixd-lfs.garbage", 0), Err(Rejected::Invalid));
    }
}
