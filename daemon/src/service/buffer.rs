//! Transfer buffers, for every transport: a response is written into pack-cache entries and
//! sent from them, so the transfer slot and the blocking thread that wrote it are given back
//! when it is written, not when the client has read it. A slow reader costs buffer space (the
//! cache's memory budget, then its spill directory), not a slot or a thread.
//!
//! - [`Outbox`]: the writing side, on the blocking thread. What it is given goes into a private
//!   entry (`PackCache::private`) — a range of a pack file as the range, not a copy
//!   ([`crate::pack_ranges`]); a cached response ([`Outbox::splice`]) goes out as the shared
//!   entry itself, read along while it is generated. The entries form one ordered queue.
//! - [`send`]: the sending side, an async task of the transport: each entry of the queue from its
//!   start to its end, to an [`Outlet`], as fast as the client takes it.

use std::io::{IoSlice, Write};
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
        self.put_through_with(&[])
    }

    /// What was gathered and then `range` (a range of a pack file, or nothing), into the private
    /// entry in one write: readers are told once.
    fn put_through_with(&mut self, range: &[u8]) -> std::io::Result<()> {
        if self.gathered.is_empty() && range.is_empty() {
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
        let mut writer = self.state.buffers.writer(&entry);
        let mut bufs = [IoSlice::new(&self.gathered), IoSlice::new(range)];
        let written = crate::pack_ranges::write_all_vectored(&mut writer, &mut bufs);
        self.gathered.clear();
        written
    }

    /// One slice of what is written: a range of a pack file goes into the entry as one (after
    /// what was gathered before it); other bytes are gathered.
    fn put(&mut self, data: &[u8]) -> std::io::Result<()> {
        if crate::pack_ranges::Range::kept(data).is_some() {
            return self.put_through_with(data);
        }
        if self.gathered.len() + data.len() > GATHER {
            self.put_through()?;
        }
        self.gathered.extend_from_slice(data);
        if data.len() >= GATHER {
            // Large writes go through as they are (a pack's packets), not copied twice.
            self.put_through()?;
        }
        Ok(())
    }

    /// The server's stop cancelled what was left in flight: the writer stops here.
    fn cancelled(&mut self) -> std::io::Result<()> {
        if self.state.life.is_cancelled() {
            self.gathered.clear();
            return Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "the server is shutting down"));
        }
        Ok(())
    }
}

impl Write for Outbox {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.cancelled()?;
        self.put(data)?;
        Ok(data.len())
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> std::io::Result<usize> {
        self.cancelled()?;
        for buf in bufs {
            self.put(buf)?;
        }
        Ok(bufs.iter().map(|b| b.len()).sum())
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

    /// Send these chunks one after the other, as one write where the outlet can (a side-band
    /// packet's header and its payload from a pack file); false as for [`Self::send`].
    fn send_many(&mut self, chunks: Vec<Bytes>) -> impl Future<Output = bool> {
        async move {
            for chunk in chunks {
                if !self.send(chunk).await {
                    return false;
                }
            }
            true
        }
    }

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
    /// Bytes its entries wrote to the spill directory, and bytes of it that were ranges of pack
    /// files (sent from the files).
    pub spilled: u64,
    pub ranged: u64,
}

impl Sent {
    /// Into a request's record: what was sent and where it waited.
    pub fn record(&self, record: &mut crate::access_log::Record) {
        record.bytes = self.bytes;
        record.buffer = Some(self.held);
        (record.spill_bytes, record.ranged_bytes) = (Some(self.spilled), Some(self.ranged));
    }
}

/// Send the queue's entries in order, each from its start to its end, to `outlet`; stops at
/// the first the client does not take (the queue is dropped: the writing side stops too).
pub async fn send(mut queue: Queue, outlet: &mut impl Outlet) -> Sent {
    let mut sent = Sent { bytes: 0, complete: true, held: "memory", spilled: 0, ranged: 0 };
    while let Some(entry) = queue.recv().await {
        let (bytes, complete) = read_entry(&entry, outlet).await;
        sent.bytes += bytes;
        if entry.held_in() == "disk" {
            sent.held = "disk";
        }
        sent.spilled += entry.spilled();
        sent.ranged += entry.ranged();
        if !complete || entry.progress().state != Generation::Done {
            sent.complete = false;
            // A writer waiting for its reader to make room must not wait for a reader gone.
            entry.consumed_to(u64::MAX);
            break;
        }
    }
    sent
}

/// A chunk this short is sent together with the next one ([`read_entry`]).
const SHORT_CHUNK: usize = 1024;

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
            let mut len = chunk.len() as u64;
            // A short chunk (a packet's header before its payload from a pack file) leaves with
            // what follows it, when that is there already: not as a segment of its own.
            let next = match chunk.len() < SHORT_CHUNK {
                true => entry.read_at(offset + len, outlet.max_chunk().saturating_sub(chunk.len()).max(1)),
                false => Ok(Bytes::new()),
            };
            let sent = match next {
                Ok(next) if !next.is_empty() => {
                    len += next.len() as u64;
                    outlet.send_many(vec![chunk, next]).await
                }
                _ => outlet.send(chunk).await,
            };
            if !sent {
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
