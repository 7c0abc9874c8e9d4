//! A git command as SSH carries it, from its command line to its service: `git-upload-pack
//! '<path>'`, `git-receive-pack '<path>'` or `git-upload-archive '<path>'` (also spelled
//! `git upload-pack`), the path unquoted by git's shell-quoting rules, resolved under the base
//! path and authorized by the key's grant; then a transfer slot, the conversation on a blocking
//! thread reading the client, and what it wrote sent from the transfer buffers. The in-process
//! SSH server ([`super::ssh`]) and `gixd shell` under OpenSSH ([`super::shell`]) differ only in
//! where the bytes come from and go to, and how the exit status and a refusal reach the client.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::auth::{Decision, Identity};
use crate::protocol::Version;
use crate::service;
use crate::session::State;
use crate::transport::TimedRead;
use crate::transport::pace::Paced;

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

impl Ended {
    fn refused(message: String) -> Ended {
        Ended { status: 128, refusal: Some(format!("fatal: {message}")) }
    }
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

/// Run the command `line` for `origin`: `input` gives the client's bytes (read on the blocking
/// thread, each read within the pace's window or the I/O timeout), `outlet` takes what is sent
/// back.
/// Returns how it ended and the outlet, once everything written was sent (or the client went);
/// the request's record is written then.
pub async fn run<I, O>(state: Arc<State>, origin: Origin, line: &str, input: I, mut outlet: O) -> (Ended, O)
where
    I: tokio::io::AsyncRead + Unpin + Send + 'static,
    O: service::buffer::Outlet,
{
    let Origin { transport, peer, identity, version } = origin;
    let parsed = parse_command(line);
    let mut log = service::Request::new(
        transport,
        peer,
        parsed.as_ref().map_or("malformed", |c| c.service.name()),
        Some(version),
    );
    log.record.user = identity.user().map(str::to_owned);
    let refuse = |log: service::Request, outcome, message: String| {
        log.finish(&state, outcome);
        Ended::refused(message)
    };
    let Some(command) = parsed else {
        tracing::info!(?peer, command = %crate::error::quoted(line, 128), "SSH command refused");
        let message = "gixd runs git-upload-pack, git-receive-pack and git-upload-archive only".into();
        return (refuse(log, service::Outcome::Refused, message), outlet);
    };
    if command.service == service::Service::UploadArchive && !state.config.services.upload_archive {
        let message = "git-upload-archive is not enabled on this server".into();
        return (refuse(log, service::Outcome::Refused, message), outlet);
    }
    // Who may do what: the key's grant, as a token's; a repository it may not read is not found,
    // exactly as a missing one.
    let write = command.service == service::Service::ReceivePack;
    let decided = {
        let (state, identity, path) = (state.clone(), identity.clone(), command.path.clone());
        tokio::task::spawn_blocking(move || {
            let (served, exported) = state.repos.locate(&path).map_err(|_| Decision::NotFound)?;
            let key = crate::auth::repo_key(&served.name);
            match crate::auth::decide(&identity, &key, exported, state.access.anonymous_read, write) {
                Decision::Allow => Ok(served),
                other => Err(other),
            }
        })
        .await
    };
    let path = crate::error::quoted(&command.path, 256);
    let served = match decided {
        Ok(Ok(served)) => served,
        Ok(Err(Decision::Forbidden)) => {
            let message = format!("your key may not push to '{path}'");
            return (refuse(log, service::Outcome::Refused, message), outlet);
        }
        _ => return (refuse(log, service::Outcome::Refused, format!("repository '{path}' not found")), outlet),
    };
    log = log.serving(&served, identity.user());
    let slot = match state.slot().await {
        Ok(slot) => slot,
        Err(refused) => return (refuse(log, service::Outcome::Busy, service::busy_message(refused).into()), outlet),
    };
    log.record.wait_ms = Some(slot.waited.as_secs_f64() * 1e3);
    let (outbox, queue) = service::buffer::Outbox::new(state.clone());
    let sending = service::buffer::send(queue, &mut outlet);
    let serving = {
        let (state, runtime) = (state.clone(), tokio::runtime::Handle::current());
        let pusher = identity.user().map(str::to_owned);
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let mut out = outbox;
            let share = match service::enter(&state, &served, peer.map(|p| p.ip())) {
                Ok(share) => share,
                Err(busy) => {
                    let mut w = crate::protocol::pkt::Writer::new();
                    w.err(busy.message());
                    let _ = std::io::Write::write_all(&mut out, &w.buf);
                    return (log, service::Outcome::Busy);
                }
            };
            let pace = if write { state.config.push_pace() } else { state.config.pace() };
            let timeout = pace.window.min(state.config.io_timeout);
            let input = TimedRead { read: input, runtime, life: state.life.clone(), timeout };
            let asked = service::Asked { service: command.service, version, pusher: pusher.as_deref() };
            let (log, outcome) = service::connection(&state, &served, asked, Paced::new(input, pace), &mut out, log);
            drop(share);
            (log, outcome)
        })
    };
    let (served, sent) = tokio::join!(serving, sending);
    let Ok((mut log, outcome)) = served else {
        return (Ended { status: 128, refusal: None }, outlet);
    };
    sent.record(&mut log.record);
    let outcome = match outcome {
        service::Outcome::Ok if !sent.complete => service::Outcome::Disconnected,
        outcome => outcome,
    };
    log.finish(&state, outcome);
    (Ended { status: if outcome == service::Outcome::Ok { 0 } else { 128 }, refusal: None }, outlet)
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
