//! Maintenance (repository access layer): repack everything reachable from the refs into one
//! pack, in-process, and write its reverse index (`.rev`) and bitmap (`.bitmap`) the way git
//! reads them — so a repository that only ever received pushes gets bitmaps without an external
//! git. Nothing is lost: an old pack is deleted only when every one of its objects is in the new
//! pack, a loose object only when it is; objects nobody references stay where they were.

use std::io::Write;
use std::path::{Path, PathBuf};

use gix_hash::ObjectId;

use crate::bitmap::write::{pack_order, write_bitmap, write_rev};
use crate::error::ServeError;

/// What a maintenance run did.
#[derive(Debug, Default)]
pub struct Report {
    pub objects: usize,
    pub pack: PathBuf,
    pub bitmaps: usize,
    pub packs_removed: usize,
    pub loose_removed: usize,
}

/// Repack `git_dir` into one pack with a `.rev` and a `.bitmap`.
pub fn run(git_dir: &Path) -> Result<Report, ServeError> {
    let repo = gix::open_opts(git_dir, gix::open::Options::isolated().strict_config(false)).map_err(ServeError::pack)?;
    let hash = repo.object_hash();
    let objects_dir = repo.objects.store_ref().path().to_owned();
    let pack_dir = objects_dir.join("pack");
    std::fs::create_dir_all(&pack_dir)?;

    // 1. Everything reachable from every ref and HEAD (hidden refs too: this is the repository,
    //    not a client's view of it).
    let refs = crate::repo::RefSnapshot::load_hiding_nothing(&repo)?;
    let tips = refs.tips();
    let reachable = crate::select::reachable_from(&repo, &tips)?;
    let mut ids: Vec<ObjectId> = reachable.into_iter().collect();
    ids.sort();

    // 2. A pack of them (stored deltas kept, their bases being in it too), indexed into place.
    let scratch = objects_dir.join(format!("gixd-maintenance-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let result = write_pack(&repo, &ids, &scratch, &pack_dir, hash);
    let _ = std::fs::remove_dir_all(&scratch);
    let (index_path, data_path) = result?;

    // 3. The reverse index and the bitmap.
    let index = gix_pack::index::File::at(&index_path, hash).map_err(ServeError::pack)?;
    let order = pack_order(&index);
    write_rev(&index_path.with_extension("rev"), &index, &order, hash)?;
    let bitmaps = write_bitmap(&repo, &index, &order, &tips, &index_path.with_extension("bitmap"), hash)?;

    // 4. Old packs and loose objects whose every object is in the new pack.
    let mut report = Report { objects: ids.len(), pack: data_path.clone(), bitmaps, ..Report::default() };
    for entry in std::fs::read_dir(&pack_dir)?.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "idx") || path == index_path {
            continue;
        }
        let Ok(old) = gix_pack::index::File::at(&path, hash) else { continue };
        if old.iter().all(|e| index.lookup(e.oid).is_some()) {
            // The index first: readers find packs by it.
            for ext in ["idx", "pack", "rev", "bitmap", "keep"] {
                let _ = std::fs::remove_file(path.with_extension(ext));
            }
            report.packs_removed += 1;
        }
    }
    for fanout in std::fs::read_dir(&objects_dir)?.flatten() {
        let name = fanout.file_name();
        let Some(prefix) = name.to_str().filter(|n| n.len() == 2 && n.bytes().all(|b| b.is_ascii_hexdigit())) else { continue };
        for loose in std::fs::read_dir(fanout.path())?.flatten() {
            let hex = format!("{prefix}{}", loose.file_name().to_string_lossy());
            if let Ok(id) = ObjectId::from_hex(hex.as_bytes())
                && index.lookup(id).is_some()
                && std::fs::remove_file(loose.path()).is_ok()
            {
                report.loose_removed += 1;
            }
        }
        let _ = std::fs::remove_dir(fanout.path()); // only if empty
    }
    Ok(report)
}

fn write_pack(repo: &gix::Repository, ids: &[ObjectId], scratch: &Path, pack_dir: &Path, hash: gix_hash::Kind) -> Result<(PathBuf, PathBuf), ServeError> {
    use gix_pack::data::output;
    // Every object is in: a base outside the selection is never met.
    let (num_entries, chunks) = crate::pack::gix_entries(repo, ids.iter().copied(), false, |_: &gix_hash::oid| output::entry::iter_from_counts::DeltaBase::Recompress)?;
    let tmp_pack = scratch.join("all.pack");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&tmp_pack)?);
    let entries = chunks.map(|chunk| chunk.map(|(_, entries)| entries));
    for step in output::bytes::FromEntriesIter::new(entries, &mut file, num_entries as u32, gix_pack::data::Version::V2, hash) {
        step.map_err(ServeError::pack)?;
    }
    file.flush()?;
    drop(file);
    let mut reader = std::io::BufReader::new(std::fs::File::open(&tmp_pack)?);
    let outcome = gix_pack::Bundle::write_to_directory(
        &mut reader,
        Some(pack_dir),
        &mut gix_utils::progress::Discard,
        &std::sync::atomic::AtomicBool::new(false),
        None::<gix_odb::Handle>,
        hash,
        gix_pack::bundle::write::Options { thread_limit: Some(1), ..Default::default() },
    )
    .map_err(ServeError::pack)?;
    if let Some(keep) = &outcome.keep_path {
        let _ = std::fs::remove_file(keep);
    }
    match (outcome.index_path, outcome.data_path) {
        (Some(index), Some(data)) => Ok((index, data)),
        _ => Err(ServeError::corrupt_pack("the new pack was not written")),
    }
}

