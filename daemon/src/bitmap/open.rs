//! Opening a bitmap (object selection layer): a pack's own `.bitmap` or a multi-pack-index's
//! (`multi-pack-index-<checksum>.bitmap`) mapped into a [`PackBitmap`] — the file checked (its
//! checksum, once per file: [`crate::repo::checked`]; and that it was written for this pack or
//! MIDX), the type bitmaps and commit entries parsed, the positions' order taken from the reverse
//! index — and which of a repository's bitmaps serves it ([`of`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use gix_hash::ObjectId;

use super::tables::{Order, Shared, Stored, map};
use super::{BitmapError, Bits, Ids, PackBitmap, fanout_table, write};

/// The most packs of a multi-pack-index whose entries are copied as they stand (each held open
/// and mapped with its bitmap): geometric maintenance leaves a handful; the rest of a MIDX over
/// hundreds of packs goes out entry by entry.
const REUSED_PACKS: usize = 16;

/// What a `.bitmap` file holds past its header, for `n` objects: the type bitmaps, and where
/// each commit's bitmap starts in the file with the entry it is XOR'ed against.
struct Parsed {
    types: [Bits; 4],
    entries: Vec<(usize, usize)>,
    by_commit: HashMap<ObjectId, usize>,
}

/// Check and parse the bitmap `data` mapped from `file` at `path`: its trailing checksum, magic,
/// version, that it was written for what has the checksum `expected` (the pack's, or the
/// multi-pack-index's), the type bitmaps and the commit entries (`id_at`: the id at an index
/// position).
fn parse(
    path: &Path,
    (data, file): (&[u8], &std::fs::File),
    hash: gix_hash::Kind,
    n: usize,
    expected: &gix_hash::oid,
    id_at: impl Fn(u32) -> ObjectId,
) -> Result<Parsed, BitmapError> {
    let corrupt = |message: &str| BitmapError::Corrupt { path: path.to_owned(), message: message.to_owned() };
    let hash_len = hash.len_in_bytes();
    // The whole file is covered by its trailing checksum.
    if data.len() < 12 + 2 * hash_len {
        return Err(corrupt("truncated"));
    }
    if !crate::repo::checked::trailer_matches(file, data, hash) {
        return Err(corrupt("checksum mismatch"));
    }
    let body = &data[..data.len() - hash_len];
    if &data[0..4] != b"BITM" {
        return Err(corrupt("not a bitmap (magic)"));
    }
    let version = u16::from_be_bytes([data[4], data[5]]);
    if version != 1 {
        return Err(corrupt(&format!("version {version}")));
    }
    let entries = be32(data, 8).ok_or_else(|| corrupt("header"))? as usize;
    if &data[12..12 + hash_len] != expected.as_bytes() {
        return Err(BitmapError::Stale { path: path.to_owned() });
    }
    let mut rest = &body[12 + hash_len..];
    let mut types = Vec::with_capacity(4);
    for _ in 0..4 {
        let (ewah, tail) = gix_bitmap::ewah::decode(rest).map_err(|e| corrupt(&format!("type bitmap: {e}")))?;
        types.push(Bits::from_ewah(&ewah, n).ok_or_else(|| corrupt("type bitmap out of range"))?);
        rest = tail;
    }
    let mut stored = Vec::with_capacity(entries.min(n));
    let mut by_commit = HashMap::with_capacity(entries.min(n));
    for i in 0..entries {
        let position = be32(rest, 0).ok_or_else(|| corrupt("entry"))? as usize;
        let xor = *rest.get(4).ok_or_else(|| corrupt("entry"))? as usize;
        let bitmap = rest.get(6..).ok_or_else(|| corrupt("entry"))?;
        // Only stepped over now: decoded when a walk meets the commit (from the mapped file), and
        // one that does not decode then is walked instead ([`super::tables::Stored`]).
        let tail = ewah_skipped(bitmap).ok_or_else(|| corrupt(&format!("entry {i}: truncated")))?;
        let at = bitmap.as_ptr() as usize - data.as_ptr() as usize;
        rest = tail;
        if position >= n || xor > i {
            return Err(corrupt(&format!("entry {i} out of range")));
        }
        by_commit.insert(id_at(position as u32), i);
        stored.push((at, xor));
    }
    // What follows (name-hash cache, lookup table) is optional and not needed here.
    Ok(Parsed { types: types.try_into().expect("four"), entries: stored, by_commit })
}

