//! Writing git's reverse index (`.rev`) and bitmap (`.bitmap`) for one pack or for a
//! multi-pack-index ([`Over`] names the ids either way), as `technical/pack-format` and
//! `technical/bitmap-format` describe them and git reads them (`git rev-list --test-bitmap`
//! accepts the result): the writing half beside the reading one.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use gix_hash::ObjectId;
use gix_object::{Find, Kind};
use gix_pack::data::decode::entry::ResolvedBase;

use super::Bits;

/// Writing a `.rev` or a `.bitmap` failed: an object it must place is missing or unreadable, a
/// gitoxide error kept with its chain, the file could not be written, or the pack is not what its
/// index says.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("object {0} is missing from the repository")]
    MissingObject(ObjectId),
    #[error("repository access failed: {0}")]
    Git(#[from] gix::Error),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Gix(Box<dyn std::error::Error + Send + Sync>),
    #[error("{0}")]
    Corrupt(String),
}

impl WriteError {
    fn gix(err: impl std::error::Error + Send + Sync + 'static) -> Self {
        WriteError::Gix(Box::new(err))
    }
}

impl From<crate::graph::GraphError> for WriteError {
    fn from(err: crate::graph::GraphError) -> Self {
        match err {
            crate::graph::GraphError::Missing(id) => WriteError::MissingObject(id),
            crate::graph::GraphError::Git(err) => WriteError::Git(err),
        }
    }
}

/// Pack position → index position.
pub fn pack_order(index: &gix_pack::index::File) -> Vec<u32> {
    let mut order: Vec<u32> = (0..index.num_objects()).collect();
    order.sort_by_key(|i| index.pack_offset_at_index(*i));
    order
}

fn hash_id(hash: gix_hash::Kind) -> u32 {
    match hash {
        gix_hash::Kind::Sha1 => 1,
        _ => 2,
    }
}

