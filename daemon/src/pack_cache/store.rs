//! The pack cache's store: an entry's bytes in memory windows, then in an unlinked file, with the
//! ranges of pack files it keeps among them, and where a slice handed to a reader lies (so the
//! socket writer sends it without a copy).

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;

use crate::pack_ranges::Range;

/// An entry's bytes live in memory — anonymous windows the generator appends to, huge pages
/// past an entry's first 2 MiB — until the cache's memory is used up, then in an unlinked file
/// in `dir`, mapped. Readers are handed shared slices of a window, never copies: the socket
/// writer hands a memory slice's pages to the kernel (`vmsplice(2)`) and sends a file's by
/// `sendfile(2)` ([`mapped_at`]; `transport::zero_copy`). A written byte never changes and a
/// window is never reused, so a slice handed out shows what was written for as long as it lives.
pub(super) const CHUNK: usize = 4 << 20;

/// An entry's first this many bytes are in small pages (most responses are small: a huge page
/// each would hold megabytes for kilobytes); the rest in huge ones, where the system has them
/// (`madvise`), so a reader's send takes a page reference per 2 MiB, not per 4 KiB.
pub(super) const SMALL_PAGES: usize = 2 << 20;

pub(super) struct Data {
    /// The response's length: stored bytes and ranges together.
    pub(super) len: u64,
    /// Bytes written into the entry's own store (memory windows, then its file): generated ones.
    pub(super) stored: u64,
    /// Where each part of the response is, once a range of a pack file is part of it: empty
    /// while the response is stored bytes only (then a response offset is a store offset).
    spans: Vec<Span>,
    /// The entry's stored bytes while it is in memory: window `i` holds `i * CHUNK..`; a private
    /// entry's windows its reader has passed are given back (`None`).
    pub(super) memory: Vec<Option<Arc<MemoryWindow>>>,
    /// Once the entry moved to `dir`.
    disk: Option<Disk>,
    /// Bytes of this entry counted in the cache's memory use, and in its disk use.
    pub(super) held_memory: u64,
    pub(super) held_disk: u64,
    /// Bytes written to the entry's file (moved there from memory, or appended): what spilled.
    pub(super) spilled: u64,
    /// Bytes of the response that are ranges of pack files (kept as ranges, not stored).
    pub(super) ranged: u64,
}

/// A part of a response: stored bytes from `stored_at` in the store, or a range of a pack file
/// (then `stored_at` is where the store stood when it was added), or a range framed into
/// packets: `head` stored bytes (a side-band packet's header) before each `piece` bytes of the
/// range, over and over (`len` whole packets; their headers lie one after another from
/// `stored_at`). A verbatim pack sent in side-band packets is then one span, not two per packet
/// (a 126 MB clone's ~3 900 spans were 160 KiB per client).
struct Span {
    at: u64,
    len: u64,
    stored_at: u64,
    range: Option<Range>,
    head: u64,
    piece: u64,
}

impl Span {
    fn stored(at: u64, len: u64, stored_at: u64) -> Span {
        Span { at, len, stored_at, range: None, head: 0, piece: 0 }
    }

    fn range(at: u64, stored_at: u64, range: Range) -> Span {
        Span { at, len: range.len() as u64, stored_at, range: Some(range), head: 0, piece: 0 }
    }
}

/// The longest run of stored bytes taken for a packet's header between two pieces of a range.
const MAX_HEAD: u64 = 16;

struct Disk {
    file: Arc<std::fs::File>,
    /// The file's length: whole windows, so a mapped window never reaches past the file's end.
    size: u64,
    windows: Vec<Option<Bytes>>,
}

impl Data {
    pub(super) fn new() -> Data {
        Data {
            len: 0,
            stored: 0,
            spans: Vec::new(),
            memory: Vec::new(),
            disk: None,
            held_memory: 0,
            held_disk: 0,
            spilled: 0,
            ranged: 0,
        }
    }

    pub(super) fn on_disk(&self) -> bool {
        self.disk.is_some()
    }

