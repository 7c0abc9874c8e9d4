//! Pack bitmaps: on every corpus repository (SHA-1 and SHA-256), repacked by stock git with a
//! bitmap, selection by bitmap gives the same objects as the walk for a clone of every ref (and
//! for `blob:none`), and for a fetch a subset of the walk's that lacks only objects the client
//! has; a missing, stale or corrupt bitmap falls back to the walk, and stock git's clone is the
//! same either way.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use gix_hash::ObjectId;
use gixd::bitmap::PackBitmap;
use gixd::filter::Filter;
use gixd::repo::RefSnapshot;
use gixd::select::{self, Request};
use gixd_tests::corpus::{self, Hash};
use gixd_tests::server::{all_objects, git_ok, serve};

/// A copy of a corpus repository, repacked into one pack with a bitmap (and a .rev).
fn bitmapped(tmp: &Path, name: &str, hash: Hash) -> PathBuf {
    let src = corpus::ensure(name, hash);
    let dest = tmp.join(format!("{name}-{}.git", hash.name()));
    git_ok(tmp, &["clone", "-q", "--bare", "--no-local", src.to_str().unwrap(), dest.to_str().unwrap()]);
    // Every ref of the source (clone --bare copies only branches and tags).
    git_ok(&dest, &["fetch", "-q", src.to_str().unwrap(), "+refs/*:refs/*"]);
    git_ok(&dest, &["-c", "pack.writeReverseIndex=true", "repack", "-adq", "--write-bitmap-index"]);
    dest
}

/// The bitmapped `linear` corpus repository served over HTTP (and the options `adjust` sets),
/// with a recorder of what gixd sent.
struct Served {
    tmp: tempfile::TempDir,
    repo: PathBuf,
    recorder: std::sync::Arc<gixd::tap::Recorder>,
    server: gixd::server::Running,
}

fn served_linear(adjust: impl FnOnce(&mut gixd::config::Config)) -> Served {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir_all(&base).unwrap();
    let repo = bitmapped(&base, "linear", Hash::Sha1);
    let recorder = std::sync::Arc::new(gixd::tap::Recorder::default());
    let tap = recorder.clone();
    let server = gixd_tests::server::serve_tapped(&base, Some(tap), adjust);
    Served { tmp, repo, recorder, server }
}

impl Served {
    fn url(&self) -> String {
        self.server.url(self.repo.file_name().unwrap().to_str().unwrap())
    }

    /// The statistics of the last pack gixd sent since the last call.
    fn last_pack(&self) -> gixd::pack::Stats {
        self.recorder.take().into_iter().filter_map(|e| e.pack).next_back().expect("a pack was sent")
    }
}

/// The index of the repository's bitmapped pack.
fn idx_of(repo: &Path) -> PathBuf {
    std::fs::read_dir(repo.join("objects/pack"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "bitmap"))
        .map(|p| p.with_extension("idx"))
        .unwrap()
}

fn ids(selection: &select::Selection) -> BTreeSet<ObjectId> {
    selection.ids().into_iter().collect()
}

