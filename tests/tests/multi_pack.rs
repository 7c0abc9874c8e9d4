//! A repository between repacks — a bitmapped pack, then a pack per push with the thin bases
//! stored whole (corpus `pushed-packs`), the same with a multi-pack-index and its bitmap
//! (`midx`), and small pushes git stored as loose objects (`loose-pushes`) — is served at git's
//! bytes: a clone, a blob:none clone and a fetch of a client
//! behind carry the same objects as stock git's answers from the same directory, in at most
//! 1.05 times its pack bytes (each client's received pack, `GIT_TRACE_PACKFILE`).

use std::path::Path;

use gixd_tests::corpus::{self, Hash};
use gixd_tests::server::{all_objects, assert_fsck_clean, git_ok, serve, serve_with};

/// Run git in `dir` with `args`, recording the pack it receives; returns the pack's size (0 when
/// none came).
fn traced(dir: &Path, args: &[&str], name: &str) -> u64 {
    let trace = dir.join(format!("{name}.pack-trace"));
    let out = gixd_tests::git_command(dir).env("GIT_TRACE_PACKFILE", &trace).args(args).output().unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::metadata(&trace).map(|m| m.len()).unwrap_or(0)
}

/// A new bare client of object format `h` at `client`, holding `old` (fetched from `file_url`),
/// fetches `main` from `from` (protocol v2, thin packs allowed); returns the size of the pack it
/// received. Its repository is checked by git.
fn fetched_from_behind(client: &Path, h: &str, file_url: &str, old: &str, from: &str) -> u64 {
    std::fs::create_dir_all(client).unwrap();
    git_ok(client, &["init", "-q", "--bare", &format!("--object-format={h}")]);
    let upload = "--upload-pack=git -c uploadpack.allowReachableSHA1InWant=true upload-pack";
    git_ok(client, &["fetch", "-q", upload, file_url, &format!("{old}:refs/heads/main")]);
    let size = traced(client, &["-c", "protocol.version=2", "fetch", "-q", from, "main:refs/heads/main"], "fetch");
    assert_fsck_clean(client);
    size
}

/// Issue 43's bar: 1.05 times git's bytes, for every operation.
const BAR: (u64, u64) = (105, 100);

fn within_bytes(case: &str, ours: u64, theirs: u64, (num, den): (u64, u64)) {
    eprintln!("{case}: gixd {ours} git {theirs} ratio {:.3}", ours as f64 / theirs as f64); // seen with --no-capture
    assert!(ours * den <= theirs * num, "{case}: gixd sent {ours} bytes, git {theirs}: more than {num}/{den} times");
}

#[test]
fn between_repacks_clones_and_fetches_carry_gits_objects_at_gits_bytes() {
    carry_gits_objects_within(&["pushed-packs", "midx"], BAR);
}

/// Where git stored small pushes loose, gixd's bitmapped answers search the loose objects for
/// deltas (among themselves, against what the answer sends from the bitmapped pack and against
/// what the client holds at the same path), as git's pack-objects does; sent whole they were
/// 1.2-5.4 times git's bytes (tokio's life bench), red here with the search off. Its ties are
/// broken in the order the bitmap's walk met the objects (newest commit first, as git's rev-list),
/// not by id: by id, versions of a path of one size were tried against unrelated versions (this
/// corpus's blob:none clone 1.056 of git's bytes, tokio's fetch 200 behind 1.10).
#[test]
fn loose_objects_are_served_near_gits_bytes() {
    carry_gits_objects_within(&["loose-pushes"], BAR);
}

