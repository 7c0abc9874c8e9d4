//! A git command as SSH carries it, from its command line to its service: `git-upload-pack
//! '<path>'`, `git-receive-pack '<path>'` or `git-upload-archive '<path>'` (also spelled
//! `git upload-pack`), the path unquoted by git's shell-quoting rules; then the pipeline
//! ([`pipeline::connection`]): authorized by the key's grant, admitted, served reading the
//! client, and what it wrote sent from the transfer buffers. The in-process
//! SSH server ([`super::ssh`]) and `gixd shell` under OpenSSH ([`super::shell`]) differ only in
//! where the bytes come from and go to, and how the exit status and a refusal reach the client.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::auth::Identity;
use crate::protocol::Version;
use crate::service::{self, pipeline};
use crate::session::State;
use crate::transport::TimedRead;

/// A command an exec request may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    pub service: service::Service,
    pub path: String,
}

/// `git-upload-pack '<path>'` (or `git upload-pack …`, and receive-pack, upload-archive), the
/// path unquoted as git's `sq_quote` writes it; `None` for anything else.
pub fn parse_command(line: &str) -> Option<Command> {
    let line = line.trim_end_matches(['\n', '\r']);
    let (program, argument) = line.split_once(' ')?;
    let (program, argument) = match (program, argument.split_once(' ')) {
        ("git", Some((sub, rest))) => (format!("git-{sub}"), rest),
        _ => (program.to_owned(), argument),
    };
    let service = service::Service::from_name(&program)?;
    let path = dequote(argument.trim())?;
    (!path.is_empty() && !path.contains('\0')).then_some(Command { service, path })
}

/// One shell word as git quotes it: single-quoted runs, between them `\'` or `\!` (git's
/// `sq_dequote`); or a bare word with no quoting or escaping characters in it.
fn dequote(word: &str) -> Option<String> {
    if !word.starts_with('\'') {
        let plain = !word.chars().any(|c| c.is_whitespace() || "'\"\\$`;&|<>(){}*?[]!#~".contains(c));
        return plain.then(|| word.to_owned());
    }
    let mut out = String::new();
    let mut chars = word.chars();
    chars.next(); // the opening quote
    loop {
        // Inside quotes: everything up to the closing one.
        loop {
            match chars.next()? {
                '\'' => break,
                c => out.push(c),
            }
        }
        match chars.next() {
            None => return Some(out),
            Some('\\') => match (chars.next()?, chars.next()?) {
                (c @ ('\'' | '!'), '\'') => out.push(c),
                _ => return None,
            },
            Some(_) => return None,
        }
    }
}

