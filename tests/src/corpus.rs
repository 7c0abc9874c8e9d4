//! The deterministic corpus: repositories generated, never downloaded. Fixed identities and dates,
//! `git fast-import` streams made from a fixed pseudo-random sequence, `pack.threads=1`: object ids
//! and pack bytes are the same on every machine. Each repository exists in a SHA-1 and a SHA-256
//! variant, built once into `target/corpus/<key>/`, where the key hashes this file and the git
//! version, so a change to the generator builds a new corpus instead of reusing a stale one.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The object format of a corpus variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Hash {
    Sha1,
    Sha256,
}

impl Hash {
    pub const ALL: [Hash; 2] = [Hash::Sha1, Hash::Sha256];

    pub fn name(self) -> &'static str {
        match self {
            Hash::Sha1 => "sha1",
            Hash::Sha256 => "sha256",
        }
    }

    /// A made-up commit id of this format (for gitlinks, which point into another repository).
    fn fake_commit(self) -> &'static str {
        match self {
            Hash::Sha1 => "0123456789abcdef0123456789abcdef01234567",
            Hash::Sha256 => "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        }
    }
}

/// One corpus repository: a name and how to build it into an empty bare repository.
pub struct Spec {
    pub name: &'static str,
    /// What it covers, for the listing.
    pub about: &'static str,
    build: fn(&Builder),
}

/// Every corpus repository, in listing order.
pub const REPOS: &[Spec] = &[
    Spec { name: "empty", about: "no commits at all", build: |_| {} },
    Spec { name: "one-commit", about: "a single commit", build: one_commit },
    Spec { name: "linear", about: "2500 commits of line edits: deep delta chains", build: linear },
    Spec { name: "wide", about: "a tree of 10 000 files", build: wide },
    Spec { name: "deep", about: "directories nested 64 deep", build: deep },
    Spec { name: "binaries", about: "incompressible blobs of several MB, and a small edit of one", build: binaries },
    Spec { name: "merges", about: "branches, merges and a four-parent octopus", build: merges },
    Spec { name: "tags", about: "lightweight and annotated tags, a tag of a tag, of a tree, of a blob", build: tags },
    Spec { name: "many-refs", about: "5 000 refs (packed)", build: many_refs },
    Spec { name: "head-elsewhere", about: "HEAD on a non-default branch", build: head_elsewhere },
    Spec { name: "odd-paths", about: "unicode, spaces, quotes, leading dashes in paths", build: odd_paths },
    Spec { name: "gitlinks", about: "submodule entries (gitlinks) that must not be followed", build: gitlinks },
    Spec { name: "loose-and-packs", about: "three packs and loose objects beside them", build: loose_and_packs },
    Spec {
        name: "delta-bases",
        about: "reachable blobs stored as deltas against an unreachable (force-pushed-away) blob and against blobs of another branch",
        build: delta_bases,
    },
    Spec { name: "bitmap", about: "a fully packed repository with a .bitmap", build: bitmap },
    Spec {
        name: "real-shapes",
        about: "a real repository's shape: 300 commits over 12 files with merged branches, 120 annotated and 100 lightweight tags on old commits, 30 hidden refs/pull/*/head with objects of their own, a bitmap covering only the older tips (commits and a branch pushed after the repack)",
        build: real_shapes,
    },
    Spec {
        name: "pushed-packs",
        about: "a server between repacks: 120 commits with a bitmap, then 8 pushes of 10 commits, each kept as the thin pack it came as, completed with its bases stored whole",
        build: pushed_packs,
    },
    Spec {
        name: "loose-pushes",
        about: "a server between repacks whose small pushes git stored loose: 120 commits with a bitmap, then 40 pushes of one commit each at git's default receive.unpackLimit",
        build: loose_pushes,
    },
    Spec {
        name: "midx",
        about: "pushed-packs with a multi-pack-index and its bitmap over every pack, the big pack preferred (git multi-pack-index write --bitmap --preferred-pack)",
        build: midx,
    },
];

/// Where the corpus of this generator lives.
pub fn dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("corpus").join(key())
}

