//! The guard of `patches/gix-pack/0004-delta-search.patch`: gix-pack finds deltas among many
//! objects (git's window search). Every delta it chooses applies back to its exact target, is
//! smaller than half of it, names a base of the same kind, never gives a preferred base (an
//! object the receiver has) a delta, keeps chains within the depth limit and free of cycles, and
//! a spent budget means no search. Versions of one file find each other through the name hash.
//! A search tells its progress, object by object, of how many it may give a delta.

use gix_pack::data::delta::{apply_to_vec, search};
use gixd_tests::noise;

/// `versions` edits of one text, each a few lines away from the one before.
fn versions(seed: u64, versions: usize) -> Vec<Vec<u8>> {
    let mut text: Vec<u8> = (0..2000).flat_map(|n| format!("line {n} of file {seed}\n").into_bytes()).collect();
    let mut out = Vec::new();
    for v in 0..versions {
        let at = (noise(seed + v as u64, 8).iter().map(|b| *b as usize).sum::<usize>() * 37) % text.len();
        text.splice(at..at, format!("inserted in version {v}\n").into_bytes());
        out.push(text.clone());
    }
    out
}

/// A blob at a path of `name_hash`, to be sent (no preferred base), not stored whole anywhere.
fn blob(name_hash: u32, data: &[u8]) -> search::Object<'_> {
    search::Object { kind: gix::objs::Kind::Blob, name_hash, data, preferred_base: false, stored_whole_in: None }
}

