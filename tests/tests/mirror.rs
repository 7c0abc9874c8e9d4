//! Pull mirrors: a repository that follows an upstream served by stock `git daemon`, synced with
//! gix's client into gixd's own push ingest — branches and tags followed exactly (force-pushes,
//! deletions), only what the mirror lacks fetched, served like any repository, refusing clients'
//! pushes, and keeping what it had when the upstream cannot be reached.

use std::path::{Path, PathBuf};

use gixd::session::{State, Tally};
use gixd_tests::git;

/// What `git for-each-ref` says of the repository at `git_dir`.
fn refs(git_dir: &Path) -> String {
    let out = git(git_dir, &["for-each-ref", "--format=%(objectname) %(refname)"]);
    String::from_utf8(out.stdout).unwrap()
}

struct Fixture {
    tmp: tempfile::TempDir,
    upstream: PathBuf,
    work: PathBuf,
    base: PathBuf,
    /// Upstream's git daemon (`None`: stopped).
    daemon: Option<gixd_tests::Killed>,
    url: String,
}

impl Fixture {
    /// An upstream with two branches and an annotated tag, behind git daemon; a base path.
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let (up, base) = (tmp.path().join("up"), tmp.path().join("base"));
        std::fs::create_dir_all(&up).unwrap();
        std::fs::create_dir_all(&base).unwrap();
        git(&up, &["init", "-q", "--bare", "src.git"]);
        let upstream = up.join("src.git");
        let work = tmp.path().join("work");
        git(tmp.path(), &["init", "-q", "-b", "main", work.to_str().unwrap()]);
        for i in 0..3 {
            std::fs::write(work.join(format!("f{i}")), format!("{i}\n")).unwrap();
            git(&work, &["add", "."]);
            git(&work, &["commit", "-q", "-m", &format!("c{i}")]);
        }
        git(&work, &["tag", "-a", "v1", "-m", "v1"]);
        git(&work, &["push", "-q", upstream.to_str().unwrap(), "main", "main:other", "v1"]);
        let (daemon, port) = gixd_tests::git_daemon(&up, &[]);
        let url = format!("git://127.0.0.1:{port}/src.git");
        Fixture { tmp, upstream, work, base, daemon: Some(daemon), url }
    }

    fn state(&self) -> State {
        let mut config = gixd::config::Config::new(self.base.clone());
        config.exports = gixd::config::Exports::All;
        let repos = gixd::repo::Repos::new(&self.base, config.exports.clone()).unwrap();
        State::new(config, repos, None, None).unwrap()
    }

    fn sync(&self, name: &str) -> Result<gixd::mirror::Synced, gixd::mirror::MirrorError> {
        let state = self.state();
        let served = state.repos.resolve(name).unwrap();
        let tally = Tally::default();
        gixd::mirror::sync(&state.context(&served, Some("mirror-test"), &tally))
    }

    fn create(&self, name: &str, url: &str) -> PathBuf {
        let options = gixd::repo::create::Options {
            object_hash: gix_hash::Kind::Sha1,
            public: true,
            description: None,
            reftable: false,
        };
        gixd::mirror::create(&self.base, name, url, &options).unwrap()
    }

    fn upstream_push(&self, args: &[&str]) {
        let mut all = vec!["push", "-q", self.upstream.to_str().unwrap()];
        all.extend_from_slice(args);
        git(&self.work, &all);
    }
}