/// Write `bytes` followed by their checksum to `path`, through a temporary file (removed if the
/// write fails).
fn write_checksummed(path: &Path, bytes: &[u8], hash: gix_hash::Kind) -> Result<(), WriteError> {
    let mut hasher = gix_hash::hasher(hash);
    hasher.update(bytes);
    let digest = hasher.try_finalize().map_err(WriteError::gix)?;
    let tmp = path.with_extension("tmp");
    let written = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.write_all(digest.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    // A write that failed (a full disk) leaves no temporary file beside the pack.
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    Ok(written?)
}

/// `technical/pack-format`'s reverse index: `RIDX`, version 1, hash id, index positions in pack
/// order, the pack's checksum, then the file's.
pub fn write_rev(
    path: &Path,
    index: &gix_pack::index::File,
    order: &[u32],
    hash: gix_hash::Kind,
) -> Result<(), WriteError> {
    write_rev_for(path, &index.pack_checksum(), order, hash)
}

/// A reverse index for what has the checksum `checksum`: a pack, or a multi-pack-index (its
/// `multi-pack-index-<checksum>.rev`, positions in its pseudo-pack order, which git reads where
/// the MIDX has no `RIDX` chunk).
pub fn write_rev_for(
    path: &Path,
    checksum: &gix_hash::oid,
    order: &[u32],
    hash: gix_hash::Kind,
) -> Result<(), WriteError> {
    let mut out = Vec::with_capacity(12 + 4 * order.len() + 2 * hash.len_in_bytes());
    out.extend(b"RIDX");
    out.extend(1u32.to_be_bytes());
    out.extend(hash_id(hash).to_be_bytes());
    for i in order {
        out.extend(i.to_be_bytes());
    }
    out.extend(checksum.as_bytes());
    write_checksummed(path, &out, hash)
}

/// Each object's kind by pack position (`offsets`: its entries' offsets in pack order), from its
/// entry's header — a delta takes its base's kind — in one pass over the headers that lets go of
/// the pages it read as it goes: nothing inflated, no id looked up but a ref-delta's base.
/// (Through the object database each delta's kind was its chain's walk to the base, and every
/// page of the pack stayed resident.)
fn kinds_in_pack(
    pack: &gix_pack::data::File,
    index: &gix_pack::index::File,
    offsets: &[u64],
) -> Result<Vec<Kind>, WriteError> {
    use gix_pack::data::entry::Header;
    let corrupt = || WriteError::Corrupt("a delta's base is not an entry of its pack".into());
    let pos_at = |offset: u64| offsets.binary_search(&offset).map_err(|_| corrupt());
    let n = offsets.len();
    let mut kinds: Vec<Option<Kind>> = vec![None; n];
    // The pack position of each delta's base (ref-deltas may name a base stored after them).
    let mut base_of: Vec<usize> = vec![usize::MAX; n];
    // The pages read are let go as the pass moves on: every header is read once.
    let mut released = 0;
    for (pos, offset) in offsets.iter().enumerate() {
        if *offset - released >= 8 << 20 {
            crate::packs::let_resident_pages_go(pack, released..*offset);
            released = *offset;
        }
        let entry = pack.entry(*offset).map_err(WriteError::gix)?;
        let base = match entry.header {
            Header::OfsDelta { base_distance } => {
                pos_at(entry.checked_base_pack_offset(base_distance).ok_or_else(corrupt)?)?
            }
            Header::RefDelta { base_id } => {
                pos_at(index.pack_offset_at_index(index.lookup(base_id).ok_or_else(corrupt)?))?
            }
            header => {
                kinds[pos] = header.as_kind();
                continue;
            }
        };
        base_of[pos] = base;
        kinds[pos] = kinds[base];
    }
    (0..n)
        .map(|pos| {
            let mut at = pos;
            for _ in 0..n {
                if let Some(kind) = kinds[at] {
                    return Ok(kind);
                }
                at = *base_of.get(at).filter(|b| **b != usize::MAX).ok_or_else(corrupt)?;
            }
            Err(corrupt())
        })
        .collect()
}

/// The ids a bitmap is written over: a pack's index, or a multi-pack-index's.
pub struct Over<'a> {
    /// The id at an index position.
    pub id_at: &'a dyn Fn(u32) -> ObjectId,
    /// The index position of an id.
    pub lookup: &'a dyn Fn(&gix_hash::oid) -> Option<u32>,
    /// The checksum of what the bitmap is for (the pack's, the MIDX's).
    pub checksum: ObjectId,
    /// An older bitmap of these objects, whose closures are carried over ([`write_bitmap_over`]).
    pub carried: Option<&'a super::PackBitmap>,
}

/// Commits from one chosen for a bitmap to the next, at the `i`-th commit of the walk (newest
/// first): one in 100 over the newest 20 000, then further apart the older they are, up to one
/// in 5 000 (git's spacing of its bitmaps: clients' edges are seldom deep in old history, and a
/// bitmap each 100 commits of all of git.git's 75 000 was twice git's count and most of a
/// repack's bitmap writing).
fn spacing(i: usize) -> usize {
    const RECENT: usize = 20_000;
    if i <= RECENT { 100 } else { (i - RECENT).clamp(100, 5000) }
}

/// The commits that get a bitmap: every ref tip that is a commit, and of the rest one in
/// [`spacing`], newest first — counting from the last one chosen, and choosing every commit
/// `kept` says an older bitmap has a closure for (taken over, not walked: [`write_bitmap_over`]).
fn select_commits(
    repo: &gix::Repository,
    tips: &[ObjectId],
    kept: &dyn Fn(&ObjectId) -> bool,
) -> Result<Vec<ObjectId>, WriteError> {
    let mut chosen = Vec::new();
    let mut commit_tips = Vec::new();
    for tip in tips {
        commit_tips.extend(crate::graph::peel_to_commit(repo, *tip)?);
    }
    commit_tips.sort();
    commit_tips.dedup();
    chosen.extend(commit_tips.iter().copied());
    if !commit_tips.is_empty() {
        let walk = repo.rev_walk(commit_tips.clone()).all()?;
        spaced(walk.map(|info| info.map(|info| info.id).map_err(WriteError::from)), &mut chosen, kept)?;
    }
    Ok(chosen)
}