fn check(objects: &[search::Object<'_>], deltas: &[search::Delta], options: search::Options) {
    let mut base_of = vec![None; objects.len()];
    for d in deltas {
        assert!(!objects[d.target].preferred_base, "a preferred base got a delta");
        assert_eq!(objects[d.target].kind, objects[d.base].kind, "a delta across kinds");
        assert!(base_of[d.target].replace(d.base).is_none(), "two deltas for one target");
        assert!(
            d.data.len() < objects[d.target].data.len() / 2,
            "a delta of {} bytes for {}",
            d.data.len(),
            objects[d.target].data.len()
        );
        let applied = apply_to_vec(objects[d.base].data, &d.data).expect("the delta applies");
        assert!(applied == objects[d.target].data, "delta {} <- {} does not give its target", d.target, d.base);
    }
    for start in 0..objects.len() {
        let (mut at, mut depth) = (start, 0);
        while let Some(base) = base_of[at] {
            depth += 1;
            assert!(depth <= options.max_depth, "a chain from {start} longer than {}", options.max_depth);
            at = base;
        }
    }
}

#[test]
fn versions_of_one_file_become_deltas_of_each_other_and_each_applies_back() {
    let files: Vec<Vec<Vec<u8>>> = (1..=3).map(|f| versions(f, 6)).collect();
    let mut objects = Vec::new();
    for (f, file) in files.iter().enumerate() {
        for data in file {
            objects.push(blob(search::name_hash(format!("src/file{f}.rs").as_bytes()), data));
        }
    }
    let random = noise(99, 50_000);
    objects.push(blob(7, &random));
    let options = search::Options::default();
    let (deltas, stats) = search::find(&objects, options);
    check(&objects, &deltas, options);
    // Six versions of each of three files: all but one of each is a delta.
    assert_eq!(deltas.len(), 15, "{stats:?}");
    assert!(deltas.iter().all(|d| d.target != objects.len() - 1), "noise found a base");
}

#[test]
fn objects_stored_whole_in_one_pack_are_not_tried_against_each_other_but_across_packs_they_are() {
    let file = versions(6, 3);
    let object = |data, stored_whole_in| search::Object {
        kind: gix::objs::Kind::Blob,
        name_hash: 1,
        data,
        preferred_base: false,
        stored_whole_in,
    };
    let options = search::Options::default();
    // All three whole in pack 4: its writer kept them whole, so no pair is tried.
    let same: Vec<_> = file.iter().map(|data| object(data, Some(4))).collect();
    let (deltas, stats) = search::find(&same, options);
    assert!(deltas.is_empty() && stats.pairs == 0, "{stats:?}");
    // One of them in another pack (or loose): it is tried against the others and they against it.
    let mixed = [object(&file[0], Some(4)), object(&file[1], Some(5)), object(&file[2], Some(4))];
    let (deltas, stats) = search::find(&mixed, options);
    check(&mixed, &deltas, options);
    assert_eq!(deltas.len(), 2, "{stats:?}");
    assert!(deltas.iter().all(|d| mixed[d.target].stored_whole_in != mixed[d.base].stored_whole_in));
    let loose = [object(&file[0], Some(4)), object(&file[1], None), object(&file[2], Some(4))];
    assert_eq!(search::find(&loose, options).0.len(), 2);
}

#[test]
fn a_preferred_base_is_used_but_never_given_a_delta() {
    let file = versions(5, 2);
    let objects = [
        search::Object {
            kind: gix::objs::Kind::Blob,
            name_hash: 1,
            data: &file[0],
            preferred_base: true,
            stored_whole_in: None,
        },
        blob(1, &file[1]),
    ];
    let options = search::Options::default();
    let (deltas, _) = search::find(&objects, options);
    check(&objects, &deltas, options);
    assert_eq!(deltas.iter().map(|d| (d.target, d.base)).collect::<Vec<_>>(), [(1, 0)]);
}

#[test]
fn chains_stop_at_the_depth_limit_and_kinds_never_mix() {
    let file = versions(11, 12);
    let mut objects: Vec<search::Object<'_>> = file.iter().map(|data| blob(3, data)).collect();
    objects.push(search::Object {
        kind: gix::objs::Kind::Tree,
        name_hash: 3,
        data: &file[5],
        preferred_base: false,
        stored_whole_in: None,
    });
    let options = search::Options { max_depth: 2, window: 3, ..Default::default() };
    let (deltas, _) = search::find(&objects, options);
    check(&objects, &deltas, options);
    assert!(!deltas.is_empty());
    assert!(deltas.iter().all(|d| d.target != 12), "the tree found a blob as its base");
}

#[test]
fn no_budget_means_no_search_and_tiny_objects_are_left_alone() {
    let file = versions(21, 4);
    let objects: Vec<search::Object<'_>> = file.iter().map(|data| blob(3, data)).collect();
    let (deltas, stats) = search::find(&objects, search::Options { budget: 0, ..Default::default() });
    assert!(deltas.is_empty() && stats.budget_exhausted, "{stats:?}");
    let tiny = [b"abc".as_slice(), b"abcd".as_slice()];
    let objects: Vec<search::Object<'_>> = tiny.iter().map(|data| blob(3, data)).collect();
    assert!(search::find(&objects, search::Options::default()).0.is_empty());
}

#[test]
fn the_name_hash_is_gits() {
    // git's pack_name_hash: (hash >> 2) + (c << 24) per byte, white space skipped.
    let by_hand = |s: &[u8]| {
        s.iter().filter(|c| !c.is_ascii_whitespace()).fold(0u32, |h, c| (h >> 2).wrapping_add(u32::from(*c) << 24))
    };
    for path in [&b"src/main.rs"[..], b"", b"a b\tc", b"a/very/long/path/to/some/file.txt"] {
        assert_eq!(search::name_hash(path), by_hand(path));
    }
    // Only the last sixteen characters remain in the hash: one file name in two directories sorts together.
    assert_eq!(
        search::name_hash(b"one/dir/some_long_file_name.rs"),
        search::name_hash(b"another/some_long_file_name.rs")
    );
    assert_ne!(search::name_hash(b"src/a.rs"), search::name_hash(b"src/b.rs"));
}

#[test]
fn the_search_tells_each_object_it_may_give_a_delta_once_in_order_of_all_of_them() {
    let file = versions(31, 5);
    let mut objects: Vec<search::Object<'_>> = file.iter().map(|data| blob(3, data)).collect();
    objects[0].preferred_base = true;
    let tiny = b"abc".to_vec();
    objects.push(blob(3, &tiny));
    let mut told = Vec::new();
    let (deltas, _) =
        search::find_with_progress(&objects, search::Options::default(), &mut |done, total| told.push((done, total)));
    // Four objects may get a delta: not the preferred base, not the tiny one.
    assert_eq!(told, [(1, 4), (2, 4), (3, 4), (4, 4)]);
    assert_eq!(deltas.len(), search::find(&objects, search::Options::default()).0.len(), "telling changes no delta");
}