    /// Append `bytes` to the store and to the response.
    pub(super) fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.store(bytes)?;
        let n = bytes.len() as u64;
        match self.spans.last_mut() {
            None => {}
            Some(last) if last.range.is_none() => last.len += n,
            Some(_) => self.spans.push(Span::stored(self.len, n, self.stored)),
        }
        (self.len, self.stored) = (self.len + n, self.stored + n);
        Ok(())
    }

    /// Append a range of a pack file to the response: kept as the range, nothing stored.
    pub(super) fn append_range(&mut self, range: Range) {
        if self.spans.is_empty() && self.len > 0 {
            self.spans.push(Span::stored(0, self.len, 0));
        }
        let n = range.len() as u64;
        if !self.frame(&range) {
            match self.spans.last_mut() {
                Some(Span { range: Some(last), len, head: 0, .. }) if last.continued_by(&range) => {
                    last.extend(range.len());
                    *len += n;
                }
                _ => self.spans.push(Span::range(self.len, self.stored, range)),
            }
        }
        self.len += n;
        self.ranged += n;
    }

    /// Take `range` into a framed span when it is the next packet's piece: the spans end with a
    /// range it continues, of its length, and the packet's header (stored bytes) after that.
    /// The first two such packets become a framed span; later ones lengthen it.
    fn frame(&mut self, range: &Range) -> bool {
        let (k, n) = (self.spans.len(), range.len() as u64);
        if k < 2 {
            return false;
        }
        let (header, before) = (&self.spans[k - 1], &self.spans[k - 2]);
        let h = header.len;
        let continued = before.range.as_ref().is_some_and(|r| r.continued_by(range));
        if header.range.is_some() || h == 0 || h > MAX_HEAD || !continued {
            return false;
        }
        if before.head > 0 {
            if before.head != h || before.piece != n {
                return false;
            }
            debug_assert_eq!(header.stored_at, before.stored_at + before.len / (h + n) * h);
            self.spans.pop();
            let framed = self.spans.last_mut().expect("two spans");
            framed.range.as_mut().expect("a range").extend(range.len());
            framed.len += h + n;
            return true;
        }
        // The first packet: its header ends the stored span before its range.
        if before.len != n || k < 3 || self.spans[k - 3].range.is_some() || self.spans[k - 3].len < h {
            return false;
        }
        self.spans.pop();
        let first = self.spans.pop().expect("two spans");
        let stored = self.spans.last_mut().expect("three spans");
        stored.len -= h;
        let stored_at = stored.stored_at + stored.len;
        if stored.len == 0 {
            self.spans.pop();
        }
        let mut pieces = first.range.expect("a range");
        pieces.extend(range.len());
        self.spans.push(Span { at: first.at - h, len: 2 * (h + n), stored_at, range: Some(pieces), head: h, piece: n });
        true
    }

    /// How many parts the response is kept in (stored runs, ranges, framed ranges).
    #[cfg(test)]
    pub(super) fn spans(&self) -> usize {
        self.spans.len()
    }

    /// Write `bytes` at the end of the store (the caller moves `stored`).
    fn store(&mut self, mut bytes: &[u8]) -> std::io::Result<()> {
        if let Some(disk) = &mut self.disk {
            disk.file.write_all_at(bytes, self.stored)?;
            disk.size = disk.size.max(self.stored + bytes.len() as u64);
            self.spilled += bytes.len() as u64;
            return Ok(());
        }
        let mut at = self.stored as usize;
        while !bytes.is_empty() {
            let (index, within) = (at / CHUNK, at % CHUNK);
            if self.memory.len() <= index {
                self.memory.push(Some(MemoryWindow::new(index)?));
            }
            let n = bytes.len().min(CHUNK - within);
            let window =
                self.memory[index].as_ref().ok_or_else(|| std::io::Error::other("write to a released window"))?;
            // SAFETY: `within..within + n` lies in the window and past every byte written to it,
            // so no slice handed out covers it; the caller holds the entry's lock, the only
            // writer's.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), window.map.as_mut_ptr().add(within), n) };
            (bytes, at) = (&bytes[n..], at + n);
        }
        Ok(())
    }

    /// Move the entry's store to a new file in `dir`: what is in memory is copied over; readers
    /// holding memory slices read on from those.
    pub(super) fn spill(&mut self, dir: &std::path::Path) -> std::io::Result<()> {
        let file = crate::unlinked_file(dir, "pack-cache")?;
        let mut at = 0u64;
        for window in &self.memory {
            let n = (self.stored - at).min(CHUNK as u64) as usize;
            // A window given back was read: the file keeps a hole there.
            if let Some(window) = window {
                // SAFETY: the window's first `n` bytes were written and never change.
                file.write_all_at(unsafe { std::slice::from_raw_parts(window.map.as_ptr(), n) }, at)?;
                self.spilled += n as u64;
            }
            at += n as u64;
        }
        self.memory = Vec::new();
        self.disk = Some(Disk { file: Arc::new(file), size: self.stored, windows: Vec::new() });
        Ok(())
    }

    /// The span holding response offset `offset` (< `len`), when there are spans.
    fn span_at(&self, offset: u64) -> Option<&Span> {
        let i = self.spans.partition_point(|s| s.at <= offset).checked_sub(1)?;
        Some(&self.spans[i])
    }

    /// Where the store stands at response offset `offset`: the stored bytes before it.
    pub(super) fn stored_before(&self, offset: u64) -> u64 {
        match self.span_at(offset) {
            None if self.spans.is_empty() => offset.min(self.stored),
            None => 0,
            Some(span) if span.head > 0 => {
                let within = offset - span.at;
                let (packet, into) = (within / (span.head + span.piece), within % (span.head + span.piece));
                span.stored_at + packet * span.head + into.min(span.head)
            }
            Some(span) if span.range.is_some() => span.stored_at,
            Some(span) => span.stored_at + (offset - span.at).min(span.len),
        }
    }

    /// `n` (≥ 1, there) bytes of the response from `offset`, up to the end of their span or window
    /// (a reader asks again for the rest).
    pub(super) fn read(&mut self, offset: u64, n: usize) -> std::io::Result<Bytes> {
        let Some(span) = self.span_at(offset) else { return self.read_stored(offset, n) };
        let within = offset - span.at;
        let n = n.min((span.len - within) as usize);
        match &span.range {
            Some(range) if span.head > 0 => {
                let (packet, into) = (within / (span.head + span.piece), within % (span.head + span.piece));
                if into < span.head {
                    let at = span.stored_at + packet * span.head + into;
                    let n = n.min((span.head - into) as usize);
                    return self.read_stored(at, n);
                }
                let into = into - span.head;
                let n = n.min((span.piece - into) as usize);
                Ok(range.sub((packet * span.piece + into) as usize, n).bytes())
            }
            Some(range) => Ok(range.sub(within as usize, n).bytes()),
            None => {
                let at = span.stored_at + within;
                self.read_stored(at, n)
            }
        }
    }

    /// `n` (≥ 1, written) stored bytes from store offset `offset` (within one window).
    fn read_stored(&mut self, offset: u64, n: usize) -> std::io::Result<Bytes> {
        let (index, within) = ((offset / CHUNK as u64) as usize, (offset % CHUNK as u64) as usize);
        let n = n.min(CHUNK - within);
        let Some(disk) = &mut self.disk else {
            let window =
                self.memory[index].clone().ok_or_else(|| std::io::Error::other("read of a released window"))?;
            return Ok(Bytes::from_owner(Written { window, start: within, len: n }));
        };
        if disk.windows.len() <= index {
            disk.windows.resize(index + 1, None);
        }
        let window = match &disk.windows[index] {
            Some(window) => window.clone(),
            None => {
                let end = (index as u64 + 1) * CHUNK as u64;
                if disk.size < end {
                    disk.file.set_len(end)?;
                    disk.size = end;
                }
                let window = map(&disk.file, index as u64 * CHUNK as u64)?;
                disk.windows[index] = Some(window.clone());
                window
            }
        };
        Ok(window.slice(within..within + n))
    }
}

