//! Pack writing: a selection becomes a pack through gix-pack (`iter_from_counts_with_delta_bases`,
//! `PackCopyAndBaseObjects`, one thread: the caller's), written to any `io::Write` (the protocol
//! layer frames it). Unselected delta bases are added, and thin-pack bases used, only where the
//! caller's `may_send` allows (the client may read them); thin ones only when the client has them.

use std::collections::HashMap;
use std::io::{self, Read, Write};

use gix_hash::ObjectId;
use gix_pack::data::output;
use gix_pack::data::output::entry::iter_from_counts::DeltaBase;

use crate::error::ServeError;
use crate::select::Selection;

/// Where a pack goes: its bytes, and git's progress lines for a client waiting for them
/// (`Counting objects:  45% (450/1000)\r` while a phase runs, `…100% (1000/1000), done.\n` at its
/// end). A file or a buffer takes no progress.
pub trait Sink: Write {
    fn progress(&mut self, _line: &str) -> io::Result<()> {
        Ok(())
    }
}

impl Sink for Vec<u8> {}
impl<W: Write> Sink for io::BufWriter<W> {}

/// git's pace for a running progress line: at most one per interval (a second, as git:
/// [`crate::config::Config::progress_interval`]).
pub(crate) struct Throttle {
    last: std::time::Instant,
    every: std::time::Duration,
}

impl Throttle {
    pub(crate) fn new(every: std::time::Duration) -> Self {
        Throttle { last: std::time::Instant::now(), every }
    }

    /// Whether a line is due now (and, if so, the next one an interval from now).
    pub(crate) fn due(&mut self) -> bool {
        let due = self.last.elapsed() >= self.every;
        if due {
            self.last = std::time::Instant::now();
        }
        due
    }
}

/// One phase of pack writing as git reports it: a line at most every interval ([`Throttle`])
/// while it runs, and one saying it is done.
struct Phase {
    title: &'static str,
    total: usize,
    done: usize,
    pace: Throttle,
}

impl Phase {
    fn new(title: &'static str, total: usize, every: std::time::Duration) -> Self {
        Phase { title, total, done: 0, pace: Throttle::new(every) }
    }

    fn line(&self, end: &str) -> String {
        let percent = (self.done * 100).checked_div(self.total).unwrap_or(100);
        format!("{}: {percent:3}% ({}/{}){end}", self.title, self.done, self.total)
    }

    fn advance<W: Sink>(&mut self, by: usize, out: &mut Hashed<'_, W>) -> Result<(), ServeError> {
        self.done += by;
        if self.pace.due() {
            out.out.progress(&self.line("\r")).map_err(gone)?;
        }
        Ok(())
    }

    /// Where a phase whose total is learnt as it goes stands (the search's "Compressing").
    fn at<W: Sink>(&mut self, done: usize, total: usize, out: &mut Hashed<'_, W>) -> Result<(), ServeError> {
        self.total = total;
        self.advance(done.saturating_sub(self.done), out)
    }

    fn finish<W: Sink>(mut self, out: &mut Hashed<'_, W>) -> Result<(), ServeError> {
        self.done = self.total;
        out.out.progress(&self.line(", done.\n")).map_err(gone)
    }
}

/// Verbatim reuse: the selection is every object of one pack (a bitmap said so) and maybe some
/// objects outside it (`extra`, pushed since the repack). The pack file's entries go out as they
/// are — no object decoded; the extra objects follow, as gix-pack gives them, a delta against an
/// object of the big pack referring to it by id (it is in this pack). Header count and trailer
/// checksum are written for the whole; without extras the file is sent as it is.
fn write_verbatim<W: Write>(
    repo: &gix::Repository,
    bitmap: &crate::bitmap::PackBitmap,
    objects: usize,
    extra: &[ObjectId],
    options: &Options,
    out: &mut W,
) -> Result<Stats, ServeError> {
    let hash = repo.object_hash();
    // The pack as the bitmap mapped it: a repack that renames or deletes the file meanwhile
    // does not take it from under this answer.
    let pack = &*bitmap.data;
    if pack.num_objects() as usize != objects {
        return Err(ServeError::corrupt_pack(format!("{}: not the pack the bitmap describes", bitmap.pack.display())));
    }
    let total = u32::try_from(objects + extra.len()).map_err(|_| ServeError::too_many_objects())?;
    let header = gix_pack::data::header::encode(pack.version(), total);
    // Without extras the file's own trailer is right; with them, everything is hashed anew.
    let mut answer = if extra.is_empty() { Hashed::unhashed(out) } else { Hashed::new(out, hash) };
    answer.emit(&header)?;
    let entries_end = if extra.is_empty() { pack.data_len() } else { pack.pack_end() } as u64;
    let mut at = 12u64;
    while at < entries_end {
        let end = (at + 256 * 1024).min(entries_end);
        let bytes = pack
            .entry_slice(at..end)
            .ok_or_else(|| ServeError::corrupt_pack(format!("{}: shorter than it says", bitmap.pack.display())))?;
        answer.emit(bytes)?;
        at = end;
    }
    let mut stats = Stats { entries: objects, copied: objects, verbatim: true, ..Stats::default() };
    if !extra.is_empty() {
        // A delta whose base is in the big pack refers to it by id (it is in this answer); any
        // other base is not, and its delta is re-deflated.
        let decide =
            |id: &gix_hash::oid| if bitmap.pos(id).is_some() { DeltaBase::Thin } else { DeltaBase::Recompress };
        // Their stored entries located in the pack files as read now, not by gix-odb: its
        // locations, taken while a repack swaps packs under its snapshot, can pair an index
        // with another pack (seen: a clone sent an entry that did not inflate, and gix-odb's
        // own "index must always be present" panic, with git gc running beside gixd).
        write_through_gix_pack(repo, extra.iter().copied(), decide, (options.packs)(), &mut answer, |_| {
            stats.entries += 1
        })?;
    }
    stats.bytes = answer.finish()?;
    Ok(stats)
}