#[test]
fn bitmap_and_walk_select_the_same_objects_on_every_corpus_repository() {
    let tmp = tempfile::tempdir().unwrap();
    let mut compared = 0;
    for spec in corpus::REPOS {
        for hash in Hash::ALL {
            let repo_path = bitmapped(tmp.path(), spec.name, hash);
            let repo = gix::open(&repo_path).unwrap();
            let refs = RefSnapshot::load(&repo).unwrap();
            let wants = refs.tips();
            if wants.is_empty() {
                continue; // the empty repository: nothing to select
            }
            let bitmap = std::sync::Arc::new(
                PackBitmap::open(&idx_of(&repo_path), repo.object_hash()).unwrap().expect("git wrote a bitmap"),
            );
            assert!(bitmap.commit_bitmaps() > 0);
            for filter in [Filter::default(), Filter { no_blobs: true, ..Filter::default() }] {
                let request = Request { filter, ..gixd_tests::select_request(&wants, &[], &refs) };
                let by_bitmap = select::select(&repo, &request, Some(&bitmap)).unwrap();
                let by_walk = select::select_by_walking(&repo, &request).unwrap();
                assert_eq!(ids(&by_bitmap), ids(&by_walk), "{} {}: {filter:?}", spec.name, hash.name());
                assert_eq!(
                    (by_bitmap.commits, by_bitmap.trees, by_bitmap.blobs, by_bitmap.tags),
                    (by_walk.commits, by_walk.trees, by_walk.blobs, by_walk.tags),
                    "{} {}",
                    spec.name,
                    hash.name()
                );
            }
            // A fetch from a client that has HEAD~2: the bitmap excludes everything the client
            // has, the walk only what the boundary trees hold; so a subset, missing only held objects.
            let head = gixd_tests::server::git_client(&repo_path, &["rev-parse", "--verify", "-q", "HEAD~2"]);
            if let Ok(common) = ObjectId::from_hex(String::from_utf8_lossy(&head.stdout).trim().as_bytes()) {
                let commons = [common];
                let request = gixd_tests::select_request(&wants, &commons, &refs);
                let by_bitmap = ids(&select::select(&repo, &request, Some(&bitmap)).unwrap());
                let by_walk = ids(&select::select_by_walking(&repo, &request).unwrap());
                assert!(
                    by_bitmap.is_subset(&by_walk),
                    "{} {}: the bitmap selected something the walk did not",
                    spec.name,
                    hash.name()
                );
                let held: BTreeSet<ObjectId> =
                    gixd::select::reachable_from(&repo, &[common]).unwrap().into_iter().collect();
                assert!(
                    by_walk.difference(&by_bitmap).all(|id| held.contains(id)),
                    "{} {}: left out something the client lacks",
                    spec.name,
                    hash.name()
                );
            }
            compared += 1;
        }
    }
    assert!(compared >= 2 * (corpus::REPOS.len() - 1), "every non-empty corpus repository in both hashes: {compared}");
}

/// A pack's positions are found by offset until a table pays, and agree with it; a reverse index
/// whose order is not the pack's offset order is refused on open (red before: two entries
/// swapped still made a permutation, and the bitmap answered with each other's objects).
#[test]
fn positions_agree_by_offset_and_by_table_and_a_reverse_index_out_of_pack_order_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let repo_path = bitmapped(tmp.path(), "merges", Hash::Sha1);
    let idx = idx_of(&repo_path);
    let bitmap = PackBitmap::open(&idx, gix_hash::Kind::Sha1).unwrap().expect("git wrote a bitmap");
    let n = bitmap.len();
    assert!(n > 10);
    // Past 8 192 look-ups (a small pack's threshold) the table is made: every position is
    // looked up until then and after.
    let mut looked_up = 0;
    while looked_up < 8192 + 2 * n {
        for pos in 0..n {
            assert_eq!(bitmap.pos(&bitmap.oid_at(pos)), Some(pos), "after {looked_up} look-ups");
        }
        looked_up += n;
    }
    let rev = idx.with_extension("rev");
    let mut bytes = std::fs::read(&rev).expect("git 2.41+ writes a .rev beside the pack");
    bytes[12..20].rotate_left(4); // pack positions 0 and 1 swapped
    std::fs::write(&rev, &bytes).unwrap();
    let err = PackBitmap::open(&idx, gix_hash::Kind::Sha1).expect_err("refused");
    assert!(err.to_string().contains("not in pack order"), "{err}");
}

#[test]
fn a_missing_stale_or_corrupt_bitmap_falls_back_to_the_walk_and_the_clone_is_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let repo_path = bitmapped(tmp.path(), "merges", Hash::Sha1);
    let reference = tmp.path().join("reference");
    git_ok(
        tmp.path(),
        &["clone", "-q", "--mirror", "--no-local", repo_path.to_str().unwrap(), reference.to_str().unwrap()],
    );
    let expected = all_objects(&reference);
    let idx = idx_of(&repo_path);
    let bitmap_file = idx.with_extension("bitmap");
    let good = std::fs::read(&bitmap_file).unwrap();
    let hash = gix_hash::Kind::Sha1;

    // Corrupt: one byte flipped → an error naming the file, not a wrong answer.
    let mut corrupt = good.clone();
    corrupt[good.len() / 2] ^= 0x5a;
    std::fs::write(&bitmap_file, &corrupt).unwrap();
    let err = PackBitmap::open(&idx, hash).expect_err("a corrupt bitmap is refused");
    assert!(err.to_string().contains("checksum"), "{err}");
    // Stale: a well-formed bitmap of another pack.
    let other = bitmapped(tmp.path(), "tags", Hash::Sha1);
    std::fs::copy(idx_of(&other).with_extension("bitmap"), &bitmap_file).unwrap();
    let err = PackBitmap::open(&idx, hash).expect_err("a stale bitmap is refused");
    assert!(err.to_string().contains("stale"), "{err}");
    // Missing.
    std::fs::remove_file(&bitmap_file).unwrap();
    assert!(PackBitmap::open(&idx, hash).unwrap().is_none());

    // Served in each state, stock git gets the same objects.
    let server = serve(tmp.path());
    let url = server.url(repo_path.file_name().unwrap().to_str().unwrap());
    for (state, bytes) in [
        ("missing", None),
        ("corrupt", Some(corrupt)),
        ("stale", Some(std::fs::read(idx_of(&other).with_extension("bitmap")).unwrap())),
        ("good", Some(good)),
    ] {
        if let Some(bytes) = bytes {
            std::fs::write(&bitmap_file, bytes).unwrap();
        }
        let dest = tmp.path().join(format!("clone-{state}"));
        git_ok(tmp.path(), &["clone", "-q", "--mirror", &url, dest.to_str().unwrap()]);
        assert_eq!(all_objects(&dest), expected, "{state}");
    }
}

