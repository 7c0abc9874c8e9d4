//! The wire suite: every corpus repository × operation × hash kind, stock git as the client.
//!
//! - Against stock git: the same operation against `git upload-pack` (file://) gives the client
//!   the same refs and the same objects (a difference is printed as counted lists and fails unless
//!   it is gixd sending more objects that are reachable from the server's refs). Every clone and
//!   fetch from gixd runs with `transfer.fsckObjects` (git's `index-pack --strict`, `--fix-thin`
//!   for fetches, accepts each pack as it arrives) and `git fsck --full --strict` is clean after.
//! - Snapshots (insta, one file per repository): per case the SHA-256 of gixd's response bytes with
//!   progress (band 2) removed, their size, pack entries by type, and copied / re-deflated / added
//!   bases. A change that moves one byte fails until re-blessed (`INSTA_UPDATE=always`), and the
//!   commit that re-blesses says why.
//! - The ref advertisement (v0 and v2) and ls-refs are byte-identical to git upload-pack's, apart
//!   from [`INTENDED_DIFFERENCES`].
//! - Same request, same bytes: each clone runs twice.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gixd::tap::{Exchange, Recorder};
use gixd_tests::corpus::{self, Hash};
use gixd_tests::git_upload_pack;
use gixd_tests::server::{
    all_objects, assert_fsck_clean, git_client, git_ok, http, pkt, pkt_lines, refs, rev_list_objects, serve_tapped,
};

/// What gixd deliberately does not (yet) say that git upload-pack says, each as (where, token).
/// A token here is removed from git's output before the byte comparison; the test
/// `every_intended_difference_still_occurs` keeps this list from going stale.
const INTENDED_DIFFERENCES: &[(&str, &str)] = &[
    // agent=git/<version> becomes agent=gixd/<version> (compared as a value, not removed).
    ("agent", "agent="),
];

fn not_yet(place: &str) -> Vec<&'static str> {
    INTENDED_DIFFERENCES.iter().filter(|(p, _)| *p == place).map(|(_, t)| *t).collect()
}

fn encode(lines: &[Option<Vec<u8>>]) -> Vec<u8> {
    let mut out = Vec::new();
    for line in lines {
        match line {
            None => out.extend(b"0000"),
            Some(data) => {
                out.extend(format!("{:04x}", data.len() + 4).as_bytes());
                out.extend(data);
            }
        }
    }
    out
}

/// Replace the agent value of a capability token list.
fn with_agent(token: &str) -> String {
    if token.starts_with("agent=") { format!("agent={}", gixd::agent()) } else { token.to_owned() }
}

/// git's v0 advertisement as gixd is meant to send it.
fn normalize_git_v0(git: &[u8]) -> Vec<u8> {
    let skip = not_yet("v0 capability");
    let mut lines = pkt_lines(git);
    if let Some(Some(first)) = lines.first_mut() {
        let nul = first.iter().position(|b| *b == 0).expect("capabilities after NUL");
        let caps = String::from_utf8(first[nul + 1..first.len() - 1].to_vec()).unwrap();
        let caps: Vec<String> = caps.split(' ').filter(|c| !skip.contains(c)).map(with_agent).collect();
        let mut new = first[..=nul].to_vec();
        new.extend(caps.join(" ").as_bytes());
        new.push(b'\n');
        *first = new;
    }
    encode(&lines)
}

/// git's v2 capability advertisement as gixd is meant to send it.
fn normalize_git_v2(git: &[u8]) -> Vec<u8> {
    let skip = not_yet("v2 fetch feature");
    let lines: Vec<Option<Vec<u8>>> = pkt_lines(git)
        .into_iter()
        .map(|l| {
            l.map(|data| {
                let text = String::from_utf8(data).unwrap();
                let text = text.trim_end_matches('\n');
                let text = if let Some(features) = text.strip_prefix("fetch=") {
                    let kept: Vec<&str> = features.split(' ').filter(|f| !skip.contains(f)).collect();
                    format!("fetch={}", kept.join(" "))
                } else {
                    with_agent(text)
                };
                format!("{text}\n").into_bytes()
            })
        })
        .collect();
    encode(&lines)
}

