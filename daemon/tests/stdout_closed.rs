//! gixd announces where it serves on stdout; whoever started it may stop reading (a test that
//! read the address, a supervisor), and that must not stop the server.

use std::process::{Command, Stdio};

#[test]
fn the_server_goes_on_serving_when_its_stdout_is_closed_before_it_announces() {
    let base = tempfile::tempdir().unwrap();
    let mut server = Command::new(env!("CARGO_BIN_EXE_gixd"))
        .args(["serve", "--listen", "127.0.0.1:0", "--git-listen", "127.0.0.1:0", "--export-all", "--base-path"])
        .arg(base.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The read end goes before the server has bound and printed: its announcement meets EPIPE.
    drop(server.stdout.take());
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let status = server.try_wait().unwrap();
    let _ = server.kill();
    let _ = server.wait();
    assert!(status.is_none(), "the server stopped: {status:?}");
}