#[test]
fn objects_outside_the_bitmapped_pack_are_walked_and_the_result_is_the_walks() {
    let tmp = tempfile::tempdir().unwrap();
    let repo_path = bitmapped(tmp.path(), "merges", Hash::Sha256);
    // Commits after the repack, as loose objects and in a second pack (as pushes leave them).
    let work = tmp.path().join("work");
    git_ok(tmp.path(), &["clone", "-q", repo_path.to_str().unwrap(), work.to_str().unwrap()]);
    for i in 0..3 {
        gixd_tests::commit_files(
            &work,
            &[("new.txt", format!("after the repack {i}\n").as_bytes())],
            &format!("after {i}"),
        );
    }
    git_ok(&work, &["push", "-q", "origin", "HEAD:refs/heads/after"]);
    gixd_tests::git(&repo_path, &["repack", "-dq"]); // the pushed objects into a pack of their own, no bitmap
    gixd_tests::commit_files(&work, &[("new.txt", b"loose\n")], "loose");
    git_ok(&work, &["-c", "transfer.unpackLimit=1000", "push", "-q", "origin", "HEAD:refs/heads/loose"]);
    let repo = gix::open(&repo_path).unwrap();
    let refs = RefSnapshot::load(&repo).unwrap();
    let wants = refs.tips();
    let bitmap = std::sync::Arc::new(
        PackBitmap::open(&idx_of(&repo_path), repo.object_hash()).unwrap().expect("the first pack keeps its bitmap"),
    );
    for filter in [Filter::default(), Filter { no_blobs: true, ..Filter::default() }] {
        let request = Request { filter, ..gixd_tests::select_request(&wants, &[], &refs) };
        let by_bitmap = select::select(&repo, &request, Some(&bitmap)).unwrap();
        assert!(by_bitmap.by_bitmap);
        if filter.is_none() {
            assert!(
                by_bitmap.whole_pack.is_some() && !by_bitmap.extra.is_empty(),
                "the whole bitmapped pack plus objects outside it"
            );
        }
        let by_walk = select::select_by_walking(&repo, &request).unwrap();
        assert_eq!(ids(&by_bitmap), ids(&by_walk), "{filter:?}");
        assert_eq!((by_bitmap.commits, by_bitmap.blobs), (by_walk.commits, by_walk.blobs));
    }
}

#[test]
fn a_clone_of_a_bitmapped_pack_plus_pushed_objects_is_the_pack_verbatim_plus_those_objects() {
    use gixd_tests::server::assert_fsck_clean;
    let served = served_linear(|c| {
        c.git_listen = Some("127.0.0.1:0".parse().unwrap());
        c.services.receive_pack = true;
    });
    let (tmp, repo_path, recorder, server) = (&served.tmp, &served.repo, &served.recorder, &served.server);
    let url = format!("git://{}/{}", server.git_addr.unwrap(), repo_path.file_name().unwrap().to_str().unwrap());
    // Pushes after the repack: thin packs completed with copies of bases the big pack has.
    let work = tmp.path().join("work");
    git_ok(tmp.path(), &["clone", "-q", &url, work.to_str().unwrap()]);
    let file = work.join(gixd_tests::git_out(&work, &["ls-files"]).lines().next().expect("a tracked file"));
    for i in 0..3 {
        let mut content = std::fs::read(&file).unwrap();
        content.extend(format!("pushed line {i}\n").as_bytes());
        std::fs::write(&file, content).unwrap();
        gixd_tests::git(&work, &["commit", "-qam", &format!("push {i}")]);
        git_ok(&work, &["push", "-q", &url, &format!("HEAD:refs/heads/pushed-{i}")]);
    }
    let http_url = server.url(repo_path.file_name().unwrap().to_str().unwrap());
    for args in [&["--mirror"][..], &["--bare"][..]] {
        let dest = tmp.path().join(format!("clone{}", args[0]));
        recorder.take();
        git_ok(tmp.path(), &[&["clone", "-q"][..], args, &[&http_url, dest.to_str().unwrap()]].concat());
        assert_fsck_clean(&dest);
        let expected = gixd_tests::server::rev_list_objects(repo_path, &["--all"]);
        assert_eq!(all_objects(&dest), expected, "{args:?}");
        // The big pack went out as it is, the pushed objects after it.
        let stats = recorder.take().into_iter().find_map(|e| e.pack).expect("a pack was sent");
        assert!(stats.verbatim && stats.entries > stats.copied && stats.re_deflated == 0, "{args:?}: {stats:?}");
    }
}