/// The ls-refs requests compared: what `git clone` sends, nothing at all, and peeled tags only.
fn ls_refs_requests(hash: Hash) -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();
    for (name, args) in [
        (
            "clone",
            vec![
                "peel\n",
                "symrefs\n",
                "unborn\n",
                "ref-prefix HEAD\n",
                "ref-prefix refs/heads/\n",
                "ref-prefix refs/tags/\n",
            ],
        ),
        ("all", vec![]),
        ("tags-peeled", vec!["peel\n", "ref-prefix refs/tags/\n"]),
    ] {
        let mut body = pkt("command=ls-refs\n");
        body.extend(pkt(&format!("object-format={}\n", hash.name())));
        body.extend(b"0001");
        for a in args {
            body.extend(pkt(a));
        }
        body.extend(b"0000");
        out.push((name, body));
    }
    out
}

fn check_advertisements(addr: std::net::SocketAddr, url_path: &str, repo: &Path, hash: Hash) {
    let info = format!("/{url_path}/info/refs?service=git-upload-pack");
    let ours_v0 = http(addr, "GET", &info, &[], b"").body;
    let ours_v0 = encode(&pkt_lines(&ours_v0)[2..]); // without "# service=…" and its flush
    let git_v0 = normalize_git_v0(&git_upload_pack(repo, &["--stateless-rpc", "--advertise-refs"], false, b""));
    assert_eq!(String::from_utf8_lossy(&ours_v0), String::from_utf8_lossy(&git_v0), "v0 advertisement of {url_path}");

    let ours_v2 = http(addr, "GET", &info, &[("Git-Protocol", "version=2")], b"").body;
    let git_v2 = normalize_git_v2(&git_upload_pack(repo, &["--stateless-rpc", "--advertise-refs"], true, b""));
    assert_eq!(String::from_utf8_lossy(&ours_v2), String::from_utf8_lossy(&git_v2), "v2 advertisement of {url_path}");

    for (name, request) in ls_refs_requests(hash) {
        let ours = http(
            addr,
            "POST",
            &format!("/{url_path}/git-upload-pack"),
            &[("Content-Type", "application/x-git-upload-pack-request"), ("Git-Protocol", "version=2")],
            &request,
        )
        .body;
        let git = git_upload_pack(repo, &["--stateless-rpc"], true, &request);
        assert_eq!(String::from_utf8_lossy(&ours), String::from_utf8_lossy(&git), "ls-refs '{name}' of {url_path}");
    }
}

