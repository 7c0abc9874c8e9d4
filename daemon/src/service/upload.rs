//! upload-pack as a service, for every transport: a fetch that ends its negotiation goes
//! through the single-flight pack cache when it is on (keyed by the repository, the state of its
//! refs and packs, and the typed request: [`crate::protocol::FetchKey`]), anything else is
//! answered by the codecs ([`run`]) with a session of its own ([`super::negotiation`]). A stateless request (smart HTTP) is answered on a
//! blocking thread into a channel the transport sends from; a connection (git://) on its own
//! thread, command by command.
//!
//! - **Generation**: one request generates an entry, in a transfer slot; identical requests
//!   read it along from its start and hold no slot. Over HTTP the generator writes the entry
//!   only and its own client reads it like the others (zero copy); over a connection the
//!   generator writes the entry and its own client at once, on its own thread (no second
//!   thread per transfer), and goes on filling the entry if its client leaves.
//! - **Reading**: [`read_entry`] sends an entry from its start to one [`Outlet`] at the
//!   outlet's pace, waiting for the generator where it has caught up.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::negotiation::Session;
use super::{Outcome, Refusal, Request, Work, sink};
use crate::error::ServeError;
use crate::pack::Stats;
use crate::pack_cache::{Entry, Found, Generated, Generation, Key, PackCache};
use crate::protocol::{self, Context, FetchKey, Input, Version};
use crate::repo::{RefSnapshot, Served};
use crate::session::{Exchange, Share, State, Tally};

/// What a connection's fetches came to, for its record.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fetched {
    /// Objects in the last pack sent.
    pub objects: Option<usize>,
    /// How the last cacheable fetch was answered: `hit`, `join`, `miss`.
    pub cache: Option<&'static str>,
}

/// The pack-cache key of `request` for `served` as its refs and packs are now.
fn key(served: &Served, request: &FetchKey) -> Result<Key, ServeError> {
    let repo = served.repo.to_thread_local();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (crate::repo::upload_ref_state(&repo)?, crate::packs::directory_state(&repo)).hash(&mut h);
    Ok(Key { git_dir: served.git_dir.clone(), state: h.finish(), version: request.version, request: request.encode() })
}

fn found(found: Found) -> (Arc<Entry>, &'static str) {
    match found {
        Found::Hit(entry) => (entry, "hit"),
        Found::Join(entry) => (entry, "join"),
    }
}

/// Generate `entry` by `run` on the calling thread, writing to `out` (the entry's writer, or a
/// tee of it): what it made is recorded on the entry, the generation counted, and the entry
/// finished (kept only if it succeeded).
fn generate(
    state: &State,
    cache: &PackCache,
    entry: &Arc<Entry>,
    tally: &Tally,
    served: &Served,
    run: impl FnOnce() -> Result<Option<Stats>, ServeError>,
) -> Result<Option<Stats>, ServeError> {
    let work = Work::start();
    let result = run();
    let cpu_seconds = work.seconds();
    let (wants, haves) = tally.counts();
    let stats = result.as_ref().ok().copied().flatten();
    *entry.generated.lock().expect("not poisoned") = Generated { stats, wants, haves, cpu_seconds };
    if stats.is_some() {
        state.metrics.generated(cpu_seconds);
    }
    if let Err(err) = &result {
        tracing::warn!(repo = %served.name, %err, "upload-pack failed");
    }
    cache.finish(entry, result.is_ok());
    result
}

/// Where a reader of an entry sends it.
pub trait Outlet {
    /// Send one chunk; false: the client is gone (or stalled past the I/O timeout).
    fn send(&mut self, chunk: Bytes) -> impl Future<Output = bool>;
}

/// An async channel (a response body), each chunk accepted within `stall`.
struct Channel {
    tx: mpsc::Sender<Bytes>,
    stall: std::time::Duration,
}

impl Outlet for Channel {
    async fn send(&mut self, chunk: Bytes) -> bool {
        matches!(tokio::time::timeout(self.stall, self.tx.send(chunk)).await, Ok(Ok(())))
    }
}

