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

/// What a server's object database sees over its life: every push adds a pack and every
/// maintenance run replaces the packs with one, while readers (pack writers, which pin pack ids
/// so a pack they read from is not unloaded) hold handles. gix-odb gives each index a slot and
/// declares a new generation when it reuses an occupied one. Once every slot had been used, the
/// new pack went into the very slot its predecessor was vacating: the slot list stayed equal, the
/// generation changed, and `consolidate_with_disk_state` asserted ("if the generation changed, the
/// slot index must have changed for sure") — a panic in the request that looked, and the slot's
/// new pack then put on the removal list with the old one.
#[test]
fn packs_replaced_one_at_a_time_while_a_reader_pins_pack_ids_are_always_found() {
    let (_tmp, repo) = gixd_tests::temp_repo(false);
    let objects = repo.join(".git/objects");
    let store = gix_odb::at(&objects, gix_hash::Kind::Sha1).unwrap();
    let mut pinned = store.clone();
    pinned.prevent_pack_unload();
    // gix-odb starts with at least 32 slots; go around them more than once.
    for round in 0..80 {
        let content = format!("round {round}\n");
        commit_files(&repo, &[("file.txt", content.as_bytes())], &format!("round {round}"));
        git(&repo, &["repack", "-adq"]);
        let blob = gix_hash::ObjectId::from_hex(git_out(&repo, &["rev-parse", "HEAD:file.txt"]).as_bytes()).unwrap();
        for handle in [&store, &pinned] {
            let mut buf = Vec::new();
            let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                gix::prelude::Find::try_find(handle, &blob, &mut buf).map(|data| data.map(|data| data.data.to_vec()))
            }));
            let found = found.unwrap_or_else(|_| panic!("round {round}: looking up the new pack's object panicked"));
            let data = found.unwrap_or_else(|err| panic!("round {round}: the read failed: {err:?}"));
            assert_eq!(
                data.as_deref(),
                Some(content.as_bytes()),
                "round {round}: the object of the pack that replaced the last one is not found"
            );
        }
    }
}