/// One line of the snapshot for a list of exchanges.
fn describe(exchanges: &[Exchange], hash: Hash) -> String {
    let mut bytes_without_progress = Vec::new();
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    let (mut copied, mut re_deflated, mut bases, mut thin) = (0, 0, 0, 0);
    for e in exchanges {
        let mut lines = pkt_lines(&e.response);
        lines.retain(|l| l.as_ref().is_none_or(|d| d.first() != Some(&2)));
        // The agent's version is not a wire change worth re-blessing every snapshot for.
        for line in lines.iter_mut().flatten() {
            if let Some(at) = find(line, format!("agent={}", gixd::agent()).as_bytes()) {
                let end = at + "agent=".len() + gixd::agent().len();
                line.splice(at..end, b"agent=gixd/VERSION".iter().copied());
            }
        }
        bytes_without_progress.extend(encode(&lines));
        let pack: Vec<u8> =
            lines.iter().flatten().filter(|l| l.first() == Some(&1)).flat_map(|l| l[1..].to_vec()).collect();
        if !pack.is_empty() {
            let entries = gix_pack::data::input::BytesToEntriesIter::new_from_header(
                std::io::BufReader::new(&pack[..]),
                gix_pack::data::input::Mode::Verify,
                gix_pack::data::input::EntryDataMode::Ignore,
                if hash == Hash::Sha1 { gix_hash::Kind::Sha1 } else { gix_hash::Kind::Sha256 },
            )
            .expect("a pack");
            for entry in entries {
                use gix_pack::data::entry::Header::*;
                let kind = match entry.expect("a valid pack entry").header {
                    Commit => "commit",
                    Tree => "tree",
                    Blob => "blob",
                    Tag => "tag",
                    OfsDelta { .. } => "ofs-delta",
                    RefDelta { .. } => "ref-delta",
                };
                *kinds.entry(kind).or_default() += 1;
            }
        }
        if let Some(stats) = e.pack {
            copied += stats.copied;
            re_deflated += stats.re_deflated;
            bases += stats.bases_included;
            thin += stats.thin_deltas;
        }
    }
    let mut hasher = gix_hash::hasher(gix_hash::Kind::Sha256);
    hasher.update(&bytes_without_progress);
    let digest = hasher.try_finalize().expect("no collision").to_hex().to_string();
    let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k}={n}")).collect();
    format!(
        "requests={} bytes={} sha256={} entries[{}] copied={copied} re-deflated={re_deflated} bases-added={bases} thin={thin}",
        exchanges.len(),
        bytes_without_progress.len(),
        &digest[..16],
        kinds.join(" "),
    )
}

/// Every pack the client receives is checked as it arrives: with `transfer.fsckObjects`, git's
/// fetch runs `git index-pack --strict` on it (with `--fix-thin` for a fetch, which completes a
/// thin pack from what the client holds), so a broken object, a bad link or a thin base the client
/// lacks fails the clone or fetch. The result is then checked whole by [`assert_fsck_clean`].
const CHECKED: [&str; 2] = ["-c", "transfer.fsckObjects=true"];

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Client objects compared with what stock git's upload-pack gave the same client: equal, or gixd
/// gave more objects that are all reachable from the server's refs. Returns a note for the snapshot.
fn compare_with_git(server: &Path, ours: &Path, theirs: &Path, case: &str) -> String {
    assert_eq!(refs(ours, "refs"), refs(theirs, "refs"), "{case}: refs differ from stock git's result");
    let (o, t) = (all_objects(ours), all_objects(theirs));
    let missing: BTreeSet<_> = t.difference(&o).collect();
    let extra: BTreeSet<_> = o.difference(&t).cloned().collect();
    assert!(missing.is_empty(), "{case}: {} objects stock git sent are missing: {missing:?}", missing.len());
    if extra.is_empty() {
        return "same objects as git".into();
    }
    let reachable = rev_list_objects(server, &["--all"]);
    let unreachable: Vec<_> = extra.difference(&reachable).collect();
    assert!(unreachable.is_empty(), "{case}: gixd sent {} unreachable objects: {unreachable:?}", unreachable.len());
    format!("{} more objects than git (all reachable)", extra.len())
}

/// A client that has the server's HEAD branch as of `back` commits ago and nothing else, fetched
/// from stock git (allowReachableSHA1InWant), with `origin` pointing at `url`. `None` when the
/// history is too short or there is no HEAD branch.
fn behind_client(server: &Path, dest: &Path, hash: Hash, url: &str) -> Option<()> {
    let branch = git_client(server, &["symbolic-ref", "HEAD"]);
    let branch = String::from_utf8(branch.stdout).ok()?.trim().to_owned();
    let count = git_client(server, &["rev-list", "--count", &branch]);
    let depth: usize = String::from_utf8(count.stdout).ok()?.trim().parse().ok()?; // empty: no branch yet
    if depth < 2 {
        return None;
    }
    let back = (depth - 1).min(3);
    let old = git_ok(server, &["rev-parse", &format!("{branch}~{back}")]).trim().to_owned();
    std::fs::create_dir_all(dest).unwrap();
    git_ok(dest, &["init", "-q", "--bare", &format!("--object-format={}", hash.name())]);
    let upload = "git -c uploadpack.allowReachableSHA1InWant=true upload-pack";
    git_ok(
        dest,
        &[
            "fetch",
            "-q",
            "--no-tags",
            &format!("--upload-pack={upload}"),
            &format!("file://{}", server.display()),
            &format!("{old}:{branch}"),
        ],
    );
    git_ok(dest, &["remote", "add", "--mirror=fetch", "origin", url]);
    Some(())
}