/// gix-pack's pack entries for `ids`: looked up one by one in `repo`'s object database (its packs
/// kept mapped), their stored entries located in `packs` when given (without inflating each,
/// [`crate::packs`]), on the calling thread; a delta whose base is outside `ids` is what
/// `decide` says. Every pack gixd writes through gix-pack starts here.
#[allow(clippy::type_complexity, reason = "gix-pack's own iterator type, spelled where it is returned")]
pub(crate) fn gix_entries<I: Iterator<Item = ObjectId>, D: FnMut(&gix_hash::oid) -> DeltaBase>(
    repo: &gix::Repository,
    ids: I,
    allow_thin_pack: bool,
    compression: gix::zlib::Compression,
    packs: Option<std::sync::Arc<crate::packs::Packs>>,
    decide: D,
) -> Result<
    (
        usize,
        impl Iterator<Item = gix_error::Result<(gix_parallel::SequenceId, Vec<output::Entry>)>>
        + gix_parallel::Finalize<Reduce = output::entry::iter_from_counts::reduce::Statistics<gix_error::Error>>
        + use<I, D>,
    ),
    ServeError,
> {
    let counts: Vec<output::Count> =
        ids.map(|id| output::Count { id, entry_pack_location: output::count::PackLocation::NotLookedUp }).collect();
    // Deleted packs kept readable from here on, and the snapshot taken after that (a clone
    // collects its own): one taken before could pair a pack's index with whatever pack gix-odb
    // loads into its slot once a repack has freed it.
    let odb = {
        let mut odb = repo.objects.clone().into_inner();
        odb.prevent_pack_unload();
        odb.clone()
    };
    let options = output::entry::iter_from_counts::Options {
        thread_limit: Some(1),
        allow_thin_pack,
        compression,
        ..Default::default()
    };
    let progress = Box::new(gix_utils::progress::Discard);
    output::entry::iter_from_counts_with_delta_bases(
        counts,
        crate::packs::Locating { odb, packs },
        progress,
        options,
        Some(decide),
    )
    .map_err(ServeError::pack)
}

/// Objects gix-pack writes after the entries already in `answer`, looked up one by one; a delta
/// base outside them is what `decide` says (`Thin`: named by id, as it is in the answer or the
/// client has it; else re-deflated). `count` sees every entry written, for the statistics.
fn write_through_gix_pack<W: Write>(
    repo: &gix::Repository,
    ids: impl Iterator<Item = ObjectId>,
    decide: impl FnMut(&gix_hash::oid) -> DeltaBase,
    packs: Option<std::sync::Arc<crate::packs::Packs>>,
    answer: &mut Hashed<'_, W>,
    mut count: impl FnMut(&output::Entry),
) -> Result<(), ServeError> {
    let (_, chunks) = gix_entries(repo, ids, true, gix::zlib::Compression::DEFAULT, packs, decide)?;
    let mut written = EntryOffsets::default();
    for chunk in chunks {
        let (_, entries) = chunk.map_err(ServeError::pack)?;
        for entry in entries {
            if entry.is_invalid() {
                return Err(ServeError::MissingObject(entry.id));
            }
            written.emit(&entry, answer)?;
            count(&entry);
        }
    }
    Ok(())
}

/// Where each entry gix-pack generated went in the answer, so that an ofs-delta against an
/// earlier one (gix-pack names its base by index) gets its distance.
#[derive(Default)]
struct EntryOffsets {
    offsets: Vec<u64>,
    head: Vec<u8>,
}

impl EntryOffsets {
    /// Write every entry of `entries`, each base before its deltas (the search may have made an
    /// entry the base of an earlier one): in the given order, an entry whose base is not out yet
    /// waits for it. A delta against another entry is an ofs-delta where the client takes them,
    /// else it names its base by id; a thin one names the object the client has.
    fn emit_in_base_order<W: Write>(
        &mut self,
        entries: &[output::Entry],
        ofs_delta: bool,
        answer: &mut Hashed<'_, W>,
    ) -> Result<(), ServeError> {
        let by_id: HashMap<ObjectId, usize> = entries.iter().enumerate().map(|(i, e)| (e.id, i)).collect();
        let mut waiting: HashMap<usize, Vec<usize>> = HashMap::new();
        let mut at: Vec<u64> = vec![u64::MAX; entries.len()];
        let Some(mut entry) = entries.first().cloned() else { return Ok(()) };
        for first in 0..entries.len() {
            if let Some(base) = base_in_pack(&entries[first], &by_id)
                && at[base] == u64::MAX
            {
                waiting.entry(base).or_default().push(first);
                continue;
            }
            let mut ready = vec![first];
            while let Some(i) = ready.pop() {
                entry.clone_from(&entries[i]);
                if let Some(base) = base_in_pack(&entries[i], &by_id) {
                    entry.kind = if ofs_delta {
                        output::entry::Kind::DeltaRef { object_index: base }
                    } else {
                        output::entry::Kind::DeltaOid { id: entries[base].id }
                    };
                }
                let here = write_entry(&mut self.head, &entry, answer, |index| at[index])?;
                at[i] = here;
                self.offsets.push(here);
                if let Some(mut next) = waiting.remove(&i) {
                    next.reverse();
                    ready.extend(next);
                }
            }
        }
        if !waiting.is_empty() {
            return Err(ServeError::corrupt_pack("a delta's base was never written"));
        }
        Ok(())
    }

    /// Write `entry` (header and compressed data) to `answer`; an invalid entry (a missing
    /// object) is skipped, as gix-pack's own writer skips it.
    fn emit<W: Write>(&mut self, entry: &output::Entry, answer: &mut Hashed<'_, W>) -> Result<(), ServeError> {
        if entry.is_invalid() {
            self.offsets.push(u64::MAX);
            return Ok(());
        }
        let offsets = &self.offsets;
        let here = write_entry(&mut self.head, entry, answer, |index| offsets[index])?;
        self.offsets.push(here);
        Ok(())
    }
}

