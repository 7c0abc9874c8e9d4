//! Guard of patches/gix-pack/0001-delta-base-inclusion.patch: a selected delta whose base is in
//! the pack but not selected is copied with its base when the caller allows the base, and is
//! re-deflated (its base never sent) when the caller refuses it.

use std::collections::BTreeSet;
use std::path::Path;

use gix_hash::ObjectId;
use gix_pack::data::output::{self, entry::iter_from_counts::DeltaBase};
use gixd_tests::{commit_files, git, git_command, git_out, temp_repo};

/// A text file of `lines` numbered lines, with a recognisable `tag` in each.
fn text(tag: &str, lines: usize) -> Vec<u8> {
    (0..lines).map(|n| format!("{tag} line {n}: some ordinary text to make deltas\n")).collect::<String>().into_bytes()
}

fn oid(hex: &str) -> ObjectId {
    ObjectId::from_hex(hex.as_bytes()).unwrap()
}

/// `(id, base id)` of every delta in the repository's one pack, from `git verify-pack -v`.
fn deltas(repo: &Path) -> Vec<(String, String)> {
    let (_, rows) = gixd_tests::verify_pack(&repo.join(".git/objects"));
    rows.into_iter().filter(|w| w.len() == 7).map(|w| (w[0].clone(), w[6].clone())).collect()
}

/// A repository whose `main` has `file.txt` stored as a delta against the bigger version on
/// branch `other`, packed while both branches existed. Returns (repo, main's blob, other's blob).
fn repo_with_delta_against(other_branch: &str) -> (tempfile::TempDir, std::path::PathBuf, String, String) {
    let (tmp, repo) = temp_repo(false);
    commit_files(&repo, &[("file.txt", &text("shared", 120))], "main");
    git(&repo, &["checkout", "-q", "-b", other_branch]);
    let mut bigger = text("shared", 120);
    bigger.extend(text(other_branch, 40));
    commit_files(&repo, &[("file.txt", &bigger)], other_branch);
    git(&repo, &["checkout", "-q", "main"]);
    git(&repo, &["repack", "-adfq", "--window=10", "--depth=10"]);
    let small = git_out(&repo, &["rev-parse", "main:file.txt"]);
    let big = git_out(&repo, &["rev-parse", &format!("{other_branch}:file.txt")]);
    assert!(
        deltas(&repo).contains(&(small.clone(), big.clone())),
        "precondition: git stored main's blob as a delta against {other_branch}'s"
    );
    (tmp, repo, small, big)
}

/// The objects reachable from `main` only, as unresolved counts.
fn main_counts(repo: &Path) -> Vec<output::Count> {
    git_out(repo, &["rev-list", "--objects", "main"])
        .lines()
        .map(|l| output::Count {
            id: oid(l.split(' ').next().unwrap()),
            entry_pack_location: output::count::PackLocation::NotLookedUp,
        })
        .collect()
}

struct Generated {
    ids: BTreeSet<ObjectId>,
    outcome: output::entry::iter_from_counts::Outcome,
    pack: Vec<u8>,
}

/// Generate a pack of `main`'s objects, asking `decide` about unselected delta bases.
fn generate(repo: &Path, decide: impl FnMut(&gix_hash::oid) -> DeltaBase) -> Generated {
    let mut odb = gix_odb::at(repo.join(".git/objects"), gix_hash::Kind::Sha1).unwrap();
    odb.prevent_pack_unload();
    let (num_entries, mut chunks) = output::entry::iter_from_counts_with_delta_bases(
        main_counts(repo),
        odb,
        Box::new(gix_utils::progress::Discard),
        output::entry::iter_from_counts::Options { thread_limit: Some(1), ..Default::default() },
        Some(decide),
    )
    .unwrap();
    let mut entries = Vec::new();
    for chunk in chunks.by_ref() {
        entries.extend(chunk.unwrap().1);
    }
    let outcome = gix_parallel::Finalize::finalize(chunks).unwrap();
    assert_eq!(entries.len(), num_entries, "the announced entry count is the real one");
    let ids = entries.iter().map(|e| e.id).collect();
    let pack = pack_of(entries);
    Generated { ids, outcome, pack }
}

/// A SHA-1 pack of `entries`, as gix-pack writes it.
fn pack_of(entries: Vec<output::Entry>) -> Vec<u8> {
    let mut pack = Vec::new();
    let num_entries = entries.len() as u32;
    let writer = output::bytes::FromEntriesIter::new(
        std::iter::once(Ok::<_, gix_error::Error>(entries)),
        &mut pack,
        num_entries,
        gix_pack::data::Version::V2,
        gix_hash::Kind::Sha1,
    );
    for step in writer {
        step.unwrap();
    }
    pack
}

