//! Serving a transfer creates no thread: pack generation runs inline on a blocking thread that
//! was started with the server (the queue's serial Stepwise keeps gix-pack from starting its
//! own). Counted, not timed: every clone/clone3 with CLONE_THREAD that the process makes while
//! one clone of a 12 847-object repository is served, under strace.
//!
//! One served-clone test per binary: strace follows the whole process.

use gixd_tests::corpus::{self, Hash};
use gixd_tests::server::{http, pkt, refs, serve};
use gixd_tests::{threads_created_by_inner_test, threads_created_in_window};

const MARK: &str = "getppid";

#[test]
#[ignore = "runs under strace, started by serving_a_clone_creates_no_thread"]
fn inner_serve_one_clone() {
    let repo = corpus::ensure("linear", Hash::Sha1);
    let wants: Vec<String> = refs(&repo, "refs").into_values().collect();
    let server = serve(repo.parent().unwrap());
    let path = format!("/{}/git-upload-pack", repo.file_name().unwrap().to_str().unwrap());
    let headers = [("Content-Type", "application/x-git-upload-pack-request"), ("Git-Protocol", "version=2")];
    let mut ls_refs = pkt("command=ls-refs\n");
    ls_refs.extend(b"0001");
    ls_refs.extend(pkt("symrefs\n"));
    ls_refs.extend(b"0000");
    let mut fetch = pkt("command=fetch\n");
    fetch.extend(b"0001");
    for id in &wants {
        fetch.extend(pkt(&format!("want {id}\n")));
    }
    fetch.extend(pkt("ofs-delta\n"));
    fetch.extend(pkt("done\n"));
    fetch.extend(b"0000");

    let _ = std::os::unix::process::parent_id(); // window opens
    let refs = http(server.addr, "POST", &path, &headers, &ls_refs);
    let pack = http(server.addr, "POST", &path, &headers, &fetch);
    let _ = std::os::unix::process::parent_id(); // window closes

    assert_eq!(refs.status, 200);
    assert!(pack.body.len() > 1_000_000, "a whole pack was served");
}

#[test]
fn serving_a_clone_creates_no_thread() {
    // Build the corpus first, outside the traced run.
    corpus::ensure("linear", Hash::Sha1);
    let Some(created) = threads_created_by_inner_test("inner_serve_one_clone", MARK, &[]) else { return };
    assert!(created.is_empty(), "serving one clone created {} thread(s):\n{}", created.len(), created.join("\n"));
}

#[test]
fn the_window_parser_counts_threads_and_not_processes() {
    let log = "\
10 clone3({flags=CLONE_VM|CLONE_THREAD|CLONE_SYSVSEM, exit_signal=0}, 88) = 11
10 getppid() = 1
10 clone3({flags=CLONE_VM|CLONE_FS|CLONE_THREAD|CLONE_SETTLS, exit_signal=0}, 88) = 12
10 clone(child_stack=NULL, flags=CLONE_CHILD_SETTID|SIGCHLD) = 13
10 getppid() = 1
10 clone3({flags=CLONE_VM|CLONE_THREAD, exit_signal=0}, 88) = 14
";
    assert_eq!(threads_created_in_window(log, MARK).len(), 1);
}