fn carry_gits_objects_within(names: &[&str], bar: (u64, u64)) {
    let base = corpus::dir();
    std::fs::create_dir_all(&base).unwrap();
    let server = serve(&base);
    for &name in names {
        for hash in Hash::ALL {
            let repo = corpus::ensure(name, hash);
            let packs = std::fs::read_dir(repo.join("objects/pack"))
                .unwrap()
                .flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "pack"))
                .count();
            if name == "loose-pushes" {
                let loose = git_ok(&repo, &["count-objects"]);
                assert!(packs == 1 && !loose.starts_with("0 objects"), "{name}: one pack, the rest loose ({loose})");
            } else {
                assert!(packs >= 9, "{name}: a bitmapped pack and a pack per push ({packs})");
            }
            let url = server.url(repo.file_name().unwrap().to_str().unwrap());
            let file_url = format!("file://{}", repo.display());
            let tmp = tempfile::tempdir().unwrap();
            let t = tmp.path();
            let h = hash.name();
            for (op, extra) in [("clone", &[][..]), ("blob-none", &["--filter=blob:none"][..])] {
                let case = format!("{name} [{h}] {op}");
                let clone = |from: &str, to: &str| {
                    let args = [
                        &["-c", "protocol.version=2", "clone", "-q", "--mirror", "--no-local"][..],
                        extra,
                        &[from, to],
                    ]
                    .concat();
                    traced(t, &args, to)
                };
                let ours = clone(&url, &format!("gixd-{op}"));
                let theirs = clone(&file_url, &format!("git-{op}"));
                assert_fsck_clean(&t.join(format!("gixd-{op}")));
                assert_eq!(
                    all_objects(&t.join(format!("gixd-{op}"))),
                    all_objects(&t.join(format!("git-{op}"))),
                    "{case}: objects differ from git's"
                );
                within_bytes(&case, ours, theirs, bar);
            }
            // A client 25 commits behind (two and a half pushes), thin packs allowed.
            let case = format!("{name} [{h}] fetch-behind");
            let old = git_ok(&repo, &["rev-parse", "main~25"]).trim().to_owned();
            let mut sizes = Vec::new();
            for (who, from) in [("gixd", &url), ("git", &file_url)] {
                sizes.push(fetched_from_behind(&t.join(format!("behind-{who}")), h, &file_url, &old, from));
            }
            assert_eq!(
                all_objects(&t.join("behind-gixd")),
                all_objects(&t.join("behind-git")),
                "{case}: objects differ from git's"
            );
            within_bytes(&case, sizes[0], sizes[1], bar);
        }
    }
}