/// Write `entry`'s header (through the scratch `head`) and compressed data at the end of
/// `answer`; `at` says where an earlier entry, by index, starts (an ofs-delta's base). Returns
/// where this one starts.
fn write_entry<W: Write>(
    head: &mut Vec<u8>,
    entry: &output::Entry,
    answer: &mut Hashed<'_, W>,
    at: impl Fn(usize) -> u64,
) -> Result<u64, ServeError> {
    let here = answer.written;
    let header = entry.to_entry_header(gix_pack::data::Version::V2, |index| here - at(index));
    head.clear();
    header.write_to(entry.decompressed_size as u64, head)?;
    answer.emit(head)?;
    answer.emit(&entry.compressed_data)?;
    Ok(here)
}

/// How one entry of the bitmapped pack goes out when reused.
#[derive(Clone, Copy)]
enum Reuse {
    /// Its bytes as they are (a whole object, or a ref-delta whose base is sent or held).
    AsItIs,
    /// An ofs-delta whose base is reused before it: the same delta, its distance rewritten.
    Ofs { base: u32 },
    /// A delta whose base is sent later or held by the client: the same delta, naming its base by id.
    ByBase { base: u32 },
    /// Not reusable (its base is neither sent nor usable): written by gix-pack after the reused
    /// entries, re-deflated.
    Later,
}

/// Partial pack reuse (git's `reuse_partial_packfile_from_bitmap`): the selection's entries of
/// the bitmapped pack go out as their stored bytes, in pack order — no object is looked up or
/// inflated; an ofs-delta's distance is rewritten for the entries left out between it and its
/// base, a delta whose base is not reused names the base by id when the base is sent anyway or
/// the client has it (thin, where allowed and readable), and only a delta with no usable base
/// is handed to gix-pack (after the reused entries, with the selection's objects outside the
/// pack), which re-deflates it. Every byte is hashed anew for the trailer.
fn write_reused<W: Write>(
    repo: &gix::Repository,
    selection: &Selection,
    bitmap: &crate::bitmap::PackBitmap,
    positions: &[u32],
    options: &Options,
    may_send: &mut dyn FnMut(&gix_hash::oid) -> bool,
    out: &mut W,
) -> Result<Stats, ServeError> {
    let hash = repo.object_hash();
    let pack = &*bitmap.data;
    let mut sent = crate::bitmap::Bits::new(bitmap.len());
    for pos in positions {
        sent.set(*pos as usize);
    }
    let mut usable_thin = |id: &gix_hash::oid| {
        options.thin_pack && selection.client_has(id) && (selection.client_has_readably(id) || may_send(id))
    };
    // First the decisions (headers only), so the entry count is known before anything is written.
    // With each entry: where its data starts after the header, and its decompressed size.
    let mut plan: Vec<(u32, Reuse, usize, u64)> = Vec::with_capacity(positions.len());
    let mut reused = crate::bitmap::Bits::new(bitmap.len());
    let mut reused_count = 0usize;
    let mut later: Vec<ObjectId> = Vec::new();
    for &pos in positions {
        let (offset, _) = bitmap.entry_at(pos as usize);
        let entry = pack.entry(offset).map_err(ServeError::pack)?;
        let decision = match entry.header {
            gix_pack::data::entry::Header::OfsDelta { base_distance } => {
                let base = offset.checked_sub(base_distance).and_then(|o| bitmap.pos_at_offset(o)).map(|p| p as u32);
                match base {
                    Some(base) if reused.get(base as usize) && options.ofs_delta => Reuse::Ofs { base },
                    Some(base) if sent.get(base as usize) => Reuse::ByBase { base },
                    Some(base) if usable_thin(&bitmap.oid_at(base as usize)) => Reuse::ByBase { base },
                    _ => Reuse::Later,
                }
            }
            gix_pack::data::entry::Header::RefDelta { base_id } => match bitmap.pos(&base_id) {
                Some(base) if sent.get(base) => Reuse::AsItIs,
                _ if usable_thin(&base_id) => Reuse::AsItIs,
                _ => Reuse::Later,
            },
            _ => Reuse::AsItIs,
        };
        match decision {
            Reuse::Later => later.push(bitmap.oid_at(pos as usize)),
            _ => {
                reused.set(pos as usize);
                reused_count += 1;
            }
        }
        plan.push((pos, decision, (entry.data_offset - offset) as usize, entry.decompressed_size));
    }
    let extra = &selection.objects[positions.len()..];
    let total = u32::try_from(reused_count + later.len() + extra.len()).map_err(|_| ServeError::too_many_objects())?;
    let mut answer = Hashed::new(out, hash);
    let mut header = *b"PACK\0\0\0\x02\0\0\0\0";
    header[8..12].copy_from_slice(&total.to_be_bytes());
    answer.emit(&header)?;
    // Where each reused entry went in the answer, by pack position (bases precede their deltas).
    let mut new_offset: Vec<u64> = vec![0; bitmap.len()];
    let mut stats = Stats::default();
    let mut head = Vec::with_capacity(64);
    for (pos, decision, data_start, decompressed_size) in plan {
        let (offset, size) = bitmap.entry_at(pos as usize);
        let bytes = pack.entry_slice(offset..offset + size as u64).ok_or_else(|| {
            ServeError::corrupt_pack(format!("{}: entry at {offset} out of bounds", bitmap.pack.display()))
        })?;
        let here = answer.written;
        match decision {
            Reuse::Later => continue,
            Reuse::AsItIs => answer.emit(bytes)?,
            Reuse::Ofs { base } | Reuse::ByBase { base } => {
                let data = &bytes[data_start..];
                let rewritten = match decision {
                    Reuse::Ofs { .. } => {
                        gix_pack::data::entry::Header::OfsDelta { base_distance: here - new_offset[base as usize] }
                    }
                    _ => {
                        if !sent.get(base as usize) {
                            stats.thin_deltas += 1;
                        }
                        gix_pack::data::entry::Header::RefDelta { base_id: bitmap.oid_at(base as usize) }
                    }
                };
                head.clear();
                rewritten.write_to(decompressed_size, &mut head)?;
                answer.emit(&head)?;
                answer.emit(data)?;
            }
        }
        new_offset[pos as usize] = here;
        stats.entries += 1;
        stats.copied += 1;
        stats.reused += 1;
    }
    // What could not be reused, and what is not in the bitmapped pack, through gix-pack: a delta
    // against an object this pack sends names it by id; one against an object the client has,
    // where thin packs are allowed, too; any other is re-deflated.
    if !later.is_empty() || !extra.is_empty() {
        let extra_set: std::collections::HashSet<&ObjectId> = extra.iter().collect();
        let later_set: std::collections::HashSet<ObjectId> = later.iter().copied().collect();
        let in_answer =
            |id: &gix_hash::oid| bitmap.pos(id).is_some_and(|p| sent.get(p)) || extra_set.contains(&id.to_owned());
        let decide =
            |id: &gix_hash::oid| if in_answer(id) || usable_thin(id) { DeltaBase::Thin } else { DeltaBase::Recompress };
        write_through_gix_pack(
            repo,
            later.iter().chain(extra).copied(),
            decide,
            (options.packs)(),
            &mut answer,
            |entry| {
                stats.entries += 1;
                match entry.kind {
                    output::entry::Kind::DeltaOid { .. } => stats.thin_deltas += 1,
                    output::entry::Kind::Base(_) | output::entry::Kind::DeltaRef { .. }
                        if later_set.contains(&entry.id) =>
                    {
                        stats.re_deflated += 1
                    }
                    _ => stats.copied += 1,
                }
            },
        )?;
    }
    stats.bytes = answer.finish()?;
    if stats.entries != total as usize {
        return Err(ServeError::corrupt_pack(format!("wrote {} entries of the {total} announced", stats.entries)));
    }
    Ok(stats)
}

