//! Transfer buffers, for every transport: a response is written into pack-cache entries and
//! sent from them, so the transfer slot and the blocking thread that wrote it are given back
//! when it is written, not when the client has read it. A slow reader costs buffer space (the
//! cache's memory budget, then its spill directory), not a slot or a thread.
//!
//! - [`Outbox`]: the writing side, on the blocking thread. What it is given goes into a private
//!   entry (`PackCache::private`); a cached response ([`Outbox::splice`]) goes out as the shared
//!   entry itself, read along while it is generated. The entries form one ordered queue.
//! - [`send`]: the sending side, an async task of the transport: each entry of the queue from its
//!   start to its end, to an [`Outlet`], as fast as the client takes it.

use std::io::Write;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::pack_cache::{Entry, Generation};
use crate::session::State;

/// Writes are gathered up to this many bytes before they go into the entry (a negotiation's
/// lines and a pack's side-band packets leave in large pieces, and readers are woken per piece).
const GATHER: usize = 64 * 1024;

/// The writing side of a response: an ordered queue of entries.
pub struct Outbox {
    state: Arc<State>,
    entries: mpsc::UnboundedSender<Arc<Entry>>,
    /// The private entry being written, once something was.
    current: Option<Arc<Entry>>,
    gathered: Vec<u8>,
}

/// The queue's receiving end, for [`send`].
pub type Queue = mpsc::UnboundedReceiver<Arc<Entry>>;

fn gone() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::BrokenPipe, "client disconnected")
}

impl Outbox {
    pub fn new(state: Arc<State>) -> (Outbox, Queue) {
        let (entries, queue) = mpsc::unbounded_channel();
        (Outbox { state, entries, current: None, gathered: Vec::new() }, queue)
    }

    /// What comes next is the whole of `entry` (a shared response of the pack cache, finished or
    /// being generated); later writes follow it.
    pub fn splice(&mut self, entry: Arc<Entry>) -> std::io::Result<()> {
        self.put_through()?;
        self.close_current(true);
        self.entries.send(entry).map_err(|_| gone())
    }

    /// The private entry's writer is done: what it holds is all there is.
    fn close_current(&mut self, ok: bool) {
        if let Some(entry) = self.current.take() {
            self.state.buffers.finish(&entry, ok);
        }
    }

    /// What was gathered, into the private entry.
    fn put_through(&mut self) -> std::io::Result<()> {
        if self.gathered.is_empty() {
            return Ok(());
        }
        // The sending side stopped: the client is gone, nothing more is worth writing.
        if self.entries.is_closed() {
            self.gathered.clear();
            return Err(gone());
        }
        let entry = match &self.current {
            Some(entry) => entry.clone(),
            None => {
                let entry = self.state.buffers.private();
                self.entries.send(entry.clone()).map_err(|_| gone())?;
                self.current = Some(entry.clone());
                entry
            }
        };
        let written = self.state.buffers.writer(&entry).write_all(&self.gathered);
        self.gathered.clear();
        written
    }
}

impl Write for Outbox {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        // The server's stop cancelled what was left in flight: the writer stops here.
        if self.state.life.is_cancelled() {
            self.gathered.clear();
            return Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "the server is shutting down"));
        }
        if self.gathered.len() + data.len() > GATHER {
            self.put_through()?;
        }
        if data.len() >= GATHER {
            // Large writes go through as they are (a pack's packets), not copied twice.
            self.gathered.extend_from_slice(data);
            self.put_through()?;
        } else {
            self.gathered.extend_from_slice(data);
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.put_through()?;
        if let Some(entry) = &self.current {
            self.state.buffers.writer(entry).flush()?;
        }
        Ok(())
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        let ok = self.put_through().is_ok();
        self.close_current(ok);
    }
}

/// Where the sending side sends an entry's bytes.
pub trait Outlet {
    /// Send one chunk; false: the client is gone (or stalled past the I/O timeout).
    fn send(&mut self, chunk: Bytes) -> impl Future<Output = bool>;

    /// The largest chunk it takes at once.
    fn max_chunk(&self) -> usize {
        usize::MAX
    }
}

/// What the sending side did.
#[derive(Debug, Clone, Copy)]
pub struct Sent {
    pub bytes: u64,
    /// Every entry was sent to its end, and every one ended well.
    pub complete: bool,
    /// Where the response's bytes waited: `disk` if any of its entries spilled, else `memory`.
    pub held: &'static str,
}

/// Send the queue's entries in order, each from its start to its end, to `outlet`; stops at
/// the first the client does not take (the queue is dropped: the writing side stops too).
pub async fn send(mut queue: Queue, outlet: &mut impl Outlet) -> Sent {
    let mut sent = Sent { bytes: 0, complete: true, held: "memory" };
    while let Some(entry) = queue.recv().await {
        let (bytes, complete) = read_entry(&entry, outlet).await;
        sent.bytes += bytes;
        if entry.held_in() == "disk" {
            sent.held = "disk";
        }
        if !complete || entry.progress().state != Generation::Done {
            sent.complete = false;
            // A writer waiting for its reader to make room must not wait for a reader gone.
            entry.consumed_to(u64::MAX);
            break;
        }
    }
    sent
}

/// Send an entry from its start to `outlet`, as fast as it takes it, waiting for the generator
/// where it has caught up. The bytes sent, and whether the entry was sent to its end. Each
/// chunk is what the entry holds up to the end of its window (its bytes are mapped already: no
/// copy, no memory per chunk); what was taken is told to the entry (a private one gives its
/// memory back).
pub async fn read_entry(entry: &Entry, outlet: &mut impl Outlet) -> (u64, bool) {
    let mut progress = entry.subscribe();
    let mut offset = 0u64;
    loop {
        let chunk = match entry.read_at(offset, outlet.max_chunk()) {
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
            entry.consumed_to(offset);
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