/// `word` quoted for a POSIX shell as git's `sq_quote` does (the inverse of [`dequote`]).
pub fn sq_quote(word: &str) -> String {
    let mut out = String::from("'");
    for c in word.chars() {
        match c {
            '\'' | '!' => {
                out.push_str("'\\");
                out.push(c);
                out.push('\'');
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// How a command ended: its exit status, and the line its client is told on stderr when it was
/// refused or failed before its conversation began.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    pub status: u32,
    pub refusal: Option<String>,
}

/// Where a command came from and who runs it.
pub struct Origin {
    /// The access log's transport (`ssh`).
    pub transport: &'static str,
    pub peer: Option<SocketAddr>,
    pub identity: Identity,
    /// `GIT_PROTOCOL`.
    pub version: Version,
}

/// Run the command `line` for `origin` through the pipeline ([`pipeline::connection`]): `input`
/// gives the client's bytes (read on the blocking thread, each read within the pace's window or
/// the I/O timeout), `outlet` takes what is sent back. Returns how it ended and the outlet, once
/// everything written was sent (or the client went).
pub async fn run<I, O>(state: Arc<State>, origin: Origin, line: &str, input: I, mut outlet: O) -> (Ended, O)
where
    I: tokio::io::AsyncRead + Unpin + Send + 'static,
    O: service::buffer::Outlet,
{
    let trimmed = line.trim_end_matches(['\n', '\r']);
    for program in ["git-lfs-authenticate", "git-lfs-transfer"] {
        if let Some(arguments) = trimmed.strip_prefix(program).and_then(|a| a.strip_prefix(' ')) {
            return (lfs(&state, origin, program, arguments, input, &mut outlet).await, outlet);
        }
    }
    let Origin { transport, peer, identity, version } = origin;
    let origin = pipeline::Origin { transport, peer, caller: pipeline::Caller::Identified(identity) };
    let Some(command) = parse_command(line) else {
        let why = format!("command {} refused", crate::error::quoted(line, 128));
        let ended = pipeline::unreadable(&state, &origin, "malformed", Some(version), why);
        return (said(ended, line), outlet);
    };
    let path = crate::error::quoted(&command.path, 256);
    let target = pipeline::Target { service: command.service, path: command.path, version };
    let (runtime, life) = (tokio::runtime::Handle::current(), state.life.clone());
    let input = move |timeout| TimedRead { read: input, runtime, life, timeout };
    let (ended, outlet) = pipeline::connection(&state, origin, target, input, outlet, std::future::pending()).await;
    (said(ended, &path), outlet)
}

/// `git-lfs-authenticate <path> <operation>` or `git-lfs-transfer <path> upload|download`, read
/// as git-lfs quotes them, run by the service ([`service::lfs_transfer::command`]).
async fn lfs<I>(
    state: &Arc<State>,
    origin: Origin,
    program: &str,
    arguments: &str,
    input: I,
    outlet: &mut impl service::buffer::Outlet,
) -> Ended
where
    I: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    let Origin { transport, peer, identity, version } = origin;
    let origin = pipeline::Origin { transport, peer, caller: pipeline::Caller::Identified(identity) };
    let parsed = arguments.trim().rsplit_once(' ').and_then(|(path, op)| Some((dequote(path.trim())?, op)));
    let command = match (program, parsed) {
        ("git-lfs-authenticate", Some((path, op))) => {
            Some((path, service::lfs_transfer::LfsCommand::Authenticate(op.to_owned())))
        }
        ("git-lfs-transfer", Some((path, "download"))) => {
            Some((path, service::lfs_transfer::LfsCommand::Transfer(service::lfs::Access::Read)))
        }
        ("git-lfs-transfer", Some((path, "upload"))) => {
            Some((path, service::lfs_transfer::LfsCommand::Transfer(service::lfs::Access::Write)))
        }
        _ => None,
    };
    let Some((path, command)) = command.filter(|(path, _)| !path.is_empty() && !path.contains('\0')) else {
        let why = format!("usage: {program} <path> <operation>");
        pipeline::unreadable(state, &origin, program, Some(version), why.clone());
        return Ended { status: 1, refusal: Some(format!("fatal: {why}")) };
    };
    match service::lfs_transfer::command(state, origin, path, command, input, outlet).await {
        Ok(()) => Ended { status: 0, refusal: None },
        Err(why) => Ended { status: 1, refusal: Some(format!("fatal: {why}")) },
    }
}

/// How a command that ended so is told: its exit status, and why it was refused.
fn said(ended: pipeline::Ended, path: &str) -> Ended {
    use pipeline::{Denied, Why};
    let status = ended.status();
    let refusal = match ended {
        pipeline::Ended::Refused(_, why) => Some(match why {
            Why::Malformed(_) => "gixd runs git-upload-pack, git-receive-pack and git-upload-archive only".to_owned(),
            Why::Denied(Denied::NotEnabled(service)) => format!("{} is not enabled on this server", service.name()),
            Why::Denied(Denied::Forbidden) => format!("your key may not push to '{path}'"),
            Why::Denied(Denied::Unsupported(reason)) => {
                format!("repository '{path}' cannot be served by gixd: {reason}")
            }
            Why::Denied(_) => format!("repository '{path}' not found"),
            Why::Busy(message) => message.to_owned(),
            Why::Failed(message) => message,
        }),
        pipeline::Ended::Served(_) | pipeline::Ended::Gone => None,
    };
    Ended { status, refusal: refusal.map(|message| format!("fatal: {message}")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_read_as_git_quotes_them_and_nothing_else_runs() {
        let c = parse_command("git-upload-pack '/team/app.git'").unwrap();
        assert_eq!((c.service, c.path.as_str()), (service::Service::UploadPack, "/team/app.git"));
        let c = parse_command("git receive-pack 'it'\\''s.git'").unwrap();
        assert_eq!((c.service, c.path.as_str()), (service::Service::ReceivePack, "it's.git"));
        let c = parse_command("git-upload-archive 'a'\\!'b'").unwrap();
        assert_eq!(c.path, "a!b");
        assert_eq!(parse_command("git-upload-pack repo.git").unwrap().path, "repo.git");
        for refused in [
            "sh -c 'id'",
            "git-upload-pack",
            "git-upload-pack 'unterminated",
            "git-upload-pack 'a'b'",
            "git-upload-pack 'a' 'b'",
            "git-upload-pack $(id)",
            "git-upload-pack ''",
            "git-http-backend '/x'",
            "git upload-pack; id",
        ] {
            assert_eq!(parse_command(refused), None, "{refused}");
        }
    }

    #[test]
    fn quoting_then_reading_gives_back_the_word() {
        for word in ["plain", "it's", "a!b", "two words", "'", "$(id)", "back\\slash", "\"q\""] {
            let line = format!("git-upload-pack {}", sq_quote(word));
            assert_eq!(parse_command(&line).map(|c| c.path), Some(word.to_owned()), "{word}");
        }
    }
}
