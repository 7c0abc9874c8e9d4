//! upload-pack as a service, for every transport: a fetch that ends its negotiation goes
//! through the single-flight pack cache when it is on (keyed by the repository, the state of its
//! refs and packs, and the typed request: [`crate::protocol::FetchKey`]), anything else is
//! answered by the codecs ([`run`]) with a session of its own ([`super::negotiation`]). Every
//! answer is written into the transfer buffers ([`super::buffer`]) on a blocking thread in a
//! transfer slot, and sent from them by the transport's async side without either: a stateless
//! request (smart HTTP) into a channel the response body takes, a connection (git://) command by
//! command until its pack.
//!
//! - **Generation**: one request generates an entry, in a transfer slot; identical requests
//!   read it along from its start and hold no slot. The generator writes the entry only; its
//!   own client reads it like the others (zero copy), and it goes on filling the entry if its
//!   client leaves.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::buffer::{self, Outbox, Outlet};
use super::negotiation::Session;
use super::{Outcome, Refusal, Request, Work};
use crate::pack::Stats;
use crate::pack_cache::{Entry, Found, Generated, Generation, Key, PackCache};
use crate::protocol::{self, FetchKey, Input, Version};
use crate::repo::{RefSnapshot, Served};
use crate::serve_error::ServeError;
use crate::session::Context;
use crate::session::{Exchange, State, Tally};

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

/// An async channel (a response body), each chunk of at most `window` bytes (the stream window:
/// one frame in the channel, one being written) accepted within `stall`.
struct Channel {
    tx: mpsc::Sender<Bytes>,
    window: usize,
    stall: std::time::Duration,
}

impl Outlet for Channel {
    async fn send(&mut self, chunk: Bytes) -> bool {
        matches!(tokio::time::timeout(self.stall, self.tx.send(chunk)).await, Ok(Ok(())))
    }

    /// Both frames put in the channel at once, so the body's writer finds them together and
    /// writes them in one call.
    async fn send_many(&mut self, chunks: Vec<Bytes>) -> bool {
        let permits = match tokio::time::timeout(self.stall, self.tx.reserve_many(chunks.len())).await {
            Ok(Ok(permits)) => permits,
            _ => return false,
        };
        for (permit, chunk) in permits.zip(chunks) {
            permit.send(chunk);
        }
        true
    }

    fn max_chunk(&self) -> usize {
        self.window
    }
}