/// An answer being written and counted; every byte hashed for a new trailer, unless the answer
/// is a pack file as it is (with its own trailer).
struct Hashed<'w, W> {
    out: &'w mut W,
    hasher: Option<TrailerHasher>,
    written: u64,
}

impl<'w, W: Write> Hashed<'w, W> {
    fn new(out: &'w mut W, hash: gix_hash::Kind) -> Self {
        Hashed { out, hasher: Some(TrailerHasher::new(hash)), written: 0 }
    }

    fn unhashed(out: &'w mut W) -> Self {
        Hashed { out, hasher: None, written: 0 }
    }

    fn emit(&mut self, data: &[u8]) -> Result<(), ServeError> {
        if let Some(hasher) = self.hasher.as_mut() {
            hasher.update(data);
        }
        self.written += data.len() as u64;
        self.out.write_all(data).map_err(gone)
    }

    /// The trailer, when hashing: every byte written, it included.
    fn finish(self) -> Result<u64, ServeError> {
        let Some(hasher) = self.hasher else {
            return Ok(self.written);
        };
        let digest = hasher.finalize()?;
        self.out.write_all(&digest).map_err(gone)?;
        Ok(self.written + digest.len() as u64)
    }
}

/// The hash of a pack's trailer. For SHA-1, plain SHA-1 (with the CPU's SHA instructions where
/// it has them): the trailer is a checksum of bytes gixd writes itself, which the client verifies
/// with its own SHA-1, so detecting manufactured collisions — which gix-hash's SHA-1 always does,
/// and which makes it slower — guards nothing here. The digest is the same either way; SHA-256
/// repositories use gix-hash's.
enum TrailerHasher {
    Sha1(sha1::Sha1),
    Other(gix_hash::Hasher),
}

impl TrailerHasher {
    fn new(hash: gix_hash::Kind) -> Self {
        match hash {
            gix_hash::Kind::Sha1 => TrailerHasher::Sha1(sha1::Digest::new()),
            other => TrailerHasher::Other(gix_hash::hasher(other)),
        }
    }

    fn update(&mut self, data: &[u8]) {
        match self {
            TrailerHasher::Sha1(h) => sha1::Digest::update(h, data),
            TrailerHasher::Other(h) => h.update(data),
        }
    }

    fn finalize(self) -> Result<Vec<u8>, ServeError> {
        Ok(match self {
            TrailerHasher::Sha1(h) => sha1::Digest::finalize(h).to_vec(),
            TrailerHasher::Other(h) => h.try_finalize().map_err(ServeError::pack)?.as_bytes().to_vec(),
        })
    }
}

/// A failed write to the client: a disconnect, or an I/O error.
fn gone(err: std::io::Error) -> ServeError {
    if is_disconnect(&err) { ServeError::Disconnected } else { ServeError::Io(err) }
}

/// What a pack request asks for beyond the objects.
pub struct Options<'a> {
    pub thin_pack: bool,
    pub ofs_delta: bool,
    /// Add a selected delta's unselected base (one the client may read) to the pack instead of
    /// re-deflating the delta. Right for a clone, where the client has nothing; for a fetch the
    /// client most likely holds the base already, and a deep delta chain can add many objects it
    /// holds (measured: 22 added for 3 deltas on the corpus's linear fetch), so there the delta is
    /// re-deflated unless it can refer to a base the client is known to have (thin).
    pub include_unselected_bases: bool,
    /// The repository's pack files ([`crate::packs::of`]): stored entries are located there,
    /// not inflated one by one to find their ends. `None`: gix-odb locates them. Asked for only
    /// when gix-pack generates entries — a pack sent as the bitmapped pack's bytes needs none.
    pub packs: &'a dyn Fn() -> Option<std::sync::Arc<crate::packs::Packs>>,
    /// Search deltas among the objects going out whole even when the client holds nothing
    /// (a repack: [`crate::maintenance`]). Without it the search runs only for fetches answered
    /// by walking — a clone's whole objects are its stored pack's delta bases already.
    pub deltify: bool,
    /// The pace of running progress lines ([`Throttle`]).
    pub progress_every: std::time::Duration,
}

