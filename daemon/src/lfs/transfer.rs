//! git-lfs's pure-SSH protocol (`git-lfs-transfer <path> <operation>`, git-lfs's
//! `docs/proposals/ssh_adapter.md`, version 1): the requests a client sends, read from their
//! pkt-lines into typed values — a command line, `key=value` arguments, and after a delimiter the
//! oid lines of a batch. Nothing here touches a repository; the session that answers is
//! `crate::service::lfs_transfer`.

use std::collections::BTreeMap;

use super::Oid;

/// One request's command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Version(String),
    Batch,
    GetObject(Oid),
    PutObject(Oid),
    VerifyObject(Oid),
    Lock,
    /// `list-lock` (search) or `list-locks` (verify: ours and theirs).
    ListLocks {
        verify: bool,
    },
    Unlock(String),
    Quit,
}

/// Why a request cannot be read; the session answers it with a 400 and goes on (or ends).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("unknown command '{0}'")]
    UnknownCommand(String),
    #[error("'{0}' is not an LFS oid")]
    BadOid(String),
    #[error("malformed argument '{0}'")]
    BadArgument(String),
    #[error("malformed object line '{0}'")]
    BadObjectLine(String),
    #[error("too many lines in one request (at most {0})")]
    TooMany(usize),
}

/// The most argument or object lines one request may carry (git-lfs batches 100 objects).
pub const MOST_LINES: usize = 10_000;

fn quoted(text: &str) -> String {
    crate::error::quoted(text, 100)
}

/// The command of a request's first line.
pub fn command(line: &str) -> Result<Command, RequestError> {
    let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
    let oid = |text: &str| Oid::parse(text).ok_or_else(|| RequestError::BadOid(quoted(text)));
    Ok(match (word, rest) {
        ("version", v) if !v.is_empty() => Command::Version(v.to_owned()),
        ("batch", "") => Command::Batch,
        ("get-object", o) => Command::GetObject(oid(o)?),
        ("put-object", o) => Command::PutObject(oid(o)?),
        ("verify-object", rest) => {
            // `verify-object <oid> <size>` in the proposal; git-lfs sends the size as an argument.
            Command::VerifyObject(oid(rest.split(' ').next().unwrap_or(""))?)
        }
        ("lock", "") => Command::Lock,
        ("list-lock", "") => Command::ListLocks { verify: false },
        ("list-locks", "") => Command::ListLocks { verify: true },
        ("unlock", id) if !id.is_empty() && !id.contains(' ') => Command::Unlock(id.to_owned()),
        ("quit", "") => Command::Quit,
        _ => return Err(RequestError::UnknownCommand(quoted(line))),
    })
}

/// `key=value` argument lines as a map (a key given twice: the last wins; unknown keys are kept
/// and ignored by the session, as the protocol asks).
pub fn arguments<'a>(lines: impl IntoIterator<Item = &'a str>) -> Result<BTreeMap<String, String>, RequestError> {
    let mut out = BTreeMap::new();
    for (n, line) in lines.into_iter().enumerate() {
        if n >= MOST_LINES {
            return Err(RequestError::TooMany(MOST_LINES));
        }
        let (key, value) = line.split_once('=').ok_or_else(|| RequestError::BadArgument(quoted(line)))?;
        if key.is_empty() {
            return Err(RequestError::BadArgument(quoted(line)));
        }
        out.insert(key.to_owned(), value.to_owned());
    }
    Ok(out)
}

/// A batch's object lines: `<oid> <size>` (further `key=value` words ignored). An oid that is not
/// one is kept as text: the session answers it as missing rather than failing the batch.
pub fn objects<'a>(lines: impl IntoIterator<Item = &'a str>) -> Result<Vec<(String, u64)>, RequestError> {
    let mut out = Vec::new();
    for (n, line) in lines.into_iter().enumerate() {
        if n >= MOST_LINES {
            return Err(RequestError::TooMany(MOST_LINES));
        }
        let mut words = line.split(' ');
        let (Some(oid), Some(size)) = (words.next(), words.next()) else {
            return Err(RequestError::BadObjectLine(quoted(line)));
        };
        let size = size.parse().map_err(|_| RequestError::BadObjectLine(quoted(line)))?;
        out.push((oid.to_owned(), size));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_read_as_git_lfs_sends_them_and_nothing_else() {
        let oid = "a".repeat(64);
        assert_eq!(command("version 1"), Ok(Command::Version("1".into())));
        assert_eq!(command("batch"), Ok(Command::Batch));
        assert_eq!(command(&format!("get-object {oid}")), Ok(Command::GetObject(Oid::parse(&oid).unwrap())));
        assert_eq!(command(&format!("verify-object {oid} 12")), Ok(Command::VerifyObject(Oid::parse(&oid).unwrap())));
        assert_eq!(command("list-locks"), Ok(Command::ListLocks { verify: true }));
        assert_eq!(command("unlock abc"), Ok(Command::Unlock("abc".into())));
        for bad in ["", "batch x", "get-object ../../x", "unlock", "unlock a b", "shell", "quit now"] {
            assert!(command(bad).is_err(), "{bad:?}");
        }
        let args = arguments(["size=12", "refname=refs/heads/main", "path=a=b"]).unwrap();
        assert_eq!(args["path"], "a=b");
        assert!(arguments(["novalue"]).is_err());
        assert_eq!(objects([format!("{oid} 12 id=x").as_str()]).unwrap(), [(oid.clone(), 12)]);
        assert!(objects([format!("{oid} twelve").as_str()]).is_err());
    }
}
