//! The spool: one entry's bytes, written once by its generator and read along by any number of
//! readers, each at its own offset — in memory within the cache's budget, spilled to an
//! unlinked file past it, pack-file ranges kept as ranges ([`super::store`]); a private entry's
//! writer waits for its one reader when both budgets are full. The keyed cache that shares
//! entries between identical requests is [`super::PackCache`].

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;

use super::PackCache;
use super::store::{CHUNK, Data};
use crate::pack_ranges::Range;

/// How far an entry has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub len: u64,
    pub state: Generation,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    Running,
    Done,
    /// The generator ended with an error; what it wrote (an error message on band 3) is all
    /// there is, and the entry is not kept.
    Failed,
}

/// Readers are told about new bytes every this many (and for a short write, and at the end).
pub(super) const TELL_EVERY: u64 = 256 * 1024;

/// A write this short is told to readers at once: it is a progress line or the end of a burst.
pub(super) const SHORT_WRITE: usize = 1024;

/// What generating an entry took and made.
#[derive(Debug, Clone, Copy, Default)]
pub struct Generated {
    pub stats: Option<crate::pack::Stats>,
    pub wants: usize,
    pub haves: usize,
    pub cpu_seconds: f64,
}

pub struct Entry {
    pub(super) data: Mutex<Data>,
    pub(super) progress: tokio::sync::watch::Sender<Progress>,
    pub(super) finished_at: Mutex<Option<Instant>>,
    /// What the generator reported, for whoever reads the entry (the access log); set before
    /// the entry is finished.
    pub generated: Mutex<Generated>,
    /// A transfer buffer ([`PackCache::private`]): one reader, whose passed bytes are given back.
    pub(super) private: bool,
    /// How far the one reader of a private entry has taken it.
    pub(super) consumed: AtomicU64,
    pub(super) used: Arc<Used>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        let (memory, disk) = self.data.get_mut().map(|d| (d.held_memory, d.held_disk)).unwrap_or((0, 0));
        self.used.memory.fetch_sub(memory, Ordering::Relaxed);
        self.used.disk.fetch_sub(disk, Ordering::Relaxed);
        self.used.freed();
    }
}

impl Entry {
    pub fn progress(&self) -> Progress {
        *self.progress.borrow()
    }

    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<Progress> {
        self.progress.subscribe()
    }

    /// Up to `max` bytes from `offset`; empty when none are there yet.
    pub fn read_at(&self, offset: u64, max: usize) -> std::io::Result<Bytes> {
        let mut data = self.data.lock().expect("not poisoned");
        let n = (data.len.saturating_sub(offset)).min(max as u64) as usize;
        if n == 0 {
            return Ok(Bytes::new());
        }
        data.read(offset, n)
    }

    /// The whole response, once finished.
    pub fn read_all(&self) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            let piece = self.read_at(out.len() as u64, usize::MAX)?;
            if piece.is_empty() {
                return Ok(out);
            }
            out.extend_from_slice(&piece);
        }
    }

    /// The reader has taken everything before `offset` (`u64::MAX`: it left). A private entry
    /// gives back the memory windows wholly before it (slices handed out keep their window until
    /// they are dropped) and wakes a writer waiting for room (one whose reader left fails with
    /// "client disconnected"); a shared entry's bytes are everyone's and stay.
    pub fn consumed_to(&self, offset: u64) {
        if !self.private {
            return;
        }
        self.consumed.fetch_max(offset, Ordering::Relaxed);
        let mut data = self.data.lock().expect("not poisoned");
        let passed = (data.stored_before(offset) / CHUNK as u64) as usize;
        let mut given_back = 0u64;
        for window in data.memory.iter_mut().take(passed) {
            if window.take().is_some() {
                given_back += CHUNK as u64;
            }
        }
        let given_back = given_back.min(data.held_memory);
        data.held_memory -= given_back;
        drop(data);
        self.used.memory.fetch_sub(given_back, Ordering::Relaxed);
        self.used.freed();
    }

    /// Where its bytes are held now: `memory` or `disk`.
    pub fn held_in(&self) -> &'static str {
        if self.data.lock().expect("not poisoned").on_disk() { "disk" } else { "memory" }
    }

    /// Bytes written to its file in the spill directory (moved there from memory, or appended).
    pub fn spilled(&self) -> u64 {
        self.data.lock().expect("not poisoned").spilled
    }

    /// Bytes of it that are ranges of pack files, sent from the files and never stored.
    pub fn ranged(&self) -> u64 {
        self.data.lock().expect("not poisoned").ranged
    }
}

/// Bytes all entries of one cache hold, and the writers of private entries waiting for room.
#[derive(Default)]
pub(super) struct Used {
    pub(super) memory: AtomicU64,
    pub(super) disk: AtomicU64,
    /// Bumped and notified whenever bytes are given back.
    pub(super) freed: Mutex<u64>,
    pub(super) room: std::sync::Condvar,
}

impl Used {
    pub(super) fn freed(&self) {
        *self.freed.lock().expect("not poisoned") += 1;
        self.room.notify_all();
    }
}

pub struct EntryWriter<'a> {
    pub(super) cache: &'a PackCache,
    pub(super) entry: &'a Arc<Entry>,
}

