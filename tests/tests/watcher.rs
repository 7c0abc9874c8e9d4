//! Regression guard for the park-based watcher (gitoxide PR 2877, released in gix-parallel 0.50):
//! `in_parallel_with_slice`'s interrupt watcher must not sleep out a `periodic()` interval after
//! the work is done, and indexing a tiny pack must not sleep at all.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use gixd_tests::{commit_files, git, syscall_counts_of_test, temp_repo};

/// How long the deliberately slow `periodic()` asks to wait. The work itself takes microseconds;
/// a call that returns later than half of this slept out the interval.
const SLOW_INTERVAL: Duration = Duration::from_secs(60);

#[test]
fn in_parallel_with_slice_returns_without_waiting_out_a_slow_periodic_interval() {
    let (done, finished) = std::sync::mpsc::channel();
    let periodic_calls = std::sync::Arc::new(AtomicUsize::new(0));
    let calls = periodic_calls.clone();
    std::thread::spawn(move || {
        let mut input: Vec<u32> = (0..64).collect();
        let result = gix_parallel::in_parallel_with_slice(
            &mut input,
            Some(2),
            |_| 0u64,
            |item, sum, _threads_left, _should_interrupt| {
                *sum += u64::from(*item);
                Ok::<_, std::convert::Infallible>(())
            },
            move || {
                calls.fetch_add(1, Ordering::SeqCst);
                Some(SLOW_INTERVAL)
            },
            |sum| sum,
        );
        done.send(result).ok();
    });
    let sums = finished
        .recv_timeout(SLOW_INTERVAL / 2)
        .expect("in_parallel_with_slice waited out its watcher's periodic() interval after the work was done")
        .expect("no error");
    assert_eq!(sums.iter().sum::<u64>(), (0..64u64).sum::<u64>());
    assert!(periodic_calls.load(Ordering::SeqCst) <= 1, "the watcher polled more than once");
}

/// Index a tiny pack (one commit, three objects) through gix-pack's bundle writer.
fn index_a_tiny_pack() {
    let (tmp, repo) = temp_repo(false);
    commit_files(&repo, &[("a.txt", b"a tiny file\n")], "tiny");
    git(&repo, &["repack", "-adq"]);
    let pack_dir = repo.join(".git/objects/pack");
    let pack = std::fs::read_dir(&pack_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "pack"))
        .unwrap();
    let out = tmp.path().join("indexed");
    std::fs::create_dir_all(&out).unwrap();
    let mut reader = std::io::BufReader::new(std::fs::File::open(pack).unwrap());
    let outcome = gix_pack::Bundle::write_to_directory(
        &mut reader,
        Some(&out),
        &mut gix_utils::progress::Discard,
        &AtomicBool::new(false),
        None::<gix_odb::Handle>,
        gix_hash::Kind::Sha1,
        gix_pack::bundle::write::Options::default(),
    )
    .expect("the pack indexes");
    assert_eq!(outcome.index.num_objects, 3);
}

#[test]
#[ignore = "runs under strace, started by indexing_a_tiny_pack_never_sleeps"]
fn inner_index_a_tiny_pack() {
    index_a_tiny_pack();
}

#[test]
fn indexing_a_tiny_pack_never_sleeps() {
    let Some(counts) = syscall_counts_of_test("inner_index_a_tiny_pack", "clock_nanosleep,nanosleep") else {
        if std::env::var_os("CI").is_some() {
            panic!("strace is required in CI (.ci/run installs it)");
        }
        eprintln!("strace is not installed: indexing without the syscall count");
        index_a_tiny_pack();
        return;
    };
    assert_eq!(
        counts.values().sum::<u64>(),
        0,
        "indexing a tiny pack slept: {counts:?} (the old watcher slept out a 50 ms interval per index)"
    );
}
