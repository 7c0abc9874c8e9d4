//! The corpus repositories again, with their refs in reftable: a copy of each (the same packs,
//! byte for byte) converted by stock git (`git refs migrate --ref-format=reftable`), so the wire
//! suite can hold a reftable repository to the very expectations of its files-backend twin.

use std::path::PathBuf;

use crate::corpus::{self, Hash};

/// Where the reftable copies live: a directory of their own (served as its own base), each copy
/// under its twin's file name so that URLs, and with them the snapshots, are the same.
pub fn dir() -> PathBuf {
    corpus::dir().join("reftable")
}

/// The reftable copy of corpus repository `name` in `hash`, made if it is not there yet (safe to
/// race: built aside, then renamed into place).
pub fn ensure(name: &str, hash: Hash) -> PathBuf {
    let files = corpus::ensure(name, hash);
    let dest = dir().join(files.file_name().unwrap());
    if dest.join("HEAD").is_file() {
        return dest;
    }
    std::fs::create_dir_all(dir()).unwrap();
    let scratch = dir().join(format!(".build-{name}-{}-{}", hash.name(), std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let copied = std::process::Command::new("cp").arg("-a").arg(&files).arg(&scratch).status().unwrap();
    assert!(copied.success(), "copying {}", files.display());
    crate::git(&scratch, &["refs", "migrate", "--ref-format=reftable"]);
    assert!(scratch.join("reftable/tables.list").is_file(), "{name} was migrated to reftable");
    if std::fs::rename(&scratch, &dest).is_err() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    dest
}