/// A multi-pack-index's reverse index (pseudo-pack position → MIDX position): its `RIDX`
/// chunk (git writes one with every MIDX bitmap), else the `multi-pack-index-<checksum>.rev`
/// file older gits wrote beside it. `None`: neither, or one that does not read.
fn midx_reverse_index(raw: &Shared, pack_dir: &Path, checksum: &gix_hash::oid, n: usize) -> Option<Order> {
    let be32s = |bytes: &[u8]| -> Vec<u32> {
        bytes.chunks_exact(4).map(|c| u32::from_be_bytes(c.try_into().expect("four bytes"))).collect()
    };
    let num_chunks = *raw.get(6)? as u32;
    if let Ok(toc) = gix_chunk::file::Index::from_bytes(raw, 12, num_chunks)
        && let Ok(range) = toc.offset_by_id(*b"RIDX")
    {
        let range = usize::try_from(range.start).ok()?..usize::try_from(range.end).ok()?;
        return (range.len() == 4 * n).then(|| Order::chunk(raw.clone(), range.start, n)).flatten();
    }
    let rev = std::fs::read(pack_dir.join(format!("multi-pack-index-{}.rev", checksum.to_hex()))).ok()?;
    // `RIDX`, version 1, hash id, the positions, the MIDX's checksum and the file's own.
    let body = rev.get(12..12 + 4 * n)?;
    (rev.get(0..4)? == b"RIDX").then(|| Order::Owned(be32s(body)))
}

/// What follows the EWAH bitmap at the start of `data` (its bit count, word count, the words
/// and the position of the last run-length word), or `None` if it does not fit.
fn ewah_skipped(data: &[u8]) -> Option<&[u8]> {
    let words = be32(data, 4)? as usize;
    data.get(8usize.checked_add(words.checked_mul(8)?)?.checked_add(4)?..)
}

fn be32(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(data.get(at..at + 4)?.try_into().ok()?))
}

impl PackBitmap {
    /// Open the bitmap of the pack whose index is `idx` (its `.bitmap` beside it). `Ok(None)`:
    /// the pack has no bitmap.
    pub fn open(idx: &Path, hash: gix_hash::Kind) -> Result<Option<PackBitmap>, BitmapError> {
        let path = idx.with_extension("bitmap");
        let Some((data, file)) = map(&path)? else { return Ok(None) };
        let corrupt = |message: &str| BitmapError::Corrupt { path: path.clone(), message: message.to_owned() };
        let index = gix_pack::index::File::at(idx, hash)
            .map_err(|e| BitmapError::Index { path: idx.to_owned(), message: e.to_string() })?;
        let n = index.num_objects() as usize;
        let parsed =
            parse(&path, (&data, &file), hash, n, &index.pack_checksum(), |i| index.oid_at_index(i).to_owned())?;
        let order = match Order::map_rev(&idx.with_extension("rev"), n, &index.pack_checksum(), hash) {
            Some(order) => order,
            None => Order::Owned(write::pack_order(&index)),
        };
        // Pack order is offset order: positions are found by offset until a table pays
        // ([`super::Position`]); a reverse index that is not is refused now.
        let mut previous = None;
        for pos in 0..n {
            let i = order.get(pos);
            let offset = (i < n as u32).then(|| index.pack_offset_at_index(i));
            if offset.is_none() || offset <= previous {
                return Err(corrupt("the reverse index is not in pack order"));
            }
            previous = offset;
        }
        let position = super::Position::Searched { table: Default::default(), lookups: Default::default() };
        let pack = idx.with_extension("pack");
        // Mapped now and held with the bitmap: `git repack` renames and deletes packs while
        // requests read them, and a mapping outlives the name (a path opened per request fails).
        let pack_data = crate::pack_ranges::open_data(&pack, hash)
            .map_err(|message| BitmapError::Pack { path: pack.clone(), message })?;
        if pack_data.num_objects() as usize != n {
            return Err(corrupt("the pack beside the index holds another number of objects"));
        }
        Ok(Some(PackBitmap::new(
            pack,
            std::sync::Arc::new(pack_data),
            Ids::Pack(index),
            order,
            position,
            (data, parsed),
        )))
    }