/// A blocking writer (a connection's socket), written from its own blocking thread.
struct Blocking<'a, W>(&'a mut W);

impl<W: Write> Outlet for Blocking<'_, W> {
    async fn send(&mut self, chunk: Bytes) -> bool {
        self.0.write_all(&chunk).is_ok()
    }
}

/// Send an entry from its start to `outlet`, as fast as it takes it, waiting for the generator
/// where it has caught up. The bytes sent, and whether the entry was sent to its end. Each
/// chunk is what the entry holds up to the end of its window (its bytes are mapped already: no
/// copy, no memory per chunk).
pub async fn read_entry(entry: &Entry, outlet: &mut impl Outlet) -> (u64, bool) {
    let mut progress = entry.subscribe();
    let mut offset = 0u64;
    loop {
        let chunk = match entry.read_at(offset, usize::MAX) {
            Ok(chunk) => chunk,
            Err(err) => {
                tracing::warn!(%err, "pack cache entry unreadable");
                return (offset, false);
            }
        };
        if !chunk.is_empty() {
            let len = chunk.len() as u64;
            if !outlet.send(chunk).await {
                return (offset, false);
            }
            offset += len;
            continue;
        }
        let now = *progress.borrow_and_update();
        if now.len > offset {
            continue;
        }
        if now.state != Generation::Running {
            return (offset, true);
        }
        if progress.changed().await.is_err() {
            // The generator is gone and so is its entry's sender: whatever is there was read.
            return (offset, entry.progress().len == offset);
        }
    }
}

/// A stateless fetch (smart HTTP): `body` is the whole request; the answer's frames arrive on
/// the receiver. Refused only for load, before anything is sent.
pub async fn stateless(
    state: &Arc<State>,
    served: Served,
    client: Option<IpAddr>,
    version: Version,
    body: Vec<u8>,
    log: Request,
) -> Result<mpsc::Receiver<Bytes>, Refusal> {
    let share = super::enter(state, &served, client)?;
    if let Some(request) = state.pack_cache.as_ref().and_then(|_| protocol::fetch_key(version, &body)) {
        return cached(state, served, share, version, body, request, log).await;
    }
    // The slot is taken once the request is in: a client trickling its body holds none.
    let slot = super::slot(state).await?;
    let (mut sink, rx) = sink::pair(state.config.effective_stream_window(), state.config.io_timeout);
    let state = state.clone();
    tokio::task::spawn_blocking(move || {
        let _admitted = (share, slot);
        let mut log = log;
        let work = Work::start();
        let tally = Tally::default();
        let ctx = state.context(&served, None, &tally);
        let mut tee = Tapped { sink: &mut sink, copy: state.tap.as_ref().map(|_| Vec::new()), sent: 0 };
        let result = run(&ctx, version, Input::<&[u8]>::Stateless(&body), &mut tee);
        let (copy, sent) = (tee.copy.take(), tee.sent);
        // The tap hears of the exchange before its last frame leaves: once the client has the
        // whole response, the exchange is already recorded.
        if let (Some(tap), Some(response)) = (&state.tap, copy) {
            tap.exchange(Exchange {
                repo: served.name.clone(),
                service: "git-upload-pack",
                version,
                request: body.clone(),
                response,
                pack: result.as_ref().ok().copied().flatten(),
            });
        }
        let finished = sink.finish();
        let cpu = work.seconds();
        if let Ok(Some(stats)) = &result {
            state.metrics.generated(cpu);
            log.record.objects = Some(stats.entries);
        }
        let outcome = match super::ended(&served, result) {
            Outcome::Ok if finished.is_err() => Outcome::Disconnected,
            outcome => outcome,
        };
        log.counted(&tally);
        log.record.bytes = sent;
        log.record.cpu_ms = cpu * 1e3;
        log.finish(&state, outcome);
    });
    Ok(rx)
}

