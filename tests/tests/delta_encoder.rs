//! The guard of `patches/gix-pack/0003-delta-encoder.patch`: gix-pack computes deltas in git's
//! format, and stock git applies them. A delta made by `gix_pack::data::delta::encode` is put in
//! a pack as a REF_DELTA against its base, and `git index-pack --strict` must rebuild the exact
//! target (its id is the target's); the delta must also be small where the objects are similar.
//! Every delta it makes applies back to the exact target (gix-pack's own decoder as the oracle), on
//! empty, identical, edited, all-different, repetitive and over-16-MiB inputs.

use gixd_tests::noise;
use gixd_tests::server::git_ok;

/// A pack of `base` (a blob) and `target` as a REF_DELTA of `delta` against it, in SHA-1.
fn pack_of(base: &[u8], base_id: gix_hash::ObjectId, delta: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let deflate = |data: &[u8]| {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(data).unwrap();
        z.finish().unwrap()
    };
    let header = |kind: u8, mut size: usize| {
        let mut out = vec![(kind << 4) | (size & 0x0f) as u8];
        size >>= 4;
        while size > 0 {
            *out.last_mut().unwrap() |= 0x80;
            out.push((size & 0x7f) as u8);
            size >>= 7;
        }
        out
    };
    let mut pack = b"PACK\0\0\0\x02\0\0\0\x02".to_vec();
    pack.extend(header(3, base.len()));
    pack.extend(deflate(base));
    pack.extend(header(7, delta.len()));
    pack.extend(base_id.as_bytes());
    pack.extend(deflate(delta));
    let mut hasher = gix_hash::hasher(gix_hash::Kind::Sha1);
    hasher.update(&pack);
    pack.extend(hasher.try_finalize().unwrap().as_bytes());
    pack
}

fn blob_id(data: &[u8]) -> gix_hash::ObjectId {
    gix::objs::compute_hash(gix_hash::Kind::Sha1, gix::objs::Kind::Blob, data).unwrap()
}

#[test]
fn a_computed_delta_is_applied_by_stock_git_to_the_exact_target() {
    let base: Vec<u8> =
        (0..3000).flat_map(|n| format!("line {n} of a text that changes little\n").into_bytes()).collect();
    let mut target = base.clone();
    target.splice(40_000..40_000, b"a line that is new in this version\n".iter().copied());
    target.drain(90_000..90_500);
    let delta = gix_pack::data::delta::encode::Index::new(&base).encode(&target, 0).expect("no size limit");
    assert!(
        delta.len() < 200,
        "similar objects give a small delta: {} bytes for a {} byte target",
        delta.len(),
        target.len()
    );
    assert_eq!(gix_pack::data::delta::apply_to_vec(&base, &delta).unwrap(), target);

    let tmp = tempfile::tempdir().unwrap();
    let pack = tmp.path().join("d.pack");
    std::fs::write(&pack, pack_of(&base, blob_id(&base), &delta)).unwrap();
    git_ok(tmp.path(), &["index-pack", "--strict", pack.to_str().unwrap()]);
    let listed = git_ok(tmp.path(), &["verify-pack", "-v", pack.with_extension("idx").to_str().unwrap()]);
    assert!(listed.contains(&blob_id(&target).to_string()), "git rebuilt the target: {listed}");
}

fn roundtrip(base: &[u8], target: &[u8]) -> usize {
    let delta = gix_pack::data::delta::encode::Index::new(base).encode(target, 0).expect("no limit");
    let back = gix_pack::data::delta::apply_to_vec(base, &delta).expect("an encoded delta applies");
    assert!(back == target, "the delta rebuilds the target exactly ({} bytes of {})", back.len(), target.len());
    delta.len()
}

#[test]
fn every_delta_applies_back_to_its_exact_target() {
    let text: Vec<u8> = (0..2000).flat_map(|n| format!("line {n} of a file\n").into_bytes()).collect();
    let mut edited = text.clone();
    edited.splice(5000..5010, b"an insertion that is new".iter().copied());
    edited.drain(20_000..20_100);
    edited.extend_from_slice(b"appended tail\n");
    let random = noise(7, 100_000);
    let mut random_edited = random.clone();
    random_edited[50_000] ^= 0xff;
    random_edited.splice(0..0, noise(9, 300));
    for (name, base, target) in [
        ("empty both", Vec::new(), Vec::new()),
        ("empty base", Vec::new(), text.clone()),
        ("empty target", text.clone(), Vec::new()),
        ("identical", text.clone(), text.clone()),
        ("edited text", text.clone(), edited.clone()),
        ("edited text, other way", edited.clone(), text.clone()),
        ("all different", noise(1, 50_000), noise(2, 60_000)),
        ("edited binary", random.clone(), random_edited.clone()),
        ("shorter than a block", b"abc".to_vec(), b"abd".to_vec()),
        ("one byte repeated", vec![0u8; 100_000], vec![0u8; 100_017]),
        ("periodic", b"ab".repeat(40_000), b"ba".repeat(40_001)),
    ] {
        let size = roundtrip(&base, &target);
        assert!(size <= target.len() + target.len() / 127 + 32, "{name}: a delta no longer than the literals ({size})");
    }
}