/// A client behind the server's HEAD branch fetches over v2 from gixd (`urls.0`) and one from
/// stock git (`urls.1`); the snapshot line of what gixd sent, with how the objects compare.
fn fetch_behind(recorder: &Recorder, repo: &Path, hash: Hash, urls: (&str, &str), dir: &Path, case: &str) -> String {
    let ours = dir.join("gixd");
    let theirs = dir.join("git");
    if behind_client(repo, &ours, hash, urls.0).is_none() {
        return format!("{case}: n/a (history too short)");
    }
    behind_client(repo, &theirs, hash, urls.1).unwrap();
    recorder.take();
    git_ok(&ours, &[&CHECKED[..], &["-c", "protocol.version=2", "fetch", "-q", "origin"]].concat());
    let line = describe(&recorder.take(), hash);
    git_ok(&theirs, &["-c", "protocol.version=2", "fetch", "-q", "origin"]);
    assert_fsck_clean(&ours);
    let note = compare_with_git(repo, &ours, &theirs, case);
    format!("{case}: {line} ({note})")
}

fn run_repository(hashes: &[Hash], path_of: impl Fn(Hash) -> PathBuf) -> String {
    run_repository_in(&corpus::dir(), hashes, path_of)
}

/// [`run_repository`] with the repositories served from `base`.
fn run_repository_in(base: &Path, hashes: &[Hash], path_of: impl Fn(Hash) -> PathBuf) -> String {
    let recorder = Arc::new(Recorder::default());
    let tap = recorder.clone();
    let base = base.to_owned();
    // Served before its repositories are built: the directory must be there (a fresh checkout).
    std::fs::create_dir_all(&base).unwrap();
    let server = serve_tapped(&base, Some(tap), |_| {});
    // Bitmapped copies (git repack -adb, with a .rev), served from a directory of their own.
    let bitmapped_base = base.join("bitmapped");
    let bitmap_tap = recorder.clone();
    let bitmapped_server = serve_tapped(&bitmapped_base_dir(&bitmapped_base), Some(bitmap_tap), |_| {});
    let mut snapshot = String::new();
    for &hash in hashes {
        let repo = path_of(hash);
        let url_path = repo.file_name().unwrap().to_str().unwrap().to_owned();
        let url = server.url(&url_path);
        let tmp = tempfile::tempdir().unwrap();
        check_advertisements(server.addr, &url_path, &repo, hash);
        let file_url = format!("file://{}", repo.display());
        let h = hash.name();

        for version in ["2", "0"] {
            let case = format!("[{h}] clone-v{version}");
            let v = format!("protocol.version={version}");
            let ours = tmp.path().join(format!("clone-v{version}"));
            recorder.take();
            git_ok(
                tmp.path(),
                &[&CHECKED[..], &["-c", &v, "clone", "-q", "--mirror", &url, ours.to_str().unwrap()]].concat(),
            );
            let first = describe(&recorder.take(), hash);
            // Same request, same bytes.
            let again = tmp.path().join(format!("clone-v{version}-again"));
            git_ok(
                tmp.path(),
                &[&CHECKED[..], &["-c", &v, "clone", "-q", "--mirror", &url, again.to_str().unwrap()]].concat(),
            );
            assert_eq!(describe(&recorder.take(), hash), first, "{case}: a second identical clone got other bytes");
            let theirs = tmp.path().join(format!("git-clone-v{version}"));
            git_ok(
                tmp.path(),
                &["-c", &v, "clone", "-q", "--mirror", "--no-local", &file_url, theirs.to_str().unwrap()],
            );
            assert_fsck_clean(&ours);
            let note = compare_with_git(&repo, &ours, &theirs, &case);
            writeln!(snapshot, "{case}: {first} ({note})").unwrap();
        }

        // A CI clone (--depth 1) and a monorepo clone (--filter=blob:none), in both protocols:
        // the client's shallow file and objects equal stock git's.
        for (op, args) in [("depth1", &["--depth", "1"][..]), ("blob-none", &["--filter=blob:none"][..])] {
            for version in ["2", "0"] {
                let case = format!("[{h}] clone-{op}-v{version}");
                let v = format!("protocol.version={version}");
                let ours = tmp.path().join(format!("clone-{op}-v{version}"));
                let theirs = tmp.path().join(format!("git-clone-{op}-v{version}"));
                recorder.take();
                let mut clone_args = vec!["-c", v.as_str(), "clone", "-q", "--mirror"];
                clone_args.extend(args);
                git_ok(tmp.path(), &[&CHECKED[..], &clone_args[..], &[&url, ours.to_str().unwrap()]].concat());
                let line = describe(&recorder.take(), hash);
                git_ok(tmp.path(), &[&clone_args[..], &[&file_url, theirs.to_str().unwrap()]].concat());
                assert_fsck_clean(&ours);
                let shallow = |dir: &Path| std::fs::read_to_string(dir.join("shallow")).unwrap_or_default();
                let mut ours_shallow: Vec<String> = shallow(&ours).lines().map(str::to_owned).collect();
                let mut theirs_shallow: Vec<String> = shallow(&theirs).lines().map(str::to_owned).collect();
                ours_shallow.sort();
                theirs_shallow.sort();
                assert_eq!(ours_shallow, theirs_shallow, "{case}: shallow commits differ from git's");
                assert_eq!(all_objects(&ours), all_objects(&theirs), "{case}: objects differ from git's");
                writeln!(snapshot, "{case}: {line} (same objects as git, {} shallow)", ours_shallow.len()).unwrap();
            }
        }

        let line = fetch_behind(
            &recorder,
            &repo,
            hash,
            (&url, &file_url),
            &tmp.path().join("behind"),
            &format!("[{h}] fetch-behind-v2"),
        );
        writeln!(snapshot, "{line}").unwrap();

        let case = format!("[{h}] fetch-nothing-new-v2");
        let client = tmp.path().join("clone-v2");
        let before = (refs(&client, "refs"), all_objects(&client));
        recorder.take();
        git_ok(&client, &[&CHECKED[..], &["-c", "protocol.version=2", "fetch", "-q", "origin"]].concat());
        let line = describe(&recorder.take(), hash);
        assert_fsck_clean(&client);
        assert_eq!(
            (refs(&client, "refs"), all_objects(&client)),
            before,
            "{case}: a fetch with nothing new changed the client"
        );
        writeln!(snapshot, "{case}: {line}").unwrap();

        // The same repository with a bitmap: gixd selects by bitmap (and sends the pack as it
        // is when the clone is all of it); the client gets what git gives it.
        let case = format!("[{h}] clone-bitmapped-v2");
        let copy = bitmapped_copy(&bitmapped_base, &repo);
        let ours = tmp.path().join("clone-bitmapped");
        recorder.take();
        git_ok(
            tmp.path(),
            &[
                &CHECKED[..],
                &[
                    "-c",
                    "protocol.version=2",
                    "clone",
                    "-q",
                    "--mirror",
                    &bitmapped_server.url(&url_path),
                    ours.to_str().unwrap(),
                ],
            ]
            .concat(),
        );
        let line = describe(&recorder.take(), hash);
        let theirs = tmp.path().join("git-clone-bitmapped");
        git_ok(
            tmp.path(),
            &[
                "-c",
                "protocol.version=2",
                "clone",
                "-q",
                "--mirror",
                "--no-local",
                &format!("file://{}", copy.display()),
                theirs.to_str().unwrap(),
            ],
        );
        assert_fsck_clean(&ours);
        let note = compare_with_git(&copy, &ours, &theirs, &case);
        writeln!(snapshot, "{case}: {line} ({note})").unwrap();

        // With the bitmap, a selection that is part of the pack: a blob:none clone and a fetch
        // by a client behind go out as the pack's stored entries (partial reuse).
        let bitmapped_url = bitmapped_server.url(&url_path);
        let copy_url = format!("file://{}", copy.display());
        let case = format!("[{h}] clone-blob-none-bitmapped-v2");
        let ours = tmp.path().join("blob-none-bitmapped");
        let theirs = tmp.path().join("git-blob-none-bitmapped");
        recorder.take();
        git_ok(
            tmp.path(),
            &[
                &CHECKED[..],
                &[
                    "-c",
                    "protocol.version=2",
                    "clone",
                    "-q",
                    "--mirror",
                    "--filter=blob:none",
                    &bitmapped_url,
                    ours.to_str().unwrap(),
                ],
            ]
            .concat(),
        );
        let line = describe(&recorder.take(), hash);
        assert_fsck_clean(&ours);
        git_ok(
            tmp.path(),
            &[
                "-c",
                "protocol.version=2",
                "clone",
                "-q",
                "--mirror",
                "--filter=blob:none",
                &copy_url,
                theirs.to_str().unwrap(),
            ],
        );
        assert_eq!(all_objects(&ours), all_objects(&theirs), "{case}: objects differ from git's");
        writeln!(snapshot, "{case}: {line} (same objects as git)").unwrap();

        let line = fetch_behind(
            &recorder,
            &copy,
            hash,
            (&bitmapped_url, &copy_url),
            &tmp.path().join("behind-bitmapped"),
            &format!("[{h}] fetch-behind-bitmapped-v2"),
        );
        writeln!(snapshot, "{line}").unwrap();
    }
    snapshot
}

