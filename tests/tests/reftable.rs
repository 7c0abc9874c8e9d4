//! gix-reftable (carried by the patch queue) against stock git as the oracle: tables git writes
//! are read as `git for-each-ref` lists them; tables written here are read by git, pass `git refs
//! verify` and `git fsck`, and git goes on writing on top of them; compaction keeps every ref.
//! SHA-1 and SHA-256 both; damaged tables are errors, never panics.

use std::path::Path;
use std::time::Duration;

use gix_hash::ObjectId;
use gix_reftable::{LogRecord, LogUpdate, Options, RefRecord, RefValue, Stack, Table};
use gixd_tests::{commit_files, git, git_command, git_out};

/// A non-bare reftable repository of `format` with one commit on `main`.
fn reftable_repo(format: &str) -> (tempfile::TempDir, std::path::PathBuf, String) {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    git(tmp.path(), &["init", "-q", "--ref-format=reftable", &format!("--object-format={format}"), "repo"]);
    let head = commit_files(&repo, &[("a.txt", b"a\n")], "one");
    (tmp, repo, head)
}

/// `name value peeled-or-empty symref-or-empty` per ref, HEAD first, as git sees them.
fn git_view(repo: &Path) -> Vec<String> {
    let mut lines = vec![format!("HEAD {}", git_out(repo, &["symbolic-ref", "-q", "HEAD"]))];
    let refs = git_out(repo, &["for-each-ref", "--format=%(refname) %(objectname) %(*objectname) %(symref)"]);
    lines.extend(refs.lines().map(|l| l.trim_end().to_owned()));
    lines
}

/// The same, from the stack read here.
fn our_view(repo: &Path) -> Vec<String> {
    let stack = Stack::open(&repo.join(".git/reftable")).unwrap();
    let mut lines = Vec::new();
    let refs = stack.refs().unwrap();
    let resolve = |name: &[u8]| {
        refs.iter().find(|r| r.name == name).and_then(|r| match &r.value {
            RefValue::Val1(id) | RefValue::Val2 { value: id, .. } => Some(*id),
            _ => None,
        })
    };
    match &stack.find("HEAD".into()).unwrap().expect("HEAD is stored in the stack").value {
        RefValue::Symref(target) => lines.push(format!("HEAD {target}")),
        other => panic!("HEAD is {other:?}"),
    }
    for r in refs.iter().filter(|r| r.name != "HEAD") {
        lines.push(match &r.value {
            RefValue::Val1(id) => format!("{} {id}", r.name),
            RefValue::Val2 { value, peeled } => format!("{} {value} {peeled}", r.name),
            RefValue::Symref(target) => {
                format!("{} {}  {target}", r.name, resolve(target).expect("symref target exists"))
            }
            RefValue::Deletion => unreachable!("merged refs leave deletions out"),
        });
    }
    lines
}

#[test]
fn tables_git_writes_are_read_as_git_lists_them_sha1_and_sha256() {
    for format in ["sha1", "sha256"] {
        let (_tmp, repo, head) = reftable_repo(format);
        // Enough refs for many ref blocks and a ref index; annotated tags; a symref; deletions;
        // several tables (one per update-ref transaction) that git has not compacted.
        let mut script = String::new();
        for i in 0..3000 {
            script.push_str(&format!("create refs/heads/topic/{i:05} {head}\n"));
        }
        git_command(&repo).args(["update-ref", "--stdin"]).stdin_bytes(script.as_bytes());
        for i in 0..20 {
            git(&repo, &["tag", "-a", "-m", "tag", &format!("v{i}")]);
        }
        git(&repo, &["symbolic-ref", "refs/heads/alias", "refs/heads/main"]);
        for i in 0..10 {
            git(&repo, &["update-ref", "-d", &format!("refs/heads/topic/{i:05}")]);
        }
        let stack = Stack::open(&repo.join(".git/reftable")).unwrap();
        assert!(stack.tables().len() > 1, "{format}: git left several tables");
        assert_eq!(our_view(&repo), git_view(&repo), "{format}");

        git(&repo, &["pack-refs"]);
        let stack = Stack::open(&repo.join(".git/reftable")).unwrap();
        assert_eq!(stack.tables().len(), 1, "{format}: git compacted to one table");
        assert_eq!(our_view(&repo), git_view(&repo), "{format}: after git's compaction");
        assert!(!stack.logs().unwrap().is_empty(), "{format}: the work tree's reflogs are read");
    }
}