#[test]
fn a_bitmap_selection_places_every_entry_from_the_pack_order_without_looking_it_up() {
    let served = served_linear(|_| {});
    gixd_tests::git(&served.repo, &["config", "uploadpack.allowFilter", "true"]);
    let dest = served.tmp.path().join("blobless");
    git_ok(served.tmp.path(), &["clone", "-q", "--bare", "--filter=blob:none", &served.url(), dest.to_str().unwrap()]);
    gixd_tests::server::assert_fsck_clean(&dest);
    let stats = served.last_pack();
    // Not the whole pack (no blobs), so entry by entry — each placed from the bitmap's order.
    assert!(!stats.verbatim && stats.entries > 0, "{stats:?}");
    assert_eq!(stats.reused, stats.entries, "every entry is the pack's bytes: {stats:?}");
}

#[test]
fn every_object_of_the_pack_is_found_at_its_position_and_no_other_id_is() {
    let tmp = tempfile::tempdir().unwrap();
    for hash in [Hash::Sha1, Hash::Sha256] {
        let repo = bitmapped(tmp.path(), "linear", hash);
        let idx = idx_of(&repo);
        let kind = if hash == Hash::Sha1 { gix_hash::Kind::Sha1 } else { gix_hash::Kind::Sha256 };
        let bitmap = gixd::bitmap::PackBitmap::open(&idx, kind).unwrap().expect("a bitmap");
        let index = gix_pack::index::File::at(&idx, kind).unwrap();
        let mut positions = BTreeSet::new();
        for entry in index.iter() {
            let pos = bitmap.pos(&entry.oid).unwrap_or_else(|| panic!("{} not found", entry.oid));
            assert_eq!(bitmap.oid_at(pos), entry.oid);
            positions.insert(pos);
            // The same id with its last byte changed is not in the pack (nor found by prefix).
            let mut other = entry.oid;
            let last = other.as_mut_slice().last_mut().unwrap();
            *last ^= 0xff;
            if index.lookup(other).is_none() {
                assert_eq!(bitmap.pos(&other), None, "{other}");
            }
        }
        assert_eq!(positions.len(), index.num_objects() as usize, "positions are distinct");
    }
}

/// A repository whose visible file is stored as a delta against a bigger version that only a
/// hidden ref reaches (git deltas the smaller against the bigger), repacked with a bitmap.
fn hidden_base_repo(base: &Path) -> PathBuf {
    let work = base.join("work");
    std::fs::create_dir_all(&work).unwrap();
    gixd_tests::git(&work, &["init", "-q", "-b", "main"]);
    let text: String = (0..400).map(|n| format!("line {n} of a file that deltas well\n")).collect();
    gixd_tests::commit_files(&work, &[("a.txt", b"first\n")], "root");
    gixd_tests::git(&work, &["checkout", "-q", "-b", "secret"]);
    gixd_tests::commit_files(&work, &[("file.txt", format!("{text}secret tail\n").as_bytes())], "secret");
    gixd_tests::git(&work, &["checkout", "-q", "main"]);
    let visible: String = text.lines().take(390).map(|l| format!("{l}\n")).collect();
    gixd_tests::commit_files(&work, &[("file.txt", visible.as_bytes())], "visible");
    let bare = base.join("served/repo.git");
    git_ok(base, &["clone", "-q", "--bare", work.to_str().unwrap(), bare.to_str().unwrap()]);
    git_ok(&bare, &["fetch", "-q", work.to_str().unwrap(), "+refs/heads/secret:refs/hidden/secret"]);
    git_ok(&bare, &["branch", "-D", "secret"]);
    git_ok(&bare, &["config", "uploadpack.hideRefs", "refs/hidden"]);
    git_ok(&bare, &["-c", "pack.writeReverseIndex=true", "repack", "-adq", "--write-bitmap-index", "--window=50"]);
    bare
}