/// Index `pack` with stock git and list the objects it holds.
fn objects_git_reads_from(pack: &[u8]) -> BTreeSet<ObjectId> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.pack");
    std::fs::write(&path, pack).unwrap();
    let out = git_command(dir.path()).args(["index-pack", "--strict"]).arg(&path).output().unwrap();
    assert!(out.status.success(), "git index-pack refused the pack: {}", String::from_utf8_lossy(&out.stderr));
    let idx = git_command(dir.path())
        .args(["show-index", "--object-format=sha1"])
        .stdin(std::fs::File::open(path.with_extension("idx")).unwrap())
        .output()
        .unwrap();
    String::from_utf8(idx.stdout).unwrap().lines().map(|l| oid(l.split_whitespace().nth(1).unwrap())).collect()
}

#[test]
fn an_allowed_unselected_base_is_added_and_both_entries_are_copied() {
    let (_tmp, repo, small, big) = repo_with_delta_against("other");
    let mut asked = Vec::new();
    let got = generate(&repo, |id| {
        asked.push(id.to_owned());
        DeltaBase::Include
    });
    assert_eq!(asked, vec![oid(&big)], "asked once, about the one unselected base");
    assert_eq!(got.outcome.decoded_and_recompressed_objects, 0, "nothing re-deflated");
    assert_eq!(got.outcome.delta_bases_included, 1);
    assert!(got.ids.contains(&oid(&big)) && got.ids.contains(&oid(&small)));
    assert_eq!(got.outcome.objects_copied_from_pack, main_counts(&repo).len() + 1);
    assert_eq!(objects_git_reads_from(&got.pack), got.ids, "git indexes the pack and finds every entry");
}

#[test]
fn a_refused_base_is_never_sent_and_the_delta_is_re_deflated() {
    let (_tmp, repo, small, secret) = repo_with_delta_against("secret");
    // The secret branch goes away after packing: its blob stays in the pack, unreachable.
    git(&repo, &["branch", "-q", "-D", "secret"]);
    let reachable: BTreeSet<ObjectId> = git_out(&repo, &["rev-list", "--objects", "--all"])
        .lines()
        .map(|l| oid(l.split(' ').next().unwrap()))
        .collect();
    assert!(!reachable.contains(&oid(&secret)));
    let got = generate(&repo, |id| if reachable.contains(id) { DeltaBase::Include } else { DeltaBase::Recompress });
    assert!(!got.ids.contains(&oid(&secret)), "the unreachable base was sent");
    assert_eq!(got.outcome.decoded_and_recompressed_objects, 1, "the delta against it was re-deflated");
    assert_eq!(got.outcome.delta_bases_included, 0);
    assert!(got.ids.contains(&oid(&small)));
    let in_pack = objects_git_reads_from(&got.pack);
    assert!(!in_pack.contains(&oid(&secret)));
    assert_eq!(in_pack, got.ids);
}

#[test]
fn without_a_decision_function_nothing_changes() {
    let (_tmp, repo, _small, big) = repo_with_delta_against("other");
    let mut odb = gix_odb::at(repo.join(".git/objects"), gix_hash::Kind::Sha1).unwrap();
    odb.prevent_pack_unload();
    let mut chunks = output::entry::iter_from_counts(
        main_counts(&repo),
        odb,
        Box::new(gix_utils::progress::Discard),
        output::entry::iter_from_counts::Options { thread_limit: Some(1), ..Default::default() },
    )
    .unwrap();
    let ids: BTreeSet<ObjectId> = chunks.by_ref().flat_map(|c| c.unwrap().1).map(|e| e.id).collect();
    let outcome = gix_parallel::Finalize::finalize(chunks).unwrap();
    assert!(!ids.contains(&oid(&big)));
    assert_eq!(outcome.decoded_and_recompressed_objects, 1, "stock behaviour: the delta is re-deflated");
    assert_eq!(outcome.delta_bases_included, 0);
}

