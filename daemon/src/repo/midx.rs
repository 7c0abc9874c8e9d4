//! The multi-pack-index (`objects/pack/multi-pack-index`), as far as opening a repository goes:
//! whether gix may use it. gix-odb skips one that does not parse, but one that names a pack a
//! repack has deleted (a stale MIDX: git rewrites it on its next repack) makes every object of
//! that pack "missing", though a newer pack holds it. Such a MIDX is logged once and the
//! repository opened with `core.multiPackIndex=false`: each pack's own index serves.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// What was found at a repository's MIDX path, and the packs it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Midx {
    /// Modification time and length of the file; `None`: there is none.
    stamp: Option<(SystemTime, u64)>,
    /// The `.idx` and `.pack` files it names.
    named: Vec<PathBuf>,
    /// Why gix must not use it (`None`: usable, or absent).
    pub unusable: Option<String>,
}

fn path(git_dir: &Path) -> PathBuf {
    git_dir.join("objects/pack/multi-pack-index")
}

fn stamp(git_dir: &Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path(git_dir)).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// Read the MIDX of `git_dir` (if any) and check that every pack it names is there.
pub fn check(git_dir: &Path) -> Midx {
    let Some(stamp) = stamp(git_dir) else { return Midx { stamp: None, named: Vec::new(), unusable: None } };
    let pack_dir = git_dir.join("objects/pack");
    // A file that does not parse is skipped by gix-odb itself: each pack's index serves.
    let Ok(file) = gix_pack::multi_index::File::at(path(git_dir), None) else {
        return Midx { stamp: Some(stamp), named: Vec::new(), unusable: None };
    };
    // gix-odb trusts a MIDX that parses: one with a damaged offset table returns another
    // object's entry for an id (found by fuzzing its bytes). Its trailing checksum is checked
    // once per file state (a hash of the file: ~40 bytes per object).
    let interrupt = std::sync::atomic::AtomicBool::new(false);
    if let Err(err) = file.verify_checksum(&mut gix::progress::Discard, &interrupt) {
        let unusable = Some(format!("its checksum does not match its contents ({err}): damaged"));
        return Midx { stamp: Some(stamp), named: Vec::new(), unusable };
    }
    let named = named(&file, &pack_dir);
    let missing = named.iter().find(|p| !p.is_file());
    let unusable = missing.map(|p| format!("it names {}, which is gone", p.display()));
    Midx { stamp: Some(stamp), named, unusable }
}

/// Whether `git_dir` has a MIDX that names a pack (or its index) no longer there: parsed, its
/// packs looked at, its checksum not computed (what maintenance asks after every push).
pub fn names_a_missing_pack(git_dir: &Path) -> bool {
    let Ok(file) = gix_pack::multi_index::File::at(path(git_dir), None) else { return false };
    named(&file, &git_dir.join("objects/pack")).iter().any(|p| !p.is_file())
}

/// The `.pack` and `.idx` files `file` names, in `pack_dir`.
fn named(file: &gix_pack::multi_index::File, pack_dir: &Path) -> Vec<PathBuf> {
    let mut named = Vec::new();
    for index in file.index_names() {
        let index = pack_dir.join(index);
        named.push(index.with_extension("pack"));
        named.push(index);
    }
    named
}

impl Midx {
    /// Still what `git_dir` has: the same file, and every pack it names still there (one `stat`
    /// per pack; nothing is read).
    pub fn still(&self, git_dir: &Path) -> bool {
        stamp(git_dir) == self.stamp && (self.unusable.is_some() || self.named.iter().all(|p| p.is_file()))
    }

    /// A MIDX never used, whatever the repository has: each pack's own index serves.
    pub fn not_used() -> Midx {
        Midx { stamp: None, named: Vec::new(), unusable: Some("not used: each pack's own index serves".into()) }
    }

    /// The configuration override that keeps gix from using an unusable MIDX.
    pub fn override_needed(&self) -> Option<&'static str> {
        self.unusable.as_ref().map(|_| "core.multiPackIndex=false")
    }
}