/// Add to `chosen` the commits of `walk` (newest first) that get a bitmap: one [`spacing`] after
/// the last one chosen, and each `kept` says an older bitmap has; none twice.
fn spaced(
    walk: impl Iterator<Item = Result<ObjectId, WriteError>>,
    chosen: &mut Vec<ObjectId>,
    kept: &dyn Fn(&ObjectId) -> bool,
) -> Result<(), WriteError> {
    let mut have: std::collections::HashSet<ObjectId> = chosen.iter().copied().collect();
    let mut since = 0;
    for (i, id) in walk.enumerate() {
        let id = id?;
        since += 1;
        if (since >= spacing(i) || kept(&id)) && have.insert(id) {
            chosen.push(id);
            since = 0;
        }
    }
    Ok(())
}

/// A commit's committer time, read once (`times` keeps it).
fn commit_time(
    objects: &Objects<'_>,
    times: &mut gix::hashtable::HashMap<ObjectId, i64>,
    id: &ObjectId,
    pos: Option<usize>,
    buf: &mut Vec<u8>,
) -> Result<i64, WriteError> {
    if let Some(t) = times.get(id) {
        return Ok(*t);
    }
    let (_, data) = objects.find(id, pos, buf)?;
    let time = gix_object::CommitRefIter::from_bytes(data, id.kind())
        .committer()
        .map_or(0, |c| c.time().map_or(0, |t| t.seconds));
    times.insert(*id, time);
    Ok(time)
}

/// The delta bases kept while the closures decode trees. Since the closures go in time order
/// (each meets the trees its predecessor did not hold) a decoded tree or commit is seldom asked
/// for again: no object cache, and a small delta cache: on cargo as one git-written pack, 8 MiB
/// of delta cache and no object cache cost the same CPU as 32 and 16 MiB (whole-process CPU,
/// seven paired runs: 1.02x) at 107 MiB peak instead of 169.
const CLOSURE_DELTA_CACHE: usize = 8 << 20;

/// Where the bitmap writer reads commits, trees and tags: its one pack itself, by position,
/// through a map of its own whose pages it lets go every few megabytes read (the object
/// database's maps keep every page read resident, counted in the run's peak); or the object
/// database (a multi-pack-index's packs).
enum Objects<'a> {
    Pack {
        pack: &'a gix_pack::data::File,
        index: &'a gix_pack::index::File,
        /// Entry offsets by pack position.
        offsets: &'a [u64],
        /// The inflate stream, the delta cache and the bytes read since the pages last went.
        state: std::cell::RefCell<(gix::zlib::Inflate, gix_pack::cache::lru::MemoryCappedHashmap, usize)>,
    },
    Odb(gix::OdbHandle),
}