/// Hash of this generator's source and the git that runs it.
fn key() -> String {
    use std::hash::{Hash as _, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    include_str!("corpus.rs").hash(&mut h);
    let git = Command::new("git").arg("--version").output().map(|o| o.stdout).unwrap_or_default();
    git.hash(&mut h);
    format!("{:016x}", h.finish())
}

/// The bare repository `name` in `hash`, built if it is not there yet. Safe to call from several
/// processes at once: each builds into a scratch directory and the first rename wins.
pub fn ensure(name: &str, hash: Hash) -> PathBuf {
    let spec = REPOS.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no corpus repository '{name}'"));
    let dest = dir().join(format!("{name}-{}.git", hash.name()));
    if dest.join("HEAD").is_file() {
        return dest;
    }
    std::fs::create_dir_all(dir()).unwrap();
    let scratch = dir().join(format!(".build-{name}-{}-{}", hash.name(), std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let b = Builder { repo: scratch.clone(), hash };
    b.git(&["init", "-q", "--bare", &format!("--object-format={}", hash.name())]);
    b.git(&["symbolic-ref", "HEAD", "refs/heads/main"]);
    (spec.build)(&b);
    allow_partial_clones(&b);
    if std::fs::rename(&scratch, &dest).is_err() {
        // Another process finished first; its copy is identical.
        let _ = std::fs::remove_dir_all(&scratch);
    }
    assert!(dest.join("HEAD").is_file());
    dest
}

/// The project's own history at a fixed commit, when this checkout has it (a real repository).
pub const SELF_COMMIT: &str = "3a10613";

pub fn ensure_self() -> Option<PathBuf> {
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let full = Command::new("git")
        .current_dir(&checkout)
        .args(["rev-parse", "--verify", "--quiet", &format!("{SELF_COMMIT}^{{commit}}")])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let full = String::from_utf8(full.stdout).ok()?.trim().to_owned();
    let dest = dir().join("self-sha1.git");
    if dest.join("HEAD").is_file() {
        return Some(dest);
    }
    std::fs::create_dir_all(dir()).unwrap();
    let scratch = dir().join(format!(".build-self-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let b = Builder { repo: scratch.clone(), hash: Hash::Sha1 };
    b.git(&["init", "-q", "--bare"]);
    b.git(&["fetch", "-q", "--no-tags", checkout.to_str()?, &format!("{full}:refs/heads/main")]);
    b.git(&["symbolic-ref", "HEAD", "refs/heads/main"]);
    // -F, not -f: recompress every object, so the pack does not depend on how the checkout stores
    // its objects (a local clone hardlinks them; loose and packed objects deflate differently).
    b.git(&["repack", "-adFq"]);
    allow_partial_clones(&b);
    if std::fs::rename(&scratch, &dest).is_err() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    Some(dest)
}

/// Every corpus repository serves partial clones (`uploadpack.allowFilter`), as a server for
/// monorepo users would: gixd and git upload-pack then both advertise and honour filters.
fn allow_partial_clones(b: &Builder) {
    b.git(&["config", "uploadpack.allowFilter", "true"]);
}

/// Runs git in the repository being built, deterministically.
pub struct Builder {
    pub repo: PathBuf,
    pub hash: Hash,
}

impl Builder {
    fn command(&self) -> Command {
        let mut cmd = crate::git_command(&self.repo);
        cmd.args(["-c", "repack.writeBitmaps=false", "-c", "pack.writeBitmapHashCache=false"]);
        cmd
    }

    pub fn git(&self, args: &[&str]) -> String {
        let out = self.command().args(args).output().expect("git runs");
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Feed a fast-import stream.
    fn import(&self, stream: &Stream) {
        let mut child = self
            .command()
            // Keep every import as a pack, however small (git would otherwise write loose objects).
            .args(["-c", "fastimport.unpackLimit=1", "fast-import", "--quiet", "--done"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&stream.out).unwrap();
        stdin.write_all(b"done\n").unwrap();
        drop(stdin);
        assert!(child.wait().unwrap().success(), "fast-import failed");
    }

    fn repack_all(&self) {
        self.git(&["repack", "-adfq", "--window=10", "--depth=50"]);
    }
}

/// A fast-import stream under construction: marks and a clock that only move forward.
struct Stream {
    out: Vec<u8>,
    mark: usize,
    time: u64,
}

/// A file in a commit: its content, or a gitlink.
enum File<'a> {
    Data(&'a [u8]),
    Mode(&'a str, &'a [u8]),
    Gitlink(&'a str),
    Delete,
}

impl Stream {
    fn new() -> Self {
        Stream { out: Vec::new(), mark: 0, time: 1_600_000_000 }
    }

    fn data(&mut self, data: &[u8]) {
        self.out.extend(format!("data {}\n", data.len()).as_bytes());
        self.out.extend_from_slice(data);
        self.out.push(b'\n');
    }

    /// A commit on `branch`; `parents[0]` continues the branch, the rest are merged.
    fn commit(&mut self, branch: &str, parents: &[usize], files: &[(&str, File<'_>)], message: &str) -> usize {
        self.mark += 1;
        self.time += 60;
        let mark = self.mark;
        let t = self.time;
        self.out.extend(format!("commit refs/heads/{branch}\nmark :{mark}\n").as_bytes());
        self.out.extend(format!("author A U Thor <author@example.com> {t} +0000\n").as_bytes());
        self.out.extend(format!("committer C O Mitter <committer@example.com> {t} +0000\n").as_bytes());
        self.data(message.as_bytes());
        for (i, p) in parents.iter().enumerate() {
            let verb = if i == 0 { "from" } else { "merge" };
            self.out.extend(format!("{verb} :{p}\n").as_bytes());
        }
        for (path, file) in files {
            let path = quote(path);
            match file {
                File::Data(content) => {
                    self.out.extend(format!("M 100644 inline {path}\n").as_bytes());
                    self.data(content);
                }
                File::Mode(mode, content) => {
                    self.out.extend(format!("M {mode} inline {path}\n").as_bytes());
                    self.data(content);
                }
                File::Gitlink(id) => self.out.extend(format!("M 160000 {id} {path}\n").as_bytes()),
                File::Delete => self.out.extend(format!("D {path}\n").as_bytes()),
            }
        }
        self.out.push(b'\n');
        mark
    }

    fn reset(&mut self, reference: &str, mark: usize) {
        self.out.extend(format!("reset {reference}\nfrom :{mark}\n\n").as_bytes());
    }

    fn annotated_tag(&mut self, name: &str, mark: usize, message: &str) {
        self.time += 60;
        let t = self.time;
        self.out
            .extend(format!("tag {name}\nfrom :{mark}\ntagger T A Gger <tagger@example.com> {t} +0000\n").as_bytes());
        self.data(message.as_bytes());
    }
}

/// fast-import's C-style quoting, where a path needs it.
fn quote(path: &str) -> String {
    if !path.contains(['"', '\\', '\n', '\t']) {
        return path.to_owned();
    }
    let mut q = String::from("\"");
    for c in path.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            '\t' => q.push_str("\\t"),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// A deterministic pseudo-random sequence (64-bit LCG).
pub struct Lcg(pub u64);

impl Lcg {
    #[allow(
        clippy::should_implement_trait,
        reason = "an endless generator: Iterator's Option would be noise at every call"
    )]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A line of prose-like text.
    pub fn line(&mut self) -> String {
        const WORDS: &[&str] = &[
            "the",
            "server",
            "sends",
            "a",
            "pack",
            "of",
            "objects",
            "that",
            "client",
            "wants",
            "and",
            "does",
            "not",
            "have",
            "yet",
            "delta",
            "base",
            "tree",
            "commit",
            "blob",
            "ref",
            "walk",
            "history",
            "negotiation",
            "round",
            "thread",
            "quota",
            "stream",
            "window",
            "frame",
            "byte",
            "count",
            "index",
            "offset",
            "chain",
            "depth",
        ];
        let n = 5 + self.below(9);
        let mut words: Vec<&str> = (0..n).map(|_| WORDS[self.below(WORDS.len())]).collect();
        if self.below(4) == 0 {
            words.push("—");
        }
        let mut s = words.join(" ");
        s.push('\n');
        s
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| (self.next() >> 7) as u8).collect()
    }
}

/// A text file as lines, for realistic edits.
struct TextFile(Vec<String>);

impl TextFile {
    fn new(rng: &mut Lcg, lines: usize) -> Self {
        TextFile((0..lines).map(|_| rng.line()).collect())
    }

    /// Replace, insert or delete a few lines, like an ordinary change.
    fn edit(&mut self, rng: &mut Lcg) {
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(self.0.len().max(1));
            match rng.below(3) {
                0 => self.0[at] = rng.line(),
                1 => self.0.insert(at, rng.line()),
                _ if self.0.len() > 10 => {
                    self.0.remove(at);
                }
                _ => self.0.push(rng.line()),
            }
        }
    }

    fn bytes(&self) -> Vec<u8> {
        self.0.concat().into_bytes()
    }
}

fn one_commit(b: &Builder) {
    let mut s = Stream::new();
    s.commit(
        "main",
        &[],
        &[
            ("README.md", File::Data(b"# one commit\n")),
            ("src/lib.rs", File::Data(b"pub fn f() {}\n")),
            ("run.sh", File::Mode("100755", b"#!/bin/sh\necho hi\n")),
        ],
        "the only commit\n",
    );
    b.import(&s);
}

fn linear(b: &Builder) {
    let mut rng = Lcg(1);
    let paths: Vec<String> =
        (0..40).map(|n| format!("{}/file{n:02}.txt", ["src", "docs", "tests", "src/core"][n % 4])).collect();
    let mut files: Vec<TextFile> = (0..paths.len())
        .map(|_| {
            let lines = 80 + rng.below(80);
            TextFile::new(&mut rng, lines)
        })
        .collect();
    let mut s = Stream::new();
    let initial: Vec<(usize, Vec<u8>)> = files.iter().enumerate().map(|(n, f)| (n, f.bytes())).collect();
    let entries: Vec<(&str, File<'_>)> = initial.iter().map(|(n, d)| (paths[*n].as_str(), File::Data(d))).collect();
    let mut tip = s.commit("main", &[], &entries, "initial import\n");
    for i in 1..2500 {
        let mut changed = Vec::new();
        for _ in 0..1 + rng.below(2) {
            let n = rng.below(files.len());
            files[n].edit(&mut rng);
            changed.push((n, files[n].bytes()));
        }
        let entries: Vec<(&str, File<'_>)> = changed.iter().map(|(n, d)| (paths[*n].as_str(), File::Data(d))).collect();
        tip = s.commit("main", &[tip], &entries, &format!("change {i}: {}", rng.line()));
    }
    b.import(&s);
    b.repack_all();
}

fn wide(b: &Builder) {
    let mut s = Stream::new();
    let contents: Vec<Vec<u8>> = (0..10_000).map(|n| format!("file number {n}\n").into_bytes()).collect();
    let paths: Vec<String> = (0..10_000).map(|n| format!("dir{:02}/file{n:05}.txt", n % 100)).collect();
    let entries: Vec<(&str, File<'_>)> =
        paths.iter().zip(&contents).map(|(p, c)| (p.as_str(), File::Data(c))).collect();
    let first = s.commit("main", &[], &entries, "ten thousand files\n");
    s.commit(
        "main",
        &[first],
        &[("dir07/file00007.txt", File::Data(b"changed\n")), ("dir42/new.txt", File::Data(b"new\n"))],
        "touch two\n",
    );
    b.import(&s);
    b.repack_all();
}

fn deep(b: &Builder) {
    let mut s = Stream::new();
    let dir: String = (0..64).map(|n| format!("d{n}/")).collect();
    let a = format!("{dir}leaf.txt");
    let mid: String = (0..32).map(|n| format!("d{n}/")).collect();
    let m = format!("{mid}middle.txt");
    let first = s.commit(
        "main",
        &[],
        &[(a.as_str(), File::Data(b"at the bottom\n")), (m.as_str(), File::Data(b"half way\n"))],
        "deep\n",
    );
    s.commit("main", &[first], &[(a.as_str(), File::Data(b"at the bottom, changed\n"))], "deeper change\n");
    b.import(&s);
    b.repack_all();
}

fn binaries(b: &Builder) {
    let mut rng = Lcg(7);
    let big: Vec<Vec<u8>> = [3 << 20, 2 << 20, 4 << 20].iter().map(|len| rng.bytes(*len)).collect();
    let mut edited = big[0].clone();
    edited[1000..1100].copy_from_slice(&rng.bytes(100));
    let mut s = Stream::new();
    let first = s.commit(
        "main",
        &[],
        &[
            ("assets/a.bin", File::Data(&big[0])),
            ("assets/b.bin", File::Data(&big[1])),
            ("assets/c.bin", File::Data(&big[2])),
        ],
        "binaries\n",
    );
    s.commit("main", &[first], &[("assets/a.bin", File::Data(&edited))], "edit a.bin\n");
    b.import(&s);
    b.repack_all();
}

fn merges(b: &Builder) {
    let mut rng = Lcg(3);
    let mut s = Stream::new();
    let mut f = TextFile::new(&mut rng, 60);
    let base = s.commit("main", &[], &[("shared.txt", File::Data(&f.bytes()))], "base\n");
    let mut heads = Vec::new();
    for n in 0..4 {
        let branch = format!("topic{n}");
        let mut tip = base;
        for i in 0..5 {
            let content = format!("{branch} {i}\n{}", rng.line());
            let path = format!("{branch}.txt");
            tip = s.commit(
                &branch,
                &[tip],
                &[(path.as_str(), File::Data(content.as_bytes()))],
                &format!("{branch} step {i}\n"),
            );
        }
        heads.push(tip);
    }
    f.edit(&mut rng);
    let main1 = s.commit("main", &[base], &[("shared.txt", File::Data(&f.bytes()))], "main moves\n");
    let merge = s.commit("main", &[main1, heads[0]], &[], "merge topic0\n");
    let octopus = s.commit("main", &[merge, heads[1], heads[2], heads[3]], &[], "octopus merge of three topics\n");
    f.edit(&mut rng);
    s.commit("main", &[octopus], &[("shared.txt", File::Data(&f.bytes()))], "after the octopus\n");
    b.import(&s);
    b.repack_all();
}

fn tags(b: &Builder) {
    let mut s = Stream::new();
    let c1 = s.commit("main", &[], &[("a.txt", File::Data(b"one\n"))], "one\n");
    let c2 = s.commit("main", &[c1], &[("a.txt", File::Data(b"two\n")), ("dir/b.txt", File::Data(b"bee\n"))], "two\n");
    let c3 = s.commit("main", &[c2], &[("a.txt", File::Data(b"three\n"))], "three\n");
    s.reset("refs/tags/light", c1);
    s.annotated_tag("v1.0", c2, "version one\n");
    s.annotated_tag("v2.0", c3, "version two\n");
    b.import(&s);
    let env_tag = |args: &[&str]| b.git(args);
    env_tag(&["tag", "-a", "-m", "a tag of a tag", "v1.0-outer", "v1.0"]);
    env_tag(&["tag", "-a", "-m", "a tag of a tree", "tree-tag", "main^{tree}"]);
    env_tag(&["tag", "-a", "-m", "a tag of a blob", "blob-tag", "main:a.txt"]);
    env_tag(&["tag", "light-tree", "main~1:dir"]);
    b.repack_all();
}

fn many_refs(b: &Builder) {
    let mut s = Stream::new();
    let mut tip = s.commit("main", &[], &[("n.txt", File::Data(b"0\n"))], "0\n");
    let mut commits = vec![tip];
    for i in 1..100 {
        let c = format!("{i}\n");
        tip = s.commit("main", &[tip], &[("n.txt", File::Data(c.as_bytes()))], &c);
        commits.push(tip);
    }
    for r in 0..5000 {
        let kind = if r % 5 == 0 { "tags/t" } else { "heads/branch" };
        s.reset(&format!("refs/{kind}{r:05}"), commits[r % commits.len()]);
    }
    b.import(&s);
    b.git(&["pack-refs", "--all"]);
    b.repack_all();
}

fn head_elsewhere(b: &Builder) {
    let mut s = Stream::new();
    let c1 = s.commit("main", &[], &[("a.txt", File::Data(b"main\n"))], "main\n");
    s.commit("develop", &[c1], &[("a.txt", File::Data(b"develop\n"))], "develop\n");
    b.import(&s);
    b.git(&["symbolic-ref", "HEAD", "refs/heads/develop"]);
    b.repack_all();
}

fn odd_paths(b: &Builder) {
    let mut s = Stream::new();
    let names = [
        "ünïcödé/файл.txt",
        "with space.txt",
        "-leading-dash",
        "quote\"d.txt",
        "back\\slash.txt",
        "tab\there.txt",
        "emoji-🦀.md",
        "日本語/ファイル.txt",
        "UPPER/lower/MiXeD.txt",
        ".hidden/.file",
    ];
    let contents: Vec<String> = names.iter().map(|n| format!("content of {n}\n")).collect();
    let entries: Vec<(&str, File<'_>)> =
        names.iter().zip(&contents).map(|(n, c)| (*n, File::Data(c.as_bytes()))).collect();
    let c1 = s.commit("main", &[], &entries, "odd names\n");
    s.commit(
        "main",
        &[c1],
        &[("with space.txt", File::Delete), ("symlink", File::Mode("120000", "ünïcödé/файл.txt".as_bytes()))],
        "delete and link\n",
    );
    b.import(&s);
    b.repack_all();
}

fn gitlinks(b: &Builder) {
    let mut s = Stream::new();
    let fake = b.hash.fake_commit();
    s.commit(
        "main",
        &[],
        &[
            (".gitmodules", File::Data(b"[submodule \"vendor/sub\"]\n\tpath = vendor/sub\n\turl = ../sub.git\n")),
            ("vendor/sub", File::Gitlink(fake)),
            ("README.md", File::Data(b"has a submodule\n")),
        ],
        "add a submodule\n",
    );
    b.import(&s);
    b.repack_all();
}

fn loose_and_packs(b: &Builder) {
    let mut rng = Lcg(5);
    let mut f = TextFile::new(&mut rng, 100);
    let mut tip: Option<String> = None;
    for stage in 0..3 {
        let mut s = Stream::new();
        s.time += stage * 100_000;
        if let Some(t) = &tip {
            b.git(&["update-ref", "refs/heads/import-base", t]);
            s.out.extend(b"reset refs/heads/main\nfrom refs/heads/import-base\n\n");
        }
        let mut parent: Option<usize> = None;
        for i in 0..10 {
            f.edit(&mut rng);
            let parents: Vec<usize> = parent.into_iter().collect();
            parent = Some(s.commit(
                "main",
                &parents,
                &[("file.txt", File::Data(&f.bytes()))],
                &format!("stage {stage} commit {i}\n"),
            ));
        }
        b.import(&s);
        tip = Some(b.git(&["rev-parse", "refs/heads/main"]));
    }
    b.git(&["update-ref", "-d", "refs/heads/import-base"]);
    // Loose objects on top: written by plumbing, not by fast-import (which always writes a pack).
    let blob = {
        let mut child = b
            .command()
            .args(["hash-object", "-w", "--stdin"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(b"a loose blob\n").unwrap();
        String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap().trim().to_owned()
    };
    let tree = {
        let mut child = b.command().args(["mktree"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        child.stdin.take().unwrap().write_all(format!("100644 blob {blob}\tloose.txt\n").as_bytes()).unwrap();
        String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap().trim().to_owned()
    };
    let parent = b.git(&["rev-parse", "main"]);
    let commit = b.git(&["commit-tree", &tree, "-p", &parent, "-m", "loose commit"]);
    b.git(&["update-ref", "refs/heads/main", &commit]);
}

fn delta_bases(b: &Builder) {
    let mut rng = Lcg(11);
    let data = TextFile::new(&mut rng, 300).bytes();
    let other = TextFile::new(&mut rng, 200).bytes();
    let mut s = Stream::new();
    let c1 =
        s.commit("main", &[], &[("data.txt", File::Data(&data)), ("other.txt", File::Data(&other))], "public data\n");
    // A branch with a bigger version of other.txt: git makes it the base of main's.
    let mut bigger = other.clone();
    bigger.extend(b"more public lines\n".repeat(40));
    s.commit("other", &[c1], &[("other.txt", File::Data(&bigger))], "other branch grows\n");
    // A branch with a bigger version of data.txt holding a secret: the base of main's data.txt.
    let mut secret = data.clone();
    secret.extend(b"password=hunter2\n".repeat(40));
    s.commit("secret", &[c1], &[("data.txt", File::Data(&secret))], "secret data\n");
    b.import(&s);
    b.repack_all();
    // Force-pushed away: the branch goes, its blob stays in the pack as the only copy.
    b.git(&["update-ref", "-d", "refs/heads/secret"]);
}

fn bitmap(b: &Builder) {
    let mut rng = Lcg(13);
    let mut f = TextFile::new(&mut rng, 100);
    let mut s = Stream::new();
    let mut tip = s.commit("main", &[], &[("file.txt", File::Data(&f.bytes()))], "start\n");
    for i in 0..50 {
        f.edit(&mut rng);
        tip = s.commit("main", &[tip], &[("file.txt", File::Data(&f.bytes()))], &format!("edit {i}\n"));
    }
    b.import(&s);
    b.git(&["-c", "repack.writeBitmaps=true", "repack", "-adfbq"]);
}

fn real_shapes(b: &Builder) {
    let mut rng = Lcg(29);
    let mut files: Vec<TextFile> = (0..12).map(|_| TextFile::new(&mut rng, 60)).collect();
    let name = |i: usize| format!("src/mod{i:02}.rs");
    let mut s = Stream::new();
    let all: Vec<(String, Vec<u8>)> = files.iter().enumerate().map(|(i, f)| (name(i), f.bytes())).collect();
    let first: Vec<(&str, File<'_>)> = all.iter().map(|(n, d)| (n.as_str(), File::Data(d))).collect();
    let mut tip = s.commit("main", &[], &first, "start\n");
    let mut main = vec![tip];
    for i in 1..300 {
        let f = rng.below(files.len());
        files[f].edit(&mut rng);
        let data = files[f].bytes();
        let path = name(f);
        if i % 40 == 0 {
            // A topic branch of three commits, merged back.
            let mut topic = tip;
            for t in 0..3 {
                let g = rng.below(files.len());
                files[g].edit(&mut rng);
                let d = files[g].bytes();
                topic = s.commit(
                    &format!("topic-{i}"),
                    &[topic],
                    &[(name(g).as_str(), File::Data(&d))],
                    &format!("topic {i}.{t}\n"),
                );
            }
            tip = s.commit("main", &[tip, topic], &[(path.as_str(), File::Data(&data))], &format!("merge topic {i}\n"));
        } else {
            tip = s.commit("main", &[tip], &[(path.as_str(), File::Data(&data))], &format!("change {i}\n"));
        }
        main.push(tip);
    }
    for (n, commit) in main.iter().enumerate().take(240).step_by(2) {
        s.annotated_tag(&format!("v0.{n:03}"), *commit, &format!("release {n}\n"));
    }
    for (n, commit) in main.iter().enumerate().skip(1).take(200).step_by(2) {
        s.reset(&format!("refs/tags/snap-{n:03}"), *commit);
    }
    // Pull-request heads: commits off main with content no visible ref reaches, hidden.
    for pr in 0..30 {
        let base = main[rng.below(main.len())];
        let secret: Vec<u8> = format!("pull request {pr}: {}\n", rng.line()).into_bytes();
        let head = s.commit(&format!("pr-{pr}"), &[base], &[("PR.txt", File::Data(&secret))], &format!("pr {pr}\n"));
        s.reset(&format!("refs/pull/{pr}/head"), head);
    }
    b.import(&s);
    for pr in 0..30 {
        b.git(&["update-ref", "-d", &format!("refs/heads/pr-{pr}")]);
    }
    for topic in (40..300).step_by(40) {
        b.git(&["update-ref", "-d", &format!("refs/heads/topic-{topic}")]);
    }
    b.git(&["config", "uploadpack.hideRefs", "refs/pull"]);
    b.git(&["pack-refs", "--all"]);
    b.git(&[
        "-c",
        "repack.writeBitmaps=true",
        "-c",
        "pack.writeReverseIndex=true",
        "repack",
        "-adbq",
        "--window=10",
        "--depth=50",
    ]);
    // After the repack: commits on main and a new branch, in a pack of their own (no bitmap).
    let mut s = Stream::new();
    s.time = 1_700_000_000;
    let main_tip = b.git(&["rev-parse", "refs/heads/main"]);
    s.out.extend(format!("reset refs/heads/main\nfrom {main_tip}\n\n").as_bytes());
    let mut last = None;
    for i in 0..20 {
        let f = rng.below(files.len());
        files[f].edit(&mut rng);
        let data = files[f].bytes();
        let parents: Vec<usize> = last.into_iter().collect();
        last = Some(s.commit(
            "main",
            &parents,
            &[(name(f).as_str(), File::Data(&data))],
            &format!("after the repack {i}\n"),
        ));
    }
    let fresh = s.commit(
        "fresh",
        &[last.expect("commits")],
        &[("NEW.txt", File::Data(b"a branch the bitmap never saw\n"))],
        "fresh\n",
    );
    s.annotated_tag("v1.0", fresh, "after the repack\n");
    b.import(&s);
}

/// A server's repository between repacks: main's first 120 commits fetched and repacked with a
/// bitmap, then 8 pushes of 10 commits each by stock git (thin packs, kept as packs by
/// receive-pack and completed with their bases, as `index-pack --fix-thin` does).
fn pushed_packs(b: &Builder) {
    pushed(b, 8, 10, "1");
}

/// [`pushed_packs`]' history, its last 40 commits pushed one at a time at git's default
/// `receive.unpackLimit` (100): each push's objects are stored loose.
fn loose_pushes(b: &Builder) {
    pushed(b, 40, 1, "100");
}

/// main's first 120 commits of a 200-commit history fetched and repacked with a bitmap, then
/// `pushes` pushes of `step` commits each by stock git (thin), `receive.unpackLimit` set to
/// `unpack_limit` meanwhile.
fn pushed(b: &Builder, pushes: usize, step: usize, unpack_limit: &str) {
    let src = Builder { repo: b.repo.with_extension("src"), hash: b.hash };
    let _ = std::fs::remove_dir_all(&src.repo);
    std::fs::create_dir_all(&src.repo).unwrap();
    src.git(&["init", "-q", "--bare", &format!("--object-format={}", b.hash.name())]);
    let mut rng = Lcg(37);
    let mut files: Vec<TextFile> = (0..12).map(|_| TextFile::new(&mut rng, 80)).collect();
    let name = |i: usize| format!("src/part{i:02}.txt");
    let mut s = Stream::new();
    let all: Vec<(String, Vec<u8>)> = files.iter().enumerate().map(|(i, f)| (name(i), f.bytes())).collect();
    let first: Vec<(&str, File<'_>)> = all.iter().map(|(n, d)| (n.as_str(), File::Data(d))).collect();
    let mut tip = s.commit("main", &[], &first, "start\n");
    for i in 1..200 {
        let edited: Vec<usize> = (0..1 + rng.below(2)).map(|_| rng.below(files.len())).collect();
        let mut changed = Vec::new();
        for f in edited {
            files[f].edit(&mut rng);
            changed.push((name(f), files[f].bytes()));
        }
        let changes: Vec<(&str, File<'_>)> = changed.iter().map(|(n, d)| (n.as_str(), File::Data(d))).collect();
        tip = s.commit("main", &[tip], &changes, &format!("change {i}\n"));
    }
    src.import(&s);
    let commit = |back: usize| src.git(&["rev-parse", &format!("main~{back}")]);
    let single = ["-c", "pack.threads=1"];
    b.git(&["fetch", "-q", src.repo.to_str().unwrap(), &format!("{}:refs/heads/main", commit(80))]);
    // -f: deltas computed here on one thread, not the fetch's (threaded, so not reproducible).
    b.git(&[&single[..], &["repack", "-adfbq", "--window=10", "--depth=50"]].concat());
    b.git(&["config", "receive.unpackLimit", unpack_limit]);
    for push in 1..=pushes {
        let target = format!("{}:refs/heads/main", commit(80 - push * step));
        src.git(&[&single[..], &["push", "-q", "--thin", b.repo.to_str().unwrap(), &target]].concat());
    }
    b.git(&["config", "--unset", "receive.unpackLimit"]);
    let _ = std::fs::remove_dir_all(&src.repo);
}

/// [`pushed_packs`] with a multi-pack-index over every pack and its bitmap, the big pack
/// preferred (as `git repack --write-midx` prefers it; left to itself, `multi-pack-index write`
/// prefers the oldest pack, and the pushes' packs are as old as it to the second).
fn midx(b: &Builder) {
    pushed_packs(b);
    let big = std::fs::read_dir(b.repo.join("objects/pack"))
        .expect("a pack directory")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|name| name.starts_with("pack-") && name.ends_with(".bitmap"))
        .expect("the big pack has a bitmap");
    let preferred = format!("--preferred-pack={}", big.replace(".bitmap", ".pack"));
    b.git(&["-c", "pack.threads=1", "multi-pack-index", "write", "--bitmap", &preferred]);
}