/// A fetch whose changed files are loose (a push git stored loose on a bitmapped repository) sends
/// each as a thin delta against the client's version at its own path, not at another path that
/// shares git's name hash (which weighs a path's last sixteen characters: `a/…` and `b/…` below
/// share one). Matched by name hash, both files were offered the version first met and one went
/// out whole (tokio: `tokio/src/sync/batch_semaphore.rs` was offered
/// `tokio/tests/sync_semaphore.rs`).
#[test]
fn a_loose_changed_file_is_a_thin_delta_against_its_own_path_not_one_sharing_its_name_hash() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    for hash in Hash::ALL {
        let h = hash.name();
        let work = t.join(format!("work-{h}"));
        std::fs::create_dir_all(work.join("a")).unwrap();
        std::fs::create_dir_all(work.join("b")).unwrap();
        git_ok(&work, &["init", "-q", "-b", "main", &format!("--object-format={h}")]);
        // Two unrelated files, each its own pseudo-random text (nothing to delta between them).
        let text = |seed: u64| {
            let mut x = seed;
            (0..600)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    format!("line {i} {x:016x}\n")
                })
                .collect::<String>()
        };
        let name = "0123456789abcdef.txt";
        let (a, b) = (text(0x9e37_79b9_7f4a_7c15), text(0xd1b5_4a32_d192_ed03));
        std::fs::write(work.join("a").join(name), &a).unwrap();
        std::fs::write(work.join("b").join(name), &b).unwrap();
        git_ok(&work, &["add", "."]);
        git_ok(&work, &["commit", "-q", "-m", "one"]);
        let base = t.join(format!("base-{h}"));
        let repo = base.join("r.git");
        git_ok(t, &["clone", "-q", "--bare", work.to_str().unwrap(), repo.to_str().unwrap()]);
        git_ok(&repo, &["repack", "-adbq"]);
        let old = git_ok(&repo, &["rev-parse", "main"]).trim().to_owned();
        std::fs::write(work.join("a").join(name), format!("{a}one more line in a\n")).unwrap();
        std::fs::write(work.join("b").join(name), format!("{b}one more line in b\n")).unwrap();
        git_ok(&work, &["commit", "-q", "-am", "two"]);
        git_ok(&work, &["push", "-q", repo.to_str().unwrap(), "main"]);
        let loose = git_ok(&repo, &["count-objects"]);
        assert!(!loose.starts_with("0 objects"), "the push is stored loose ({loose})");
        let server = serve(&base);
        let file_url = format!("file://{}", repo.display());
        let mut sizes = Vec::new();
        // git's answer is read for the record only: with a bitmap, its pack-objects offers no
        // thin bases from the client's trees, and both files go out whole.
        for (who, from) in [("gixd", server.url("r.git")), ("git", file_url.clone())] {
            sizes.push(fetched_from_behind(&t.join(format!("client-{who}-{h}")), h, &file_url, &old, &from));
        }
        eprintln!("[{h}] two changed files sharing a name hash: gixd {} git {}", sizes[0], sizes[1]);
        // One file whole is at least a quarter of its text, deflated (pseudo-random hex digits).
        assert!(
            sizes[0] < a.len() as u64 / 4,
            "[{h}] gixd sent {} bytes for two one-line changes: a file went out whole",
            sizes[0]
        );
    }
}

/// A clone through a multi-pack bitmap sends its preferred pack's entries as stored, one run of
/// the pack file (sent as a range, not copied): an ofs-delta whose base went out just before it
/// keeps its distance and its stored header. Red while every reused ofs-delta had its header
/// written anew (to the same bytes), which cut the run at each delta into pieces too short to be
/// kept as ranges (after a geometric roll-up of tokio: 18 000 runs for one clone, each read
/// ahead with a system call, and twice the CPU).
#[test]
fn a_multi_pack_clone_sends_the_preferred_pack_as_one_run_of_the_file() {
    for hash in Hash::ALL {
        let source = corpus::ensure("midx", hash);
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("base");
        std::fs::create_dir_all(&base).unwrap();
        let status = std::process::Command::new("cp")
            .args(["-a", source.to_str().unwrap(), base.join("r.git").to_str().unwrap()])
            .status()
            .unwrap();
        assert!(status.success());
        let big = std::fs::read_dir(source.join("objects/pack"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "bitmap") && !p.to_string_lossy().contains("multi-pack-index"))
            .expect("the big pack's bitmap")
            .with_extension("pack");
        let big = std::fs::metadata(big).unwrap().len();
        let log = tmp.path().join("access.log");
        let server = serve_with(&base, |c| c.access_log = Some(log.clone()));
        let dest = tmp.path().join("clone.git");
        git_ok(
            tmp.path(),
            &["-c", "protocol.version=2", "clone", "-q", "--bare", &server.url("r.git"), dest.to_str().unwrap()],
        );
        assert_eq!(all_objects(&dest), all_objects(&source), "[{}] the clone holds every object", hash.name());
        drop(server);
        let record = gixd_tests::access_log_records(&log)
            .into_iter()
            .find(|r| r["objects"].as_u64().is_some_and(|n| n > 0))
            .expect("the clone's record");
        let ranged = record["ranged_bytes"].as_u64().unwrap();
        // The big pack's entries: all of it but its 12-byte header and its trailer.
        let trailer = if hash == Hash::Sha1 { 20 } else { 32 };
        let entries = big - 12 - trailer;
        assert!(
            ranged >= entries,
            "[{}] {ranged} bytes sent as ranges; the preferred pack's entries are {entries}",
            hash.name()
        );
    }
}