fn bitmapped_base_dir(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    dir.to_owned()
}

/// A copy of `repo` repacked by git into one pack with a bitmap, made once (safe to race: built
/// aside, then renamed into place).
fn bitmapped_copy(dir: &Path, repo: &Path) -> PathBuf {
    let dest = dir.join(repo.file_name().unwrap());
    if dest.join("HEAD").is_file() {
        return dest;
    }
    let scratch = dir.join(format!(".build-{}-{}", repo.file_name().unwrap().to_string_lossy(), std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    // A reftable repository's copy keeps its refs in reftable.
    let ref_format = if repo.join("reftable").is_dir() { "--ref-format=reftable" } else { "--ref-format=files" };
    git_ok(
        dir,
        &["clone", "-q", "--mirror", "--no-local", ref_format, repo.to_str().unwrap(), scratch.to_str().unwrap()],
    );
    let loose = std::fs::read_dir(repo.join("objects"))
        .unwrap()
        .flatten()
        .any(|e| e.file_name().len() == 2 && e.file_name().to_string_lossy().chars().all(|c| c.is_ascii_hexdigit()));
    if repo.join("objects/pack/multi-pack-index").is_file() || loose {
        // git's answer from a MIDX bitmap differs from run to run (three clones of the midx
        // corpus, three packs), and so does its answer with loose objects (searched on several
        // threads; the loose-pushes copy moved in CI): the copy's deltas are searched anew on one
        // thread and every object is compressed anew (`-F`: with `-f` alone, an object stored
        // whole kept the compressed bytes of whichever pack the clone got, and a sha256 clone's
        // bytes moved in CI), so that the bitmapped pack gixd serves is the same every time.
        git_ok(
            &scratch,
            &["-c", "pack.threads=1", "-c", "pack.writeReverseIndex=true", "repack", "-adFq", "--write-bitmap-index"],
        );
    } else {
        git_ok(&scratch, &["-c", "pack.writeReverseIndex=true", "repack", "-adq", "--write-bitmap-index"]);
    }
    // As the corpus allows them: partial clones are served from the copy too.
    git_ok(&scratch, &["config", "uploadpack.allowFilter", "true"]);
    if std::fs::rename(&scratch, &dest).is_err() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    dest
}

macro_rules! corpus_cases {
    ($($test:ident => $name:literal),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                let snapshot = run_repository(&Hash::ALL, |hash| corpus::ensure($name, hash));
                insta::assert_snapshot!($name, snapshot);
            }
        )*

        /// Every corpus repository has a case here.
        #[test]
        fn every_corpus_repository_is_in_the_suite() {
            let covered: BTreeSet<&str> = [$($name),*].into_iter().collect();
            let all: BTreeSet<&str> = corpus::REPOS.iter().map(|s| s.name).collect();
            assert_eq!(covered, all);
        }
    };
}

