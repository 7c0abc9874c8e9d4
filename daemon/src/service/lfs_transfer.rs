//! Git LFS over SSH ([`command`]: `git-lfs-authenticate` and `git-lfs-transfer`, in process or
//! under OpenSSH, authorized, served and recorded once), and git-lfs's pure-SSH protocol
//! answered: the capability advertisement, then one request after another — `version`, `batch`,
//! `get-object` (the object's bytes as data packets from its mapped file), `put-object` (streamed into the store under an upload permit, checked before
//! it is visible), `verify-object`, `lock`, `list-lock`, `list-locks`, `unlock`, `quit` — with
//! the HTTP API's statuses and the same store, locks and grants ([`super::lfs`]). A request that
//! cannot be read is answered `400` with why, and the session goes on. git-lfs reads its lines
//! as they are, so they go without a trailing newline (`status 200`, not `status 200\n`).

use std::collections::BTreeMap;

use bytes::Bytes;
use gix_packetline::PacketLineRef;
use gix_packetline::decode::{PacketLineOrWantedSize, hex_prefix};
use tokio::io::{AsyncRead, AsyncReadExt};

use std::sync::Arc;

use super::buffer::Outlet;
use super::lfs::{Access, Refusal};
use super::pipeline::{Caller, Origin};
use super::{Outcome, Request};
use crate::auth::Identity;
use crate::lfs::Store;
use crate::lfs::locks::Lock;
use crate::lfs::transfer::{self, Command};
use crate::protocol::pkt::{self, Writer};
use crate::repo::Served;
use crate::session::State;

/// One packet as read.
enum Packet {
    Data(Vec<u8>),
    Flush,
    Delim,
}

/// The session's reader: one packet at a time off the channel, each within the I/O timeout (a
/// session waiting for its client's next request holds no thread, only this future).
struct Reader<R> {
    input: R,
    timeout: std::time::Duration,
}

fn malformed(message: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message.to_string())
}

impl<R: AsyncRead + Unpin> Reader<R> {
    /// The next packet; `None` when the client hung up between packets.
    async fn packet(&mut self) -> std::io::Result<Option<Packet>> {
        let read = async {
            let mut prefix = [0u8; 4];
            match self.input.read_exact(&mut prefix).await {
                Ok(_) => {}
                Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
                Err(err) => return Err(err),
            }
            match hex_prefix(&prefix).map_err(malformed)? {
                PacketLineOrWantedSize::Line(PacketLineRef::Flush) => Ok(Some(Packet::Flush)),
                PacketLineOrWantedSize::Line(PacketLineRef::Delimiter) => Ok(Some(Packet::Delim)),
                PacketLineOrWantedSize::Line(other) => Err(malformed(format!("unexpected packet {other:?}"))),
                PacketLineOrWantedSize::Wanted(n) => {
                    let mut data = vec![0u8; n as usize];
                    self.input.read_exact(&mut data).await?;
                    Ok(Some(Packet::Data(data)))
                }
            }
        };
        match tokio::time::timeout(self.timeout, read).await {
            Ok(read) => read,
            Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the client sent nothing in time")),
        }
    }

    /// The next packet, which must come (a client gone mid-request is an error).
    async fn must(&mut self) -> std::io::Result<Packet> {
        self.packet().await?.ok_or_else(|| malformed("the client hung up mid-request"))
    }
}

fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data.strip_suffix(b"\n").unwrap_or(data)).into_owned()
}

/// One request as read: its header lines (command, arguments), and whether a delimiter followed
/// them (what comes after it is read by the command).
struct Header {
    lines: Vec<String>,
    delimited: bool,
}

/// Read the next request's header; `None` when the client hung up between requests.
async fn header<R: AsyncRead + Unpin>(reader: &mut Reader<R>) -> std::io::Result<Option<Header>> {
    let mut lines = Vec::new();
    loop {
        let packet = match lines.is_empty() {
            true => match reader.packet().await? {
                Some(packet) => packet,
                None => return Ok(None),
            },
            false => reader.must().await?,
        };
        match packet {
            Packet::Data(d) if lines.len() < transfer::MOST_LINES => lines.push(text(&d)),
            Packet::Data(_) => return Err(malformed("too many lines in one request")),
            Packet::Delim => return Ok(Some(Header { lines, delimited: true })),
            Packet::Flush => return Ok(Some(Header { lines, delimited: false })),
        }
    }
}