/// After gixd's geometric maintenance of a repository whose small pushes stock git stored loose,
/// a clone copies the entries of every pack the multi-pack-index names as they are stored — the
/// roll-up's too, not only the preferred pack's (git's `pack.allowPackReuse=multi` over disjoint
/// packs) — and carries every object. Red while only the preferred pack was reused: the roll-up's
/// entries went out one by one through gix-pack (after a roll-up of tokio's loose pushes, a
/// quarter of the clone's CPU).
#[test]
fn a_clone_after_a_geometric_roll_up_copies_every_pack_of_the_multi_pack_index_as_it_is_stored() {
    for hash in Hash::ALL {
        let case = format!("[{}]", hash.name());
        let source = corpus::ensure("loose-pushes", hash);
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("base");
        std::fs::create_dir_all(&base).unwrap();
        let repo = base.join("r.git");
        let status = std::process::Command::new("cp")
            .args(["-a", source.to_str().unwrap(), repo.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(status.success());
        gixd::maintenance::geometric::run(&repo).unwrap().expect("a roll-up");
        let pack_dir = repo.join("objects/pack");
        assert!(pack_dir.join("multi-pack-index").is_file(), "{case} a MIDX over the big pack and the roll-up");
        assert_eq!(gixd::maintenance::geometric::packs(&pack_dir).len(), 2, "{case}");
        let recorder = std::sync::Arc::new(gixd::tap::Recorder::default());
        let server = gixd_tests::server::serve_tapped(&base, Some(recorder.clone()), |_| {});
        let dest = tmp.path().join("clone.git");
        git_ok(
            tmp.path(),
            &["-c", "protocol.version=2", "clone", "-q", "--bare", &server.url("r.git"), dest.to_str().unwrap()],
        );
        drop(server);
        assert_eq!(
            all_objects(&dest),
            gixd_tests::server::rev_list_objects(&repo, &["--all"]),
            "{case} the clone holds every object"
        );
        assert_fsck_clean(&dest);
        let stats = recorder.take().into_iter().find_map(|e| e.pack).expect("a pack was sent");
        assert_eq!(stats.reused, stats.entries, "{case} every entry is a pack's stored bytes: {stats:?}");
    }
}

/// A multi-pack-index that is truncated, stale (naming packs a repack deleted) or damaged (its
/// checksum does not match) does not stop gixd serving the repository: a clone still carries
/// every object (the lookup goes around it).
#[test]
fn a_truncated_or_stale_multi_pack_index_is_served_around() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir_all(&base).unwrap();
    let source = corpus::ensure("midx", Hash::Sha1);
    let expected = gixd_tests::server::rev_list_objects(&source, &["--all"]);
    let copy = |name: &str| {
        let dest = base.join(name);
        git_ok(
            tmp.path(),
            &["clone", "-q", "--mirror", "--no-local", source.to_str().unwrap(), dest.to_str().unwrap()],
        );
        // A mirror clone is one pack: make it the corpus's packs and MIDX again.
        std::fs::remove_dir_all(dest.join("objects/pack")).unwrap();
        let status = std::process::Command::new("cp")
            .args(["-a", source.join("objects/pack").to_str().unwrap(), dest.join("objects").to_str().unwrap()])
            .status()
            .unwrap();
        assert!(status.success());
        dest
    };
    let truncated = copy("truncated.git");
    let midx = truncated.join("objects/pack/multi-pack-index");
    let len = std::fs::metadata(&midx).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&midx).unwrap().set_len(len / 2).unwrap();
    let stale = copy("stale.git");
    let saved = std::fs::read(stale.join("objects/pack/multi-pack-index")).unwrap();
    git_ok(&stale, &["repack", "-adq"]);
    std::fs::write(stale.join("objects/pack/multi-pack-index"), saved).unwrap();
    // An offset table shifted by one entry, each id naming the next one's object: gix-odb,
    // trusting it, gave another object's data for an id; the MIDX's checksum says it is damaged.
    let damaged = copy("damaged.git");
    let path = damaged.join("objects/pack/multi-pack-index");
    let mut bytes = std::fs::read(&path).unwrap();
    let ooff = (0..bytes[6] as usize)
        .map(|i| &bytes[12 + 12 * i..24 + 12 * i])
        .find(|entry| &entry[..4] == b"OOFF")
        .map(|entry| u64::from_be_bytes(entry[4..12].try_into().unwrap()) as usize)
        .expect("an OOFF chunk");
    let objects = gix_pack::multi_index::File::at(&path, None).unwrap().num_objects() as usize;
    bytes.copy_within(ooff + 8..ooff + 8 * objects, ooff);
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, &bytes).unwrap();
    let server = serve(&base);
    for name in ["truncated.git", "stale.git", "damaged.git"] {
        let dest = tmp.path().join(format!("clone-{name}"));
        git_ok(tmp.path(), &["clone", "-q", "--mirror", &server.url(name), dest.to_str().unwrap()]);
        assert_fsck_clean(&dest);
        assert_eq!(all_objects(&dest), expected, "{name}: the clone carries every object");
    }
}