/// An object in two packs (a pushed thin pack completed with a copy of its base) is sent once:
/// a delta whose base copy sits in the other pack is not given that base again. Seen as
/// "the same object appears twice in the pack" from git's index-pack before the fix.
#[test]
fn a_base_selected_from_another_pack_is_not_added_twice() {
    use gixd_tests::server::{all_objects, git_ok, serve_with};
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    let server_repo = base.join("r.git");
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    for round in 0..3 {
        commit_files(&work, &[("doc.txt", &text(&format!("v{round}"), 400))], &format!("v{round}"));
    }
    std::fs::create_dir_all(&base).unwrap();
    git_ok(tmp.path(), &["clone", "-q", "--bare", work.to_str().unwrap(), server_repo.to_str().unwrap()]);
    git(&server_repo, &["repack", "-adq"]);
    let server = serve_with(&base, |c| {
        c.git_listen = Some("127.0.0.1:0".parse().unwrap());
        c.services.receive_pack = true;
    });
    let url = format!("git://{}/r.git", server.git_addr.unwrap());
    // Small edits pushed as thin packs: each completed with a copy of a base the server has.
    for round in 0..3 {
        let mut content = text("v2", 400);
        content.extend(format!("pushed {round}\n").as_bytes());
        commit_files(&work, &[("doc.txt", &content)], &format!("push {round}"));
        git_ok(&work, &["push", "-q", &url, "main"]);
    }
    let packs = std::fs::read_dir(server_repo.join("objects/pack"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "pack"))
        .count();
    assert!(packs >= 2, "the pushes added packs");
    for args in [&["--bare"][..], &["--mirror"][..]] {
        let dest = tmp.path().join(format!("clone{}", args[0]));
        let out = gixd_tests::server::git_client(
            tmp.path(),
            &[&["clone", "-q"][..], args, &[&url, dest.to_str().unwrap()]].concat(),
        );
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(all_objects(&dest), all_objects(&server_repo));
    }
}

/// A delta whose base goes out from another pack (after pushes an object sits in two packs: as
/// the delta it came as, and in a later pack) names that base by id — a ref-delta within the
/// pack — instead of being re-deflated, even for a client that did not ask for thin packs; the
/// base's chain is the one its chosen copy has. gixd's own locator chooses copies here (a stored
/// delta before a whole copy: `gixd::packs::Packs::locate`).
#[test]
fn a_delta_whose_base_goes_out_from_another_pack_names_it_by_id_instead_of_being_re_deflated() {
    let (_tmp, repo, small, big) = repo_with_delta_against("other");
    // A second pack holding `big` as a delta against a bigger third version.
    git(&repo, &["checkout", "-q", "-b", "third", "other"]);
    let mut third = text("shared", 120);
    third.extend(text("other", 40));
    third.extend(text("third", 60));
    commit_files(&repo, &[("file.txt", &third)], "third");
    let third_blob = git_out(&repo, &["rev-parse", "third:file.txt"]);
    let mut pack_objects = git_command(&repo);
    pack_objects.args(["pack-objects", "-q", "--delta-base-offset", ".git/objects/pack/pack"]);
    let out = gixd_tests::output_with_input(pack_objects, format!("{third_blob}\n{big}\n").as_bytes());
    assert!(!out.is_empty(), "pack-objects wrote a pack");
    let second = repo.join(format!(".git/objects/pack/pack-{}.idx", String::from_utf8_lossy(&out).trim()));
    let rows = gixd_tests::verify_pack_file(&second);
    assert!(
        rows.iter().any(|w| w.len() == 7 && w[0] == big && w[6] == third_blob),
        "precondition: the second pack stores {big} as a delta against {third_blob}: {rows:?}"
    );

    let mut ids: Vec<String> = git_out(&repo, &["rev-list", "--objects", "main"])
        .lines()
        .map(|l| l.split(' ').next().unwrap().to_owned())
        .collect();
    ids.extend([big.clone(), third_blob.clone()]);
    let counts: Vec<output::Count> = ids
        .iter()
        .map(|id| output::Count { id: oid(id), entry_pack_location: output::count::PackLocation::NotLookedUp })
        .collect();
    let packs = gixd::packs::Packs::open(&repo.join(".git/objects/pack"), gix_hash::Kind::Sha1).unwrap();
    let mut odb = gix_odb::at(repo.join(".git/objects"), gix_hash::Kind::Sha1).unwrap();
    odb.prevent_pack_unload();
    let located = gixd::packs::Locating {
        odb: gix::odb::Handle::from(odb),
        packs: Some(std::sync::Arc::new(packs)),
        copies: None,
        hollow: None,
    };
    let (num_entries, mut chunks) = output::entry::iter_from_counts_with_delta_bases(
        counts,
        located,
        Box::new(gix_utils::progress::Discard),
        output::entry::iter_from_counts::Options {
            thread_limit: Some(1),
            allow_thin_pack: false,
            ..Default::default()
        },
        Some(|_: &gix_hash::oid| DeltaBase::Recompress),
    )
    .unwrap();
    let mut entries = Vec::new();
    for chunk in chunks.by_ref() {
        entries.extend(chunk.unwrap().1);
    }
    let outcome = gix_parallel::Finalize::finalize(chunks).unwrap();
    assert_eq!(entries.len(), num_entries);
    let small_entry = entries.iter().find(|e| e.id == oid(&small)).unwrap();
    assert!(
        matches!(small_entry.kind, output::entry::Kind::DeltaOid { id } if id == oid(&big)),
        "{small} goes as a delta naming {big}, not re-deflated: {:?}",
        small_entry.kind
    );
    let kinds: Vec<_> = entries.iter().map(|e| (e.id.to_string(), format!("{:?}", e.kind))).collect();
    assert_eq!(
        outcome.decoded_and_recompressed_objects, 0,
        "nothing re-deflated: {kinds:?} small {small} big {big} third {third_blob}"
    );
    let pack = pack_of(entries);
    let expected: BTreeSet<ObjectId> = ids.iter().map(|id| oid(id)).collect();
    assert_eq!(objects_git_reads_from(&pack), expected, "git indexes the pack: every ref-delta's base is in it");
}