/// What went into a pack; counts, so they can be compared and snapshot.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub entries: usize,
    pub copied: usize,
    pub re_deflated: usize,
    pub bases_included: usize,
    pub thin_deltas: usize,
    /// Entries sent as the bitmapped pack's bytes (partial reuse: nothing decoded).
    pub reused: usize,
    pub bytes: u64,
    /// The pack file was sent as it is (verbatim reuse).
    pub verbatim: bool,
    /// Objects that would have gone out whole, sent instead as a delta computed against the
    /// client's version at the same path (thin).
    pub deltas_computed: usize,
}

/// Write the pack of `selection` to `out`. `may_send` answers whether the client may be sent an
/// object that it did not ask for (it is reachable from a ref the client may read); it is asked
/// only about delta bases outside the selection, which are then added or referred to thin.
pub fn write<W: Sink>(
    repo: &gix::Repository,
    selection: &Selection,
    options: Options,
    mut may_send: impl FnMut(&gix_hash::oid) -> bool,
    out: &mut W,
) -> Result<Stats, ServeError> {
    if let Some(bitmap) = &selection.whole_pack
        && options.ofs_delta
    {
        return write_verbatim(
            repo,
            bitmap,
            selection.objects.len() - selection.extra.len(),
            &selection.extra,
            &options,
            out,
        );
    }
    if let Some((bitmap, positions)) = &selection.in_pack
        && !positions.is_empty()
    {
        return write_reused(repo, selection, bitmap, positions, &options, &mut may_send, out);
    }
    let decide = move |id: &gix_hash::oid| {
        if options.thin_pack && selection.client_has_readably(id) {
            return DeltaBase::Thin;
        }
        // What this base would be, were the client allowed it; `may_send` (costly the first
        // time) is consulted only when that is more than re-deflating.
        let wanted = if options.thin_pack && selection.client_has(id) {
            DeltaBase::Thin
        } else if options.include_unselected_bases {
            DeltaBase::Include
        } else {
            return DeltaBase::Recompress;
        };
        if may_send(id) { wanted } else { DeltaBase::Recompress }
    };
    let mut search = DeltaSearch::new(repo, selection, &options);
    // An object gix-pack re-deflates whole is, when a search follows, inflated again at once and
    // often made a delta: it is stored (level 0) for now, and deflated for the wire only if it
    // stays whole ([`deflate_stored`]).
    let compression = if search.enabled { gix::zlib::Compression::NONE } else { gix::zlib::Compression::DEFAULT };
    let (num_entries, mut chunks) = gix_entries(
        repo,
        selection.objects.iter().copied(),
        options.thin_pack,
        compression,
        (options.packs)(),
        decide,
    )?;
    let num_entries_u32 = u32::try_from(num_entries).map_err(|_| ServeError::too_many_objects())?;

    // Without ofs-delta, a delta refers to its base by id; keep the ids written so far for that.
    let mut ids: Vec<ObjectId> = Vec::new();
    let mut missing = None;
    let mut answer = Hashed::new(out, repo.object_hash());
    answer.emit(&gix_pack::data::header::encode(gix_pack::data::Version::V2, num_entries_u32))?;
    let mut written = EntryOffsets::default();
    // git's counting is its look-up of each object's stored entry, as gix-pack's here.
    let mut counting = Some(Phase::new("Counting objects", num_entries, options.progress_every));
    if search.enabled {
        let mut entries = Vec::with_capacity(num_entries);
        let mut counting = counting.take().expect("not finished yet");
        for chunk in chunks.by_ref() {
            entries.extend(chunk.map_err(ServeError::pack)?.1);
            counting.advance(entries.len() - counting.done, &mut answer)?;
        }
        counting.finish(&mut answer)?;
        if entries.iter().any(|e| e.is_invalid()) {
            return Err(ServeError::corrupt_pack("an object to send is missing from the repository"));
        }
        // git's "Compressing objects: P% (n/N)" while the search runs, then its final line. A
        // line that cannot be sent (the client went away) ends the pack after the search.
        let mut compressing = Phase::new("Compressing objects", 0, options.progress_every);
        let mut told = Ok(());
        let mut tell = |done: usize, total: usize| {
            if told.is_ok() {
                told = compressing.at(done, total, &mut answer);
            }
        };
        let searched = if search.deltify {
            search.repack_window(&mut entries, &mut tell)
        } else {
            search.window(&mut entries, &mut tell)
        };
        told?;
        compressing.total = searched;
        compressing.finish(&mut answer)?;
        written.emit_in_base_order(&entries, options.ofs_delta, &mut answer)?;
    }
    for chunk in chunks.by_ref() {
        let (_seq, mut entries) = chunk.map_err(ServeError::pack)?;
        if let Some(counting) = counting.as_mut() {
            counting.advance(entries.len(), &mut answer)?;
        }
        for entry in &mut entries {
            if entry.is_invalid() {
                missing.get_or_insert(entry.id);
            }
            if !options.ofs_delta {
                if let output::entry::Kind::DeltaRef { object_index } = entry.kind {
                    entry.kind = output::entry::Kind::DeltaOid { id: ids[object_index] };
                }
                ids.push(entry.id);
            }
            written.emit(entry, &mut answer)?;
        }
    }
    if missing.is_some() {
        return Err(ServeError::corrupt_pack("an object to send is missing from the repository"));
    }
    if let Some(counting) = counting {
        counting.finish(&mut answer)?;
    }
    if written.offsets.len() != num_entries {
        return Err(ServeError::corrupt_pack(format!(
            "wrote {} entries of the {num_entries} announced",
            written.offsets.len()
        )));
    }
    let bytes = answer.finish()?;
    let outcome = gix_parallel::Finalize::finalize(chunks).map_err(ServeError::pack)?;
    Ok(Stats {
        entries: num_entries,
        copied: outcome.objects_copied_from_pack,
        re_deflated: outcome.decoded_and_recompressed_objects,
        bases_included: outcome.delta_bases_included,
        thin_deltas: outcome.ref_delta_objects,
        reused: 0,
        bytes,
        verbatim: false,
        deltas_computed: search.found,
    })
}