/// git's multi-pack-index bitmap (`multi-pack-index write --bitmap`, positions over every pack in
/// the MIDX's pseudo-pack order) is read: gixd prefers it to the big pack's own bitmap (which
/// covers none of the pushed packs), and selection by it gives what the walk gives for a clone of
/// every ref (and blob:none), and for a fetch a subset of the walk's lacking only what the client
/// has. Its preferred pack's entries are copied as they stand only when that is the big pack (as
/// the corpus and `git repack --write-midx` prefer it); with a push's pack preferred, whose thin
/// bases are stored whole, every object goes out from its smallest stored copy instead.
#[test]
fn a_multi_pack_index_bitmap_selects_what_the_walk_selects() {
    use gixd::filter::Filter;
    use gixd::select::{self, Request};
    let ids =
        |s: &select::Selection| s.ids().iter().map(|id| id.to_string()).collect::<std::collections::BTreeSet<_>>();
    for (hash, big_preferred) in Hash::ALL.into_iter().flat_map(|h| [(h, false), (h, true)]) {
        let source = corpus::ensure("midx", hash);
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("base");
        std::fs::create_dir_all(&base).unwrap();
        let repo_path = base.join("r.git");
        let status = std::process::Command::new("cp")
            .args(["-a", source.to_str().unwrap(), repo_path.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(status.success());
        // The big pack: the one with its own bitmap.
        let big = std::fs::read_dir(repo_path.join("objects/pack"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name().unwrap().to_string_lossy().starts_with("pack-") && p.extension().unwrap() == "bitmap"
            })
            .unwrap()
            .with_extension("pack");
        if !big_preferred {
            // A push's pack preferred (git keeps a MIDX it finds up to date: written anew).
            let small = std::fs::read_dir(repo_path.join("objects/pack"))
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "pack") && *p != big)
                .min()
                .unwrap();
            for entry in std::fs::read_dir(repo_path.join("objects/pack")).unwrap().flatten() {
                if entry.file_name().to_string_lossy().starts_with("multi-pack-index") {
                    std::fs::remove_file(entry.path()).unwrap();
                }
            }
            let preferred = format!("--preferred-pack={}", small.file_name().unwrap().to_str().unwrap());
            git_ok(&repo_path, &["multi-pack-index", "write", "--bitmap", &preferred]);
        }
        let repos = gixd::repo::Repos::new(&base, gixd::config::Exports::All).unwrap();
        let served = repos.resolve("/r.git").unwrap();
        let repo = served.repo.to_thread_local();
        let bitmap = gixd::bitmap::of(&Default::default(), &repos, &served, &repo).expect("a bitmap is used");
        assert!(!bitmap.is_one_pack(), "{}: the MIDX's bitmap is preferred to the big pack's own", hash.name());
        assert_eq!(bitmap.len(), all_objects(&repo_path).len(), "{}: its positions span every pack", hash.name());
        // `bitmap.pack`: the preferred pack.
        assert_eq!(bitmap.pack == big, big_preferred, "{bitmap:?}");
        let big_index = gix_pack::index::File::at(big.with_extension("idx"), repo.object_hash()).unwrap();
        // Copied as stored: the big pack's entries when it is preferred (every object of it is
        // picked from it); never a push's pack, whose thin bases, stored whole, another pack
        // holds too (though the MIDX may pick every object of it from it).
        let reusable = (0..bitmap.len()).filter(|pos| bitmap.is_reusable(*pos)).count();
        match big_preferred {
            true => assert_eq!(reusable, big_index.num_objects() as usize, "{bitmap:?}"),
            false => assert!(!bitmap.is_reusable(0), "{bitmap:?}"),
        }
        // Whatever is copied as stored, a clone through it carries every object, whole.
        let server = serve(&base);
        let dest = tmp.path().join("clone.git");
        git_ok(tmp.path(), &["clone", "-q", "--bare", &server.url("r.git"), dest.to_str().unwrap()]);
        drop(server);
        assert_fsck_clean(&dest);
        assert_eq!(all_objects(&dest), gixd_tests::server::rev_list_objects(&repo_path, &["--all"]));
        let refs = gixd::repo::RefSnapshot::load(&repo).unwrap();
        let wants = refs.tips();
        for filter in [Filter::default(), Filter { no_blobs: true, ..Filter::default() }] {
            let request = Request { filter, ..gixd_tests::select_request(&wants, &[], &refs) };
            let by_bitmap = select::select(&repo, &request, Some(&bitmap)).unwrap();
            assert!(by_bitmap.by_bitmap);
            assert!(by_bitmap.whole_pack.is_none(), "several packs are never sent as one");
            let by_walk = select::select_by_walking(&repo, &request).unwrap();
            assert_eq!(ids(&by_bitmap), ids(&by_walk), "{}: {filter:?}", hash.name());
            assert_eq!((by_bitmap.commits, by_bitmap.blobs), (by_walk.commits, by_walk.blobs));
        }
        let behind = git_ok(&repo_path, &["rev-parse", "main~45"]);
        let common = [gix_hash::ObjectId::from_hex(behind.trim().as_bytes()).unwrap()];
        let request = gixd_tests::select_request(&wants, &common, &refs);
        let by_bitmap = ids(&select::select(&repo, &request, Some(&bitmap)).unwrap());
        let by_walk = ids(&select::select_by_walking(&repo, &request).unwrap());
        assert!(by_bitmap.is_subset(&by_walk), "{}: the bitmap selected something the walk did not", hash.name());
        let held = gixd_tests::server::rev_list_objects(&repo_path, &[behind.trim()]);
        assert!(by_walk.difference(&by_bitmap).all(|id| held.contains(id)), "{}", hash.name());
        assert!(!by_bitmap.is_empty());
    }
}