corpus_cases! {
    wire_empty => "empty",
    wire_one_commit => "one-commit",
    wire_linear => "linear",
    wire_wide => "wide",
    wire_deep => "deep",
    wire_binaries => "binaries",
    wire_merges => "merges",
    wire_tags => "tags",
    wire_many_refs => "many-refs",
    wire_head_elsewhere => "head-elsewhere",
    wire_odd_paths => "odd-paths",
    wire_gitlinks => "gitlinks",
    wire_loose_and_packs => "loose-and-packs",
    wire_delta_bases => "delta-bases",
    wire_bitmap => "bitmap",
    wire_real_shapes => "real-shapes",
    wire_pushed_packs => "pushed-packs",
    wire_loose_pushes => "loose-pushes",
    wire_midx => "midx",
}

/// Reftable twins of corpus repositories (annotated tags, many refs, HEAD on another branch, an
/// unborn HEAD): served from their own base under the same names, each is held to its
/// files-backend twin's snapshot — the same bytes for every case — and to git's advertisements.
macro_rules! reftable_cases {
    ($($test:ident => $name:literal),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                let base = gixd_tests::reftable_corpus::dir();
                std::fs::create_dir_all(&base).unwrap();
                let snapshot = run_repository_in(&base, &Hash::ALL, |hash| gixd_tests::reftable_corpus::ensure($name, hash));
                insta::assert_snapshot!($name, snapshot);
            }
        )*
    };
}