/// The entry of this pack (by index) a delta's base is, once the search may have made deltas of
/// any entry; `None` for a whole object and for a thin delta (its base is the client's).
fn base_in_pack(entry: &output::Entry, by_id: &HashMap<ObjectId, usize>) -> Option<usize> {
    match entry.kind {
        output::entry::Kind::DeltaRef { object_index } => Some(object_index),
        output::entry::Kind::DeltaOid { id } => by_id.get(&id).copied(),
        _ => None,
    }
}

/// Deltas computed while the pack is written (with gix-pack's delta encoder, patch 0003): an
/// object about to go out whole whose path the client holds another version of becomes a thin
/// delta against that version — the client has it (an edge commit's tree) and may read it.
/// Bounded: objects of at most [`DeltaSearch::MAX_OBJECT`] bytes, and [`DeltaSearch::BUDGET`]
/// bytes of objects and bases looked at per pack; past that, objects go out as before.
struct DeltaSearch<'a> {
    repo: &'a gix::Repository,
    selection: &'a Selection,
    enabled: bool,
    /// Thin deltas (against what the client has) are allowed.
    thin_allowed: bool,
    /// A repack's search ([`Options::deltify`]): every object stored whole, in batches.
    deltify: bool,
    budget: usize,
    found: usize,
    base: Vec<u8>,
}

impl<'a> DeltaSearch<'a> {
    const MAX_OBJECT: usize = 16 << 20;
    const BUDGET: usize = 1 << 30;
    /// Smaller objects gain nothing worth a delta's header and instructions.
    const MIN_OBJECT: usize = 64;

    /// At most this many entries are kept back for a windowed search; a larger pack streams.
    const MAX_SEARCHED_ENTRIES: usize = 500_000;
    /// Objects inflated for the search, in bytes at most (the rest are not searched).
    const MAX_SEARCHED_BYTES: usize = 512 << 20;

    fn new(repo: &'a gix::Repository, selection: &'a Selection, options: &Options) -> Self {
        // A fetch by walking: the client holds something to delta against, and what is sent
        // whole is new (a clone's whole objects are its pack's delta bases already).
        let enabled = !selection.by_bitmap
            && (options.deltify || !selection.client_has.is_empty())
            && selection.objects.len() <= Self::MAX_SEARCHED_ENTRIES;
        DeltaSearch {
            repo,
            selection,
            enabled,
            thin_allowed: options.thin_pack,
            deltify: options.deltify,
            budget: Self::BUDGET,
            found: 0,
            base: Vec::new(),
        }
    }

    /// git's window search over the entries going out whole (trees and blobs) and, as preferred
    /// bases, what the client holds at their paths (thin only where the client may read it and
    /// thin packs are allowed): entries that gain become deltas (`DeltaOid`, an entry's id or a
    /// held object's; [`EntryOffsets::emit_in_base_order`] orders and encodes them). What the
    /// window leaves whole may still pay as a thin delta against the client's version at its
    /// path, by a looser limit ([`Self::same_path_delta`]); an entry too large for the search's
    /// memory is tried for that alone ([`Self::try_thin_delta`]). `tell` hears how many it has
    /// searched, of how many, as it goes. Returns how many entries it searched.
    fn window(&mut self, entries: &mut [output::Entry], tell: &mut dyn FnMut(usize, usize)) -> usize {
        use gix_pack::data::delta::search;
        /// An object the search looks at: an entry (by index) or a held object, inflated.
        struct Candidate {
            entry: Option<usize>,
            id: ObjectId,
            kind: gix_object::Kind,
            name_hash: u32,
            data: Vec<u8>,
        }
        let mut candidates: Vec<Candidate> = Vec::new();
        // Entry candidate → the candidate of the client's version at its path.
        let mut same_path: Vec<(usize, usize)> = Vec::new();
        let mut held_at: HashMap<ObjectId, usize> = HashMap::new();
        let mut left_out: Vec<usize> = Vec::new();
        let mut bytes = 0usize;
        for (i, entry) in entries.iter().enumerate() {
            let output::entry::Kind::Base(kind @ (gix_object::Kind::Blob | gix_object::Kind::Tree)) = entry.kind else {
                continue;
            };
            let size = entry.decompressed_size;
            if !(Self::MIN_OBJECT..=Self::MAX_OBJECT).contains(&size) {
                continue;
            }
            if bytes + size > Self::MAX_SEARCHED_BYTES {
                left_out.push(i);
                continue;
            }
            let Some(target) = inflated(entry) else { continue };
            bytes += size;
            let name_hash = self.selection.name_hash.get(&entry.id).copied().unwrap_or(0);
            candidates.push(Candidate { entry: Some(i), id: entry.id, kind, name_hash, data: target });
            let this = candidates.len() - 1;
            let Some(held) = self
                .selection
                .same_path_held
                .get(&entry.id)
                .filter(|held| self.thin_allowed && self.selection.client_has_readably(held))
            else {
                continue;
            };
            let at = match held_at.get(held) {
                Some(at) => *at,
                None => {
                    let Ok(Some(base)) = gix_object::Find::try_find(&self.repo.objects, held, &mut self.base) else {
                        continue;
                    };
                    if base.kind != kind || base.data.len() > Self::MAX_OBJECT {
                        continue;
                    }
                    bytes += base.data.len();
                    candidates.push(Candidate { entry: None, id: *held, kind, name_hash, data: base.data.to_vec() });
                    held_at.insert(*held, candidates.len() - 1);
                    candidates.len() - 1
                }
            };
            same_path.push((this, at));
        }
        let objects: Vec<search::Object<'_>> = candidates
            .iter()
            .map(|c| search::Object {
                kind: c.kind,
                name_hash: c.name_hash,
                data: &c.data,
                preferred_base: c.entry.is_none(),
            })
            .collect();
        let options = search::Options {
            budget: self.budget,
            max_size: Self::MAX_OBJECT,
            min_size: Self::MIN_OBJECT,
            ..Default::default()
        };
        let (deltas, _stats) = search::find_with_progress(&objects, options, tell);
        let mut has_delta = vec![false; candidates.len()];
        for delta in deltas {
            let Some(target) = candidates[delta.target].entry else { continue };
            has_delta[delta.target] =
                self.replace_with_delta(&mut entries[target], candidates[delta.base].id, &delta.data);
        }
        for (target, held) in same_path {
            if has_delta[target] {
                continue;
            }
            let (t, h) = (&candidates[target], &candidates[held]);
            let entry = &mut entries[t.entry.expect("a target is an entry")];
            if let Some(delta) = self.same_path_delta(&t.data, &h.data) {
                self.replace_with_delta(entry, h.id, &delta);
            }
        }
        for i in left_out {
            self.try_thin_delta(&mut entries[i]);
        }
        // What stays whole and was stored for the search is deflated now: from the data at hand
        // for the candidates, inflated again for the rest (once each: a candidate that does
        // not deflate smaller is not tried again).
        let mut deflated = vec![false; entries.len()];
        for c in &candidates {
            if let Some(i) = c.entry {
                deflate_stored(&mut entries[i], Some(&c.data));
                deflated[i] = true;
            }
        }
        for (entry, _) in entries.iter_mut().zip(deflated).filter(|(_, done)| !done) {
            deflate_stored(entry, None);
        }
        candidates.iter().filter(|c| c.entry.is_some()).count()
    }