/// The text lines after a delimiter, up to the flush.
async fn rest_lines<R: AsyncRead + Unpin>(reader: &mut Reader<R>) -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    loop {
        match reader.must().await? {
            Packet::Data(d) if out.len() < transfer::MOST_LINES => out.push(text(&d)),
            Packet::Data(_) => return Err(malformed("too many lines in one request")),
            Packet::Flush => return Ok(out),
            Packet::Delim => return Err(malformed("a second delimiter in one request")),
        }
    }
}

/// Each data packet after a delimiter up to the flush, handed to `take` (whose first error stops
/// taking, not reading: the rest is read and dropped, so the session stays in step).
async fn rest_data<R: AsyncRead + Unpin, E>(
    reader: &mut Reader<R>,
    mut take: impl FnMut(&[u8]) -> Result<(), E>,
) -> std::io::Result<Result<(), E>> {
    let mut result = Ok(());
    loop {
        match reader.must().await? {
            Packet::Data(d) => {
                if result.is_ok() {
                    result = take(&d);
                }
            }
            Packet::Flush => return Ok(result),
            Packet::Delim => return Err(malformed("a second delimiter in one request")),
        }
    }
}

/// Where the answers go: the channel, each answer as one chunk.
struct Out<'o, O> {
    outlet: &'o mut O,
}

impl<O: Outlet> Out<'_, O> {
    async fn send(&mut self, w: Writer) -> std::io::Result<()> {
        match self.outlet.send(Bytes::from(w.into_bytes())).await {
            true => Ok(()),
            false => Err(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "client disconnected")),
        }
    }
}

fn status(code: u16, args: &[String]) -> Writer {
    let mut w = Writer::new();
    w.text(format!("status {code}"));
    for arg in args {
        w.text(arg);
    }
    w.flush();
    w
}

/// A refusal: its status, the arguments that go with it, and after a delimiter its message.
fn refused(code: u16, args: &[String], message: &str) -> Writer {
    let mut w = Writer::new();
    w.text(format!("status {code}"));
    for arg in args {
        w.text(arg);
    }
    w.delim();
    w.text(crate::error::for_client(message, 1000));
    w.flush();
    w
}

fn lock_args(lock: &Lock) -> Vec<String> {
    vec![
        format!("id={}", lock.id),
        format!("path={}", lock.path),
        format!("locked-at={}", lock.locked_at),
        format!("ownername={}", lock.owner.name),
    ]
}

fn answer_refusal(refusal: Refusal) -> Writer {
    let args = refusal.lock.as_deref().map(lock_args).unwrap_or_default();
    refused(refusal.status, &args, &refusal.message)
}