reftable_cases! {
    wire_reftable_empty => "empty",
    wire_reftable_tags => "tags",
    wire_reftable_many_refs => "many-refs",
    wire_reftable_head_elsewhere => "head-elsewhere",
}

#[test]
fn wire_self() {
    let Some(path) = corpus::ensure_self() else {
        eprintln!("this checkout does not have commit {}: the real-history case is skipped", corpus::SELF_COMMIT);
        return;
    };
    let snapshot = run_repository(&[Hash::Sha1], |_| path.clone());
    insta::assert_snapshot!("self", snapshot);
}

#[test]
fn every_intended_difference_still_occurs() {
    let repo = corpus::ensure("one-commit", Hash::Sha1);
    let v0 = String::from_utf8(git_upload_pack(&repo, &["--stateless-rpc", "--advertise-refs"], false, b"")).unwrap();
    let v2 = String::from_utf8(git_upload_pack(&repo, &["--stateless-rpc", "--advertise-refs"], true, b"")).unwrap();
    for (place, token) in INTENDED_DIFFERENCES {
        let found = match *place {
            "v0 capability" => v0.split(['\0', ' ', '\n']).any(|t| t == *token),
            "v2 fetch feature" => v2.lines().any(|l| l.contains("fetch=") && l.split(['=', ' ']).any(|t| t == *token)),
            "agent" => v0.contains("agent=git/") && v2.contains("agent=git/"),
            other => panic!("unknown place {other}"),
        };
        assert!(found, "intended difference ({place}, {token}) no longer occurs in git's output: remove it");
    }
}