#[test]
fn a_mirror_follows_its_upstreams_branches_and_tags_exactly_and_fetches_only_what_it_lacks() {
    let f = Fixture::new();
    let mirror = f.create("m/src", &f.url);
    let first = f.sync("m/src").unwrap();
    assert_eq!(refs(&mirror), refs(&f.upstream), "branches and tags as upstream has them");
    assert_eq!((first.updated, first.objects), (3, 10), "3 commits, 3 trees, 3 blobs and a tag");
    git(&mirror, &["fsck", "--strict", "--no-dangling"]);

    // Upstream rewrites main (a force-push), deletes a branch, adds one.
    git(&f.work, &["reset", "-q", "--hard", "HEAD~1"]);
    std::fs::write(f.work.join("g"), "g\n").unwrap();
    git(&f.work, &["add", "."]);
    git(&f.work, &["commit", "-q", "-m", "rewritten"]);
    f.upstream_push(&["-f", "main", ":other", "main:next"]);
    let second = f.sync("m/src").unwrap();
    assert_eq!(refs(&mirror), refs(&f.upstream), "the force-push followed, the deleted branch gone");
    assert_eq!((second.updated, second.objects), (3, 3), "only the new commit, its tree and its blob came");
    assert_eq!(f.sync("m/src").unwrap(), gixd::mirror::Synced::default(), "up to date: nothing to do");

    // Upstream's HEAD names another branch: the mirror's follows.
    let head = |git_dir: &Path| String::from_utf8(git(git_dir, &["symbolic-ref", "HEAD"]).stdout).unwrap();
    git(&f.upstream, &["symbolic-ref", "HEAD", "refs/heads/next"]);
    assert_ne!(head(&mirror), head(&f.upstream));
    f.sync("m/src").unwrap();
    assert_eq!(head(&mirror), "refs/heads/next\n");

    // Served like any repository: a clone from gixd has upstream's refs.
    let server = gixd_tests::server::serve_with(&f.base, |_| {});
    let clone = f.tmp.path().join("clone");
    let url = format!("http://{}/m/src.git", server.addr);
    git(f.tmp.path(), &["clone", "-q", "--mirror", &url, clone.to_str().unwrap()]);
    assert_eq!(refs(&clone), refs(&f.upstream));
}

#[test]
fn a_clients_push_to_a_mirror_is_refused_naming_its_upstream_and_changes_nothing() {
    let f = Fixture::new();
    let mirror = f.create("m/src", &f.url);
    f.sync("m/src").unwrap();
    let before = refs(&mirror);
    let token_file = f.tmp.path().join("tokens.toml");
    let mut store = gixd::auth::TokenStore::load(&token_file).unwrap();
    let (_, secret) = store.add("alice", "*", true).unwrap();
    store.save().unwrap();
    let server = gixd_tests::server::serve_with(&f.base, |c| {
        c.services.receive_pack = true;
        c.token_file = Some(token_file);
    });
    std::fs::write(f.work.join("h"), "h\n").unwrap();
    git(&f.work, &["add", "."]);
    git(&f.work, &["commit", "-q", "-m", "local"]);
    let url = format!("http://alice:{secret}@{}/m/src.git", server.addr);
    let out = gixd_tests::git_command(&f.work).args(["push", &url, "main"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("this repository is a mirror of {}", f.url)), "{stderr}");
    assert_eq!(refs(&mirror), before);
}

#[test]
fn a_mirror_of_another_object_format_is_refused_with_the_format_to_use() {
    let f = Fixture::new();
    let options = gixd::repo::create::Options {
        object_hash: gix_hash::Kind::Sha256,
        public: true,
        description: None,
        reftable: false,
    };
    let mirror = gixd::mirror::create(&f.base, "m/wide", &f.url, &options).unwrap();
    let err = f.sync("m/wide").unwrap_err().to_string();
    assert!(
        err.contains("its objects are sha1, the mirror's sha256: make the mirror with --object-format sha1"),
        "{err}"
    );
    assert_eq!(refs(&mirror), "");
}

#[test]
fn an_unreachable_upstream_is_a_clear_error_and_the_mirror_keeps_what_it_had() {
    let mut f = Fixture::new();
    let unused = bench_support::run::free_port().unwrap();
    let mirror = f.create("m/gone", &format!("git://127.0.0.1:{unused}/src.git"));
    let err = f.sync("m/gone").unwrap_err();
    assert!(matches!(err, gixd::mirror::MirrorError::Upstream { .. }), "{err}");
    assert!(err.to_string().contains(&format!("127.0.0.1:{unused}")), "{err}");
    assert_eq!(refs(&mirror), "", "nothing came, nothing changed");

    // A mirror with refs keeps them when its upstream goes away.
    let kept = f.create("m/src", &f.url);
    f.sync("m/src").unwrap();
    let before = refs(&kept);
    f.daemon = None;
    assert!(f.sync("m/src").is_err());
    assert_eq!(refs(&kept), before);
}
