//! What gixd relies on when `git repack` swaps packs behind it: gix-odb treats a pack whose
//! index it read, but whose data file vanished before it was opened, as stale — it re-reads the
//! pack directory and finds the object where it went (renamed), or reports it missing (deleted),
//! instead of failing the read.

use std::path::PathBuf;

use gixd_tests::{commit_files, git, git_out, temp_repo};

/// A repository with one packed blob, and its object database after a lookup of the blob by id:
/// the pack's index is read, its data is not opened yet.
fn index_read_pack_unopened() -> (tempfile::TempDir, PathBuf, gix_odb::Handle, gix_hash::ObjectId) {
    let (tmp, repo) = temp_repo(false);
    commit_files(&repo, &[("file.txt", b"some content\n")], "one");
    git(&repo, &["repack", "-adq"]);
    let blob = gix_hash::ObjectId::from_hex(git_out(&repo, &["rev-parse", "HEAD:file.txt"]).as_bytes()).unwrap();
    let objects = repo.join(".git/objects");
    let store = gix_odb::at(&objects, gix_hash::Kind::Sha1).unwrap();
    assert!(gix_pack::Find::contains(&store, &blob));
    (tmp, objects, store, blob)
}

#[test]
fn a_pack_renamed_after_its_index_was_read_is_found_under_its_new_name() {
    let (_tmp, objects, store, blob) = index_read_pack_unopened();
    // What git repack does while a server reads: the pack moves to another name.
    for path in gixd_tests::pack_files(&objects) {
        let name = path.file_name().unwrap().to_str().unwrap().replace("pack-", "pack-moved-");
        std::fs::rename(&path, path.with_file_name(name)).unwrap();
    }

    let mut buf = Vec::new();
    let found = gix::prelude::Find::try_find(&store, &blob, &mut buf);
    let data = found.unwrap_or_else(|err| panic!("the read fails instead of finding the moved pack: {err:?}"));
    assert_eq!(data.expect("the object is found in the moved pack").data, b"some content\n");
}

#[test]
fn a_pack_deleted_after_its_index_was_read_is_a_miss_not_an_error() {
    let (_tmp, objects, store, blob) = index_read_pack_unopened();
    for path in gixd_tests::pack_files(&objects) {
        std::fs::remove_file(path).unwrap();
    }
    let mut buf = Vec::new();
    let found = gix::prelude::Find::try_find(&store, &blob, &mut buf)
        .unwrap_or_else(|err| panic!("a vanished pack is an error: {err:?}"));
    assert!(found.is_none(), "the object is gone with its pack");
}