/// Where the figures of a response's generation come from, once it is sent.
enum Figures {
    /// A shared entry of the cache (its generator recorded them on it).
    Entry(Arc<Entry>, &'static str),
    /// This request's own generation, told when it ends.
    Told(tokio::sync::oneshot::Receiver<(Generated, Outcome)>),
}

/// A stateless fetch (smart HTTP): `body` is the whole request; the answer's frames arrive on
/// the receiver. Refused only for load, before anything is sent. The answer is written into the
/// transfer buffers ([`super::buffer`]) in a transfer slot, and sent from them without one.
pub async fn stateless(
    state: &Arc<State>,
    served: Served,
    client: Option<IpAddr>,
    version: Version,
    body: Vec<u8>,
    mut log: Request,
) -> Result<mpsc::Receiver<Bytes>, Refusal> {
    let share = super::pipeline::enter(state, &served, client)?;
    let (mut outbox, queue) = Outbox::new(state.clone());
    let figures = match state.pack_cache.as_ref().and_then(|_| protocol::fetch_key(version, &body)) {
        Some(request) => {
            let (entry, outcome, waited) = cached(state, served, version, body, request).await?;
            log.record.wait_ms = waited.map(|w| w.as_secs_f64() * 1e3);
            state.metrics.cache(outcome);
            log.record.cache = Some(outcome);
            outbox.splice(entry.clone()).map_err(|err| Refusal::Failed(err.to_string()))?;
            drop(outbox);
            Figures::Entry(entry, outcome)
        }
        None => {
            // The slot is taken once the request is in: a client trickling its body holds none.
            let slot = super::pipeline::slot(state).await?;
            log.record.wait_ms = Some(slot.waited.as_secs_f64() * 1e3);
            let (tell, told) = tokio::sync::oneshot::channel();
            let state = state.clone();
            tokio::task::spawn_blocking(move || {
                let _slot = slot;
                let _ = tell.send(generate_stateless(&state, &served, version, &body, outbox));
            });
            Figures::Told(told)
        }
    };
    // Room for a packet's header and its payload at once ([`Outlet::send_many`]).
    let (tx, rx) = mpsc::channel(2);
    let state = state.clone();
    tokio::spawn(async move {
        let _share = share;
        let window = state.config.effective_stream_window();
        let sent = buffer::send(queue, &mut Channel { tx, window, stall: state.config.io_timeout }).await;
        sent.record(&mut log.record);
        let (generated, outcome) = match figures {
            Figures::Entry(entry, cache) => {
                let generated = *entry.generated.lock().expect("not poisoned");
                let ok = entry.progress().state == Generation::Done;
                (Some(generated).filter(|_| cache == "miss"), if ok { Outcome::Ok } else { Outcome::Failed })
            }
            Figures::Told(told) => match told.await {
                Ok((generated, outcome)) => (Some(generated), outcome),
                Err(_) => (None, Outcome::Failed),
            },
        };
        if let Some(generated) = generated {
            log.record.cpu_ms = generated.cpu_seconds * 1e3;
            log.record.objects = generated.stats.map(|s| s.entries);
            (log.record.wants, log.record.haves) = (generated.wants, generated.haves);
        }
        let outcome = match outcome {
            Outcome::Ok if !sent.complete => Outcome::Disconnected,
            outcome => outcome,
        };
        log.finish(&state, outcome);
    });
    Ok(rx)
}

/// Answer a stateless fetch into `outbox` on the calling (blocking) thread: what it made and
/// how it ended. With a tap, the whole answer is told to it before any of it goes out (once the
/// client has the response, the exchange is already recorded).
fn generate_stateless(
    state: &Arc<State>,
    served: &Served,
    version: Version,
    body: &[u8],
    mut outbox: Outbox,
) -> (Generated, Outcome) {
    let work = Work::start();
    let tally = Tally::default();
    let ctx = state.context(served, None, &tally);
    let result = match &state.tap {
        None => run(&ctx, version, Input::<&[u8]>::Stateless(body), &mut outbox),
        Some(tap) => {
            let mut response = Vec::new();
            let result = run(&ctx, version, Input::<&[u8]>::Stateless(body), &mut response);
            tap.exchange(Exchange {
                repo: served.name.clone(),
                service: "git-upload-pack",
                version,
                request: body.to_vec(),
                response: response.clone(),
                pack: result.as_ref().ok().copied().flatten(),
            });
            outbox.write_all(&response).map_err(ServeError::from).and(result)
        }
    };
    let flushed = outbox.flush();
    drop(outbox);
    let cpu_seconds = work.seconds();
    let stats = result.as_ref().ok().copied().flatten();
    if stats.is_some() {
        state.metrics.generated(cpu_seconds);
    }
    let (wants, haves) = tally.counts();
    let outcome = match super::ended(served, result) {
        Outcome::Ok if flushed.is_err() => Outcome::Disconnected,
        outcome => outcome,
    };
    (Generated { stats, wants, haves, cpu_seconds }, outcome)
}

/// A stateless fetch through the pack cache: a finished answer is read back, one being generated
/// is read along, else this request generates it (in a transfer slot) for itself and for every
/// identical request that comes while it runs. Readers hold no transfer slot; their
/// repository's and client's limits still count them. The entry, how it was found, and how long
/// this request waited for a slot (if it took one).
async fn cached(
    state: &Arc<State>,
    served: Served,
    version: Version,
    body: Vec<u8>,
    request: FetchKey,
) -> Result<(Arc<Entry>, &'static str, Option<std::time::Duration>), Refusal> {
    let cache = state.pack_cache.as_ref().expect("only with a cache");
    let of = served.clone();
    let key = match tokio::task::spawn_blocking(move || key(&of, &request)).await {
        Ok(Ok(key)) => key,
        Ok(Err(err)) => return Err(Refusal::Failed(err.to_string())),
        Err(_) => return Err(Refusal::Failed("internal error".into())),
    };
    if let Some(f) = cache.find(&key) {
        let (entry, outcome) = found(f);
        return Ok((entry, outcome, None));
    }
    let slot = super::pipeline::slot(state).await?;
    let waited = Some(slot.waited);
    match cache.start(key) {
        // Another request started it while this one waited for its slot.
        Err(f) => {
            let (entry, outcome) = found(f);
            Ok((entry, outcome, waited))
        }
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
            Ok((entry, "miss", waited))
        }
    }
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
        (Input::Stateless(body), Version::V2) => {
            protocol::v2::serve(&ctx.bounds(), &mut Session::open(ctx)?, body, out)
        }
        (Input::Stateless(body), _) => protocol::v0::upload_pack(&ctx.bounds(), &mut Session::open(ctx)?, body, out),
        (Input::Stateful(input), Version::V2) => {
            let settings = RefSnapshot::settings_only(&ctx.served.repo.to_thread_local());
            protocol::v2::serve_stateful(&ctx.bounds(), &settings, input, out, &mut |request, out| {
                protocol::v2::serve_request(&ctx.bounds(), &mut Session::open(ctx)?, request, out)
            })
        }
        (Input::Stateful(input), v0_or_v1) => {
            protocol::v0::serve_stateful(&ctx.bounds(), &mut Session::open(ctx)?, v0_or_v1, input, out)
        }
    }
}