impl Objects<'_> {
    /// `id` (at pack position `pos`, where known): its kind and data, in `buf`.
    fn find<'b>(
        &self,
        id: &ObjectId,
        pos: Option<usize>,
        buf: &'b mut Vec<u8>,
    ) -> Result<(Kind, &'b [u8]), WriteError> {
        let missing = || WriteError::MissingObject(*id);
        match self {
            Objects::Odb(objects) => {
                let data = objects.try_find(id, buf)?.ok_or_else(missing)?;
                Ok((data.kind, data.data))
            }
            Objects::Pack { pack, index, offsets, state } => {
                let offset = *offsets.get(pos.ok_or_else(missing)?).ok_or_else(missing)?;
                let entry = pack.entry(offset).map_err(WriteError::gix)?;
                let resolve = |base: &gix_hash::oid, _: &mut Vec<u8>| -> gix_error::Result<Option<ResolvedBase>> {
                    match index.lookup(base) {
                        Some(i) => Ok(Some(ResolvedBase::InPack(pack.entry(index.pack_offset_at_index(i))?))),
                        None => Ok(None),
                    }
                };
                let (inflate, cache, read) = &mut *state.borrow_mut();
                let outcome = pack.decode_entry(entry, buf, inflate, &resolve, cache).map_err(WriteError::gix)?;
                // Each entry of its chain read faulted its neighbours in too.
                *read += (outcome.num_deltas as usize + 1) * crate::packs::FAULT_AROUND;
                if *read >= Self::RESIDENT_BYTES {
                    *read = 0;
                    crate::packs::let_resident_pages_go(pack, 0..pack.data_len() as u64);
                }
                Ok((outcome.kind, &buf[..]))
            }
        }
    }

    /// Bytes made resident between two releases of the pack's resident pages, as
    /// [`crate::packs::Packs`] counts them: each entry read counts what a read fault maps in.
    const RESIDENT_BYTES: usize = 8 << 20;
}

/// One pack a bitmap is written for, read directly ([`Objects::Pack`]).
pub struct OnePack<'a> {
    pack: &'a gix_pack::data::File,
    index: &'a gix_pack::index::File,
    offsets: Vec<u64>,
    kinds: Vec<Kind>,
}

/// What a bitmap written says of its pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Commit bitmaps written.
    pub commits: usize,
    /// Objects of the pack some tip reaches: all of them, or the pack holds unreachable ones.
    pub reachable: usize,
}

/// `technical/bitmap-format` version 1 with `BITMAP_OPT_FULL_DAG`: the four type bitmaps, then
/// one bitmap per chosen commit (no XOR compression), then the checksum.
pub fn write_bitmap(
    repo: &gix::Repository,
    index: &gix_pack::index::File,
    order: &[u32],
    tips: &[ObjectId],
    reuse: Option<&super::PackBitmap>,
    path: &Path,
    hash: gix_hash::Kind,
) -> Result<Written, WriteError> {
    let over = Over {
        id_at: &|i| index.oid_at_index(i).to_owned(),
        lookup: &|id| index.lookup(id),
        checksum: index.pack_checksum(),
        carried: reuse,
    };
    let pack = gix_pack::data::File::at(index.path().with_extension("pack"), hash).map_err(WriteError::gix)?;
    let offsets: Vec<u64> = order.iter().map(|i| index.pack_offset_at_index(*i)).collect();
    let kinds = kinds_in_pack(&pack, index, &offsets)?;
    write_bitmap_over(repo, &over, order, Some(OnePack { pack: &pack, index, offsets, kinds }), tips, path, hash)
}