/// A stateless fetch through the pack cache: a finished answer is read back, one being generated
/// is read along, else this request generates it (in a transfer slot) for itself and for every
/// identical request that comes while it runs. Readers hold no transfer slot; their
/// repository's and client's limits still count them (`share`).
async fn cached(
    state: &Arc<State>,
    served: Served,
    share: Share,
    version: Version,
    body: Vec<u8>,
    request: FetchKey,
    mut log: Request,
) -> Result<mpsc::Receiver<Bytes>, Refusal> {
    let cache = state.pack_cache.as_ref().expect("only with a cache");
    let of = served.clone();
    let key = match tokio::task::spawn_blocking(move || key(&of, &request)).await {
        Ok(Ok(key)) => key,
        Ok(Err(err)) => return Err(Refusal::Failed(err.to_string())),
        Err(_) => return Err(Refusal::Failed("internal error".into())),
    };
    let (entry, outcome) = match cache.find(&key) {
        Some(f) => found(f),
        None => {
            let slot = super::slot(state).await?;
            match cache.start(key) {
                // Another request started it while this one waited for its slot.
                Err(f) => found(f),
                Ok(entry) => {
                    let (state, generated) = (state.clone(), entry.clone());
                    tokio::task::spawn_blocking(move || {
                        let entry = generated;
                        let _slot = slot;
                        let cache = state.pack_cache.as_ref().expect("only with a cache");
                        let tally = Tally::default();
                        let ctx = state.context(&served, None, &tally);
                        let _ = generate(&state, cache, &entry, &tally, &served, || {
                            run(&ctx, version, Input::<&[u8]>::Stateless(&body), &mut cache.writer(&entry))
                        });
                    });
                    (entry, "miss")
                }
            }
        }
    };
    state.metrics.cache(outcome);
    log.record.cache = Some(outcome);
    let (tx, rx) = mpsc::channel(1);
    let state = state.clone();
    tokio::spawn(async move {
        let _share = share;
        let (sent, complete) = read_entry(&entry, &mut Channel { tx, stall: state.config.io_timeout }).await;
        log.record.bytes = sent;
        let generated = *entry.generated.lock().expect("not poisoned");
        log.record.objects = generated.stats.map(|s| s.entries);
        (log.record.wants, log.record.haves) = (generated.wants, generated.haves);
        if outcome == "miss" {
            log.record.cpu_ms = generated.cpu_seconds * 1e3;
        }
        let outcome = match (complete, entry.progress().state) {
            (true, Generation::Done) => Outcome::Ok,
            (true, _) => Outcome::Failed,
            (false, _) => Outcome::Disconnected,
        };
        log.finish(&state, outcome);
    });
    Ok(rx)
}

/// upload-pack as it is answered without the cache, over any transport: v2 commands or the v0/v1
/// negotiation, by `version`; each request (a stateless round, a v2 command, a v0 connection)
/// with a session of its own ([`Session`]).
pub fn run<R: std::io::Read, W: Write>(
    ctx: &Context<'_>,
    version: Version,
    input: Input<'_, R>,
    out: W,
) -> Result<Option<Stats>, ServeError> {
    match (input, version) {
        (Input::Stateless(body), Version::V2) => protocol::v2::serve(ctx, &mut Session::open(ctx)?, body, out),
        (Input::Stateless(body), _) => protocol::v0::upload_pack(ctx, &mut Session::open(ctx)?, body, out),
        (Input::Stateful(input), Version::V2) => {
            let settings = RefSnapshot::settings_only(&ctx.served.repo.to_thread_local());
            protocol::v2::serve_stateful(ctx, &settings, input, out, &mut |request, out| {
                protocol::v2::serve_request(ctx, &mut Session::open(ctx)?, request, out)
            })
        }
        (Input::Stateful(input), v0_or_v1) => {
            protocol::v0::serve_stateful(ctx, &mut Session::open(ctx)?, v0_or_v1, input, out)
        }
    }
}