#[test]
fn similar_objects_give_small_deltas() {
    let text: Vec<u8> = (0..2000).flat_map(|n| format!("line {n} of a file\n").into_bytes()).collect();
    assert!(roundtrip(&text, &text) < 16, "identical: copies only");
    let mut edited = text.clone();
    edited.splice(15_000..15_000, b"one new line\n".iter().copied());
    assert!(roundtrip(&text, &edited) < 64, "one line inserted: two copies and the line");
    // A shift off the block grid: found by the fingerprint rolled byte by byte.
    let random = noise(11, 100_000);
    let shifted: Vec<u8> = b"xyz".iter().copied().chain(random.iter().copied()).collect();
    assert!(roundtrip(&random, &shifted) < 32, "three bytes then one copy");
}

#[test]
fn objects_over_16_mib_copy_in_runs_the_format_can_name() {
    let base = noise(3, (16 << 20) + 12_345);
    let mut target = base.clone();
    target[1 << 20] ^= 1;
    target.extend_from_slice(b"tail");
    let size = roundtrip(&base, &target);
    assert!(size < 4096, "a few hundred copy instructions, not the object ({size})");
}

#[test]
fn a_delta_over_the_limit_is_given_up() {
    let index = gix_pack::data::delta::encode::Index::new(b"");
    assert_eq!(index.encode(&noise(5, 10_000), 1000), None);
    assert!(index.encode(&noise(5, 100), 1000).is_some());
}

#[test]
fn a_delta_for_another_base_size_is_refused() {
    let delta =
        gix_pack::data::delta::encode::Index::new(b"0123456789abcdef0123").encode(b"0123456789abcdef", 0).unwrap();
    assert!(gix_pack::data::delta::apply_to_vec(b"0123456789abcdef012", &delta).is_err());
}

/// A fetch of an edited file, walking (no bitmap): with `thin-pack` the new version goes out as
/// a delta computed against the version the client has at that path, which stock git completes;
/// without `thin-pack` it goes out whole, as a client that cannot complete thin packs needs.
#[test]
fn a_fetch_sends_an_edited_file_as_a_delta_against_the_clients_version_only_when_thin() {
    use gixd_tests::server::{serve, sideband_pack, v2_fetch_raw};
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    gixd_tests::git(&work, &["init", "-q", "-b", "main"]);
    let text: String = (0..3000).map(|n| format!("line {n} of a file that is edited once\n")).collect();
    gixd_tests::commit_files(&work, &[("file.txt", text.as_bytes())], "first");
    let old_blob = gixd_tests::git_out(&work, &["rev-parse", "HEAD:file.txt"]);
    let old = gixd_tests::git_out(&work, &["rev-parse", "HEAD"]);
    gixd_tests::commit_files(
        &work,
        &[("file.txt", text.replace("line 1500 ", "line fifteen hundred ").as_bytes())],
        "edit",
    );
    let new = gixd_tests::git_out(&work, &["rev-parse", "HEAD"]);
    let bare = tmp.path().join("served/repo.git");
    git_ok(tmp.path(), &["clone", "-q", "--bare", work.to_str().unwrap(), bare.to_str().unwrap()]);
    git_ok(&bare, &["repack", "-adq", "--no-write-bitmap-index"]);
    let server = serve(&tmp.path().join("served"));
    let have = format!("have {old}");
    let thin =
        sideband_pack(&v2_fetch_raw(server.addr, "repo.git", &new, &[&have, "thin-pack", "ofs-delta", "no-progress"]));
    assert!(thin.len() < 1000, "the edit goes out as a small delta: {} bytes", thin.len());
    assert_eq!(
        gixd_tests::server::ref_delta_bases(&thin),
        [old_blob],
        "one thin delta, against the client's version of the file"
    );
    // Stock git completes it from the client's objects.
    let client = tmp.path().join("client.git");
    git_ok(tmp.path(), &["clone", "-q", "--bare", "--no-local", bare.to_str().unwrap(), client.to_str().unwrap()]);
    std::fs::write(tmp.path().join("thin.pack"), &thin).unwrap();
    let pack = tmp.path().join("thin.pack");
    let out = std::process::Command::new("git")
        .current_dir(&client)
        .args(["index-pack", "--stdin", "--fix-thin", "--strict"])
        .stdin(std::fs::File::open(&pack).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "git index-pack --fix-thin: {}", String::from_utf8_lossy(&out.stderr));
    let whole = sideband_pack(&v2_fetch_raw(server.addr, "repo.git", &new, &[&have, "ofs-delta", "no-progress"]));
    assert!(gixd_tests::server::ref_delta_bases(&whole).is_empty(), "no thin delta without thin-pack");
    assert!(whole.len() > thin.len() * 4, "without thin-pack the file goes out whole ({} bytes)", whole.len());
}
