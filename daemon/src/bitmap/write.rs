//! Writing git's reverse index (`.rev`) and bitmap (`.bitmap`) for one pack or for a
//! multi-pack-index ([`Over`] names the ids either way), as `technical/pack-format` and
//! `technical/bitmap-format` describe them and git reads them (`git rev-list --test-bitmap`
//! accepts the result): the writing half beside the reading one.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use gix_hash::ObjectId;
use gix_object::{Find, Kind};

use super::Bits;
use crate::error::ServeError;

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

/// Write `bytes` followed by their checksum to `path`, through a temporary file.
fn write_checksummed(path: &Path, bytes: &[u8], hash: gix_hash::Kind) -> Result<(), ServeError> {
    let mut hasher = gix_hash::hasher(hash);
    hasher.update(bytes);
    let digest = hasher.try_finalize().map_err(ServeError::pack)?;
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    file.write_all(digest.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// `technical/pack-format`'s reverse index: `RIDX`, version 1, hash id, index positions in pack
/// order, the pack's checksum, then the file's.
pub fn write_rev(
    path: &Path,
    index: &gix_pack::index::File,
    order: &[u32],
    hash: gix_hash::Kind,
) -> Result<(), ServeError> {
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
) -> Result<(), ServeError> {
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

/// The ids a bitmap is written over: a pack's index, or a multi-pack-index's.
pub struct Over<'a> {
    /// The id at an index position.
    pub id_at: &'a dyn Fn(u32) -> ObjectId,
    /// The index position of an id.
    pub lookup: &'a dyn Fn(&gix_hash::oid) -> Option<u32>,
    /// The checksum of what the bitmap is for (the pack's, the MIDX's).
    pub checksum: ObjectId,
}

/// The commits that get a bitmap: every ref tip that is a commit, and one commit in 100 of the
/// rest, newest first.
fn select_commits(repo: &gix::Repository, tips: &[ObjectId]) -> Result<Vec<ObjectId>, ServeError> {
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
        for (i, info) in walk.enumerate() {
            let info = info?;
            if i % 100 == 99 && !chosen.contains(&info.id) {
                chosen.push(info.id);
            }
        }
    }
    Ok(chosen)
}

/// A commit's committer time, read once (`times` keeps it).
fn commit_time(
    objects: &gix_odb::Handle,
    times: &mut gix::hashtable::HashMap<ObjectId, i64>,
    id: &ObjectId,
    buf: &mut Vec<u8>,
) -> Result<i64, ServeError> {
    if let Some(t) = times.get(id) {
        return Ok(*t);
    }
    let data = objects.try_find(id, buf)?.ok_or(ServeError::MissingObject(*id))?;
    let time = gix_object::CommitRefIter::from_bytes(data.data, id.kind())
        .committer()
        .map_or(0, |c| c.time().map_or(0, |t| t.seconds));
    times.insert(*id, time);
    Ok(time)
}

/// Bytes of decoded trees and commits kept while the commit closures are computed. Since the
/// closures go in time order (each meets the trees its predecessor did not hold) the caches are
/// seldom hit again: at 256 MiB each they made a third of a repack's peak memory (cargo after 40
/// pushes) for no CPU the smaller ones cost.
const CLOSURE_OBJECT_CACHE: usize = 16 << 20;
/// The delta bases kept while the closures decode trees from the new pack.
const CLOSURE_DELTA_CACHE: usize = 32 << 20;

/// `technical/bitmap-format` version 1 with `BITMAP_OPT_FULL_DAG`: the four type bitmaps, then
/// one bitmap per chosen commit (no XOR compression), then the checksum. Returns how many commit
/// bitmaps were written.
pub fn write_bitmap(
    repo: &gix::Repository,
    index: &gix_pack::index::File,
    order: &[u32],
    tips: &[ObjectId],
    path: &Path,
    hash: gix_hash::Kind,
) -> Result<usize, ServeError> {
    let over = Over {
        id_at: &|i| index.oid_at_index(i).to_owned(),
        lookup: &|id| index.lookup(id),
        checksum: index.pack_checksum(),
    };
    write_bitmap_over(repo, &over, order, tips, path, hash)
}

/// [`write_bitmap`] over any ids: a pack's, or a multi-pack-index's (`order` its pseudo-pack
/// order).
pub fn write_bitmap_over(
    repo: &gix::Repository,
    index: &Over<'_>,
    order: &[u32],
    tips: &[ObjectId],
    path: &Path,
    hash: gix_hash::Kind,
) -> Result<usize, ServeError> {
    let n = order.len();
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
        let id = (index.id_at)(*idx_pos);
        let kind = repo.find_header(id).map_err(|_| ServeError::MissingObject(id))?.kind();
        let slot = match kind {
            Kind::Commit => 0,
            Kind::Tree => 1,
            Kind::Blob => 2,
            Kind::Tag => 3,
        };
        types[slot].set(pack_pos);
    }
    // Each commit's closure walks the trees its older closures do not hold, and the same trees
    // come up again under later commits: decoded trees and commits stay in an object cache.
    let mut objects = repo.objects.clone();
    objects.set_pack_cache(|| Box::new(gix_pack::cache::lru::MemoryCappedHashmap::new(CLOSURE_DELTA_CACHE)));
    objects.set_object_cache(|| Box::new(gix_pack::cache::object::MemoryCappedHashmap::new(CLOSURE_OBJECT_CACHE)));
    // Commit times, read once for the order of the closures and for every walk below.
    let mut times: gix::hashtable::HashMap<ObjectId, i64> = gix::hashtable::HashMap::default();
    // Commit closures, oldest chosen commit first so later ones reuse earlier closures.
    let mut chosen: Vec<(i64, ObjectId)> = select_commits(repo, tips)?
        .into_iter()
        .map(|id| Ok((commit_time(&objects, &mut times, &id, &mut buf)?, id)))
        .collect::<Result<_, ServeError>>()?;
    chosen.sort_by_key(|(time, _)| *time); // stable: equal times keep their order
    let chosen: Vec<ObjectId> = chosen.into_iter().map(|(_, id)| id).collect();
    let mut closures: HashMap<ObjectId, Bits> = HashMap::new();
    for commit in &chosen {
        let mut bits = Bits::new(n);
        // 1. The commits, newest first: where the walk meets a chosen commit it takes that
        //    commit's closure whole. In time order a side branch's old base is met after the
        //    newer closure that holds it, not walked again below it (depth first, git.git's
        //    merges of topics forked long ago had every bitmap walk thousands of commits).
        let mut queue = std::collections::BinaryHeap::new();
        queue.push((commit_time(&objects, &mut times, commit, &mut buf)?, *commit));
        let mut trees = Vec::new();
        while let Some((_, id)) = queue.pop() {
            let pos = pos_of(&id).ok_or(ServeError::MissingObject(id))?;
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
            let data = objects.try_find(&id, &mut buf)?.ok_or(ServeError::MissingObject(id))?;
            let parsed = gix_object::CommitRefIter::from_bytes(data.data, hash);
            trees.push(parsed.clone().tree_id().map_err(|_| ServeError::MissingObject(id))?);
            let parents: Vec<ObjectId> = parsed.parent_ids().collect();
            for parent in parents {
                queue.push((commit_time(&objects, &mut times, &parent, &mut buf)?, parent));
            }
        }
        // 2. The trees of the commits it walked, against everything the closures it met hold.
        let mut stack: Vec<(ObjectId, Kind)> = trees.into_iter().map(|tree| (tree, Kind::Tree)).collect();
        while let Some((id, _)) = stack.pop() {
            let pos = pos_of(&id).ok_or(ServeError::MissingObject(id))?;
            if bits.get(pos) {
                continue;
            }
            bits.set(pos);
            if types[2].get(pos) {
                continue; // a blob has nothing below it: not read
            }
            let data = objects.try_find(&id, &mut buf)?.ok_or(ServeError::MissingObject(id))?;
            crate::graph::push_children(id, data.kind, data.data, &mut stack)?;
        }
        closures.insert(*commit, bits);
    }
    let ewah = |bits: &Bits| -> Result<Vec<u8>, ServeError> {
        let flags: Vec<bool> = (0..n).map(|i| bits.get(i)).collect();
        let vec =
            gix_bitmap::ewah::Vec::from_bits(&flags).ok_or_else(|| ServeError::corrupt_pack("bitmap too large"))?;
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
        let idx_pos = (index.lookup)(commit).ok_or(ServeError::MissingObject(*commit))?;
        out.extend(idx_pos.to_be_bytes());
        out.push(0); // no XOR
        out.push(0); // flags
        out.extend(ewah(&closures[commit])?);
    }
    write_checksummed(path, &out, hash)?;
    Ok(chosen.len())
}
