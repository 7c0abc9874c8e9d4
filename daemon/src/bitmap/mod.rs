//! Pack bitmaps (object selection layer): git's `.bitmap` (`technical/bitmap-format`: header,
//! the four type bitmaps, one EWAH bitmap per selected commit with its XOR offset, the optional
//! name-hash cache and lookup table), read with gix-bitmap's EWAH decoder — a pack's own, bit
//! positions in pack order (from the `.rev` file, or computed from the index), or a
//! multi-pack-index's, positions in its pseudo-pack order over every pack it names (from its
//! `RIDX` chunk), entries reused from each of its disjoint packs ([`open`]). [`PackBitmap::reachable`]
//! answers "everything these tips reach" as bitmap operations, walking only from tips the
//! bitmap does not cover down to covered commits; selection ([`crate::select`]) combines such
//! reaches for the wants and the haves. A stale or corrupt bitmap is an error the caller turns
//! into the walk (with one warning per file state). Writing a `.rev` and a `.bitmap`:
//! [`write`].

mod bits;
mod open;
mod reach;
mod tables;
pub mod write;

pub use bits::Bits;
pub use open::{Cache, any_in, of};

use std::collections::HashMap;
use std::path::PathBuf;

use gix_hash::ObjectId;
use gix_object::Kind;

use crate::graph::TreePath;

#[derive(Debug, thiserror::Error)]
pub enum BitmapError {
    #[error("{path}: {message}")]
    Corrupt { path: PathBuf, message: String },
    #[error("{path}: written for another pack (checksum differs): stale")]
    Stale { path: PathBuf },
    #[error("reading {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("opening the index {path}: {message}")]
    Index { path: PathBuf, message: String },
    #[error("opening the pack {path}: {message}")]
    Pack { path: PathBuf, message: String },
}

/// A pack with its bitmap, ready to answer reachability.
pub struct PackBitmap {
    pub pack: PathBuf,
    /// The pack's data, mapped when the bitmap was opened (see [`PackBitmap::open`]) with its
    /// descriptor, so that what is sent as it stands goes out as ranges of the file
    /// ([`crate::pack_ranges`]).
    pub data: std::sync::Arc<crate::pack_ranges::PackData>,
    ids: Ids,
    /// The packs whose entries are copied as they stand ([`Self::entry_at`]), by where their run
    /// of positions starts: for a pack's own bitmap the pack, all its positions; for a
    /// multi-pack-index's, each pack of it that holds no object another pack is picked for
    /// (git's disjoint packs, `pack.allowPackReuse=multi`), its run of positions in pack order.
    reusable: Vec<Reusable>,
    /// Pack position → index position, as the files have it ([`tables::Order`]).
    order: tables::Order,
    /// Index position → pack position ([`Position`]).
    position: Position,
    /// Where the ids of each two-byte prefix start in the index: a look-up searches a bucket of a
    /// few ids (they are uniform: n/65 536 a bucket), where a first byte's bucket holds a 256th
    /// of the pack — a fetch's reach looks up every entry of every tree it decodes, hundreds of
    /// thousands.
    fanout: Vec<u32>,
    /// Commits, trees, blobs, tags.
    pub types: [Bits; 4],
    /// The commit bitmaps as stored (EWAH, with the entry they are XOR'ed against), decoded
    /// only when a walk meets their commit: a request touches a few, and decoding all of them on
    /// open cost a whole pack's worth of bits per commit.
    stored: tables::Stored,
    by_commit: HashMap<ObjectId, usize>,
    closures: tables::Closures,
    /// The repository's decoded commits (time and parents, [`crate::repo::Repos::commits`], shared
    /// with negotiation): a fetch's haves are hundreds of tags whose commits every round of
    /// negotiation, and the pack, reach again.
    commits: std::sync::Arc<crate::graph::CommitCache>,
}

/// A pack whose entries positions `run` are, one each, in pack order: what a clone or fetch
/// copies as it stands.
pub(crate) struct Reusable {
    pub(crate) data: std::sync::Arc<crate::pack_ranges::PackData>,
    pub(crate) run: std::ops::Range<usize>,
    /// Where the pack's entries end (its trailing checksum starts).
    pub(crate) entries_end: u64,
}