/// Serve one `git-lfs-transfer` session for `identity`, who may have `access` to `served`:
/// requests read off `input`, answers sent through `outlet`. Light answers (batch, verify,
/// locks) are made here; an object's bytes are read from its mapped file, and an upload is
/// hashed and written on a blocking thread while it arrives.
pub async fn serve<O: Outlet>(
    state: &State,
    served: &Served,
    identity: &Identity,
    access: Access,
    input: impl AsyncRead + Unpin,
    outlet: &mut O,
) -> std::io::Result<()> {
    let mut out = Out { outlet };
    let mut w = Writer::new();
    w.text("version=1").text("locking").flush();
    out.send(w).await?;
    let mut reader = Reader { input, timeout: state.config.io_timeout };
    let store = state.lfs.store(&served.git_dir);
    let user = identity.user().unwrap_or("anonymous").to_owned();
    loop {
        let Some(header) = header(&mut reader).await? else { return Ok(()) };
        let (first, rest) = header.lines.split_first().map_or(("", &[][..]), |(f, r)| (f.as_str(), r));
        let parsed = transfer::command(first)
            .and_then(|command| Ok((command, transfer::arguments(rest.iter().map(String::as_str))?)));
        let (command, args) = match parsed {
            Ok(parsed) => parsed,
            Err(err) => {
                if header.delimited {
                    rest_data(&mut reader, |_| Ok::<_, ()>(())).await?.ok();
                }
                out.send(refused(400, &[], &err.to_string())).await?;
                continue;
            }
        };
        let size = args.get("size").and_then(|s| s.parse::<u64>().ok());
        let writes = access == Access::Write;
        let answer = match command {
            Command::Version(v) if v == "1" => status(200, &[]),
            Command::Version(v) => refused(400, &[], &format!("unknown version {}", crate::error::quoted(&v, 20))),
            Command::Quit => return out.send(status(200, &[])).await,
            Command::Batch => {
                let objects = match header.delimited {
                    true => transfer::objects(rest_lines(&mut reader).await?.iter().map(String::as_str)),
                    false => Ok(Vec::new()),
                };
                match objects {
                    Ok(objects) => batch(state, &store, access, &objects),
                    Err(err) => refused(400, &[], &err.to_string()),
                }
            }
            Command::GetObject(oid) => {
                let download = match super::lfs::object(state, served, oid.as_str()) {
                    Ok(opened) => opened,
                    Err(refusal) => {
                        out.send(answer_refusal(refusal)).await?;
                        continue;
                    }
                };
                let len = download.bytes();
                let gone = || std::io::Error::new(std::io::ErrorKind::BrokenPipe, "client disconnected");
                // The answer's head: its status and size, then the data packets.
                let sized = || {
                    let mut w = Writer::new();
                    w.text("status 200").text(format!("size={len}")).delim();
                    w
                };
                match download {
                    super::lfs::Download::File(range, _) => {
                        out.send(sized()).await?;
                        let mut at = 0usize;
                        while let Some(range) = range.as_ref().filter(|_| (at as u64) < len) {
                            let n = (len as usize - at).min(pkt::MAX_DATA);
                            if !out.outlet.send_many(vec![data_head(n), range.sub(at, n).bytes()]).await {
                                return Err(gone());
                            }
                            at += n;
                        }
                    }
                    super::lfs::Download::Remote { bucket, key, .. } => {
                        let mut body = match bucket.get(&key, None).await {
                            Ok(body) => body,
                            Err(err) => {
                                tracing::warn!(repo = %served.name, %oid, %err, "LFS object unreadable");
                                out.send(refused(502, &[], "the object storage could not be reached")).await?;
                                continue;
                            }
                        };
                        out.send(sized()).await?;
                        // The bucket's bytes as they come, in packets; a stream cut short ends
                        // the connection (the answer cannot be taken back).
                        let mut sent = 0u64;
                        while let Some(frame) = http_body_util::BodyExt::frame(&mut body).await {
                            let Ok(data) = frame.map_err(std::io::Error::other)?.into_data() else { continue };
                            for at in (0..data.len()).step_by(pkt::MAX_DATA) {
                                let piece = data.slice(at..data.len().min(at + pkt::MAX_DATA));
                                sent += piece.len() as u64;
                                if !out.outlet.send_many(vec![data_head(piece.len()), piece]).await {
                                    return Err(gone());
                                }
                            }
                        }
                        if sent != len {
                            return Err(std::io::Error::other(format!(
                                "the object storage sent {sent} of {len} bytes"
                            )));
                        }
                    }
                }
                let mut w = Writer::new();
                w.flush();
                w
            }
            Command::PutObject(oid) => {
                let limit = state.config.lfs.max_object_bytes;
                let refusal = match (writes, size, header.delimited) {
                    (false, _, _) => Some((403, "this connection was opened for downloads".to_owned())),
                    (_, None, _) => Some((400, "put-object needs its size argument".to_owned())),
                    (_, _, false) => Some((400, "put-object needs its data after a delimiter".to_owned())),
                    (_, Some(size), _) if size > limit => {
                        Some((413, format!("the object is {size} bytes, larger than the {limit} bytes allowed")))
                    }
                    _ => None,
                };
                match refusal {
                    Some((code, message)) => {
                        if header.delimited {
                            rest_data(&mut reader, |_| Ok::<_, ()>(())).await?.ok();
                        }
                        refused(code, &[], &message)
                    }
                    None => match put(state, &store, oid, size.unwrap_or(0), &mut reader).await? {
                        Ok(()) => status(200, &[]),
                        Err((code, message)) => {
                            tracing::info!(repo = %served.name, %oid, message, "LFS upload over SSH refused");
                            refused(code, &[], &message)
                        }
                    },
                }
            }
            Command::VerifyObject(oid) => {
                match super::lfs::verify(state, served, oid.as_str(), size.unwrap_or(u64::MAX)) {
                    Ok(()) => status(200, &[]),
                    Err(refusal) => answer_refusal(refusal),
                }
            }
            Command::Lock if !writes => refused(403, &[], "locks need write access"),
            Command::Lock => {
                let path = args.get("path").map(String::as_str).unwrap_or("");
                match super::lfs::create_lock(served, &user, path) {
                    Ok(made) => status(201, &lock_args(&made.lock)),
                    Err(refusal) => answer_refusal(refusal),
                }
            }
            Command::ListLocks { verify: true } if !writes => refused(403, &[], "verifying locks needs write access"),
            Command::ListLocks { verify } => {
                let get = |key: &str| args.get(key).map(String::as_str);
                let limit = get("limit").and_then(|l| l.parse().ok());
                match super::lfs::list_locks(served, get("path"), get("id"), get("cursor"), limit) {
                    Ok(list) => list_locks(&list.locks, list.next_cursor.as_deref(), verify.then_some(user.as_str())),
                    Err(refusal) => answer_refusal(refusal),
                }
            }
            Command::Unlock(_) if !writes => refused(403, &[], "locks need write access"),
            Command::Unlock(id) => {
                let force = args.get("force").is_some_and(|f| f == "true");
                match super::lfs::unlock(served, &user, &id, force) {
                    Ok(unlocked) => status(200, &lock_args(&unlocked.lock)),
                    Err(refusal) => answer_refusal(refusal),
                }
            }
        };
        out.send(answer).await?;
    }
}

