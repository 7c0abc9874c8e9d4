//! gixd — a git server on gitoxide.
//!
//! # Layout
//!
//! A request travels down these layers; each module owns one and says so in its header.
//!
//! - [`transport`] — bytes in, bytes out: smart HTTP on hyper (`transport::http`). It knows URLs,
//!   headers, body limits and streaming; it never parses a pkt-line.
//! - [`protocol`] — pkt-lines (`protocol::pkt`), the v0/v1 ref advertisement and stateless
//!   negotiation (`protocol::v0`), the v2 capability advertisement and its command table
//!   (`protocol::v2`), and what both share: which haves are common, when to say ready
//!   (`protocol::negotiate`).
//! - [`push`] — what a push does below the protocol: quarantine, object and ref checks, hooks,
//!   the ref transaction.
//! - [`select`] — object selection: what to send for some wants given the common commits;
//!   [`shallow`] — where a shallow request cuts history; [`filter`] — what a partial-clone
//!   filter leaves out; [`bitmap`] — git's pack bitmaps, for selection without a walk.
//! - [`pack`] — pack writing: gix-pack entries streamed through side-band to a sink.
//! - [`maintenance`] — repacking into one pack with a `.rev` and a `.bitmap`, in-process.
//! - [`repo`] — repository access: URL path to repository under the base path, export rules,
//!   the ref snapshot, and which objects a client may be sent.
//! - [`auth`] — who may read or push what over HTTP: tokens, grants, the decision per request.
//! - [`server`] — the accept loop and the runtime, sized by [`budget`] (the CPU budget read from
//!   the kernel: affinity and CFS quota); [`config`] — every limit, with why it exists;
//!   [`error`] — the typed errors, reported once at the edge; [`demo`] — the repository served
//!   when gixd starts with no configuration; [`tap`] — an observer of whole exchanges.

pub mod auth;
pub mod bitmap;
pub mod budget;
pub mod config;
pub mod demo;
pub mod error;
pub mod filter;
pub mod maintenance;
pub mod pack;
pub mod protocol;
pub mod push;
pub mod repo;
pub mod select;
pub mod server;
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