impl Reusable {
    pub(crate) fn whole(data: std::sync::Arc<crate::pack_ranges::PackData>, run: std::ops::Range<usize>) -> Reusable {
        Reusable { entries_end: data.pack_end() as u64, data, run }
    }
}

/// Index position → pack position. A multi-pack-index's table is made on open. A pack's own is
/// a `u32` per object (1.35 MiB for rust-analyzer's 340 000, held as long as the bitmap is, the
/// largest part of an open bitmap): a clone looks up a few hundred ids (its wants), found by
/// binary search over the pack's offsets; a fetch's reach looks up every entry of every tree it
/// decodes, and past [`Position::searched_lookups`] look-ups the table is made.
enum Position {
    Table(Vec<u32>),
    Searched { table: std::sync::OnceLock<Vec<u32>>, lookups: std::sync::atomic::AtomicUsize },
}

impl Position {
    /// Look-ups by search before the table is made, for a pack of `n` objects: a quarter of `n`
    /// (at least 8 192). A bitmapped clone looks up the entries of the trees its walk decodes
    /// above the bitmapped commits, a few thousand (8 concurrent clones of rust-analyzer made
    /// the table at 8 192); a search costs about what git pays per look-up (it searches its
    /// reverse index the same way), and the table's 4 bytes per object stay held for as long as
    /// the bitmap is.
    fn searched_lookups(n: usize) -> usize {
        (n / 4).max(8192)
    }
}

/// The object ids a bitmap's positions stand for.
enum Ids {
    /// One pack's index: every position is an entry of [`PackBitmap::data`].
    Pack(gix_pack::index::File),
    /// A multi-pack-index (`technical/multi-pack-index`): positions in its pseudo-pack order
    /// (the preferred pack's objects first, then each other pack's in pack-id and offset order,
    /// an object counted once), from its reverse index. `offsets`: each position's offset in
    /// its pack, read by the reusable packs' entries ([`PackBitmap::entry_at`]).
    /// `by_pack`: each pack's run of positions, the packs with the most objects first.
    Multi {
        index: gix_pack::multi_index::File<tables::Shared>,
        offsets: Vec<u64>,
        by_pack: Vec<std::ops::Range<usize>>,
    },
}

impl Ids {
    fn oid_at(&self, i: u32) -> &gix_hash::oid {
        match self {
            Ids::Pack(index) => index.oid_at_index(i),
            Ids::Multi { index, .. } => index.oid_at_index(i),
        }
    }

    fn num(&self) -> u32 {
        match self {
            Ids::Pack(index) => index.num_objects(),
            Ids::Multi { index, .. } => index.num_objects(),
        }
    }
}

impl std::fmt::Debug for PackBitmap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackBitmap")
            .field("pack", &self.pack)
            .field("objects", &self.len())
            .field("commit_bitmaps", &self.stored.len())
            .finish()
    }
}

impl PackBitmap {
    /// Is this one pack's bitmap (every position an entry of [`Self::data`])? A multi-pack-index's
    /// is over several packs.
    pub fn is_one_pack(&self) -> bool {
        matches!(self.ids, Ids::Pack(_))
    }

    /// The positions set in `bits`, in the order they are best sent when not copied as they
    /// stand: pack order for one pack; for a multi-pack-index pack by pack, the packs with the
    /// most objects first — the big pack holds the bases the pushed packs' deltas name, and a
    /// delta sent before its base would name it by id.
    pub fn send_order<'a>(&'a self, bits: &'a Bits) -> Box<dyn Iterator<Item = usize> + 'a> {
        match &self.ids {
            Ids::Pack(_) => Box::new(bits.ones()),
            Ids::Multi { by_pack, .. } => {
                Box::new(by_pack.iter().flat_map(|run| run.clone().filter(|pos| bits.get(*pos))))
            }
        }
    }

    /// Which of the packs whose entries are copied as they stand holds the entry at `pos`
    /// (an index for [`Self::reusable_data`]): every position of a pack's own bitmap; for a
    /// multi-pack-index's, those of its disjoint packs.
    pub fn reusable_pack(&self, pos: usize) -> Option<usize> {
        let i = self.reusable.partition_point(|r| r.run.start <= pos).checked_sub(1)?;
        self.reusable[i].run.contains(&pos).then_some(i)
    }