/// A multi-pack-index bitmap that is corrupt, or written for another MIDX (stale), is logged and
/// left aside: the big pack's own bitmap serves, and a clone carries every object.
#[test]
fn a_corrupt_or_stale_multi_pack_index_bitmap_is_served_around() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir_all(&base).unwrap();
    let source = corpus::ensure("midx", Hash::Sha1);
    let expected = all_objects(&source);
    let midx_bitmap = |repo: &Path| {
        std::fs::read_dir(repo.join("objects/pack"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name().unwrap().to_string_lossy().starts_with("multi-pack-index-")
                    && p.extension().is_some_and(|e| e == "bitmap")
            })
            .expect("git wrote a MIDX bitmap")
    };
    for damage in ["corrupt", "stale"] {
        let repo_path = base.join(format!("{damage}.git"));
        let status = std::process::Command::new("cp")
            .args(["-a", source.to_str().unwrap(), repo_path.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(status.success());
        let file = midx_bitmap(&repo_path);
        let mut bytes = std::fs::read(&file).unwrap();
        match damage {
            "corrupt" => {
                let middle = bytes.len() / 2;
                bytes[middle] ^= 0x55;
            }
            _ => {
                // Another MIDX's checksum in the header, the file's own trailer made right.
                bytes[12] ^= 0xff;
                let body = bytes.len() - 20;
                let mut hasher = gix_hash::hasher(gix_hash::Kind::Sha1);
                hasher.update(&bytes[..body]);
                let digest = hasher.try_finalize().unwrap();
                bytes[body..].copy_from_slice(digest.as_bytes());
            }
        }
        std::fs::write(&file, &bytes).unwrap();
        let hash = gix_hash::Kind::Sha1;
        let err = gixd::bitmap::PackBitmap::open_midx(&repo_path.join("objects/pack"), hash).unwrap_err();
        assert!(err.to_string().contains(if damage == "stale" { "stale" } else { "checksum" }), "{err}");
        let repos = gixd::repo::Repos::new(&base, gixd::config::Exports::All).unwrap();
        let served = repos.resolve(&format!("/{damage}.git")).unwrap();
        let bitmap = gixd::bitmap::of(&Default::default(), &repos, &served, &served.repo.to_thread_local())
            .expect("the pack's own");
        assert!(bitmap.is_one_pack());
    }
    let server = serve(&base);
    for damage in ["corrupt", "stale"] {
        let dest = tmp.path().join(format!("clone-{damage}"));
        git_ok(tmp.path(), &["clone", "-q", "--mirror", &server.url(&format!("{damage}.git")), dest.to_str().unwrap()]);
        assert_fsck_clean(&dest);
        assert_eq!(all_objects(&dest), expected, "{damage}: the clone carries every object");
    }
}

/// A multi-pack-index and its bitmap are hashed (their trailing checksums checked) when first
/// opened, not again when the repository's cache was given back while idle and the next request
/// reopens them; a bitmap damaged in place is a changed file: hashed again, and refused.
#[test]
fn a_multi_pack_index_bitmap_reopened_is_not_hashed_again_until_its_file_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let repo_path = tmp.path().join("repo.git");
    let source = corpus::ensure("midx", Hash::Sha1);
    let status =
        std::process::Command::new("cp").args(["-a", source.to_str().unwrap(), repo_path.to_str().unwrap()]).status();
    assert!(status.unwrap().success());
    let pack_dir = repo_path.join("objects/pack");
    let hash = gix_hash::Kind::Sha1;
    let hashed = || gixd::repo::checked::TRAILERS_HASHED.load(std::sync::atomic::Ordering::Relaxed);
    let before = hashed();
    let open = || gixd::bitmap::PackBitmap::open_midx(&pack_dir, hash);
    assert!(open().unwrap().is_some());
    assert_eq!(hashed() - before, 2, "the MIDX and its bitmap, each hashed once");
    for _ in 0..3 {
        assert!(open().unwrap().is_some());
    }
    assert_eq!(hashed() - before, 2, "reopened, the same files are not hashed again");

    let file = std::fs::read_dir(&pack_dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "bitmap") && p.to_string_lossy().contains("multi-pack-index-"))
        .expect("git wrote a MIDX bitmap");
    let mut bytes = std::fs::read(&file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x55;
    std::fs::write(&file, &bytes).unwrap();
    let err = open().unwrap_err();
    assert!(err.to_string().contains("checksum"), "{err}");
    assert_eq!(hashed() - before, 3, "the bitmap written again is hashed again");
}
