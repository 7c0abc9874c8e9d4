//! The single-flight pack cache (Gitaly's pack-objects cache, in-process): the whole response
//! to a fetch that ends its negotiation, keyed by repository, the state of its refs and packs,
//! the protocol version and the request's exact bytes. While one request generates it,
//! identical requests read the same bytes as they are produced (a late joiner from the start);
//! a finished response stays for `max_age` within the byte caps. Off unless configured.
//!
//! - **Readability**: everyone who may read a repository sees the same refs (hidden refs are a
//!   repository setting, part of the ref state in the key), so an entry is shared only by
//!   clients that see exactly the refs it was generated from; a client that may not read the
//!   repository never reaches the cache.
//! - **Slow readers**: the generator appends and never waits for a reader; each reader has its
//!   own offset. Bytes live in memory up to `memory_bytes` (all entries together); beyond it an
//!   entry moves to an unlinked file in `dir` (when given) and grows there.
//! - **Zero copy**: an entry is windows of memory (or of the file in `dir`) handed out as
//!   slices; the socket writer hands a memory slice's pages to the kernel, or sends a file's
//!   from the file (`transport::zero_copy`), so a reader costs the kernel's socket work, not a
//!   copy of the pack per client.
//! - **Invalidation**: a new ref or pack state is a new key; finished entries of the
//!   repository's older states are dropped when a request for the new state starts.
//! - **Transfer buffers**: the same entries, private ([`PackCache::private`]: in no table, no one
//!   else joins), are what every upload-pack writes its response into, so that a transfer's
//!   slot and thread are given back when its pack is written, not when its client has read it.
//!   A private entry gives back the memory its one reader has passed; past the memory budget it
//!   moves to an unlinked file in the spill directory, within the disk budget; past both, its
//!   writer waits for its reader (back-pressure, as a socket would) up to the stall timeout.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;

use crate::pack_ranges::Range;

/// How much the cache keeps, and where (`[pack_cache]`, `--pack-cache-*`).
pub type Settings = crate::config::PackCache;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    pub git_dir: PathBuf,
    /// Refs (and the settings hiding them) and the pack directory, fingerprinted.
    pub state: u64,
    pub version: u8,
    pub request: Vec<u8>,
}

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

/// An entry's bytes live in memory — anonymous windows the generator appends to, huge pages
/// past an entry's first 2 MiB — until the cache's memory is used up, then in an unlinked file
/// in `dir`, mapped. Readers are handed shared slices of a window, never copies: the socket
/// writer hands a memory slice's pages to the kernel (`vmsplice(2)`) and sends a file's by
/// `sendfile(2)` ([`mapped_at`]; `transport::zero_copy`). A written byte never changes and a
/// window is never reused, so a slice handed out shows what was written for as long as it lives.
const CHUNK: usize = 4 << 20;

/// An entry's first this many bytes are in small pages (most responses are small: a huge page
/// each would hold megabytes for kilobytes); the rest in huge ones, where the system has them
/// (`madvise`), so a reader's send takes a page reference per 2 MiB, not per 4 KiB.
const SMALL_PAGES: usize = 2 << 20;

/// Readers are told about new bytes every this many (and for a short write, and at the end).
const TELL_EVERY: u64 = 256 * 1024;

/// A write this short is told to readers at once: it is a progress line or the end of a burst.
const SHORT_WRITE: usize = 1024;

struct Data {
    /// The response's length: stored bytes and ranges together.
    len: u64,
    /// Bytes written into the entry's own store (memory windows, then its file): generated ones.
    stored: u64,
    /// Where each part of the response is, once a range of a pack file is part of it: empty
    /// while the response is stored bytes only (then a response offset is a store offset).
    spans: Vec<Span>,
    /// The entry's stored bytes while it is in memory: window `i` holds `i * CHUNK..`; a private
    /// entry's windows its reader has passed are given back (`None`).
    memory: Vec<Option<Arc<MemoryWindow>>>,
    /// Once the entry moved to `dir`.
    disk: Option<Disk>,
    /// Bytes of this entry counted in the cache's memory use, and in its disk use.
    held_memory: u64,
    held_disk: u64,
    /// Bytes written to the entry's file (moved there from memory, or appended): what spilled.
    spilled: u64,
    /// Bytes of the response that are ranges of pack files (kept as ranges, not stored).
    ranged: u64,
}