    pub fn is_reusable(&self, pos: usize) -> bool {
        self.reusable_pack(pos).is_some()
    }

    /// The data of reusable pack `which` ([`Self::reusable_pack`]).
    pub fn reusable_data(&self, which: usize) -> &crate::pack_ranges::PackData {
        &self.reusable[which].data
    }

    pub fn len(&self) -> usize {
        self.ids.num() as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pack position of `id`, if the pack has it.
    pub fn pos(&self, id: &gix_hash::oid) -> Option<usize> {
        let i = self.index_position(id)?;
        Some(match &self.position {
            Position::Table(table) => table[i] as usize,
            Position::Searched { table, lookups } => match table.get() {
                Some(table) => table[i] as usize,
                None if lookups.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    >= Position::searched_lookups(self.len()) =>
                {
                    let table =
                        table.get_or_init(|| self.order.inverse(self.len()).expect("a permutation: checked on open"));
                    table[i] as usize
                }
                None => self.search_position(i),
            },
        })
    }

    /// The pack position of index position `i` of a pack's own bitmap, by its offset: pack
    /// order is offset order (checked on open), and every entry is reusable.
    fn search_position(&self, i: usize) -> usize {
        let Ids::Pack(index) = &self.ids else { unreachable!("searched positions are a pack's own") };
        self.pos_at_offset(0, index.pack_offset_at_index(i as u32))
            .expect("every index entry starts an entry of the pack")
    }

    /// The index position of `id`: its two-byte prefix's bucket of the index searched.
    fn index_position(&self, id: &gix_hash::oid) -> Option<usize> {
        let first = bucket_of(id.as_bytes());
        let (mut low, mut high) = (self.fanout[first] as usize, self.fanout[first + 1] as usize);
        while low < high {
            let mid = low + (high - low) / 2;
            match self.ids.oid_at(mid as u32).cmp(id) {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }

    pub fn oid_at(&self, pos: usize) -> ObjectId {
        self.ids.oid_at(self.order.get(pos)).to_owned()
    }

    /// The entry at pack position `pos` (a reusable one: [`Self::reusable_pack`]): its offset
    /// in its pack and its size there (up to the next entry in pack order, as git sizes entries
    /// from its reverse index) — known without reading the entry, where gix-odb's
    /// `location_by_oid` inflates the object to learn it.
    pub fn entry_at(&self, pos: usize) -> (u64, usize) {
        let which = self.reusable_pack(pos).expect("a reusable position");
        let reusable = &self.reusable[which];
        let offset = self.offset_at(pos);
        let end = if pos + 1 < reusable.run.end { self.offset_at(pos + 1) } else { reusable.entries_end };
        (offset, end.saturating_sub(offset) as usize)
    }

    /// The offset in its pack of the entry at `pos` (a reusable one).
    fn offset_at(&self, pos: usize) -> u64 {
        match &self.ids {
            Ids::Pack(index) => index.pack_offset_at_index(self.order.get(pos)),
            Ids::Multi { offsets, .. } => offsets[pos],
        }
    }

    /// The position of the entry of reusable pack `which` at `offset`, if an entry starts there.
    pub fn pos_at_offset(&self, which: usize, offset: u64) -> Option<usize> {
        let run = &self.reusable.get(which)?.run;
        let (mut low, mut high) = (run.start, run.end);
        while low < high {
            let mid = low + (high - low) / 2;
            if self.offset_at(mid) < offset {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        (low < run.end && self.offset_at(low) == offset).then_some(low)
    }

    /// Whether `commit`'s stored closure holds any of `targets` (bits over this pack); `None`
    /// when the commit has no bitmap (or its bitmap does not decode).
    pub fn closure_meets(&self, commit: &gix_hash::oid, targets: &Bits) -> Option<bool> {
        self.closure(commit).map(|closure| closure.count_and(targets) > 0)
    }

    /// Whether `commit` has a stored bitmap.
    pub fn has_closure(&self, commit: &gix_hash::oid) -> bool {
        self.by_commit.contains_key(commit)
    }

    pub fn commit_bitmaps(&self) -> usize {
        self.stored.len()
    }

    /// The commits this bitmap has a stored closure for.
    pub fn commits_with_closures(&self) -> impl Iterator<Item = &ObjectId> + '_ {
        self.by_commit.keys()
    }

    /// The stored closure of `commit` (every object it reaches, as bits over this bitmap's
    /// positions), if it has one that decodes.
    pub fn stored_closure(&self, commit: &gix_hash::oid) -> Option<std::sync::Arc<Bits>> {
        self.closure(commit)
    }

    /// The closure of a commit that has a bitmap, composed down its XOR chain (or kept from a
    /// recent use, [`tables::Closures`]); `None` for a commit without one, or one whose stored
    /// bitmap does not decode (the walk then goes through it).
    fn closure(&self, id: &gix_hash::oid) -> Option<std::sync::Arc<Bits>> {
        let i = *self.by_commit.get(id)?;
        self.closures.get(&self.stored, i, self.len())
    }

    /// Every object reachable from `tips`: as bits for what this pack holds (covered commits'
    /// bitmaps OR'ed, the rest walked down to covered commits), and by id for what it does not
    /// (objects pushed since the last repack), walked through as well.
    ///
    /// As git's `find_objects`: first the commits alone, newest first, so that a covered
    /// commit's bitmap is OR'ed in before any older commit is looked at — an old tag whose
    /// commit a newer tip's bitmap already holds costs one bit test, not a walk down to its own
    /// covered ancestor; then the trees of the commits no bitmap covered, each object's bit
    /// tested before it is decoded or descended into.
    ///
    /// With `seen` (what the client has, reached first, as git's `find_objects` is given the
    /// haves' bitmap), the walk stops at anything in it: those objects are left out of the
    /// answer but for the bits OR'ed closures carry, and the commits of `seen` the walk met
    /// below its own are listed in [`Reach::met`].
    pub fn reachable(
        &self,
        repo: &gix::Repository,
        tips: &[ObjectId],
        seen: Option<&Reach>,
    ) -> Result<Reach, crate::graph::GraphError> {
        self.walk(repo, tips, seen, Depth::Named)
    }

    /// [`Self::reachable`] without [`Reach::names`] and [`Reach::extra_order`]: what the client
    /// holds, or what it may read, where only membership counts (a path costs a hash of every
    /// name the walk meets).
    pub fn reachable_unnamed(
        &self,
        repo: &gix::Repository,
        tips: &[ObjectId],
    ) -> Result<Reach, crate::graph::GraphError> {
        self.walk(repo, tips, None, Depth::Objects)
    }

    /// The commits reachable from `tips` (and what covered commits' bitmaps carry): the first
    /// half of [`Self::reachable`], no tree decoded.
    pub fn reachable_commits(
        &self,
        repo: &gix::Repository,
        tips: &[ObjectId],
    ) -> Result<Reach, crate::graph::GraphError> {
        self.walk(repo, tips, None, Depth::Commits)
    }

    /// The type of `id`, if the pack holds it: from the type bitmaps, no object read.
    pub fn kind_of(&self, id: &gix_hash::oid) -> Option<Kind> {
        self.pos(id).map(|pos| self.kind_at(pos))
    }

    /// The type of the object at pack position `pos`, from the type bitmaps.
    fn kind_at(&self, pos: usize) -> Kind {
        const KINDS: [Kind; 4] = [Kind::Commit, Kind::Tree, Kind::Blob, Kind::Tag];
        KINDS.into_iter().zip(&self.types).find(|(_, bits)| bits.get(pos)).map_or(Kind::Blob, |(kind, _)| kind)
    }

    /// `id` is reached: its bit, or its entry among the objects outside the pack (and in
    /// [`Reach::extra_order`] when `ordered`).
    fn mark(&self, reach: &mut Reach, id: ObjectId, kind: Kind, ordered: bool) {
        match self.pos(&id) {
            Some(pos) => reach.bits.set(pos),
            None => reach.add_extra(id, kind, ordered),
        }
    }
}

/// How far [`PackBitmap::walk`] goes: commits alone, every object, or every object with the
/// path it was met at and the order it was met in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Depth {
    Commits,
    Objects,
    Named,
}

/// Blobs the bitmap reach walk inflated (test builds only): none should be, a tree names its
/// blobs as blobs.
#[cfg(feature = "test-hooks")]
pub static BLOBS_INFLATED_BY_REACH: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Tree entries the bitmap reach walk gave a path (test builds only): only the wants' walk names
/// them, and an entry it met already is not named again.
#[cfg(feature = "test-hooks")]
pub static ENTRIES_NAMED_BY_REACH: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Tree entries the reach walk tested (not skipped as unchanged from the version walked before at
/// their path): in this process, for tests to count. A test hook (feature `test-hooks`).
#[cfg(feature = "test-hooks")]
pub static ENTRIES_TESTED_BY_REACH: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// What [`PackBitmap::reachable`] found: bits over the pack, and the objects outside it with
/// their kinds.

#[derive(Debug)]
pub struct Reach {
    pub bits: Bits,
    pub extra: std::collections::HashMap<ObjectId, Kind>,
    /// The ids of `extra` in the order the walk met them (git's rev-list order: commits newest
    /// first, then the trees of the newest commit's first, depth first). A delta search breaks
    /// ties in it, as git's does: versions of one path of one size next to each other, newest
    /// first, so each is tried against the version just before it.
    pub extra_order: Vec<ObjectId>,
    /// With a `seen` reach: its commits where this walk stopped (parents of commits it reached,
    /// or tips), each once.
    pub met: Vec<ObjectId>,
    /// The path each tree and blob of `extra` was met at: git's name hash of it orders a delta
    /// search, its full hash finds the client's version at the same path.
    pub names: gix::hashtable::HashMap<ObjectId, TreePath>,
    /// The commits whose bitmaps the walk took (their closures OR'd in), newest first.
    pub covered: Vec<ObjectId>,
}

impl Reach {
    /// `id`, outside the bitmapped pack, is reached.
    fn add_extra(&mut self, id: ObjectId, kind: Kind, ordered: bool) {
        if self.extra.insert(id, kind).is_none() && ordered {
            self.extra_order.push(id);
        }
    }

    /// Is the object `id`, at pack position `pos` (`None`: not in the bitmapped pack), reached?
    pub fn has_at(&self, pos: Option<usize>, id: &gix_hash::oid) -> bool {
        match pos {
            Some(pos) => self.bits.get(pos),
            None => self.extra.contains_key(id),
        }
    }

    /// Is `id` reached, by this reach over `bitmap`'s pack?
    pub fn has(&self, bitmap: &PackBitmap, id: &gix_hash::oid) -> bool {
        self.has_at(bitmap.pos(id), id)
    }
}

/// The index position where the ids of each two-byte prefix start (65 537 entries: the last is
/// the count): a bucket of a few ids at most, where a first-byte bucket holds a 256th of the
/// pack and a look-up searched it per tree entry a walk met.
fn fanout_table(ids: &Ids) -> Vec<u32> {
    let mut fanout = vec![0u32; FANOUT + 1];
    for i in 0..ids.num() {
        fanout[bucket_of(ids.oid_at(i).as_bytes()) + 1] += 1;
    }
    for b in 1..=FANOUT {
        fanout[b] += fanout[b - 1];
    }
    fanout
}

/// Buckets of the fanout table: one per two-byte prefix.
const FANOUT: usize = 1 << 16;

fn bucket_of(id: &[u8]) -> usize {
    (id[0] as usize) << 8 | id[1] as usize
}

#[cfg(test)]
mod tests {
    use super::Bits;

    #[test]
    fn bit_operations_combine_as_sets() {
        let mut a = Bits::new(130);
        for i in [0, 5, 64, 129] {
            a.set(i);
        }
        let mut b = Bits::new(130);
        for i in [5, 64, 100] {
            b.set(i);
        }
        let mut union = a.clone();
        union.or(&b);
        assert_eq!(union.ones().collect::<Vec<_>>(), vec![0, 5, 64, 100, 129]);
        let mut diff = a.clone();
        diff.and_not(&b);
        assert_eq!(diff.ones().collect::<Vec<_>>(), vec![0, 129]);
        assert_eq!(a.count_and(&b), 2);
    }
}