    /// A repack's search: every whole tree and blob, in git's search order (kind, name hash,
    /// largest first), searched in consecutive batches of at most [`Self::MAX_SEARCHED_BYTES`]
    /// inflated, so a repository of any size is searched whole with bounded memory (a window
    /// spans a batch, not the boundary between two) and no byte budget. Nothing is thin. `tell`
    /// hears how many it has searched, of how many, as it goes. Returns how many it searched.
    fn repack_window(&mut self, entries: &mut [output::Entry], tell: &mut dyn FnMut(usize, usize)) -> usize {
        use gix_pack::data::delta::search;
        let name_hash = |e: &output::Entry| self.selection.name_hash.get(&e.id).copied().unwrap_or(0);
        let mut order: Vec<(u8, u32, std::cmp::Reverse<usize>, usize)> = entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match e.kind {
                output::entry::Kind::Base(kind @ (gix_object::Kind::Blob | gix_object::Kind::Tree))
                    if (Self::MIN_OBJECT..=Self::MAX_OBJECT).contains(&e.decompressed_size) =>
                {
                    Some((kind as u8, name_hash(e), std::cmp::Reverse(e.decompressed_size), i))
                }
                _ => None,
            })
            .collect();
        order.sort();
        let mut searched = 0;
        let mut deflated = vec![false; entries.len()];
        let mut rest = &order[..];
        while !rest.is_empty() {
            let mut bytes = 0;
            let take = rest.iter().take_while(|(.., i)| {
                bytes += entries[*i].decompressed_size;
                bytes <= Self::MAX_SEARCHED_BYTES
            });
            let len = take.count().max(1);
            let (batch, next) = rest.split_at(len);
            rest = next;
            let inflated: Vec<(usize, Vec<u8>)> =
                batch.iter().filter_map(|(.., i)| inflated(&entries[*i]).map(|data| (*i, data))).collect();
            let objects: Vec<search::Object<'_>> = inflated
                .iter()
                .map(|(i, data)| {
                    let gix_pack::data::output::entry::Kind::Base(kind) = entries[*i].kind else {
                        unreachable!("whole entries only")
                    };
                    search::Object { kind, name_hash: name_hash(&entries[*i]), data, preferred_base: false }
                })
                .collect();
            let options = search::Options {
                budget: usize::MAX,
                max_size: Self::MAX_OBJECT,
                min_size: Self::MIN_OBJECT,
                ..Default::default()
            };
            let (deltas, _stats) =
                search::find_with_progress(&objects, options, &mut |done, _| tell(searched + done, order.len()));
            for delta in deltas {
                let (target, base) = (inflated[delta.target].0, inflated[delta.base].0);
                let base_id = entries[base].id;
                self.replace_with_delta(&mut entries[target], base_id, &delta.data);
            }
            for (i, data) in &inflated {
                deflate_stored(&mut entries[*i], Some(data));
                deflated[*i] = true;
            }
            searched += inflated.len();
        }
        // What stays stored (level 0) and was not searched is deflated now (once: a searched
        // entry that does not deflate smaller is not tried again).
        for (entry, _) in entries.iter_mut().zip(deflated).filter(|(_, done)| !done) {
            deflate_stored(entry, None);
        }
        searched
    }

    /// A thin delta of `target` against the client's version at its path, within the budget:
    /// worth it only well below the whole object (git asks a first delta for under half).
    fn same_path_delta(&mut self, target: &[u8], held: &[u8]) -> Option<Vec<u8>> {
        if target.len() > self.budget {
            return None;
        }
        self.budget = self.budget.saturating_sub(target.len() + held.len());
        gix_pack::data::delta::encode::Index::new(held).encode(target, target.len() / 2)
    }

    /// Make `entry` the delta `delta` against `base` if, compressed, it is smaller than the
    /// entry is now; true if it was. An entry stored for the search (not deflated yet) takes the
    /// delta as git takes what its search found: the delta is under half the object already.
    fn replace_with_delta(&mut self, entry: &mut output::Entry, base: ObjectId, delta: &[u8]) -> bool {
        let mut z =
            flate2::write::ZlibEncoder::new(Vec::with_capacity(delta.len() / 2 + 16), flate2::Compression::default());
        if z.write_all(delta).is_err() {
            return false;
        }
        let Ok(compressed) = z.finish() else { return false };
        if !is_stored(entry) && compressed.len() >= entry.compressed_data.len() {
            return false;
        }
        entry.kind = output::entry::Kind::DeltaOid { id: base };
        entry.decompressed_size = delta.len();
        entry.compressed_data = compressed;
        self.found += 1;
        true
    }

    /// [`Self::same_path_delta`] for an entry the search did not keep in memory.
    fn try_thin_delta(&mut self, entry: &mut output::Entry) {
        if !self.thin_allowed || entry.decompressed_size > self.budget {
            return;
        }
        let Some(base_id) = self.selection.same_path_held.get(&entry.id).copied() else { return };
        if !self.selection.client_has_readably(&base_id) {
            return;
        }
        let Ok(Some(base)) = gix_object::Find::try_find(&self.repo.objects, &base_id, &mut self.base) else { return };
        if base.data.len() > Self::MAX_OBJECT {
            return;
        }
        let held = base.data.to_vec();
        let Some(target) = inflated(entry) else { return };
        if let Some(delta) = self.same_path_delta(&target, &held) {
            self.replace_with_delta(entry, base_id, &delta);
        }
    }
}