#[test]
fn a_reused_delta_whose_base_only_a_hidden_ref_reaches_is_re_deflated_and_the_base_never_sent() {
    use gixd_tests::server::{all_objects, assert_fsck_clean, rev_list_objects, serve_tapped};
    let tmp = tempfile::tempdir().unwrap();
    let bare = hidden_base_repo(tmp.path());
    let hidden_only: BTreeSet<String> = rev_list_objects(&bare, &["refs/hidden/secret", "--not", "--branches"]);
    assert!(!hidden_only.is_empty());
    let recorder = std::sync::Arc::new(gixd::tap::Recorder::default());
    let tap = recorder.clone();
    let server = serve_tapped(&tmp.path().join("served"), Some(tap), |_| {});
    for version in ["2", "0"] {
        let dest = tmp.path().join(format!("clone-v{version}"));
        git_ok(
            tmp.path(),
            &[
                "-c",
                &format!("protocol.version={version}"),
                "clone",
                "-q",
                "--bare",
                &server.url("repo.git"),
                dest.to_str().unwrap(),
            ],
        );
        assert_fsck_clean(&dest);
        let got = all_objects(&dest);
        assert_eq!(got, rev_list_objects(&bare, &["--branches", "--tags"]), "v{version}");
        assert!(got.is_disjoint(&hidden_only), "v{version}: an object only the hidden ref reaches was sent");
        let stats = recorder.take().into_iter().find_map(|e| e.pack).expect("a pack was sent");
        assert!(stats.reused > 0 && stats.re_deflated >= 1 && !stats.verbatim, "v{version}: {stats:?}");
    }
}

#[test]
fn a_fetch_from_a_bitmap_goes_out_as_the_packs_bytes_and_the_client_completes_it() {
    let served = served_linear(|_| {});
    let (tmp, repo_path) = (served.tmp.path(), &served.repo);
    let behind = tmp.join("behind.git");
    git_ok(tmp, &["clone", "-q", "--bare", repo_path.to_str().unwrap(), behind.to_str().unwrap()]);
    let main = gixd_tests::git_out(repo_path, &["symbolic-ref", "HEAD"]);
    let main = main.trim();
    git_ok(&behind, &["update-ref", main, &format!("{main}~20")]);
    git_ok(&behind, &["repack", "-adq"]);
    git_ok(&behind, &["-c", "protocol.version=2", "fetch", "-q", &served.url(), &format!("+{main}:{main}")]);
    gixd_tests::server::assert_fsck_clean(&behind);
    assert_eq!(
        gixd_tests::git_out(&behind, &["rev-parse", main]),
        gixd_tests::git_out(repo_path, &["rev-parse", main])
    );
    let stats = served.last_pack();
    assert!(stats.reused > 0 && !stats.verbatim, "{stats:?}");
}

/// A client may name as a have a commit only a hidden ref reaches (it learnt the id somewhere);
/// what that have reaches is then not known to be readable, and no delta goes out thin against
/// it — the visible file, stored as a delta against the hidden bigger version, is re-deflated.
/// A have on a visible ref still gets its thin deltas.
#[test]
fn a_have_only_a_hidden_ref_reaches_is_never_a_thin_base() {
    use gixd_tests::server::{sideband_pack, v2_fetch_raw};
    let tmp = tempfile::tempdir().unwrap();
    let bare = hidden_base_repo(tmp.path());
    let secret = gixd_tests::git_out(&bare, &["rev-parse", "refs/hidden/secret"]);
    let main = gixd_tests::git_out(&bare, &["rev-parse", "main"]);
    let hidden_only = gixd_tests::server::rev_list_objects(&bare, &["refs/hidden/secret", "--not", "--branches"]);
    let server = serve(&tmp.path().join("served"));
    let pack = sideband_pack(&v2_fetch_raw(
        server.addr,
        "repo.git",
        &main,
        &[&format!("have {secret}"), "thin-pack", "ofs-delta", "no-progress"],
    ));
    let bases: BTreeSet<String> = gixd_tests::server::ref_delta_bases(&pack).into_iter().collect();
    assert!(bases.is_disjoint(&hidden_only), "a thin delta against an object only the hidden ref reaches: {bases:?}");
    // The control: the same fetch from a client that has the visible root sends a pack (so the
    // request is well formed) whose thin bases are all visible.
    let root = gixd_tests::git_out(&bare, &["rev-parse", "main~1"]);
    let pack = sideband_pack(&v2_fetch_raw(
        server.addr,
        "repo.git",
        &main,
        &[&format!("have {root}"), "thin-pack", "ofs-delta", "no-progress"],
    ));
    assert!(!pack.is_empty() && gixd_tests::server::ref_delta_bases(&pack).iter().all(|b| !hidden_only.contains(b)));
}