/// A part of a response: stored bytes from `stored_at` in the store, or a range of a pack file
/// (then `stored_at` is where the store stood when it was added).
struct Span {
    at: u64,
    len: u64,
    stored_at: u64,
    range: Option<Range>,
}

struct Disk {
    file: Arc<std::fs::File>,
    /// The file's length: whole windows, so a mapped window never reaches past the file's end.
    size: u64,
    windows: Vec<Option<Bytes>>,
}

impl Data {
    fn new() -> Data {
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

    fn on_disk(&self) -> bool {
        self.disk.is_some()
    }

    /// Append `bytes` to the store and to the response.
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.store(bytes)?;
        let n = bytes.len() as u64;
        match self.spans.last_mut() {
            None => {}
            Some(last) if last.range.is_none() => last.len += n,
            Some(_) => self.spans.push(Span { at: self.len, len: n, stored_at: self.stored, range: None }),
        }
        (self.len, self.stored) = (self.len + n, self.stored + n);
        Ok(())
    }

    /// Append a range of a pack file to the response: kept as the range, nothing stored.
    fn append_range(&mut self, range: Range) {
        if self.spans.is_empty() && self.len > 0 {
            self.spans.push(Span { at: 0, len: self.len, stored_at: 0, range: None });
        }
        let n = range.len() as u64;
        match self.spans.last_mut() {
            Some(Span { range: Some(last), len, .. }) if last.continued_by(&range) => {
                last.extend(range.len());
                *len += n;
            }
            _ => self.spans.push(Span { at: self.len, len: n, stored_at: self.stored, range: Some(range) }),
        }
        self.len += n;
        self.ranged += n;
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
    fn spill(&mut self, dir: &std::path::Path) -> std::io::Result<()> {
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
    fn stored_before(&self, offset: u64) -> u64 {
        match self.span_at(offset) {
            None if self.spans.is_empty() => offset.min(self.stored),
            None => 0,
            Some(span) if span.range.is_some() => span.stored_at,
            Some(span) => span.stored_at + (offset - span.at).min(span.len),
        }
    }

    /// `n` (≥ 1, there) bytes of the response from `offset`, up to the end of their span or window
    /// (a reader asks again for the rest).
    fn read(&mut self, offset: u64, n: usize) -> std::io::Result<Bytes> {
        let Some(span) = self.span_at(offset) else { return self.read_stored(offset, n) };
        let within = offset - span.at;
        let n = n.min((span.len - within) as usize);
        match &span.range {
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
struct MemoryWindow {
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

/// What generating an entry took and made.
#[derive(Debug, Clone, Copy, Default)]
pub struct Generated {
    pub stats: Option<crate::pack::Stats>,
    pub wants: usize,
    pub haves: usize,
    pub cpu_seconds: f64,
}

pub struct Entry {
    data: Mutex<Data>,
    progress: tokio::sync::watch::Sender<Progress>,
    finished_at: Mutex<Option<Instant>>,
    /// What the generator reported, for whoever reads the entry (the access log); set before
    /// the entry is finished.
    pub generated: Mutex<Generated>,
    /// A transfer buffer ([`PackCache::private`]): one reader, whose passed bytes are given back.
    private: bool,
    /// How far the one reader of a private entry has taken it.
    consumed: AtomicU64,
    used: Arc<Used>,
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
struct Used {
    memory: AtomicU64,
    disk: AtomicU64,
    /// Bumped and notified whenever bytes are given back.
    freed: Mutex<u64>,
    room: std::sync::Condvar,
}

impl Used {
    fn freed(&self) {
        *self.freed.lock().expect("not poisoned") += 1;
        self.room.notify_all();
    }
}

pub struct PackCache {
    settings: Settings,
    entries: Mutex<HashMap<Key, Arc<Entry>>>,
    used: Arc<Used>,
    /// Bytes ever written to files in the spill directory, and bytes kept as ranges of pack
    /// files, by every entry since the start.
    spilled: AtomicU64,
    ranged: AtomicU64,
    /// How long the writer of a private entry waits for room (its reader to take some bytes)
    /// before it gives up on the transfer.
    stall: std::time::Duration,
}

/// What a lookup found.
pub enum Found {
    /// A finished response.
    Hit(Arc<Entry>),
    /// One being generated: read along.
    Join(Arc<Entry>),
}

impl PackCache {
    pub fn new(settings: Settings) -> PackCache {
        Self::with_stall(settings, std::time::Duration::from_secs(120))
    }

    /// A cache whose private entries' writers wait up to `stall` for room.
    pub fn with_stall(settings: Settings, stall: std::time::Duration) -> PackCache {
        PackCache {
            settings,
            entries: Mutex::new(HashMap::new()),
            used: Arc::default(),
            spilled: AtomicU64::new(0),
            ranged: AtomicU64::new(0),
            stall,
        }
    }

    fn entry(&self, private: bool) -> Arc<Entry> {
        let (progress, _) = tokio::sync::watch::channel(Progress { len: 0, state: Generation::Running });
        Arc::new(Entry {
            data: Mutex::new(Data::new()),
            progress,
            finished_at: Mutex::new(None),
            generated: Mutex::new(Generated::default()),
            private,
            consumed: AtomicU64::new(0),
            used: self.used.clone(),
        })
    }

    /// A transfer buffer: an entry in no table, for one writer and one reader, within this
    /// cache's memory and disk budgets (see the module's header).
    pub fn private(&self) -> Arc<Entry> {
        self.entry(true)
    }

    fn found(entry: &Arc<Entry>) -> Option<Found> {
        match entry.progress().state {
            Generation::Running => Some(Found::Join(entry.clone())),
            Generation::Done => Some(Found::Hit(entry.clone())),
            Generation::Failed => None,
        }
    }

    /// The entry for `key`, if one is kept or being generated.
    pub fn find(&self, key: &Key) -> Option<Found> {
        let mut entries = self.entries.lock().expect("not poisoned");
        self.expire(&mut entries);
        entries.get(key).and_then(Self::found)
    }

    /// Start generating `key`, unless another request did meanwhile (then: that one).
    pub fn start(&self, key: Key) -> Result<Arc<Entry>, Found> {
        let mut entries = self.entries.lock().expect("not poisoned");
        self.expire(&mut entries);
        if let Some(found) = entries.get(&key).and_then(Self::found) {
            return Err(found);
        }
        // The repository's older states answer no request again.
        entries.retain(|k, e| {
            k.git_dir != key.git_dir || k.state == key.state || e.progress().state == Generation::Running
        });
        let entry = self.entry(false);
        entries.insert(key, entry.clone());
        Ok(entry)
    }

    /// Append to an entry being generated (its generator's writer).
    pub fn writer<'a>(&'a self, entry: &'a Arc<Entry>) -> EntryWriter<'a> {
        EntryWriter { cache: self, entry }
    }

    /// The generator is done: the entry is kept if it succeeded and fits, else dropped from
    /// the table (readers holding it read on).
    pub fn finish(&self, entry: &Arc<Entry>, ok: bool) {
        *entry.finished_at.lock().expect("not poisoned") = Some(Instant::now());
        let state = if ok { Generation::Done } else { Generation::Failed };
        // The length too: the last writes may not have been told ([`EntryWriter`]).
        let len = entry.data.lock().expect("not poisoned").len;
        entry.progress.send_modify(|p| (p.state, p.len) = (state, len));
        // A failed entry goes with the expired ones.
        if !entry.private {
            self.expire(&mut self.entries.lock().expect("not poisoned"));
        }
    }

    /// Drop what is too old, failed, or over the caps (oldest finished first). Entries being
    /// generated are never dropped here: their readers need them.
    fn expire(&self, entries: &mut HashMap<Key, Arc<Entry>>) {
        let now = Instant::now();
        let finished = |e: &Entry| *e.finished_at.lock().expect("not poisoned");
        entries.retain(|_, e| match e.progress().state {
            Generation::Running => true,
            Generation::Failed => false,
            Generation::Done => finished(e).is_some_and(|at| now.duration_since(at) < self.settings.max_age),
        });
        let sizes = |entries: &HashMap<Key, Arc<Entry>>| {
            let (mut memory, mut disk) = (0u64, 0u64);
            for e in entries.values().filter(|e| e.progress().state == Generation::Done) {
                let data = e.data.lock().expect("not poisoned");
                if data.on_disk() { disk += data.stored } else { memory += data.stored }
            }
            (memory, disk)
        };
        loop {
            let (memory, disk) = sizes(entries);
            if memory <= self.settings.memory_bytes && disk <= self.settings.disk_bytes {
                break;
            }
            let on_disk = disk > self.settings.disk_bytes;
            let oldest = entries
                .iter()
                .filter(|(_, e)| {
                    e.progress().state == Generation::Done && e.data.lock().expect("not poisoned").on_disk() == on_disk
                })
                .min_by_key(|(_, e)| finished(e))
                .map(|(k, _)| k.clone());
            match oldest {
                Some(key) => {
                    entries.remove(&key);
                }
                None => break,
            }
        }
    }

    /// Bytes held in memory now (entries kept and being generated, and dropped ones still read).
    pub fn memory_used(&self) -> u64 {
        self.used.memory.load(Ordering::Relaxed)
    }

    /// Bytes held in files in the spill directory now.
    pub fn disk_used(&self) -> u64 {
        self.used.disk.load(Ordering::Relaxed)
    }

    /// Bytes written to files in the spill directory since the start.
    pub fn spilled_total(&self) -> u64 {
        self.spilled.load(Ordering::Relaxed)
    }

    /// Bytes of responses kept as ranges of pack files since the start (sent from the files).
    pub fn ranged_total(&self) -> u64 {
        self.ranged.load(Ordering::Relaxed)
    }
}

pub struct EntryWriter<'a> {
    cache: &'a PackCache,
    entry: &'a Arc<Entry>,
}

impl<'a> EntryWriter<'a> {
    /// Where `n` more bytes go: in memory while the memory budget has room, else to the spill
    /// directory while the disk budget has room. A shared entry goes on regardless (its readers
    /// are many and never hold the generator back); a private one waits for its reader to take
    /// bytes (which gives memory back) — or writes anyway once its reader has taken everything
    /// (a socket's back-pressure: never more than a window past the budgets) — up to the stall
    /// timeout.
    fn room(&self, n: u64) -> std::io::Result<std::sync::MutexGuard<'a, Data>> {
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
    fn put(&mut self, bytes: &[u8]) -> std::io::Result<(u64, u64)> {
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
    fn tell(&self, before: u64, len: u64) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn key(state: u64, request: &[u8]) -> Key {
        Key { git_dir: "/r.git".into(), state, version: 2, request: request.to_vec() }
    }

    fn settings(memory_bytes: u64, dir: Option<PathBuf>) -> Settings {
        Settings { memory_bytes, dir, disk_bytes: 1 << 20, max_age: Duration::from_secs(60) }
    }

    #[test]
    fn identical_requests_join_the_one_being_generated_and_then_hit_it() {
        let cache = PackCache::new(settings(64 << 20, None));
        let entry = cache.start(key(1, b"a")).ok().unwrap();
        assert!(matches!(cache.find(&key(1, b"a")), Some(Found::Join(_))));
        assert!(matches!(cache.start(key(1, b"a")), Err(Found::Join(_))), "a second start joins");
        assert!(cache.find(&key(1, b"b")).is_none(), "another request is another key");
        cache.writer(&entry).write_all(b"hello").unwrap();
        assert_eq!(&entry.read_at(1, 3).unwrap()[..], b"ell");
        let big: Vec<u8> = (0..3 * CHUNK + 17).map(|i| (i % 251) as u8).collect();
        cache.writer(&entry).write_all(&big).unwrap();
        let piece = entry.read_at(CHUNK as u64 - 2, 10).unwrap();
        assert_eq!(&piece[..], &big[CHUNK - 7..CHUNK - 5], "a read stops at a chunk's end");
        let piece = entry.read_at(CHUNK as u64 + 3, 10).unwrap();
        assert_eq!(&piece[..], &big[CHUNK - 2..CHUNK + 8]);
        cache.finish(&entry, true);
        let Some(Found::Hit(hit)) = cache.find(&key(1, b"a")) else { panic!("kept") };
        assert_eq!(hit.read_all().unwrap(), [&b"hello"[..], &big].concat());
        assert!(cache.start(key(2, b"a")).is_ok(), "a new ref state is a new key");
        assert!(cache.find(&key(1, b"a")).is_none(), "and the old state's entries are dropped");
    }

    #[test]
    fn readers_are_told_of_new_bytes_every_256_kib_and_at_the_end_not_for_every_packet() {
        let cache = PackCache::new(settings(64 << 20, None));
        let entry = cache.start(key(1, b"a")).ok().unwrap();
        let packet = vec![1u8; 65520];
        let mut w = cache.writer(&entry);
        w.write_all(&packet).unwrap();
        assert_eq!(entry.progress().len, 0, "one packet is not told");
        assert_eq!(entry.read_at(0, usize::MAX).unwrap().len(), 65520, "but a reader asking gets it");
        for _ in 0..4 {
            w.write_all(&packet).unwrap();
        }
        assert_eq!(entry.progress().len, 5 * 65520, "past 256 KiB it is");
        let line = b"0023\x02Counting objects:  10% (1/10)\r";
        w.write_all(line).unwrap();
        assert_eq!(entry.progress().len, 5 * 65520 + line.len() as u64, "a progress line is told at once");
        w.write_all(&packet).unwrap();
        cache.finish(&entry, true);
        assert_eq!(entry.progress().len, 6 * 65520 + line.len() as u64, "the end tells the rest");
    }

    #[test]
    fn what_a_reader_is_handed_lies_in_the_entry_s_memory_or_its_file_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        for (memory, on_disk) in [(64 << 20, false), (0, true)] {
            let cache = PackCache::new(settings(memory, Some(dir.path().into())));
            let entry = cache.start(key(1, b"a")).ok().unwrap();
            let bytes: Vec<u8> = (0..CHUNK + 100).map(|i| (i % 253) as u8).collect();
            cache.writer(&entry).write_all(&bytes).unwrap();
            cache.finish(&entry, true);
            assert_eq!(entry.data.lock().unwrap().on_disk(), on_disk);
            let piece = entry.read_at(CHUNK as u64 - 10, 50).unwrap();
            assert_eq!(&piece[..], &bytes[CHUNK - 10..CHUNK]);
            match mapped_at(&piece[3..]).expect("a slice of a window") {
                Mapped::Memory => assert!(!on_disk, "a memory slice of an entry in memory"),
                Mapped::File(file, offset) => {
                    assert!(on_disk, "a file slice of an entry on disk");
                    assert_eq!(offset, CHUNK as u64 - 7);
                    let mut back = [0u8; 7];
                    file.read_exact_at(&mut back, offset).unwrap();
                    assert_eq!(back, piece[3..]);
                }
            }
            assert!(mapped_at(&bytes[..10]).is_none(), "other memory is not");
        }
    }

    /// Huge pages past an entry's first 2 MiB, where the system gives them on advice: a
    /// reader's send then hands the kernel one page reference per 2 MiB, not 512.
    #[test]
    fn an_entry_in_memory_lies_in_huge_pages_past_its_first_two_mib() {
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
        if thp.contains("[never]") || thp.is_empty() {
            eprintln!("skipped: no transparent huge pages here ({thp:?})");
            return;
        }
        let cache = PackCache::new(settings(64 << 20, None));
        let entry = cache.start(key(1, b"a")).ok().unwrap();
        let bytes: Vec<u8> = (0..3 * CHUNK).map(|i| (i % 251) as u8).collect();
        cache.writer(&entry).write_all(&bytes).unwrap();
        cache.finish(&entry, true);
        let huge_kib = |address: usize| -> u64 {
            let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
            let mut inside = false;
            for line in smaps.lines() {
                if let Some((range, _)) = line.split_once(' ').filter(|(r, _)| r.contains('-') && !r.ends_with(':')) {
                    let (from, to) = range.split_once('-').unwrap();
                    let (from, to) = (usize::from_str_radix(from, 16).unwrap(), usize::from_str_radix(to, 16).unwrap());
                    inside = (from..to).contains(&address);
                } else if inside && let Some(kib) = line.strip_prefix("AnonHugePages:") {
                    return kib.trim().trim_end_matches(" kB").trim().parse().unwrap();
                }
            }
            0
        };
        // Counted per mapping, which the kernel may merge with a neighbour of the same kind:
        // at least the window's huge pages.
        let first = entry.read_at(0, 1).unwrap().as_ptr() as usize;
        let second = entry.read_at(CHUNK as u64, 1).unwrap().as_ptr() as usize;
        if thp.contains("[madvise]") {
            assert_eq!(huge_kib(first), 0, "an entry's first 2 MiB: small pages");
        }
        assert!(huge_kib(first + SMALL_PAGES) >= 2048, "the rest of the first window: a huge page");
        assert!(huge_kib(second) >= 4096, "later windows: huge pages");
        assert_eq!(entry.read_all().unwrap(), bytes);
    }

    #[test]
    fn a_failed_generation_is_not_kept() {
        let cache = PackCache::new(settings(1 << 20, None));
        let entry = cache.start(key(1, b"a")).ok().unwrap();
        cache.finish(&entry, false);
        assert!(cache.find(&key(1, b"a")).is_none());
    }

    #[test]
    fn past_the_memory_cap_an_entry_spills_to_disk_and_reads_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let cache = PackCache::new(settings(10, Some(dir.path().into())));
        let entry = cache.start(key(1, b"a")).ok().unwrap();
        let mut w = cache.writer(&entry);
        w.write_all(b"0123456").unwrap();
        assert_eq!(cache.memory_used(), 7);
        // A reader's window pads the memory file past the bytes; the spill copies the bytes only.
        assert_eq!(&entry.read_at(0, 3).unwrap()[..], b"012");
        w.write_all(b"789abcdef").unwrap();
        assert_eq!(cache.memory_used(), 0, "moved to a file");
        assert_eq!(&entry.read_at(5, 6).unwrap()[..], b"56789a");
        cache.finish(&entry, true);
        assert_eq!(entry.read_all().unwrap(), b"0123456789abcdef");
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "the file is unlinked");
    }

    #[test]
    fn finished_entries_past_the_cap_go_oldest_first() {
        let cache = PackCache::new(settings(8, None));
        for (i, req) in [b"a", b"b", b"c"].iter().enumerate() {
            let entry = cache.start(key(1, *req)).ok().unwrap();
            cache.writer(&entry).write_all(&[i as u8; 4]).unwrap();
            cache.finish(&entry, true);
        }
        assert!(cache.find(&key(1, b"a")).is_none(), "the oldest went");
        assert!(matches!(cache.find(&key(1, b"b")), Some(Found::Hit(_))));
        assert!(matches!(cache.find(&key(1, b"c")), Some(Found::Hit(_))));
    }
}