/// Where a slice handed to readers lies, so the socket writer can send it without a copy.
pub enum Mapped {
    /// In an entry's memory window: its pages may be handed to the kernel as they are.
    Memory,
    /// In the entry's file, at this offset.
    File(Arc<std::fs::File>, u64),
}

/// Where windows lie in memory: start address → (length, the file and offset of a file's).
type Windows = std::collections::BTreeMap<usize, (usize, Option<(Arc<std::fs::File>, u64)>)>;
static MAPPED: std::sync::RwLock<Windows> = std::sync::RwLock::new(std::collections::BTreeMap::new());

/// A window of anonymous memory, appended to by the generator and read by everyone.
pub(super) struct MemoryWindow {
    map: memmap2::MmapRaw,
}

impl MemoryWindow {
    /// Window `index` of an entry.
    fn new(index: usize) -> std::io::Result<Arc<MemoryWindow>> {
        let map = memmap2::MmapRaw::from(memmap2::MmapOptions::new().len(CHUNK).map_anon()?);
        let small = SMALL_PAGES.saturating_sub(index * CHUNK).min(CHUNK);
        if small < CHUNK {
            // Advice: where the system has no huge pages the window works the same in small ones.
            let _ = map.advise_range(memmap2::Advice::HugePage, small, CHUNK - small);
        }
        MAPPED.write().expect("not poisoned").insert(map.as_ptr() as usize, (CHUNK, None));
        Ok(Arc::new(MemoryWindow { map }))
    }
}