/// The length header of a data packet of `n` bytes (the payload follows as its own chunk, so a
/// file's pages go out without a copy).
fn data_head(n: usize) -> Bytes {
    Bytes::from(format!("{:04x}", n + 4).into_bytes())
}

/// An upload's data packets, hashed and written on a blocking thread as they come (through a
/// channel of a few packets), under an upload permit; checked before it is visible.
async fn put<R: AsyncRead + Unpin>(
    state: &State,
    store: &Store,
    oid: crate::lfs::Oid,
    declared: u64,
    reader: &mut Reader<R>,
) -> std::io::Result<Result<(), (u16, String)>> {
    let permit = match super::pipeline::lfs_upload(state).await {
        Ok(permit) => permit,
        Err(super::pipeline::Busy(message)) => {
            rest_data(reader, |_| Ok::<_, ()>(())).await?.ok();
            return Ok(Err((429, message.to_owned())));
        }
    };
    if let Some(refusal) = super::lfs::over_quota(state, store, declared) {
        rest_data(reader, |_| Ok::<_, ()>(())).await?.ok();
        return Ok(Err((refusal.status, refusal.message)));
    }
    if store.size(&oid).is_some() {
        // Stored already: its bytes were checked then.
        rest_data(reader, |_| Ok::<_, ()>(())).await?.ok();
        return Ok(Ok(()));
    }
    let upload = match store.begin(oid, declared, state.config.lfs.max_object_bytes) {
        Ok(upload) => upload,
        Err(err) => {
            rest_data(reader, |_| Ok::<_, ()>(())).await?.ok();
            let refusal = super::lfs::upload_refused(err);
            return Ok(Err((refusal.status, refusal.message)));
        }
    };
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
    let writer = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let mut upload = upload;
        while let Some(data) = rx.blocking_recv() {
            upload.write(&data)?;
        }
        upload.finish()
    });
    let mut gone = false;
    loop {
        match reader.must().await {
            Ok(Packet::Data(d)) => {
                if !gone && tx.send(d).await.is_err() {
                    gone = true; // the writer refused the object: the rest is read and dropped
                }
            }
            Ok(Packet::Flush) => break,
            Ok(Packet::Delim) => {
                drop(tx);
                let _ = writer.await;
                return Err(malformed("a second delimiter in one request"));
            }
            Err(err) => {
                drop(tx);
                let _ = writer.await;
                return Err(err);
            }
        }
    }
    drop(tx);
    Ok(match writer.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(err)) => {
            let refusal = super::lfs::upload_refused(err);
            Err((refusal.status, refusal.message))
        }
        Err(_) => Err((500, "internal error".to_owned())),
    })
}

/// The answer to a batch: one line per object and action (`noop` for one stored already).
fn batch(state: &State, store: &Store, access: Access, objects: &[(String, u64)]) -> Writer {
    let limit = state.config.lfs.max_object_bytes;
    if access == Access::Write
        && let Some((_, size)) = objects.iter().find(|(_, size)| *size > limit)
    {
        return refused(413, &[], &format!("an object is {size} bytes, larger than the {limit} bytes allowed"));
    }
    let mut w = Writer::new();
    w.text("status 200").text("hash-algo=sha256").delim();
    let mut seen = BTreeMap::new();
    for (oid, size) in objects {
        let Some(parsed) = crate::lfs::Oid::parse(oid) else { continue };
        if seen.insert(oid.clone(), ()).is_some() {
            continue;
        }
        let stored = store.size(&parsed);
        match (access, stored) {
            (Access::Read, Some(stored)) if stored == *size => w.text(format!("{oid} {size} download")),
            // Missing (or another size): no action; git-lfs reports the object as missing.
            (Access::Read, _) => continue,
            (Access::Write, Some(_)) => w.text(format!("{oid} {size} noop")),
            (Access::Write, None) => w.text(format!("{oid} {size} upload")),
        };
    }
    w.flush();
    w
}

