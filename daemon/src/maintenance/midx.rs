//! The multi-pack-index geometric maintenance writes over the packs it leaves (git's `repack
//! --geometric=2 -d --write-midx -b`): gix-pack writes the MIDX (`write_from_index_paths`);
//! its reverse index (`multi-pack-index-<checksum>.rev`, the pseudo-pack order: the big pack
//! first, then each other pack in pack-id and offset order) and its bitmap are gixd's own
//! ([`crate::bitmap::write`]), as gix-pack writes neither, nor a preferred pack. Both land
//! before the MIDX naming them, so a reader never meets a MIDX without its bitmap.

use std::path::{Path, PathBuf};

use gix_hash::ObjectId;

use super::MaintenanceError;

fn path(pack_dir: &Path) -> PathBuf {
    pack_dir.join("multi-pack-index")
}

/// Remove the MIDX of `pack_dir` and its bitmaps and reverse indexes (all but those of
/// `keep`, a checksum), the MIDX first: a reader finds the others through it.
pub fn remove(pack_dir: &Path, keep: Option<&ObjectId>) {
    if keep.is_none() {
        let _ = std::fs::remove_file(path(pack_dir));
    }
    let kept = keep.map(|c| format!("multi-pack-index-{}.", c.to_hex()));
    for entry in std::fs::read_dir(pack_dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("multi-pack-index-")
            && (name.ends_with(".bitmap") || name.ends_with(".rev"))
            && kept.as_ref().is_none_or(|k| !name.starts_with(k.as_str()))
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Write a MIDX over the packs whose indexes are `indexes`, with `preferred` (one of them, the
/// big pack) first in its pseudo-pack order, and its bitmap with commits chosen among those
/// `tips` reach. Returns how many commit bitmaps were written: 0 when the MIDX went without
/// one, because gix-pack's MIDX took some of `preferred`'s objects from another pack (it keeps
/// the newest pack's copy; git reuses the preferred pack's entries by position, which needs
/// every one of them).
pub fn write(
    repo: &gix::Repository,
    pack_dir: &Path,
    indexes: Vec<PathBuf>,
    preferred: &Path,
    tips: &[ObjectId],
) -> Result<usize, MaintenanceError> {
    let hash = repo.object_hash();
    let tmp = pack_dir.join(format!("tmp_midx_gixd_{}", std::process::id()));
    let written = write_midx(repo, pack_dir, indexes, preferred, tips, &tmp);
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    let (checksum, bitmaps) = written?;
    std::fs::rename(&tmp, path(pack_dir))?;
    remove(pack_dir, Some(&checksum));
    tracing::debug!(pack_dir = %pack_dir.display(), %checksum, bitmaps, ?hash, "multi-pack-index written");
    Ok(bitmaps)
}

fn write_midx(
    repo: &gix::Repository,
    pack_dir: &Path,
    indexes: Vec<PathBuf>,
    preferred: &Path,
    tips: &[ObjectId],
    tmp: &Path,
) -> Result<(ObjectId, usize), MaintenanceError> {
    let hash = repo.object_hash();
    {
        let mut out = std::io::BufWriter::new(std::fs::File::create(tmp)?);
        let interrupt = std::sync::atomic::AtomicBool::new(false);
        gix_pack::multi_index::write_from_index_paths(
            indexes,
            &mut out,
            &mut gix::progress::Discard,
            &interrupt,
            gix_pack::multi_index::write::Options { object_hash: hash },
        )
        .map_err(MaintenanceError::pack)?;
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    }
    let midx = gix_pack::multi_index::File::at(tmp, None).map_err(MaintenanceError::pack)?;
    let checksum = midx.checksum();
    let preferred_name = preferred.file_name().map(PathBuf::from);
    let preferred_id = midx
        .index_names()
        .iter()
        .position(|name| Some(name) == preferred_name.as_ref())
        .ok_or_else(|| MaintenanceError::corrupt("the preferred pack is not in the multi-pack-index"))?
        as u32;
    let mut locations = Vec::with_capacity(midx.num_objects() as usize);
    for i in 0..midx.num_objects() {
        let (pack, offset) = midx.pack_id_and_pack_offset_at_index(i).map_err(MaintenanceError::pack)?;
        locations.push((pack != preferred_id, pack, offset, i));
    }
    let preferred_objects = gix_pack::index::File::at(preferred, hash).map_err(MaintenanceError::pack)?.num_objects();
    if locations.iter().filter(|l| !l.0).count() != preferred_objects as usize {
        return Ok((checksum, 0));
    }
    locations.sort_unstable();
    let order: Vec<u32> = locations.into_iter().map(|(_, _, _, i)| i).collect();
    let name = |ext: &str| pack_dir.join(format!("multi-pack-index-{}.{ext}", checksum.to_hex()));
    crate::bitmap::write::write_rev_for(&name("rev"), &checksum, &order, hash)?;
    // The closures of the bitmap the pack directory has now (the MIDX's this one replaces, or
    // the big pack's own) are carried over, not walked again.
    let old_bitmap = crate::bitmap::any_in(pack_dir, hash);
    let over = crate::bitmap::write::Over {
        id_at: &|i| midx.oid_at_index(i).to_owned(),
        lookup: &|id| midx.lookup(id),
        checksum,
        carried: old_bitmap.as_ref(),
    };
    let written = crate::bitmap::write::write_bitmap_over(repo, &over, &order, None, tips, &name("bitmap"), hash);
    drop(old_bitmap);
    match written {
        Ok(written) => Ok((checksum, written.commits)),
        // An object reachable from a ref is in none of the packs (written loose meanwhile): the
        // MIDX goes without a bitmap.
        Err(err) => {
            tracing::info!(pack_dir = %pack_dir.display(), %err, "multi-pack-index left without a bitmap");
            let _ = std::fs::remove_file(name("rev"));
            Ok((checksum, 0))
        }
    }
}
