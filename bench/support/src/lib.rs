//! Shared by the benchmarks (`xtask bench`, the bake-off in `bench/harness`) and the client
//! matrix test: the instrument in front of every server and the control server's configuration,
//! so every arm is started and counted the same way.

pub mod relay;
pub mod run;
pub mod sshd;

use std::path::Path;

/// lighttpd's configuration for git http-backend as CGI under `/git`, serving every repository
/// below `base` (`GIT_HTTP_EXPORT_ALL`), listening on 127.0.0.1:`port`, its document root and
/// error log in `scratch`. `single_process` keeps lighttpd to one process (`server.max-worker
/// = 0`), so one cgroup holds all of its CPU.
pub fn http_backend_conf(scratch: &Path, base: &Path, backend: &Path, port: u16, single_process: bool) -> String {
    format!(
        "server.modules = (\"mod_alias\", \"mod_cgi\", \"mod_setenv\")\nserver.document-root = \"{s}\"\nserver.port = {port}\n\
         server.bind = \"127.0.0.1\"\nserver.errorlog = \"{s}/lighttpd-error.log\"\n{workers}\
         alias.url = ( \"/git\" => \"{backend}\" )\n\
         $HTTP[\"url\"] =~ \"^/git\" {{\n  cgi.assign = (\"\" => \"\")\n  setenv.add-environment = ( \"GIT_PROJECT_ROOT\" => \"{b}\", \"GIT_HTTP_EXPORT_ALL\" => \"\" )\n}}\n",
        s = scratch.display(),
        b = base.display(),
        backend = backend.display(),
        workers = if single_process { "server.max-worker = 0\n" } else { "" },
    )
}

/// The summed resident memory (VmRSS, KiB) of the processes a cgroup's `cgroup.procs` lists now.
pub fn rss_kb_of(procs: &Path) -> u64 {
    std::fs::read_to_string(procs)
        .unwrap_or_default()
        .lines()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .filter_map(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .sum()
}

/// A deterministic stream of bytes (xorshift), for inputs nobody chose by hand.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