#[test]
fn a_bitmap_git_repack_is_still_writing_is_never_used() {
    // git repack writes its pack, index and bitmap as `.tmp-<pid>-pack-*`, then renames them.
    // Here the temporary set lost its pack (renamed away) while its index and bitmap remain:
    // a server that took the temporary bitmap would fail the clone.
    let served = served_linear(|_| {});
    for path in gixd_tests::pack_files(&served.repo.join("objects")) {
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        if !name.ends_with(".pack") {
            std::fs::copy(&path, path.with_file_name(format!(".tmp-1234-{name}"))).unwrap();
        }
    }
    let dest = served.tmp.path().join("clone.git");
    git_ok(served.tmp.path(), &["clone", "-q", "--bare", &served.url(), dest.to_str().unwrap()]);
    gixd_tests::server::assert_fsck_clean(&dest);
    assert!(served.last_pack().verbatim, "the clone was answered from the real pack's bitmap");
}

#[test]
fn a_pack_deleted_after_its_bitmap_was_read_still_answers_from_the_mapping() {
    // git repack -ad deletes the packs it replaced while requests that chose them still read:
    // the bitmap holds its pack mapped, so a clone and a fetch that use it still complete.
    let served = served_linear(|_| {});
    let first = served.tmp.path().join("first.git");
    git_ok(served.tmp.path(), &["clone", "-q", "--bare", &served.url(), first.to_str().unwrap()]);
    assert!(served.last_pack().verbatim);
    // The pack's files move away under the cached bitmap; the bitmap file set is unchanged
    // (the same names stay, as empty placeholders would not), so the cache is kept.
    let pack = idx_of(&served.repo).with_extension("pack");
    let moved = pack.with_file_name("moved.pack");
    std::fs::rename(&pack, &moved).unwrap();
    let second = served.tmp.path().join("second.git");
    let out = gixd_tests::git_command(served.tmp.path())
        .args(["clone", "-q", "--bare", &served.url(), second.to_str().unwrap()])
        .output()
        .unwrap();
    std::fs::rename(&moved, &pack).unwrap();
    assert!(out.status.success(), "clone after the pack file moved: {}", String::from_utf8_lossy(&out.stderr));
    gixd_tests::server::assert_fsck_clean(&second);
    assert!(served.last_pack().verbatim);
}

/// A whole-pack clone goes out by its count (its objects are not listed in the selection); a
/// client without `ofs-delta` then takes the partial-reuse path, which must still find the
/// objects outside the pack past the unlisted ones: every object arrives. Red with the objects
/// outside the pack taken from past the pack's positions in the list, as when every object was
/// listed (a slice out of range: no pack).
#[test]
fn a_whole_pack_clone_without_ofs_delta_sends_every_object() {
    use gixd_tests::server::{objects_in_pack, sideband_pack, v2_fetch_raw};
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    gixd_tests::git(&work, &["init", "-q", "-b", "main"]);
    for i in 0..5 {
        gixd_tests::commit_files(&work, &[("f.txt", format!("version {i}\n").repeat(200 + i).as_bytes())], "c");
    }
    let served = tmp.path().join("served");
    std::fs::create_dir_all(&served).unwrap();
    gixd_tests::git(&served, &["clone", "-q", "--bare", work.to_str().unwrap(), "repo.git"]);
    let repo = served.join("repo.git");
    gixd_tests::git(&repo, &["repack", "-adbq"]);
    let main = gixd_tests::git_out(&repo, &["rev-parse", "main"]);
    let server = serve(&served);
    for args in [&["no-progress"][..], &["ofs-delta", "no-progress"]] {
        let pack = sideband_pack(&v2_fetch_raw(server.addr, "repo.git", &main, args));
        assert_eq!(objects_in_pack(&pack, "sha1"), all_objects(&repo), "{args:?}");
    }
}