/// upload-pack over a connection, on the calling blocking thread: v2's commands one by one (a
/// `fetch` that says `done` through the pack cache when it is on), or v0's conversation.
pub fn connection<R: std::io::Read, W: Write>(
    state: &State,
    ctx: &Context<'_>,
    version: Version,
    input: R,
    out: W,
) -> Result<Fetched, ServeError> {
    if version != Version::V2 {
        // v0's negotiation is stateful: its answers depend on the rounds before, so a connection
        // is answered as it goes, without the cache.
        let stats = protocol::v0::serve_stateful(ctx, &mut Session::open(ctx)?, version, input, out)?;
        return Ok(Fetched { objects: stats.map(|s| s.entries), cache: None });
    }
    let mut fetched = Fetched::default();
    let settings = RefSnapshot::settings_only(&ctx.served.repo.to_thread_local());
    // Each command gets a session of its own: the refs as they are when it comes.
    let stats = protocol::v2::serve_stateful(ctx, &settings, input, out, &mut |request, out| {
        let cacheable = state.pack_cache.as_ref().zip(protocol::v2::fetch_key(request));
        let Some((cache, fetch)) = cacheable else {
            return protocol::v2::serve_request(ctx, &mut Session::open(ctx)?, request, out);
        };
        let (stats, outcome) = through_cache(state, cache, ctx, &fetch, out, |out| {
            protocol::v2::serve_request(ctx, &mut Session::open(ctx)?, request, out)
        })?;
        fetched.cache = Some(outcome);
        Ok(stats)
    })?;
    fetched.objects = stats.map(|s| s.entries).or(fetched.objects);
    Ok(fetched)
}

/// Answer one cacheable request of a connection through the cache: read an entry back or
/// along, or generate it here — into the entry and to this client at once.
fn through_cache<W: Write>(
    state: &State,
    cache: &PackCache,
    ctx: &Context<'_>,
    request: &FetchKey,
    out: &mut W,
    run: impl FnOnce(&mut dyn Write) -> Result<Option<Stats>, ServeError>,
) -> Result<(Option<Stats>, &'static str), ServeError> {
    let key = key(ctx.served, request)?;
    let (entry, outcome) = match cache.find(&key) {
        Some(f) => found(f),
        None => match cache.start(key) {
            Err(f) => found(f),
            Ok(entry) => {
                state.metrics.cache("miss");
                let mut tee = Tee { entry: cache.writer(&entry), client: &mut *out, gone: false };
                let stats = generate(state, cache, &entry, ctx.tally, ctx.served, || run(&mut tee))?;
                if tee.gone {
                    return Err(ServeError::Disconnected);
                }
                return Ok((stats, "miss"));
            }
        },
    };
    state.metrics.cache(outcome);
    let runtime = tokio::runtime::Handle::current();
    let (_, complete) = runtime.block_on(read_entry(&entry, &mut Blocking(out)));
    let generated = *entry.generated.lock().expect("not poisoned");
    ctx.tally.asked(generated.wants, generated.haves);
    match (complete, entry.progress().state) {
        (true, Generation::Done) => Ok((generated.stats, outcome)),
        (true, _) => Err(ServeError::Io(std::io::Error::other("the generation this fetch read along failed"))),
        (false, _) => Err(ServeError::Disconnected),
    }
}

/// The generator's writes over a connection: into the entry, and to its own client while it
/// reads; a client gone leaves the entry filling for the others.
struct Tee<'a, E: Write, W: Write> {
    entry: E,
    client: &'a mut W,
    gone: bool,
}

impl<E: Write, W: Write> Write for Tee<'_, E, W> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.entry.write_all(data)?;
        if !self.gone && self.client.write_all(data).is_err() {
            self.gone = true;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.entry.flush()?;
        if !self.gone && self.client.flush().is_err() {
            self.gone = true;
        }
        Ok(())
    }
}

/// Writes through to the sink, counting, and keeping a copy for the tap when there is one.
struct Tapped<'a> {
    sink: &'a mut sink::ChannelSink,
    copy: Option<Vec<u8>>,
    sent: u64,
}

impl Write for Tapped<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let n = self.sink.write(data)?;
        self.sent += n as u64;
        if let Some(copy) = &mut self.copy {
            copy.extend_from_slice(&data[..n]);
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.sink.flush()
    }
}
