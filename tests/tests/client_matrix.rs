//! The git clients people use besides the git CLI — libgit2 (pygit2), dulwich, JGit, go-git and
//! isomorphic-git — against gixd and, as the control, against stock git's own servers (git
//! http-backend behind lighttpd, git daemon), over HTTP, HTTPS (a test CA; lighttpd terminates TLS
//! for the control), git:// and SSH (gixd's own server; the control is git behind Debian's sshd,
//! both with the same ECDSA client key, which every client's SSH library reads): clone (each protocol version
//! the client speaks), fetch after new commits and annotated tags on old commits, a shallow
//! clone, push of a new branch, a refused non-fast-forward, a delete; every result checked
//! against the server's refs and with `git fsck` (`tests/clients/matrix.py` drives the clients).
//!
//! A cell that passes against the control must pass against gixd. A client that is not installed
//! (`tests/clients/install.sh`, run by `.ci/run`) or that cannot do a step is a SKIP with its
//! reason, printed and in the table, never a pass. The table is written to
//! `target/client-matrix.md`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use gixd::config::Exports;
use gixd_tests::{Killed, git_exec_path};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn wait_for_port(port: u16) {
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    panic!("nothing listens on port {port}");
}

/// A child process killed when dropped.
/// git daemon serving `base` on a free port, pushes enabled.
fn git_daemon(base: &Path) -> (Killed, u16) {
    gixd_tests::git_daemon(base, &["--enable=receive-pack"])
}

/// git http-backend as CGI behind lighttpd serving `base` under `/git`, over TLS with `tls` (its
/// mod_openssl); `None` without lighttpd.
fn http_backend(base: &Path, scratch: &Path, tls: Option<&gixd::config::TlsFiles>) -> Option<(Killed, u16)> {
    Command::new("lighttpd").arg("-v").output().ok()?;
    let port = free_port();
    let conf = scratch.join("lighttpd.conf");
    let mut text =
        bench_support::http_backend_conf(scratch, base, &git_exec_path().join("git-http-backend"), port, false);
    if let Some(tls) = tls {
        text = text.replacen("server.modules = (", "server.modules = (\"mod_openssl\", ", 1);
        text.push_str(&format!(
            "ssl.engine = \"enable\"\nssl.pemfile = \"{}\"\nssl.privkey = \"{}\"\n",
            tls.cert.display(),
            tls.key.display()
        ));
    }
    std::fs::write(&conf, text).unwrap();
    let child = Command::new("lighttpd").arg("-D").arg("-f").arg(&conf).spawn().ok()?;
    wait_for_port(port);
    Some((Killed(child), port))
}

#[derive(Debug, Clone)]
struct Cell {
    client: String,
    server: String,
    transport: String,
    protocol: String,
    step: String,
    status: String,
    detail: String,
}