/// An entry of a hand-made pack: `data` whole, or as a delta (encoded by gix-pack) against the
/// entry at `base` with the object `base_data`.
fn hand_entry(data: &[u8], base: Option<(usize, &[u8])>) -> output::Entry {
    use std::io::Write;
    let id = gix_object::compute_hash(gix_hash::Kind::Sha1, gix_object::Kind::Blob, data).unwrap();
    let (kind, bytes) = match base {
        None => (output::entry::Kind::Base(gix_object::Kind::Blob), data.to_vec()),
        Some((index, base_data)) => {
            let delta = gix_pack::data::delta::encode::Index::new(base_data).encode(data, data.len()).unwrap();
            (output::entry::Kind::DeltaRef { object_index: index }, delta)
        }
    };
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(&bytes).unwrap();
    output::Entry { id, kind, decompressed_size: bytes.len(), compressed_data: z.finish().unwrap() }
}

/// Two packs may hold a pair as deltas of each other, and a third object may be a delta of one
/// of them: pack A stores `x` as a delta of `y`, pack B stores `y` and `z` as deltas of `x`. With
/// `x` chosen from A and `y` and `z` from B (each a stored delta), `z` may name `x` by id, but
/// `y` must not, though it is a delta of the same stored base: `x`'s chain leads back to `y`. A
/// pack with `x → y → x` is one no client can index (gixd's geometric roll-up of tokio's pushes
/// met it: "a delta's base was never written").
#[test]
fn a_delta_on_a_base_another_delta_names_by_id_is_re_deflated_when_its_chain_would_loop() {
    let (_tmp, repo) = temp_repo(false);
    let x = text("x", 200);
    let mut y = x.clone();
    y.extend(text("y", 20));
    let mut z = x.clone();
    z.extend(text("z", 20));
    for pack in [
        vec![hand_entry(&y, None), hand_entry(&x, Some((0, &y)))],
        vec![hand_entry(&x, None), hand_entry(&y, Some((0, &x))), hand_entry(&z, Some((0, &x)))],
    ] {
        let bytes = pack_of(pack);
        let mut index_pack = git_command(&repo);
        index_pack.args(["index-pack", "--stdin"]);
        let out = gixd_tests::output_with_input(index_pack, &bytes);
        assert!(!out.is_empty(), "git indexed the hand-made pack");
    }
    let id = |data: &[u8]| gix_object::compute_hash(gix_hash::Kind::Sha1, gix_object::Kind::Blob, data).unwrap();
    let (x, y, z) = (id(&x), id(&y), id(&z));
    let packs = gixd::packs::Packs::open(&repo.join(".git/objects/pack"), gix_hash::Kind::Sha1).unwrap();
    // Each chosen copy is a stored delta: x from A (of y), y and z from B (of x).
    let delta_packs: Vec<u32> = [x, y, z].iter().map(|id| packs.locate(id).unwrap().pack_id).collect();
    assert_ne!(delta_packs[0], delta_packs[1], "precondition: x and y come from different packs");
    assert_eq!(delta_packs[1], delta_packs[2], "precondition: y and z come from the same pack");
    let mut odb = gix_odb::at(repo.join(".git/objects"), gix_hash::Kind::Sha1).unwrap();
    odb.prevent_pack_unload();
    let located = gixd::packs::Locating {
        odb: gix::odb::Handle::from(odb),
        packs: Some(std::sync::Arc::new(packs)),
        copies: None,
        hollow: None,
    };
    // z before y: the base decision for "x in pack B" is made for z first.
    let counts: Vec<output::Count> = [x, z, y]
        .into_iter()
        .map(|id| output::Count { id, entry_pack_location: output::count::PackLocation::NotLookedUp })
        .collect();
    let (_, mut chunks) = output::entry::iter_from_counts_with_delta_bases(
        counts,
        located,
        Box::new(gix_utils::progress::Discard),
        output::entry::iter_from_counts::Options {
            thread_limit: Some(1),
            allow_thin_pack: false,
            ..Default::default()
        },
        Some(|_: &gix_hash::oid| DeltaBase::Recompress),
    )
    .unwrap();
    let mut entries = Vec::new();
    for chunk in chunks.by_ref() {
        entries.extend(chunk.unwrap().1);
    }
    let kinds: Vec<_> = entries.iter().map(|e| (e.id.to_string(), format!("{:?}", e.kind))).collect();
    let kind_of = |id: ObjectId| entries.iter().find(|e| e.id == id).unwrap().kind;
    assert!(matches!(kind_of(z), output::entry::Kind::DeltaOid { id } if id == x), "z names x by id: {kinds:?}");
    assert!(
        !matches!(
            (kind_of(x), kind_of(y)),
            (output::entry::Kind::DeltaOid { .. }, output::entry::Kind::DeltaOid { .. })
        ),
        "x and y are not deltas of each other: {kinds:?}"
    );
    let pack = pack_of(entries);
    assert_eq!(objects_git_reads_from(&pack), BTreeSet::from([x, y, z]), "git indexes the pack");
}