/// upload-pack over a connection, on the calling blocking thread: v2's commands one by one (a
/// `fetch` that says `done` through the pack cache when it is on), or v0's conversation, written
/// into the connection's `outbox`.
pub fn connection<R: std::io::Read>(
    state: &State,
    ctx: &Context<'_>,
    version: Version,
    input: R,
    outbox: &mut Outbox,
) -> Result<Fetched, ServeError> {
    if version != Version::V2 {
        // v0's negotiation is stateful: its answers depend on the rounds before, so a connection
        // is answered as it goes, without the cache.
        let stats =
            protocol::v0::serve_stateful(&ctx.bounds(), &mut Session::open(ctx)?, version, input, &mut *outbox)?;
        return Ok(Fetched { objects: stats.map(|s| s.entries), cache: None });
    }
    let mut fetched = Fetched::default();
    let settings = RefSnapshot::settings_only(&ctx.served.repo.to_thread_local());
    // Each command gets a session of its own: the refs as they are when it comes.
    let stats = protocol::v2::serve_stateful(&ctx.bounds(), &settings, input, outbox, &mut |request, out| {
        let cacheable = state.pack_cache.as_ref().zip(protocol::v2::fetch_key(request));
        let Some((cache, fetch)) = cacheable else {
            return protocol::v2::serve_request(&ctx.bounds(), &mut Session::open(ctx)?, request, out);
        };
        let (stats, outcome) = through_cache(state, cache, ctx, &fetch, out, |out| {
            protocol::v2::serve_request(&ctx.bounds(), &mut Session::open(ctx)?, request, out)
        })?;
        fetched.cache = Some(outcome);
        Ok(stats)
    })?;
    fetched.objects = stats.map(|s| s.entries).or(fetched.objects);
    Ok(fetched)
}

/// Answer one cacheable request of a connection through the cache: the entry found, or one
/// generated here (on this thread, in its slot), goes out next from `outbox`, read along.
fn through_cache(
    state: &State,
    cache: &PackCache,
    ctx: &Context<'_>,
    request: &FetchKey,
    outbox: &mut &mut Outbox,
    run: impl FnOnce(&mut dyn Write) -> Result<Option<Stats>, ServeError>,
) -> Result<(Option<Stats>, &'static str), ServeError> {
    let key = key(ctx.served, request)?;
    let (entry, outcome) = match cache.find(&key) {
        Some(f) => found(f),
        None => match cache.start(key) {
            Err(f) => found(f),
            Ok(entry) => {
                state.metrics.cache("miss");
                outbox.splice(entry.clone())?;
                let stats = generate(state, cache, &entry, ctx.tally, ctx.served, || run(&mut cache.writer(&entry)))?;
                return Ok((stats, "miss"));
            }
        },
    };
    state.metrics.cache(outcome);
    outbox.splice(entry.clone())?;
    // A finished entry's figures are known; one being generated is read along by the sending
    // side, and this thread goes (a generation that fails shows as an incomplete send).
    let generated = *entry.generated.lock().expect("not poisoned");
    ctx.tally.asked(generated.wants, generated.haves);
    Ok((generated.stats, outcome))
}
