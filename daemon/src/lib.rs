//! gixd — a git server on gitoxide.
//!
//! # Layout
//!
//! A request travels down these layers; each module owns one and says so in its header. The
//! list is the dependency order, top to bottom: a module uses only modules of its own layer or
//! of layers below it, and no two modules use each other (`tests/tests/layers.rs` checks both
//! against the imports).
//!
//! - [`cli`] — the command line's commands (`main.rs` lists them): each assembles its
//!   configuration and calls the layers below.
//! - [`server`] — the accept loops and the runtime, sized by [`budget`] (the CPU budget read
//!   from the kernel: affinity and CFS quota); [`demo`] — the repository served when gixd
//!   starts with no configuration.
//! - [`transport`] — bytes in, bytes out: smart HTTP on hyper (`transport::http`), Git LFS's
//!   HTTP API (`transport::lfs`), what both build responses from (`transport::http_common`), git://
//!   (`transport::git`), HTTPS's TLS (`transport::tls`), SSH in-process (`transport::ssh`) or under
//!   OpenSSH (`transport::shell`), both running commands through `transport::exec`, streamed
//!   bodies (`transport::stream`), a minimum receive rate
//!   (`transport::pace`), cached packs sent without a copy (`transport::zero_copy`). It
//!   knows URLs, headers, body limits and streaming; it never parses a request's pkt-lines
//!   (git://'s request line aside) and hands every request to [`service`].
//!   [`tap`] — a recorder of whole exchanges.
//! - [`service`] — one pipeline for every transfer (`service::pipeline`: authorized, admitted —
//!   its share, then a slot, taken there only — served, sent, settled and recorded once), and
//!   one entry per service: upload-pack (`service::upload`, through the single-flight pack cache
//!   for a fetch that ends its negotiation), receive-pack (`service::receive`), a connection's
//!   service (`service::connection`), Git LFS (`service::lfs`: its objects, verify and locks
//!   under the same grants; uploads under permits of their own, downloads under none); a
//!   transport only parses its framing and carries bytes;
//!   `service::buffer` holds what a blocking writer wrote until the transport has sent it.
//!   An upload-pack request runs as a session (`service::negotiation`: the repository's answers
//!   to the codecs — allowed wants, common haves and readiness by `service::negotiate`, the
//!   shallow boundary — and its pack, selected and written by `service::pack`: the pack-swap
//!   retry, the readable-set policy, the pack's options, progress, the log line);
//!   `service::receive::Push` and `service::archive` are receive-pack's and upload-archive's.
//! - [`protocol`] — pkt-lines (`protocol::pkt`) and side-band framing (`protocol::sideband`);
//!   upload-pack's codecs: the v0/v1 advertisement and negotiation (`protocol::v0`), v2's
//!   command table (`protocol::v2`) and what both share (`protocol::upload`) parse requests into
//!   typed values (by a `Grammar`: object format, allowed arguments) and encode the answers,
//!   asking every question about objects of the `protocol::upload::Upload` session they are
//!   given; receive-pack (`protocol::receive`, its push applied by a `Receiver`) and
//!   upload-archive (`protocol::archive`, its tree and archive an `Archiver`'s) likewise —
//!   `layers.rs` checks that no codec touches a repository.
//! - [`push`] — what a push does below the protocol: quarantine, object and ref checks, hooks,
//!   the ref transaction; [`maintenance`] — repacking into one pack with a `.rev` and a
//!   `.bitmap`, in-process, the geometric roll-up of pushed packs (`maintenance::geometric`), a
//!   run again when stock git repacked under it (`maintenance::rerun`), and
//!   unreachable objects kept in a cruft pack until `gc.pruneExpire` (`maintenance::prune`);
//!   [`mirror`] — a pull mirror's sync: its upstream's refs and pack through gix's client,
//!   handed to the push's ingest.
//! - [`session`] — what a request and the server share, whatever the transport: the server's
//!   state, a request's context, the protocol version asked for, what a tap is told;
//!   [`lifecycle`] — serving, draining and cancelled: the work in flight a stop waits for, the
//!   signals, what systemd is told;
//!   [`metrics`] — the Prometheus counters; [`access_log`] — a JSON line per request;
//!   [`pack_cache`] — one generated response shared by identical fetches; [`serve_error`] — what
//!   stops serving one request, made from the errors of the layers below (each returns its own).
//! - [`pack`] — pack writing: gix-pack entries for a selection, to any writer.
//! - [`select`] — object selection: what to send for some wants given the common commits, and
//!   which objects a client may read; [`shallow`] — where a shallow request cuts history;
//!   [`bitmap`] — git's pack bitmaps, for selection without a walk.
//! - [`repo`] — repository access: URL path to repository under the base path, export rules,
//!   the ref snapshot, where refs are kept (`repo::ref_store`: the files backend or a reftable
//!   stack, and a reftable transaction), per-repository caches (`repo::cache`), trailing checksums
//!   checked once per file (`repo::checked`), git's commit-graph read and
//!   verified for walks (`repo::commit_graph`); [`packs`] — the pack files, so an entry is copied
//!   without being inflated to find its end; [`pack_ranges`] — a pack file mapped with its
//!   descriptor, so that its bytes travel up the layers as ranges of the file, not copies; [`ref_locks`] — the ref lock files a push or a
//!   maintenance run holds, noted so that a kill does not leave them for good; [`lfs`] — a
//!   repository's Git LFS objects and locks as files, and the LFS API's JSON bodies.
//! - [`graph`] — the object graph: an object's children, peeling.
//! - [`config`] — every limit, with why it exists; [`error`] — the typed errors, each reported
//!   once, where the request's answer is written; [`filter`] — partial-clone filter specs and
//!   what they leave out; [`auth`] — tokens and grants: who may read or push what;
//!   [`client_text`] — client input quoted into errors, and error text as a client is shown it.