/// A stored ref-delta — what a thin pack a push brought holds once `index-pack --fix-thin`
/// appended its bases — is copied as it is when its base goes out too, not re-deflated: pushed
/// packs would otherwise go out as whole objects (a clone of the corpus's `pushed-packs` was
/// 1.36 times git's bytes).
#[test]
fn a_stored_ref_delta_whose_base_goes_out_too_is_copied_not_re_deflated() {
    let (_tmp, repo) = temp_repo(false);
    let base = text("base", 200);
    let mut target = base.clone();
    target.extend(text("target", 10));
    let mut delta = hand_entry(&target, Some((0, &base)));
    let id = |data: &[u8]| gix_object::compute_hash(gix_hash::Kind::Sha1, gix_object::Kind::Blob, data).unwrap();
    let (target, base_id) = (id(&target), id(&base));
    // The delta first, naming its base by id; the base after it, as --fix-thin appends it.
    delta.kind = output::entry::Kind::DeltaOid { id: base_id };
    let bytes = pack_of(vec![delta, hand_entry(&base, None)]);
    let mut index_pack = git_command(&repo);
    index_pack.args(["index-pack", "--stdin"]);
    assert!(!gixd_tests::output_with_input(index_pack, &bytes).is_empty(), "git indexed the pack");
    let rows = gixd_tests::verify_pack(&repo.join(".git/objects")).1;
    let (target_hex, base_hex) = (target.to_string(), base_id.to_string());
    assert!(
        rows.iter().any(|w| w.len() == 7 && w[0] == target_hex && w[6] == base_hex),
        "precondition: stored as a delta of the base: {rows:?}"
    );
    let mut odb = gix_odb::at(repo.join(".git/objects"), gix_hash::Kind::Sha1).unwrap();
    odb.prevent_pack_unload();
    let counts: Vec<output::Count> = [target, base_id]
        .into_iter()
        .map(|id| output::Count { id, entry_pack_location: output::count::PackLocation::NotLookedUp })
        .collect();
    let (_, mut chunks) = output::entry::iter_from_counts_with_delta_bases(
        counts,
        odb,
        Box::new(gix_utils::progress::Discard),
        output::entry::iter_from_counts::Options {
            thread_limit: Some(1),
            allow_thin_pack: false,
            ..Default::default()
        },
        Some(|_: &gix_hash::oid| DeltaBase::Recompress),
    )
    .unwrap();
    let mut entries = Vec::new();
    for chunk in chunks.by_ref() {
        entries.extend(chunk.unwrap().1);
    }
    let outcome = gix_parallel::Finalize::finalize(chunks).unwrap();
    let kinds: Vec<_> = entries.iter().map(|e| (e.id.to_string(), format!("{:?}", e.kind))).collect();
    let kind_of = |id: ObjectId| entries.iter().find(|e| e.id == id).unwrap().kind;
    assert!(
        matches!(kind_of(target), output::entry::Kind::DeltaOid { id } if id == base_id),
        "the delta is copied naming its base: {kinds:?}"
    );
    assert_eq!(outcome.decoded_and_recompressed_objects, 0, "nothing re-deflated: {kinds:?}");
    assert_eq!(objects_git_reads_from(&pack_of(entries)), BTreeSet::from([target, base_id]), "git indexes the pack");
}