impl<'a> EntryWriter<'a> {
    /// Where `n` more bytes go: in memory while the memory budget has room, else to the spill
    /// directory while the disk budget has room. A shared entry goes on regardless (its readers
    /// are many and never hold the generator back); a private one waits for its reader to take
    /// bytes (which gives memory back) — or writes anyway once its reader has taken everything
    /// (a socket's back-pressure: never more than a window past the budgets) — up to the stall
    /// timeout.
    pub(super) fn room(&self, n: u64) -> std::io::Result<std::sync::MutexGuard<'a, Data>> {
        let entry: &'a Entry = self.entry;
        let mut data = entry.data.lock().expect("not poisoned");
        let settings = &self.cache.settings;
        let used = &self.cache.used;
        let deadline = Instant::now() + self.cache.stall;
        loop {
            // The one reader of a private entry left: nothing written now would be read.
            if self.entry.private && self.entry.consumed.load(Ordering::Relaxed) == u64::MAX {
                return Err(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "client disconnected"));
            }
            let memory_room = used.memory.load(Ordering::Relaxed) + n <= settings.memory_bytes;
            if !data.on_disk() && memory_room {
                return Ok(data);
            }
            let disk_room = |more: u64| used.disk.load(Ordering::Relaxed) + more <= settings.disk_bytes;
            if data.on_disk() && (disk_room(n) || !self.entry.private) {
                return Ok(data);
            }
            if !data.on_disk()
                && let Some(dir) = &settings.dir
            {
                // What is still held moves (windows given back stay holes in the file).
                let moved = data.held_memory;
                if disk_room(moved + n) || !self.entry.private {
                    data.spill(dir)?;
                    (data.held_memory, data.held_disk) = (0, moved);
                    used.memory.fetch_sub(moved, Ordering::Relaxed);
                    used.disk.fetch_add(moved, Ordering::Relaxed);
                    return Ok(data);
                }
            }
            if !self.entry.private || self.entry.consumed.load(Ordering::Relaxed) >= data.len {
                return Ok(data);
            }
            // Wait for the reader (or any other entry) to give bytes back; the reader is told of
            // everything written first (it may be waiting for bytes not yet told).
            let seen = *used.freed.lock().expect("not poisoned");
            let len = data.len;
            drop(data);
            self.entry.progress.send_if_modified(|p| {
                let moved = p.len != len;
                p.len = len;
                moved
            });
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::BrokenPipe,
                    "client disconnected: stalled past the I/O timeout with the transfer buffers full",
                ));
            }
            let freed = used.freed.lock().expect("not poisoned");
            let _ =
                used.room.wait_timeout_while(freed, left.min(std::time::Duration::from_millis(100)), |f| *f == seen);
            data = entry.data.lock().expect("not poisoned");
        }
    }
}

impl EntryWriter<'_> {
    /// Append `bytes` — a range of a pack file kept as one ([`Range::kept`]), or stored bytes,
    /// within the budgets — without telling the readers; the response's length before and after.
    pub(super) fn put(&mut self, bytes: &[u8]) -> std::io::Result<(u64, u64)> {
        if let Some(range) = Range::kept(bytes) {
            if self.entry.private && self.entry.consumed.load(Ordering::Relaxed) == u64::MAX {
                return Err(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "client disconnected"));
            }
            let mut data = self.entry.data.lock().expect("not poisoned");
            let before = data.len;
            data.append_range(range);
            self.cache.ranged.fetch_add(bytes.len() as u64, Ordering::Relaxed);
            return Ok((before, data.len));
        }
        let mut data = self.room(bytes.len() as u64)?;
        let (before, spilled) = (data.len, data.spilled);
        data.append(bytes)?;
        let n = bytes.len() as u64;
        if data.on_disk() {
            data.held_disk += n;
            self.cache.used.disk.fetch_add(n, Ordering::Relaxed);
        } else {
            data.held_memory += n;
            self.cache.used.memory.fetch_add(n, Ordering::Relaxed);
        }
        self.cache.spilled.fetch_add(data.spilled - spilled, Ordering::Relaxed);
        Ok((before, data.len))
    }

    /// Readers are woken every [`TELL_EVERY`] bytes or for a short write (a progress line, the
    /// last packet), not for every packet (a clone's ~270 for each of 32 readers); the
    /// generator's `flush` and `finish` wake them for the rest.
    pub(super) fn tell(&self, before: u64, len: u64) {
        if before / TELL_EVERY != len / TELL_EVERY || len - before < SHORT_WRITE as u64 {
            self.entry.progress.send_modify(|p| p.len = len);
        }
    }
}

impl Write for EntryWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let (before, len) = self.put(bytes)?;
        self.tell(before, len);
        Ok(bytes.len())
    }

    /// Every slice appended, the readers told once: a side-band packet's header and its payload
    /// (a range of a pack file) are one write, not a short one and another.
    fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        let (mut first, mut last, mut n) = (None, 0, 0);
        for buf in bufs.iter().filter(|b| !b.is_empty()) {
            let (before, len) = self.put(buf)?;
            first.get_or_insert(before);
            (last, n) = (len, n + buf.len());
        }
        if let Some(before) = first {
            self.tell(before, last);
        }
        Ok(n)
    }

    /// Tells the readers of everything written (a negotiation's answer waits for no more).
    fn flush(&mut self) -> std::io::Result<()> {
        let len = self.entry.data.lock().expect("not poisoned").len;
        self.entry.progress.send_if_modified(|p| {
            let moved = p.len != len;
            p.len = len;
            moved
        });
        Ok(())
    }
}