pub mod access_log;
pub mod auth;
pub mod bitmap;
pub mod budget;
pub mod cli;
pub mod client_text;
pub mod config;
pub mod demo;
pub mod error;
pub mod filter;
pub mod graph;
pub mod lfs;
pub mod lifecycle;
pub mod maintenance;
pub mod metrics;
pub mod mirror;
pub mod pack;
pub mod pack_cache;
pub mod pack_ranges;
pub mod packs;
pub mod protocol;
pub mod push;
pub mod ref_locks;
pub mod repo;
pub mod select;
pub mod serve_error;
pub mod server;
pub mod service;
pub mod session;
pub mod shallow;
pub mod tap;
pub mod transport;

/// `agent=` value: gixd and its version.
pub fn agent() -> String {
    format!("gixd/{}", env!("CARGO_PKG_VERSION"))
}

/// A temporary file in `dir` that no one else can see: created (named `gixd-<purpose>-…`), then
/// unlinked while open; it is gone when the handle is.
pub(crate) fn unlinked_file(dir: &std::path::Path, purpose: &str) -> std::io::Result<std::fs::File> {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.join(format!("gixd-{purpose}-{}-{n}", std::process::id()));
    let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(file)
}

/// A test hook (feature `test-hooks`, the test suite's build only): with
/// `GIXD_TEST_KILL_AT=<point>` in its environment, gixd kills itself (SIGKILL, as an operator's
/// `kill -9` or the OOM killer would) when it reaches that point, so a test can stop it inside a
/// window too short to hit by timing. Without the feature it is nothing.
#[cfg(feature = "test-hooks")]
pub fn kill_point(point: &str) {
    static AT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    if AT.get_or_init(|| std::env::var("GIXD_TEST_KILL_AT").ok()).as_deref() == Some(point) {
        tracing::warn!(point, "GIXD_TEST_KILL_AT: killing this process");
        // SAFETY: signalling ourselves; nothing after this runs.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
}

#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub fn kill_point(_point: &str) {}