/// Deflate a whole entry whose data is stored rather than compressed (gix-pack re-deflated it at
/// level 0 for a search: a stored stream is longer than its content), from `data` (the object)
/// or by inflating it; kept as it is unless the deflated form is smaller.
fn deflate_stored(entry: &mut output::Entry, data: Option<&[u8]>) {
    if !matches!(entry.kind, output::entry::Kind::Base(_)) || !is_stored(entry) {
        return;
    }
    let inflated_here;
    let data = match data {
        Some(data) => data,
        None => match inflated(entry) {
            Some(data) => {
                inflated_here = data;
                &inflated_here
            }
            None => return,
        },
    };
    let mut z =
        flate2::write::ZlibEncoder::new(Vec::with_capacity(data.len() / 2 + 16), flate2::Compression::default());
    if z.write_all(data).is_err() {
        return;
    }
    if let Ok(compressed) = z.finish()
        && compressed.len() < entry.compressed_data.len()
    {
        entry.compressed_data = compressed;
    }
}

/// The entry's data is stored rather than compressed: a stored zlib stream is longer than what
/// it holds (a deflated one of incompressible data can be too; it is only tried again).
fn is_stored(entry: &output::Entry) -> bool {
    entry.compressed_data.len() > entry.decompressed_size
}

/// A whole entry's object, inflated (`None` if its data does not inflate to its size).
fn inflated(entry: &output::Entry) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(entry.decompressed_size);
    flate2::read::ZlibDecoder::new(&entry.compressed_data[..]).read_to_end(&mut out).ok()?;
    (out.len() == entry.decompressed_size).then_some(out)
}

/// True when an error from writing the pack comes from the client going away: the transports
/// say so with `BrokenPipe` (`transport::stream`, a closed socket), a socket also by a reset.
fn is_disconnect(err: &io::Error) -> bool {
    matches!(err.kind(), io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trailer_hash_is_the_object_database_hash_of_the_same_bytes() {
        // Lengths around SHA-1's 64-byte block and its padding, and a large one fed in pieces.
        let data: Vec<u8> = (0..300_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for len in [0, 1, 55, 56, 63, 64, 65, 119, 120, 128, 4095, 300_000] {
            for kind in [gix_hash::Kind::Sha1, gix_hash::Kind::Sha256] {
                let mut ours = TrailerHasher::new(kind);
                for piece in data[..len].chunks(7_777) {
                    ours.update(piece);
                }
                let mut reference = gix_hash::hasher(kind);
                reference.update(&data[..len]);
                assert_eq!(
                    ours.finalize().unwrap(),
                    reference.try_finalize().unwrap().as_bytes(),
                    "{kind:?}, {len} bytes"
                );
            }
        }
    }

    /// A writer that fails every write with `kind`.
    struct Failing(io::ErrorKind);

    impl Sink for Failing {}

    impl Write for Failing {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::new(self.0, "the write failed"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn one_blob_repo() -> (tempfile::TempDir, gix::Repository, ObjectId) {
        let dir = tempfile::tempdir().unwrap();
        let repo = gix::init_bare(dir.path()).unwrap();
        let id = repo.write_blob(b"some content").unwrap().detach();
        (dir, repo, id)
    }

    fn write_into(out: &mut Failing) -> Result<Stats, ServeError> {
        let (_dir, repo, id) = one_blob_repo();
        let selection = Selection { objects: vec![id], blobs: 1, ..Selection::default() };
        let options = Options {
            thin_pack: false,
            ofs_delta: true,
            include_unselected_bases: false,
            packs: &|| None,
            deltify: false,
            progress_every: std::time::Duration::from_secs(1),
        };
        write(&repo, &selection, options, |_| false, out)
    }

    #[test]
    fn a_client_gone_mid_pack_is_a_disconnect_by_its_error_kind_not_its_message() {
        for kind in [io::ErrorKind::BrokenPipe, io::ErrorKind::ConnectionReset] {
            assert!(matches!(write_into(&mut Failing(kind)), Err(ServeError::Disconnected)), "{kind:?}");
        }
    }

    #[test]
    fn other_write_failures_stay_failures() {
        let err = write_into(&mut Failing(io::ErrorKind::PermissionDenied)).unwrap_err();
        assert!(matches!(&err, ServeError::Io(io) if io.kind() == io::ErrorKind::PermissionDenied), "{err:?}");
    }
}