/// What tests here commit: refs named `refs/heads/n/<i>` at `id`.
fn branch_records(n: usize, id: ObjectId) -> Vec<RefRecord> {
    let mut refs: Vec<RefRecord> = (0..n)
        .map(|i| RefRecord { name: format!("refs/heads/n/{i:06}").into(), update_index: 0, value: RefValue::Val1(id) })
        .collect();
    refs.sort_by(|a, b| a.name.cmp(&b.name));
    refs
}

#[test]
fn tables_written_here_are_read_verified_and_written_on_by_git_sha1_and_sha256() {
    for format in ["sha1", "sha256"] {
        let (_tmp, repo, head) = reftable_repo(format);
        let dir = repo.join(".git/reftable");
        let kind = if format == "sha1" { gix_hash::Kind::Sha1 } else { gix_hash::Kind::Sha256 };
        let id = ObjectId::from_hex(head.as_bytes()).unwrap();
        git(&repo, &["tag", "-a", "-m", "annotated", "ann"]);
        let ann = ObjectId::from_hex(git_out(&repo, &["rev-parse", "refs/tags/ann"]).as_bytes()).unwrap();
        git(&repo, &["update-ref", "-d", "refs/tags/ann"]);

        // 20 000 refs: hundreds of blocks and their index.
        let mut refs = branch_records(20_000, id);
        refs.push(RefRecord {
            name: "refs/tags/ann".into(),
            update_index: 0,
            value: RefValue::Val2 { value: ann, peeled: id },
        });
        refs.push(RefRecord {
            name: "refs/heads/sym".into(),
            update_index: 0,
            value: RefValue::Symref("refs/heads/main".into()),
        });
        refs.sort_by(|a, b| a.name.cmp(&b.name));
        let logs = vec![LogRecord {
            name: "refs/heads/n/000001".into(),
            update_index: 0,
            update: Some(LogUpdate {
                old_id: ObjectId::null(kind),
                new_id: id,
                name: "gixd".into(),
                email: "gixd@example.com".into(),
                time: 1_700_000_000,
                tz_offset: 60,
                message: "push\n".into(),
            }),
        }];
        let before = Stack::open(&dir).unwrap().tables().len();
        let lock = Stack::lock(&dir, Duration::from_secs(5)).unwrap();
        // SHA-256 in small blocks: thousands of them, an index of three levels.
        let options = Options { block_size: if format == "sha1" { 4096 } else { 512 }, object_hash: kind };
        let stack = lock.commit(refs, logs, options).unwrap();
        assert_eq!(stack.tables().len(), before + 1, "one table per transaction");

        assert_eq!(git_view(&repo), our_view(&repo), "{format}: git reads our table as we do");
        let listed = git_out(&repo, &["for-each-ref", "--count=3", "--format=%(refname)", "refs/heads/n/"]);
        assert_eq!(listed, "refs/heads/n/000000\nrefs/heads/n/000001\nrefs/heads/n/000002");
        // A lookup by name goes through the index (git seeks, it does not scan).
        assert_eq!(git_out(&repo, &["rev-parse", "refs/heads/n/019999"]), head);
        assert_eq!(git_out(&repo, &["rev-parse", "refs/tags/ann^{}"]), head);
        let reflog = git_out(&repo, &["reflog", "show", "--format=%gs", "refs/heads/n/000001"]);
        assert_eq!(reflog, "push", "{format}");
        git(&repo, &["refs", "verify", "--strict"]);
        git(&repo, &["fsck", "--no-progress"]);

        // git writes on top of our table, and we read what it wrote.
        git(&repo, &["update-ref", "-d", "refs/heads/n/000005"]);
        git(&repo, &["update-ref", "refs/heads/after", &head]);
        assert_eq!(our_view(&repo), git_view(&repo), "{format}: after git wrote on top");
    }
}