#[test]
fn every_client_that_works_against_stock_git_works_against_gixd() {
    let tmp = tempfile::tempdir().unwrap();
    let (gixd_base, git_base) = (tmp.path().join("gixd"), tmp.path().join("git"));
    std::fs::create_dir_all(&gixd_base).unwrap();
    std::fs::create_dir_all(&git_base).unwrap();

    let token_file = tmp.path().join("tokens.toml");
    let mut store = gixd::auth::TokenStore::load(&token_file).unwrap();
    let (_, secret) = store.add("matrix", "*", true).unwrap();
    store.save().unwrap();
    // HTTPS: one test CA signs both servers' certificates; lighttpd terminates TLS for git's.
    let ca = gixd_tests::tls::TestCa::new(tmp.path(), "matrix");
    let (gixd_tls, backend_tls) = (ca.server(tmp.path(), "gixd"), ca.server(tmp.path(), "lighttpd"));
    let tls_dir = tmp.path().join("tls-backend");
    std::fs::create_dir_all(&tls_dir).unwrap();
    // SSH: one client key (ECDSA P-256 in PEM, which JSch reads too), added for gixd with a write
    // grant and to the control sshd's authorized_keys.
    let ssh_key = tmp.path().join("client_key");
    bench_support::sshd::keygen(&ssh_key, "ecdsa", &["-b", "256", "-m", "PEM"]).expect("ssh-keygen runs");
    let public = std::fs::read_to_string(ssh_key.with_extension("pub")).unwrap();
    store.add_key("matrix", "*", true, public.trim()).unwrap();
    store.save().unwrap();
    let host_key = tmp.path().join("gixd_ssh_host_ed25519_key");
    let tf = token_file.clone();
    let hk = host_key.clone();
    let gixd = gixd_tests::server::serve_with(&gixd_base, move |c| {
        c.exports = Exports::All;
        c.token_file = Some(tf);
        c.git_listen = Some("127.0.0.1:0".parse().unwrap());
        c.services.receive_pack = true;
        c.max_transfers = 8;
        c.https_listen = Some("127.0.0.1:0".parse().unwrap());
        (c.tls_cert, c.tls_key) = (Some(gixd_tls.cert), Some(gixd_tls.key));
        c.ssh_listen = Some("127.0.0.1:0".parse().unwrap());
        c.ssh_host_key = Some(hk);
    });
    let gixd_known_hosts = tmp.path().join("gixd_known_hosts");
    let mut lines = String::new();
    for key in [host_key.clone(), gixd::transport::ssh::ecdsa_path(&host_key)] {
        let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
        lines.push_str(&format!("[127.0.0.1]:{} {}\n", gixd.ssh_addr.unwrap().port(), public.trim()));
    }
    std::fs::write(&gixd_known_hosts, lines).unwrap();
    let sshd = if bench_support::sshd::available() {
        let authorized = tmp.path().join("authorized_keys");
        std::fs::write(&authorized, &public).unwrap();
        let extra = format!("AuthorizedKeysFile {}", authorized.display());
        Some(bench_support::sshd::Sshd::start(&tmp.path().join("sshd"), &extra).unwrap())
    } else {
        assert!(std::env::var_os("CI").is_none(), "CI runs this as root with openssh-server (.ci/run installs it)");
        eprintln!("SKIP control SSH: needs root and /usr/sbin/sshd");
        None
    };
    let sshd_known_hosts = tmp.path().join("sshd_known_hosts");
    std::fs::write(&sshd_known_hosts, sshd.as_ref().map_or("", |s| s.known_hosts.as_str())).unwrap();
    let (_daemon, daemon_port) = git_daemon(&git_base);
    let backend = http_backend(&git_base, tmp.path(), None);
    let tls_backend = http_backend(&git_base, &tls_dir, Some(&backend_tls));
    if backend.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "lighttpd is missing: .ci/run installs it (tests/clients/install.sh)"
        );
        eprintln!("SKIP control HTTP: lighttpd is not installed (tests/clients/install.sh installs it)");
    }
    let servers = serde_json::json!([
        {
            "name": "gixd",
            "base": gixd_base,
            "http": format!("http://{}", gixd.addr),
            "git": format!("git://{}", gixd.git_addr.unwrap()),
            "https": format!("https://{}", gixd.https_addr.unwrap()),
            "ssh": format!("ssh://git@{}", gixd.ssh_addr.unwrap()),
            "ca": ca.ca_pem,
            "http_user": "matrix",
            "http_password": secret,
            "ssh_key": ssh_key,
            "known_hosts": gixd_known_hosts,
        },
        {
            "name": "git",
            "base": git_base,
            "http": backend.as_ref().map(|(_, port)| format!("http://127.0.0.1:{port}/git")),
            "git": format!("git://127.0.0.1:{daemon_port}"),
            "https": tls_backend.as_ref().map(|(_, port)| format!("https://127.0.0.1:{port}/git")),
            "ssh": sshd.as_ref().map(|s| format!("ssh://root@127.0.0.1:{}{}", s.port, git_base.display())),
            "ca": ca.ca_pem,
            "ssh_key": ssh_key,
            "known_hosts": sshd_known_hosts,
        },
    ]);
    let servers_file = tmp.path().join("servers.json");
    std::fs::write(&servers_file, serde_json::to_vec_pretty(&servers).unwrap()).unwrap();

    let root = repo_root();
    let table = root.join("target/client-matrix.md");
    let out = Command::new("python3")
        .arg(root.join("tests/clients/matrix.py"))
        .arg("--servers")
        .arg(&servers_file)
        .arg("--work")
        .arg(tmp.path().join("work"))
        .arg("--markdown")
        .arg(&table)
        .stderr(Stdio::inherit())
        .output()
        .expect("python3 runs the matrix");
    assert!(out.status.success(), "the matrix runner failed: {}", String::from_utf8_lossy(&out.stdout));
    let cells: Vec<Cell> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let s = |k: &str| v[k].as_str().unwrap_or("").to_owned();
            Cell {
                client: s("client"),
                server: s("server"),
                transport: s("transport"),
                protocol: s("protocol"),
                step: s("step"),
                status: s("status"),
                detail: s("detail"),
            }
        })
        .collect();
    assert!(!cells.is_empty(), "the matrix ran no cell");

    type Key = (String, String, String, String);
    let by_server = |server: &str| -> BTreeMap<Key, Cell> {
        cells
            .iter()
            .filter(|c| c.server == server)
            .map(|c| ((c.client.clone(), c.transport.clone(), c.protocol.clone(), c.step.clone()), c.clone()))
            .collect()
    };
    let (ours, control) = (by_server("gixd"), by_server("git"));
    let mut failures = Vec::new();
    let (mut passed, mut skipped) = (0, 0);
    for (key, theirs) in &control {
        let Some(mine) = ours.get(key) else {
            failures.push(format!("{key:?}: no gixd cell"));
            continue;
        };
        match (theirs.status.as_str(), mine.status.as_str()) {
            ("pass", "pass") => passed += 1,
            ("pass", _) => {
                failures.push(format!("{key:?}: passes against git, {} against gixd: {}", mine.status, mine.detail))
            }
            ("skip", _) | (_, "skip") => {
                skipped += 1;
                eprintln!("SKIP {key:?}: {}", if mine.detail.is_empty() { &theirs.detail } else { &mine.detail });
            }
            (status, _) => {
                eprintln!("CONTROL {status} {key:?}: {} (gixd: {} {})", theirs.detail, mine.status, mine.detail)
            }
        }
    }
    eprintln!("client matrix: {passed} cells pass on both servers, {skipped} skipped; table in {}", table.display());
    assert!(failures.is_empty(), "cells that work against stock git fail against gixd:\n{}", failures.join("\n"));
}