    /// Open the bitmap of the multi-pack-index in `pack_dir` (`multi-pack-index-<its
    /// checksum>.bitmap`, as `git multi-pack-index write --bitmap` and `git repack --write-midx
    /// -b` write it). `Ok(None)`: there is no MIDX, or it has no bitmap. Its positions are over
    /// every pack the MIDX names, the preferred pack's first; entries are reused from each pack
    /// that holds no object the MIDX picks from another (git's multi-pack reuse of disjoint
    /// packs, its facts derived from the reverse index's runs rather than a `BTMP` chunk).
    pub fn open_midx(pack_dir: &Path, hash: gix_hash::Kind) -> Result<Option<PackBitmap>, BitmapError> {
        let midx_path = pack_dir.join("multi-pack-index");
        // Shared with the parsed MIDX, which keeps it: the reverse index is read from it too.
        let Some((raw, file)) = map(&midx_path)? else { return Ok(None) };
        // Its trailing checksum first: a damaged offset table would place bits on other objects.
        if !crate::repo::checked::trailer_matches(&file, &raw, hash) {
            return Err(BitmapError::Index { path: midx_path, message: "checksum mismatch: damaged".into() });
        }
        let raw = Shared(std::sync::Arc::new(raw));
        let index = gix_pack::multi_index::File::from_data(raw.clone(), midx_path.clone(), Some(1 << 30))
            .map_err(|e| BitmapError::Index { path: midx_path.clone(), message: e.to_string() })?;
        if index.object_hash() != hash {
            return Err(BitmapError::Index { path: midx_path, message: "written for another hash".into() });
        }
        let checksum = index.checksum();
        let path = pack_dir.join(format!("multi-pack-index-{}.bitmap", checksum.to_hex()));
        let Some((data, file)) = map(&path)? else { return Ok(None) };
        // A MIDX naming a pack a repack deleted (git rewrites it on its next repack) is stale.
        if let Some(gone) = index
            .index_names()
            .iter()
            .map(|name| pack_dir.join(name))
            .find(|index| !index.is_file() || !index.with_extension("pack").is_file())
        {
            let message = format!("it names {}, which is gone: stale", gone.display());
            return Err(BitmapError::Index { path: midx_path, message });
        }
        let corrupt = |message: &str| BitmapError::Corrupt { path: path.clone(), message: message.to_owned() };
        let n = index.num_objects() as usize;
        let parsed = parse(&path, (&data, &file), hash, n, &checksum, |i| index.oid_at_index(i).to_owned())?;
        let order = midx_reverse_index(&raw, pack_dir, &checksum, n)
            .ok_or_else(|| corrupt("the multi-pack-index has no reverse index that reads"))?;
        let position = order.inverse(n).ok_or_else(|| corrupt("the reverse index is no permutation"))?;
        // Each position's pack and offset, read in the MIDX's order (its offsets table front to
        // back, not at random: a cold open pays for the table once, not per position).
        let mut located = vec![(0u32, 0u64); n];
        for (i, pos) in position.iter().enumerate() {
            located[*pos as usize] =
                index.pack_id_and_pack_offset_at_index(i as u32).map_err(|e| corrupt(&format!("entry {i}: {e}")))?;
        }
        let position = super::Position::Table(position);
        // The preferred pack: the one of the first position. Its objects lead the order, by
        // offset; all of them (the MIDX picks the preferred pack's copy of an object first).
        // Each other pack's objects follow as one run, by offset too.
        let mut offsets = Vec::with_capacity(n);
        let mut runs: Vec<(u32, std::ops::Range<usize>)> = Vec::new();
        for (pos, (pack_id, offset)) in located.into_iter().enumerate() {
            match runs.last_mut() {
                Some((id, run)) if *id == pack_id => {
                    if offsets.last().is_some_and(|last| *last >= offset) {
                        return Err(corrupt("a pack's objects are not in pack order"));
                    }
                    run.end = pos + 1;
                }
                _ => runs.push((pack_id, pos..pos + 1)),
            }
            offsets.push(offset);
        }
        let preferred = runs.first().map_or(0, |(id, _)| *id);
        let pack_path = |id: u32| {
            index
                .index_names()
                .get(id as usize)
                .map(|name| pack_dir.join(name).with_extension("pack"))
                .ok_or_else(|| corrupt("a pack id the MIDX does not name"))
        };
        let pack = pack_path(preferred)?;
        let open_pack = |path: &Path| {
            crate::pack_ranges::open_data(path, hash)
                .map(std::sync::Arc::new)
                .map_err(|message| BitmapError::Pack { path: path.to_owned(), message })
        };
        let pack_data = open_pack(&pack)?;
        // The packs copied as they stand. The preferred pack when it is the big pack, all of it
        // in the MIDX (`git multi-pack-index write` prefers the oldest pack, a push's whose thin
        // bases are stored whole: their objects go out from their smallest stored copy,
        // [`crate::packs`]; the bits still answer reachability). Then, up to [`REUSED_PACKS`]
        // (each held open with the bitmap), the most objects first, each other pack that shares
        // no object with another: a roll-up, or a push of new history, whose whole entries are
        // what a delta search left whole. Not a push completed with its thin bases, stored whole,
        // though the MIDX picks them from it: the copies another pack holds too.
        let mut by_size: Vec<&(u32, std::ops::Range<usize>)> = runs.iter().collect();
        by_size.sort_by_key(|(_, run)| std::cmp::Reverse(run.len())); // stable: pack order among equals
        let others: Vec<&(u32, std::ops::Range<usize>)> =
            by_size.iter().copied().filter(|(id, _)| *id != preferred).take(REUSED_PACKS - 1).collect();
        let shares = if others.is_empty() { Vec::new() } else { packs_sharing_objects(&index, pack_dir, &runs)? };
        let mut reusable = Vec::new();
        if let Some((_, run)) = runs.first().filter(|(_, run)| run.len() * 2 >= n)
            && pack_data.num_objects() as usize == run.len()
        {
            reusable.push(super::Reusable::whole(pack_data.clone(), run.clone()));
        }
        for (pack_id, run) in others {
            if shares.get(*pack_id as usize).is_some_and(|shares| !shares) {
                let data = open_pack(&pack_path(*pack_id)?)?;
                if data.num_objects() as usize == run.len() {
                    reusable.push(super::Reusable::whole(data, run.clone()));
                }
            }
        }
        reusable.sort_by_key(|r| r.run.start);
        let by_pack = by_size.into_iter().map(|(_, run)| run.clone()).collect();
        let mut bitmap =
            PackBitmap::new(pack, pack_data, Ids::Multi { index, offsets, by_pack }, order, position, (data, parsed));
        bitmap.reusable = reusable;
        Ok(Some(bitmap))
    }
}