/// [`write_bitmap`] over any ids: a pack's, or a multi-pack-index's (`order` its pseudo-pack
/// order); `one` the pack when it is one (read directly, its objects' kinds known), else objects
/// are read through the object database.
pub fn write_bitmap_over(
    repo: &gix::Repository,
    index: &Over<'_>,
    order: &[u32],
    one: Option<OnePack<'_>>,
    tips: &[ObjectId],
    path: &Path,
    hash: gix_hash::Kind,
) -> Result<Written, WriteError> {
    let n = order.len();
    let reuse = index.carried;
    // Pack position by id, in one id-keyed table: the closures below ask it for every object
    // they meet, and a binary search of the index each time (memcmp of ids) was over half of a
    // git.git repack's bitmap writing.
    let mut position: gix::hashtable::HashMap<ObjectId, usize> = gix::hashtable::HashMap::default();
    position.reserve(n);
    for (pack_pos, idx_pos) in order.iter().enumerate() {
        position.insert((index.id_at)(*idx_pos), pack_pos);
    }
    let pos_of = |id: &ObjectId| position.get(id).copied();
    let mut buf = Vec::new();
    // Type bitmaps, from each object's header (a blob is not inflated to learn it is one).
    let mut types = [Bits::new(n), Bits::new(n), Bits::new(n), Bits::new(n)];
    for (pack_pos, idx_pos) in order.iter().enumerate() {
        let kind = match &one {
            Some(one) => one.kinds[pack_pos],
            None => {
                let id = (index.id_at)(*idx_pos);
                repo.find_header(id).map_err(|_| WriteError::MissingObject(id))?.kind()
            }
        };
        let slot = match kind {
            Kind::Commit => 0,
            Kind::Tree => 1,
            Kind::Blob => 2,
            Kind::Tag => 3,
        };
        types[slot].set(pack_pos);
    }
    // Each commit's closure walks the trees its older closures do not hold; the bases of the
    // delta chains they decode stay in a delta cache.
    let delta_cache = || gix_pack::cache::lru::MemoryCappedHashmap::new(CLOSURE_DELTA_CACHE);
    let objects = match &one {
        Some(one) => Objects::Pack {
            pack: one.pack,
            index: one.index,
            offsets: &one.offsets,
            state: std::cell::RefCell::new((gix::zlib::Inflate::default(), delta_cache(), 0)),
        },
        None => {
            let mut objects = repo.objects.clone();
            objects.set_pack_cache(move || Box::new(delta_cache()));
            objects.unset_object_cache();
            Objects::Odb(objects)
        }
    };
    // Commit times, read once for the order of the closures and for every walk below.
    let mut times: gix::hashtable::HashMap<ObjectId, i64> = gix::hashtable::HashMap::default();
    // Commit closures, oldest chosen commit first so later ones reuse earlier closures.
    let kept = |id: &ObjectId| reuse.is_some_and(|old| old.has_closure(id));
    let mut chosen: Vec<(i64, ObjectId)> = select_commits(repo, tips, &kept)?
        .into_iter()
        .map(|id| Ok((commit_time(&objects, &mut times, &id, pos_of(&id), &mut buf)?, id)))
        .collect::<Result<_, WriteError>>()?;
    chosen.sort_by_key(|(time, _)| *time); // stable: equal times keep their order
    let chosen: Vec<ObjectId> = chosen.into_iter().map(|(_, id)| id).collect();
    let mut closures: HashMap<ObjectId, Bits> = HashMap::new();
    // The closures an older bitmap of these objects holds (git's `rebuild_existing_bitmaps`):
    // carried over to this bitmap's positions, their commits not walked. One with an object
    // this bitmap does not have is left to the walk.
    if let Some(old) = reuse.filter(|_| chosen.iter().any(&kept)) {
        let new_pos: Vec<u32> =
            (0..old.len()).map(|pos| pos_of(&old.oid_at(pos)).map_or(u32::MAX, |p| p as u32)).collect();
        for commit in chosen.iter().filter(|id| kept(id)) {
            let Some(closure) = old.stored_closure(commit) else { continue };
            let mut bits = Bits::new(n);
            let mut complete = true;
            for pos in closure.ones() {
                match new_pos.get(pos) {
                    Some(&p) if p != u32::MAX => bits.set(p as usize),
                    _ => {
                        complete = false;
                        break;
                    }
                }
            }
            if complete {
                closures.insert(*commit, bits);
            }
        }
    }
    // Trees and blobs below `roots` into `bits`, a tree that is in it already not read again.
    let mut tree_buf = Vec::new();
    let mut fill = |bits: &mut Bits, roots: Vec<ObjectId>| -> Result<(), WriteError> {
        let mut stack: Vec<(ObjectId, Kind)> = roots.into_iter().map(|root| (root, Kind::Tree)).collect();
        while let Some((id, _)) = stack.pop() {
            let pos = pos_of(&id).ok_or(WriteError::MissingObject(id))?;
            if bits.get(pos) {
                continue;
            }
            bits.set(pos);
            if types[2].get(pos) {
                continue; // a blob has nothing below it: not read
            }
            let (kind, data) = objects.find(&id, Some(pos), &mut tree_buf)?;
            crate::graph::push_children(id, kind, data, &mut stack)?;
        }
        Ok(())
    };
    for commit in &chosen {
        if closures.contains_key(commit) {
            continue; // carried over
        }
        let mut bits = Bits::new(n);
        // 1. The commits, newest first: where the walk meets a chosen commit it takes that
        //    commit's closure whole. In time order a side branch's old base is met after the
        //    newer closure that holds it, not walked again below it (depth first, git.git's
        //    merges of topics forked long ago had every bitmap walk thousands of commits).
        let mut queue = std::collections::BinaryHeap::new();
        queue.push((commit_time(&objects, &mut times, commit, pos_of(commit), &mut buf)?, *commit));
        let mut trees = Vec::new();
        while let Some((_, id)) = queue.pop() {
            let pos = pos_of(&id).ok_or(WriteError::MissingObject(id))?;
            if bits.get(pos) {
                continue;
            }
            if id != *commit
                && let Some(done) = closures.get(&id)
            {
                bits.or(done);
                continue;
            }
            bits.set(pos);
            #[cfg(feature = "test-hooks")]
            COMMITS_WALKED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let (_, data) = objects.find(&id, Some(pos), &mut buf)?;
            let parsed = gix_object::CommitRefIter::from_bytes(data, hash);
            trees.push(parsed.clone().tree_id().map_err(|_| WriteError::MissingObject(id))?);
            let parents: Vec<ObjectId> = parsed.parent_ids().collect();
            for parent in parents {
                queue.push((commit_time(&objects, &mut times, &parent, pos_of(&parent), &mut buf)?, parent));
            }
        }
        // 2. The trees of the commits it walked, against everything the closures it met hold.
        fill(&mut bits, trees)?;
        closures.insert(*commit, bits);
    }
    // What the tips reach: their commits' closures, the tags on the way, and what a tag of a
    // tree or blob names.
    let mut reach = Bits::new(n);
    for tip in tips {
        let mut id = *tip;
        for _ in 0..64 {
            let pos = pos_of(&id).ok_or(WriteError::MissingObject(id))?;
            if types[3].get(pos) {
                reach.set(pos);
                let (_, data) = objects.find(&id, Some(pos), &mut buf)?;
                id = gix_object::TagRefIter::from_bytes(data, hash)
                    .target_id()
                    .map_err(|_| WriteError::MissingObject(id))?;
            } else if let Some(closure) = closures.get(&id) {
                reach.or(closure);
                break;
            } else {
                fill(&mut reach, vec![id])?;
                break;
            }
        }
    }
    let reachable = reach.ones().count();
    let ewah = |bits: &Bits| -> Result<Vec<u8>, WriteError> {
        let flags: Vec<bool> = (0..n).map(|i| bits.get(i)).collect();
        let vec =
            gix_bitmap::ewah::Vec::from_bits(&flags).ok_or_else(|| WriteError::Corrupt("bitmap too large".into()))?;
        let mut out = Vec::new();
        vec.write_to(&mut out)?;
        Ok(out)
    };
    let mut out = Vec::new();
    out.extend(b"BITM");
    out.extend(1u16.to_be_bytes());
    out.extend(1u16.to_be_bytes()); // BITMAP_OPT_FULL_DAG
    out.extend((chosen.len() as u32).to_be_bytes());
    out.extend(index.checksum.as_bytes());
    for t in &types {
        out.extend(ewah(t)?);
    }
    for commit in &chosen {
        let idx_pos = (index.lookup)(commit).ok_or(WriteError::MissingObject(*commit))?;
        out.extend(idx_pos.to_be_bytes());
        out.push(0); // no XOR
        out.push(0); // flags
        out.extend(ewah(&closures[commit])?);
    }
    write_checksummed(path, &out, hash)?;
    Ok(Written { commits: chosen.len(), reachable })
}