impl Drop for MemoryWindow {
    fn drop(&mut self) {
        MAPPED.write().expect("not poisoned").remove(&(self.map.as_ptr() as usize));
    }
}

/// Written bytes of a memory window, as handed to a reader.
struct Written {
    window: Arc<MemoryWindow>,
    start: usize,
    len: usize,
}

impl AsRef<[u8]> for Written {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: these bytes were written (under the entry's lock) before this was made and
        // are never written again; the window lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.window.map.as_ptr().add(self.start), self.len) }
    }
}

/// A mapped window of an entry's file; its slices are [`Bytes`], and it is unmapped when the
/// last is dropped.
struct Window {
    map: memmap2::Mmap,
}

impl AsRef<[u8]> for Window {
    fn as_ref(&self) -> &[u8] {
        &self.map
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        MAPPED.write().expect("not poisoned").remove(&(self.map.as_ptr() as usize));
    }
}

fn map(file: &Arc<std::fs::File>, offset: u64) -> std::io::Result<Bytes> {
    // SAFETY: the file is this entry's own (an unlinked file no one else can open) and only
    // grows by appending: no mapped byte is ever changed or truncated away.
    let map = unsafe { memmap2::MmapOptions::new().offset(offset).len(CHUNK).map(&**file)? };
    MAPPED.write().expect("not poisoned").insert(map.as_ptr() as usize, (CHUNK, Some((file.clone(), offset))));
    Ok(Bytes::from_owner(Window { map }))
}

/// Where `bytes` lie, when they are a slice of an entry's window (a reader's
/// [`Entry::read_at`] still held by the one writing it out), or of a pack file's map (a range
/// the entry kept: in that file).
pub fn mapped_at(bytes: &[u8]) -> Option<Mapped> {
    let at = bytes.as_ptr() as usize;
    let mapped = MAPPED.read().expect("not poisoned");
    if let Some((start, (len, file))) = mapped.range(..=at).next_back()
        && at + bytes.len() <= start + len
    {
        return Some(match file {
            None => Mapped::Memory,
            Some((file, offset)) => Mapped::File(file.clone(), offset + (at - start) as u64),
        });
    }
    drop(mapped);
    // A range of a pack file, sent from the file.
    let range = Range::of(bytes)?;
    let (file, offset) = range.file();
    Some(Mapped::File(file.clone(), offset))
}