/// For each pack a multi-pack-index names (by pack id), whether it shares an object with another:
/// a pack of which the MIDX does not pick every object (`runs`: each pack's positions) names,
/// through the MIDX, the packs its other objects were picked from.
fn packs_sharing_objects(
    index: &gix_pack::multi_index::File<Shared>,
    pack_dir: &Path,
    runs: &[(u32, std::ops::Range<usize>)],
) -> Result<Vec<bool>, BitmapError> {
    let names = index.index_names();
    let mut picked = vec![0usize; names.len()];
    for (id, run) in runs {
        picked[*id as usize] += run.len();
    }
    let mut shares = vec![false; names.len()];
    for (id, name) in names.iter().enumerate() {
        let path = pack_dir.join(name);
        let pack_index = gix_pack::index::File::at(&path, index.object_hash())
            .map_err(|e| BitmapError::Index { path: path.clone(), message: e.to_string() })?;
        if pack_index.num_objects() as usize == picked[id] {
            continue;
        }
        shares[id] = true;
        for entry in pack_index.iter() {
            let Some(at) = index.lookup(entry.oid) else { continue };
            if let Ok((other, _)) = index.pack_id_and_pack_offset_at_index(at)
                && let Some(other) = shares.get_mut(other as usize)
            {
                *other = true;
            }
        }
    }
    Ok(shares)
}

impl PackBitmap {
    /// `file`: the mapped `.bitmap`, which `parsed` was read from.
    fn new(
        pack: PathBuf,
        data: std::sync::Arc<crate::pack_ranges::PackData>,
        ids: Ids,
        order: Order,
        position: super::Position,
        (file, parsed): (memmap2::Mmap, Parsed),
    ) -> PackBitmap {
        let fanout = fanout_table(&ids);
        let reusable = vec![super::Reusable::whole(data.clone(), 0..ids.num() as usize)];
        PackBitmap {
            pack,
            data,
            ids,
            reusable,
            order,
            position,
            fanout,
            types: parsed.types,
            stored: Stored { file, entries: parsed.entries },
            by_commit: parsed.by_commit,
            closures: Default::default(),
            commits: Default::default(),
        }
    }
}