#[test]
fn auto_compaction_keeps_a_geometric_stack_that_git_reads_and_drops_deletions_at_the_base() {
    let (_tmp, repo, head) = reftable_repo("sha1");
    let dir = repo.join(".git/reftable");
    let id = ObjectId::from_hex(head.as_bytes()).unwrap();
    let options = Options::new(gix_hash::Kind::Sha1);
    for i in 0..40 {
        let name = format!("refs/heads/b/{i:03}");
        let value = if i % 7 == 6 { RefValue::Deletion } else { RefValue::Val1(id) };
        let lock = Stack::lock(&dir, Duration::from_secs(5)).unwrap();
        lock.commit(vec![RefRecord { name: name.into(), update_index: 0, value }], Vec::new(), options).unwrap();
        while Stack::auto_compact(&dir, options, Duration::from_secs(5)).unwrap() {}
        let stack = Stack::open(&dir).unwrap();
        let sizes: Vec<u64> = stack.tables().iter().map(|t| t.len() as u64 - 92).collect();
        assert!(
            gix_reftable::suggest_compaction_segment(&sizes, 2).is_none(),
            "after commit {i}: sizes {sizes:?} still call for compaction"
        );
        assert!(stack.tables().len() <= 8, "after commit {i}: {} tables", stack.tables().len());
    }
    assert_eq!(our_view(&repo), git_view(&repo));
    git(&repo, &["refs", "verify", "--strict"]);
    // Everything compacted into the base: no deletion record is left in it.
    let lock = Stack::lock(&dir, Duration::from_secs(5)).unwrap();
    drop(lock);
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".ref"))
        .collect();
    assert_eq!(names.len(), Stack::open(&dir).unwrap().tables().len(), "compacted tables are deleted: {names:?}");
}

#[test]
fn geometric_compaction_segments_are_git_s() {
    let seg = gix_reftable::suggest_compaction_segment;
    assert_eq!(seg(&[], 2), None);
    assert_eq!(seg(&[100], 2), None);
    assert_eq!(seg(&[64, 32, 16, 8, 4, 2, 1], 2), None, "already geometric");
    assert_eq!(seg(&[100, 10, 10], 2), Some(1..3), "two equal newest tables");
    assert_eq!(seg(&[10, 10, 10], 2), Some(0..3));
    assert_eq!(seg(&[128, 64, 32, 16, 8, 4, 2, 1, 1], 2), Some(0..9), "one more equal table cascades");
}

#[test]
fn damaged_tables_are_errors_not_panics() {
    let (_tmp, repo, head) = reftable_repo("sha1");
    let id = ObjectId::from_hex(head.as_bytes()).unwrap();
    let table = gix_reftable::write_table(
        Options::new(gix_hash::Kind::Sha1),
        1,
        1,
        &branch_records(500, id).into_iter().map(|r| RefRecord { update_index: 1, ..r }).collect::<Vec<_>>(),
        &[],
    )
    .unwrap();
    assert_eq!(Table::from_bytes(table.clone()).unwrap().refs().unwrap().len(), 500);
    // Every truncation, and a flipped byte at every position: an error or a table that reads
    // (the CRC covers the footer only), never a panic or an unbounded read.
    for len in 0..table.len() {
        let _ = Table::from_bytes(table[..len].to_vec()).and_then(|t| t.refs().map(|_| ()));
    }
    for at in 0..table.len() {
        let mut bad = table.clone();
        bad[at] ^= 0x5a;
        let _ = Table::from_bytes(bad).and_then(|t| t.refs().map(|_| ()).and(t.logs().map(|_| ())));
    }
    let mut crc = table.clone();
    let last = crc.len() - 1;
    crc[last] ^= 1;
    assert!(Table::from_bytes(crc).is_err(), "a wrong footer CRC is refused");
    // A tables.list naming a missing table is an error after the retries, not a hang.
    std::fs::write(repo.join(".git/reftable/tables.list"), "0x000000000009-0x000000000009-deadbeef.ref\n").unwrap();
    assert!(Stack::open(&repo.join(".git/reftable")).is_err());
}

trait StdinBytes {
    fn stdin_bytes(&mut self, input: &[u8]);
}

impl StdinBytes for std::process::Command {
    fn stdin_bytes(&mut self, input: &[u8]) {
        use std::io::Write;
        let mut child = self.stdin(std::process::Stdio::piped()).spawn().unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        assert!(child.wait().unwrap().success());
    }
}
