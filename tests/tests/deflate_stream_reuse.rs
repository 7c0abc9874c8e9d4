//! Guard of patches/gix-pack/0006-deflate-stream-reuse.patch: the pack entries one thread makes
//! from objects' data (loose objects, objects re-deflated) are deflated through one zlib stream
//! (`output::entry::Deflate`, reset for each), not one set up per object — setting one up
//! allocates and clears some 300 KB of window and hash tables (with zlib-rs's C allocator, out
//! of a Rust allocator's sight), which cost more than deflating a small object. Each entry's bytes
//! are those a stream of its own writes for it, whatever the stream deflated before. Without the
//! patch this does not compile (the API is the patch's); its CPU is measured in
//! upstream/deflate-stream-reuse.md.

use std::io::Write;

use gix_pack::data::output;
use gixd_tests::{git, git_out};

#[test]
fn entries_made_from_loose_objects_share_one_deflate_stream_and_keep_their_bytes() {
    // 300 small loose blobs.
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    git(tmp.path(), &["init", "-q", "--bare", repo.to_str().unwrap()]);
    let mut ids = Vec::new();
    for n in 0..300 {
        let file = tmp.path().join("blob");
        std::fs::write(&file, format!("small object {n}\n").repeat(1 + n % 7)).unwrap();
        ids.push(git_out(&repo, &["hash-object", "-w", file.to_str().unwrap()]));
    }
    let counts: Vec<output::Count> = ids
        .iter()
        .map(|id| output::Count {
            id: gix_hash::ObjectId::from_hex(id.as_bytes()).unwrap(),
            entry_pack_location: output::count::PackLocation::NotLookedUp,
        })
        .collect();
    let mut odb = gix_odb::at(repo.join("objects"), gix_hash::Kind::Sha1).unwrap();
    odb.prevent_pack_unload();

    let mut chunks = output::entry::iter_from_counts(
        counts.clone(),
        odb,
        Box::new(gix_utils::progress::Discard),
        output::entry::iter_from_counts::Options { thread_limit: Some(1), ..Default::default() },
    )
    .unwrap();
    let entries: Vec<output::Entry> = chunks.by_ref().flat_map(|c| c.unwrap().1).collect();
    let outcome = gix_parallel::Finalize::finalize(chunks).unwrap();
    assert_eq!(outcome.decoded_and_recompressed_objects, 300);
    assert_eq!(entries.len(), 300);
    // The same through one stream by hand, at another level: a stream reset keeps nothing of the
    // object before (a bigger one first).
    let mut deflate = output::entry::Deflate::new(gix::zlib::Compression::NONE);
    let big = gix_object::Data::new(&[7u8; 100_000], gix_object::Kind::Blob, gix_hash::Kind::Sha1);
    let whole = output::Entry::from_data_with(&counts[0], &big, &mut deflate).unwrap();
    assert_eq!(whole.compressed_data, own_stream(&[7u8; 100_000], gix::zlib::Compression::NONE));

    // Each entry's bytes are what a zlib stream of its own writes for the object.
    for (entry, id) in entries.iter().zip(&ids) {
        let data = format!("{}\n", git_out(&repo, &["cat-file", "blob", id]));
        assert_eq!(entry.compressed_data, own_stream(data.as_bytes(), gix::zlib::Compression::DEFAULT), "{id}");
        let object = gix_object::Data::new(data.as_bytes(), gix_object::Kind::Blob, gix_hash::Kind::Sha1);
        let count = output::Count { id: entry.id, entry_pack_location: output::count::PackLocation::NotLookedUp };
        let stored = output::Entry::from_data_with(&count, &object, &mut deflate).unwrap();
        assert_eq!(stored.compressed_data, own_stream(data.as_bytes(), gix::zlib::Compression::NONE), "{id}");
    }
}

/// `data` deflated at `level` by a zlib stream of its own (gix-zlib's writer, as stock gix-pack
/// deflates an entry).
fn own_stream(data: &[u8], level: gix::zlib::Compression) -> Vec<u8> {
    let mut own = gix::zlib::stream::deflate::Write::new(Vec::new(), level);
    std::io::copy(&mut &data[..], &mut own).unwrap();
    own.flush().unwrap();
    own.into_inner()
}