/// A bitmap of the pack directory `pack_dir` as it is now, for a bitmap writer to take its
/// closures over ([`super::write::write_bitmap_over`]): the multi-pack-index's, else the first
/// pack's own that opens. `None` when none does (each refusal is only a walk more).
pub fn any_in(pack_dir: &Path, hash: gix_hash::Kind) -> Option<PackBitmap> {
    if let Ok(Some(bitmap)) = PackBitmap::open_midx(pack_dir, hash) {
        return Some(bitmap);
    }
    let mut indexes: Vec<PathBuf> = std::fs::read_dir(pack_dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "idx") && p.with_extension("bitmap").is_file())
        .collect();
    indexes.sort();
    indexes.into_iter().find_map(|idx| PackBitmap::open(&idx, hash).ok().flatten())
}

/// What the cached bitmap of a repository was read from: the `.bitmap` files of its pack
/// directory and their modification times, as a fingerprint.
fn bitmap_files_state(served: &crate::repo::Served) -> (u64, Vec<std::path::PathBuf>) {
    use std::hash::{Hash, Hasher};
    let pack_dir = served.git_dir.join("objects/pack");
    let mut files: Vec<(std::path::PathBuf, Option<std::time::SystemTime>)> = std::fs::read_dir(&pack_dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                // Packs' own bitmaps, a multi-pack-index's (`multi-pack-index-<hash>.bitmap`,
                // positions in the MIDX's order across packs) and the MIDX itself.
                .filter(|p| {
                    let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                    (name.starts_with("pack-") || name.starts_with("multi-pack-index"))
                        && (name == "multi-pack-index" || p.extension().is_some_and(|e| e == "bitmap"))
                        && !crate::packs::is_temporary(p)
                })
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
        .into_iter()
        .map(|p| {
            let time = std::fs::metadata(&p).and_then(|m| m.modified()).ok();
            (p, time)
        })
        .collect();
    files.sort();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    files.hash(&mut h);
    (h.finish(), files.into_iter().map(|(p, _)| p).collect())
}

/// The bitmap each repository has (or the `None` it was refused with), per state of its bitmap
/// files: what [`of`] keeps.
pub type Cache = crate::repo::cache::PerRepository<Option<std::sync::Arc<PackBitmap>>>;

/// The bitmap of a repository, if it has a usable one: its multi-pack-index's (git's
/// `repack --write-midx -b`, `multi-pack-index write --bitmap`) where the MIDX is there and names
/// no deleted pack ([`crate::repo::midx`]), as git prefers it, else a pack's own (git writes one
/// per repack with `-b`; with several, the first pack's is used). Read once per file state; a
/// stale or corrupt one is logged once (the `None` is cached too) and the next candidate, or the
/// walk, serves instead.
pub fn of(
    cache: &Cache,
    repos: &crate::repo::Repos,
    served: &crate::repo::Served,
    repo: &gix::Repository,
) -> Option<std::sync::Arc<PackBitmap>> {
    let (state, files) = bitmap_files_state(served);
    let cached = cache.get_or_compute(
        served,
        state,
        || -> Result<Option<std::sync::Arc<PackBitmap>>, std::convert::Infallible> {
            let hash = repo.object_hash();
            let pack_dir = served.git_dir.join("objects/pack");
            // A damaged or stale MIDX is refused by `open_midx` itself (its checksum, the packs it names).
            let midx = files.iter().any(|p| p.file_name().is_some_and(|n| n == "multi-pack-index"));
            let candidates = midx.then_some(None).into_iter().chain(
                files
                    .iter()
                    .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("pack-")))
                    .take(1)
                    .map(Some),
            );
            for candidate in candidates {
                let opened = match candidate {
                    None => PackBitmap::open_midx(&pack_dir, hash),
                    Some(path) => PackBitmap::open(&path.with_extension("idx"), hash),
                };
                match opened {
                    // Its reaches decode commits into the repository's cache, which negotiation fills too.
                    Ok(Some(bitmap)) => {
                        return Ok(Some(std::sync::Arc::new(PackBitmap { commits: repos.commits(served), ..bitmap })));
                    }
                    Ok(None) => {}
                    Err(err) => tracing::warn!(repo = %served.name, %err, "bitmap not used"),
                }
            }
            Ok(None)
        },
    );
    match cached {
        Ok(bitmap) => (*bitmap).clone(),
        Err(never) => match never {},
    }
}