/// Commits the closures' walks decoded (test builds only): a closure carried over from an older
/// bitmap walks none.
#[cfg(feature = "test-hooks")]
pub static COMMITS_WALKED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packs::tests::git;

    /// Over git.git's 75 000 commits, about as many bitmaps as git writes (it wrote 319 for a
    /// 300-push state of it), where one each 100 commits made 750; the newest commits, where
    /// clients' edges are, still one each 100; a commit an older bitmap has is always chosen.
    #[test]
    fn bitmaps_thin_out_in_old_history_and_keep_what_an_older_bitmap_has() {
        let id = |n: u32| {
            let mut bytes = [0u8; 20];
            bytes[..4].copy_from_slice(&n.to_be_bytes());
            ObjectId::from_bytes_or_panic(&bytes)
        };
        let walk = || (1..=75_000u32).map(|n| Ok(id(n)));
        let mut chosen = vec![id(0)];
        spaced(walk(), &mut chosen, &|_| false).unwrap();
        assert!(chosen.len() <= 320, "{} bitmaps", chosen.len());
        let recent = chosen.iter().filter(|c| u32::from_be_bytes(c.as_bytes()[..4].try_into().unwrap()) <= 20_000);
        assert_eq!(recent.count(), 1 + 200, "one each 100 of the newest 20 000, and the tip");
        let old = id(70_001);
        let mut with_kept = vec![id(0)];
        spaced(walk(), &mut with_kept, &|c| *c == old).unwrap();
        assert!(with_kept.contains(&old) && !chosen.contains(&old));
    }

    #[test]
    fn every_kind_read_from_the_pack_headers_is_the_kind_the_object_database_finds() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q"], None);
        let mut text: String = (0..300).map(|i| format!("line {i} of a file that changes a little\n")).collect();
        for round in 0..8 {
            text.push_str(&format!("round {round}\n"));
            std::fs::write(d.join("a.txt"), &text).unwrap();
            std::fs::create_dir_all(d.join("dir")).unwrap();
            std::fs::write(d.join("dir").join(format!("f{round}")), format!("{round}\n")).unwrap();
            git(d, &["add", "."], None);
            git(d, &["commit", "-qm", &format!("c{round}")], None);
        }
        git(d, &["tag", "-am", "annotated", "v1"], None);
        // Deltas by offset, then the same objects with deltas naming their base by id.
        for offsets in ["true", "false"] {
            git(d, &["-c", &format!("repack.useDeltaBaseOffset={offsets}"), "repack", "-adfq"], None);
            let repo = gix::open(d).unwrap();
            let pack_dir = d.join(".git/objects/pack");
            let index_path = std::fs::read_dir(&pack_dir)
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|x| x == "idx"))
                .unwrap();
            let index = gix_pack::index::File::at(&index_path, gix_hash::Kind::Sha1).unwrap();
            let order = pack_order(&index);
            let pack = gix_pack::data::File::at(index_path.with_extension("pack"), gix_hash::Kind::Sha1).unwrap();
            let at: Vec<u64> = order.iter().map(|i| index.pack_offset_at_index(*i)).collect();
            let kinds = kinds_in_pack(&pack, &index, &at).unwrap();
            let found: Vec<Kind> =
                order.iter().map(|i| repo.find_header(index.oid_at_index(*i)).unwrap().kind()).collect();
            assert_eq!(kinds, found, "useDeltaBaseOffset={offsets}");
            let deltas = git(d, &["verify-pack", "-v", index_path.to_str().unwrap()], None)
                .lines()
                .filter(|l| l.split_whitespace().count() == 7)
                .count();
            assert!(deltas > 5, "the pack has deltas to resolve ({deltas})");
            assert!(found.contains(&Kind::Tag) && found.contains(&Kind::Tree), "every kind is in it");
        }
    }
}