/// A list of locks: each a `lock` line and its `path`, `locked-at`, `ownername` (and, verifying
/// for `user`, `owner ours|theirs`) lines.
fn list_locks(locks: &[Lock], next: Option<&str>, user: Option<&str>) -> Writer {
    let mut w = Writer::new();
    w.text("status 200");
    if let Some(next) = next {
        w.text(format!("next-cursor={next}"));
    }
    w.delim();
    for lock in locks {
        let id = &lock.id;
        w.text(format!("lock {id}"))
            .text(format!("path {id} {}", lock.path))
            .text(format!("locked-at {id} {}", lock.locked_at))
            .text(format!("ownername {id} {}", lock.owner.name));
        if let Some(user) = user {
            w.text(format!("owner {id} {}", if lock.owner.name == user { "ours" } else { "theirs" }));
        }
    }
    w.flush();
    w
}

/// What an LFS command over SSH asks for.
pub enum LfsCommand {
    /// `git-lfs-authenticate`: a header for the HTTP API, for this operation.
    Authenticate(String),
    /// `git-lfs-transfer`: the pure-SSH protocol, a session with this access.
    Transfer(super::lfs::Access),
}

/// An LFS command over SSH, the one way for both (a request that takes no transfer slot):
/// authorized (the key's grant, as every request), served — `git-lfs-authenticate`'s answer
/// sent through `outlet`, or a `git-lfs-transfer` session reading `input` run as a task (an
/// idle session holds no thread; its uploads take their own permits) — settled and recorded
/// once. `Err`: why it was refused, for the transport to tell.
pub async fn command<O: Outlet>(
    state: &Arc<State>,
    origin: Origin,
    path: String,
    command: LfsCommand,
    input: impl tokio::io::AsyncRead + Unpin,
    outlet: &mut O,
) -> Result<(), String> {
    let Origin { transport, peer, caller } = origin;
    let Caller::Identified(identity) = caller else { return Err("LFS needs a user's key".into()) };
    let service = match command {
        LfsCommand::Authenticate(_) => "git-lfs-authenticate",
        LfsCommand::Transfer(_) => "git-lfs-transfer",
    };
    let mut log = Request::new(transport, peer, service, None);
    log.record.user = identity.user().map(str::to_owned);
    log.record.repository = Some(path.clone());
    let refused = |log: Request, outcome: Outcome, why: String| {
        log.finish(state, outcome);
        Err(why)
    };
    match command {
        LfsCommand::Authenticate(operation) => {
            let (answered, identity) = (state.clone(), identity.clone());
            let answer =
                tokio::task::spawn_blocking(move || super::lfs::authenticate(&answered, &identity, &path, &operation))
                    .await;
            match answer {
                Ok(Ok(json)) => {
                    let sent = outlet.send(bytes::Bytes::from(json + "\n")).await;
                    log.finish(state, if sent { Outcome::Ok } else { Outcome::Disconnected });
                    Ok(())
                }
                Ok(Err(refusal)) => refused(log, Outcome::Refused, refusal.message),
                Err(_) => refused(log, Outcome::Failed, "internal error".into()),
            }
        }
        LfsCommand::Transfer(access) => {
            let authorized = {
                let (state, identity) = (state.clone(), identity.clone());
                tokio::task::spawn_blocking(move || super::lfs::authorize(&state, &identity, &path, access)).await
            };
            let served = match authorized {
                Ok(Ok(served)) => served,
                Ok(Err(refusal)) => return refused(log, Outcome::Refused, refusal.message),
                Err(_) => return refused(log, Outcome::Failed, "internal error".into()),
            };
            let session = serve(state, &served, &identity, access, input, outlet);
            let outcome = match state.life.unless_cancelled(session).await {
                Some(Ok(())) => Outcome::Ok,
                Some(Err(err)) => {
                    tracing::info!(repo = %served.name, %err, "git-lfs-transfer ended");
                    Outcome::Disconnected
                }
                None => Outcome::Disconnected,
            };
            log.finish(state, outcome);
            Ok(())
        }
    }
}
