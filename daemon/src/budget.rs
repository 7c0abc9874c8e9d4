//! The CPU and memory budget gixd really has, read from the kernel: the CPUs it may run on
//! (`sched_getaffinity`) and the CFS quota of its own cgroup, v2 (`cpu.max`) or v1
//! (`cpu.cfs_quota_us` / `cpu.cfs_period_us`), the smallest along the cgroup's path. Effective
//! parallelism = min(affinity, ceil(quota / period)), at least 1. The memory it may use: the
//! smallest `memory.max` or `memory.high` (v2) or `memory.limit_in_bytes` (v1) along the path.
//! The parsers are pure functions; only [`read`] touches the system. gixd never pins itself: a
//! server in a container cannot know which CPUs are its to take.

use std::path::{Path, PathBuf};

/// A CFS bandwidth limit: `quota` µs of CPU time per `period` µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    pub quota_us: u64,
    pub period_us: u64,
}

impl Quota {
    /// Whole CPUs this quota allows, rounded up (1.5 CPUs of time can keep 2 threads busy).
    pub fn cpus(&self) -> usize {
        (self.quota_us.div_ceil(self.period_us.max(1))).max(1) as usize
    }
}

/// What the kernel says about this process's CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// CPUs in the affinity mask.
    pub affinity: usize,
    /// The tightest CFS quota on the cgroup path, if any.
    pub quota: Option<Quota>,
    /// The tightest memory limit on the cgroup path, bytes, if any.
    pub memory: Option<u64>,
}

impl Budget {
    /// min(affinity, quota in whole CPUs), at least 1.
    pub fn effective(&self) -> usize {
        let by_quota = self.quota.map_or(usize::MAX, |q| q.cpus());
        self.affinity.min(by_quota).max(1)
    }

    /// The operator's mistake worth a warning: many more CPUs to run on than CPU time to run
    /// with (a quota without a cpuset), so threads spread over cores they must share in time.
    pub fn spread_thin(&self) -> bool {
        match self.quota {
            Some(q) => self.affinity >= 2 * q.cpus(),
            None => false,
        }
    }

    /// The one startup line and, when [`spread_thin`](Self::spread_thin), the warning.
    pub fn describe(&self, sizes: &str) -> (String, Option<String>) {
        let quota = match self.quota {
            Some(q) => format!("{}/{} µs ({} CPU)", q.quota_us, q.period_us, q.cpus()),
            None => "none".into(),
        };
        let memory = match self.memory {
            Some(bytes) => format!("{} MiB", bytes >> 20),
            None => "none".into(),
        };
        let line = format!(
            "cpu budget: affinity {} CPU, quota {quota}, effective {}; memory limit {memory}; {sizes}",
            self.affinity,
            self.effective()
        );
        let warning = self.spread_thin().then(|| {
            format!(
                "gixd may run on {} CPUs but its CPU quota is {} CPU: threads will hand work across cores they only get a share of. \
                 Give it as many CPUs as quota: `docker run --cpuset-cpus=… --cpus=…`, or systemd `AllowedCPUs=` with `CPUQuota=`.",
                self.affinity,
                self.quota.map_or(0, |q| q.cpus())
            )
        });
        (line, warning)
    }
}

/// Count the CPUs of a kernel cpu list (`0-3,8,10-11`); `None` if it does not parse.
pub fn parse_cpu_list(list: &str) -> Option<usize> {
    let list = list.trim();
    if list.is_empty() {
        return Some(0);
    }
    let mut count = 0;
    for part in list.split(',') {
        let part = part.trim();
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi): (usize, usize) = (lo.parse().ok()?, hi.parse().ok()?);
                if hi < lo {
                    return None;
                }
                count += hi - lo + 1;
            }
            None => {
                part.parse::<usize>().ok()?;
                count += 1;
            }
        }
    }
    Some(count)
}

/// A cgroup file whose content is not what the kernel writes there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unreadable;

/// cgroup v2 `cpu.max`: `max <period>` (no limit) or `<quota> <period>`.
/// `Ok(None)` is "no limit"; `Err(Unreadable)` is unreadable content.
pub fn parse_cpu_max(text: &str) -> Result<Option<Quota>, Unreadable> {
    let mut words = text.split_whitespace();
    let (quota, period) = (words.next().ok_or(Unreadable)?, words.next());
    let period_us = match period {
        Some(p) => p.parse::<u64>().map_err(|_| Unreadable)?,
        None => 100_000, // the kernel's default period
    };
    if quota == "max" {
        return Ok(None);
    }
    let quota_us = quota.parse::<u64>().map_err(|_| Unreadable)?;
    if period_us == 0 {
        return Err(Unreadable);
    }
    Ok(Some(Quota { quota_us, period_us }))
}

/// cgroup v1 `cpu.cfs_quota_us` and `cpu.cfs_period_us`: a quota of `-1` is no limit.
pub fn parse_v1_quota(quota: &str, period: &str) -> Result<Option<Quota>, Unreadable> {
    let quota: i64 = quota.trim().parse().map_err(|_| Unreadable)?;
    let period_us: u64 = period.trim().parse().map_err(|_| Unreadable)?;
    if quota < 0 {
        return Ok(None);
    }
    if period_us == 0 {
        return Err(Unreadable);
    }
    Ok(Some(Quota { quota_us: quota as u64, period_us }))
}

/// The cgroup paths of this process from `/proc/self/cgroup`: the v2 path (`0::/path`) and the
/// v1 path of the `cpu` controller (`N:cpu,cpuacct:/path`).
pub fn parse_proc_cgroup(text: &str) -> (Option<String>, Option<String>) {
    parse_proc_cgroup_of(text, "cpu")
}

/// [`parse_proc_cgroup`] for the v1 `controller`.
pub fn parse_proc_cgroup_of(text: &str, controller: &str) -> (Option<String>, Option<String>) {
    let (mut v2, mut v1) = (None, None);
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            v2 = Some(path.to_owned());
        } else if controllers.split(',').any(|c| c == controller) {
            v1 = Some(path.to_owned());
        }
    }
    (v2, v1)
}

/// A memory limit file's value: `max` (v2) or a value past any machine's memory (v1's "no
/// limit", 2^63 rounded down to a page) is none.
pub fn parse_memory_limit(text: &str) -> Option<u64> {
    let bytes: u64 = text.trim().parse().ok()?;
    (bytes < 1 << 60).then_some(bytes)
}

/// Mount points from `/proc/self/mountinfo`: the cgroup2 mount, and the v1 mount carrying `cpu`.
pub fn parse_mountinfo(text: &str) -> (Option<PathBuf>, Option<PathBuf>) {
    parse_mountinfo_of(text, "cpu")
}

/// [`parse_mountinfo`] for the v1 `controller`.
pub fn parse_mountinfo_of(text: &str, controller: &str) -> (Option<PathBuf>, Option<PathBuf>) {
    let (mut v2, mut v1_cpu) = (None, None);
    for line in text.lines() {
        // <id> <parent> <maj:min> <root> <mount point> <options> [optional…] - <fstype> <source> <super options>
        let Some((left, right)) = line.split_once(" - ") else { continue };
        let mount_point = left.split_whitespace().nth(4);
        let mut right = right.split_whitespace();
        let (fstype, _source, super_opts) = (right.next(), right.next(), right.next().unwrap_or(""));
        match (fstype, mount_point) {
            (Some("cgroup2"), Some(mp)) if v2.is_none() => v2 = Some(PathBuf::from(mp)),
            (Some("cgroup"), Some(mp)) if super_opts.split(',').any(|o| o == controller) => {
                v1_cpu = Some(PathBuf::from(mp))
            }
            _ => {}
        }
    }
    (v2, v1_cpu)
}

/// The directories from the process's cgroup up to the mount's root: a limit anywhere on the
/// way applies.
pub fn cgroup_chain(mount: &Path, path: &str) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mut rel = PathBuf::from(path.trim_start_matches('/'));
    loop {
        dirs.push(mount.join(&rel));
        if !rel.pop() {
            break;
        }
    }
    dirs
}

/// The tightest quota over `dirs`, read with `read_quota` per directory.
pub fn tightest(dirs: &[PathBuf], read_quota: impl Fn(&Path) -> Option<Quota>) -> Option<Quota> {
    dirs.iter()
        .filter_map(|d| read_quota(d))
        .min_by(|a, b| (a.quota_us as u128 * b.period_us as u128).cmp(&(b.quota_us as u128 * a.period_us as u128)))
}

/// Read this process's budget from the kernel.
pub fn read() -> Budget {
    Budget {
        affinity: affinity().unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        quota: quota(),
        memory: memory(),
    }
}

/// The tightest memory limit on this process's cgroup path, v2 or v1.
fn memory() -> Option<u64> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let (v2_path, v1_path) = parse_proc_cgroup_of(&cgroup, "memory");
    let (v2_mount, v1_mount) = parse_mountinfo_of(&mountinfo, "memory");
    let mut limits = Vec::new();
    if let (Some(mount), Some(path)) = (v2_mount, v2_path) {
        for dir in cgroup_chain(&mount, &path) {
            for file in ["memory.max", "memory.high"] {
                limits.extend(std::fs::read_to_string(dir.join(file)).ok().as_deref().and_then(parse_memory_limit));
            }
        }
    }
    if let (Some(mount), Some(path)) = (v1_mount, v1_path) {
        for dir in cgroup_chain(&mount, &path) {
            let limit = std::fs::read_to_string(dir.join("memory.limit_in_bytes")).ok();
            limits.extend(limit.as_deref().and_then(parse_memory_limit));
        }
    }
    limits.into_iter().min()
}

fn affinity() -> Option<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it for pid 0 (us).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        Some(libc::CPU_COUNT(&set) as usize)
    }
}

fn quota() -> Option<Quota> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let (v2_path, v1_path) = parse_proc_cgroup(&cgroup);
    let (v2_mount, v1_mount) = parse_mountinfo(&mountinfo);
    let v2 = match (v2_mount, v2_path) {
        (Some(mount), Some(path)) => tightest(&cgroup_chain(&mount, &path), |dir| {
            parse_cpu_max(&std::fs::read_to_string(dir.join("cpu.max")).ok()?).ok().flatten()
        }),
        _ => None,
    };
    let v1 = match (v1_mount, v1_path) {
        (Some(mount), Some(path)) => tightest(&cgroup_chain(&mount, &path), |dir| {
            let q = std::fs::read_to_string(dir.join("cpu.cfs_quota_us")).ok()?;
            let p = std::fs::read_to_string(dir.join("cpu.cfs_period_us")).ok()?;
            parse_v1_quota(&q, &p).ok().flatten()
        }),
        _ => None,
    };
    tightest(&[PathBuf::from("v2"), PathBuf::from("v1")], |d| if d == Path::new("v2") { v2 } else { v1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_limits_read_numbers_and_take_max_and_v1_s_no_limit_for_none() {
        assert_eq!(parse_memory_limit("536870912\n"), Some(512 << 20));
        assert_eq!(parse_memory_limit("max\n"), None);
        assert_eq!(parse_memory_limit("9223372036854771712\n"), None, "v1's no limit");
        let cgroup = "12:memory:/ci/job\n4:cpu,cpuacct:/ci\n0::/ci/job\n";
        assert_eq!(parse_proc_cgroup_of(cgroup, "memory"), (Some("/ci/job".into()), Some("/ci/job".into())));
        let mountinfo = "30 25 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        assert_eq!(parse_mountinfo_of(mountinfo, "memory").1, Some(PathBuf::from("/sys/fs/cgroup/memory")));
    }

    #[test]
    fn cpu_lists_count_ranges_and_singletons() {
        assert_eq!(parse_cpu_list("0-31"), Some(32));
        assert_eq!(parse_cpu_list("3"), Some(1), "a single CPU is one, not zero");
        assert_eq!(parse_cpu_list("0-3,8,10-11"), Some(7));
        assert_eq!(parse_cpu_list("0,2,4"), Some(3));
        assert_eq!(parse_cpu_list("5-5"), Some(1), "a range's width includes both ends");
        assert_eq!(parse_cpu_list("7-4"), None, "a reversed range is refused");
        assert_eq!(parse_cpu_list("a-b"), None);
        assert_eq!(parse_cpu_list("\n"), Some(0));
    }

    #[test]
    fn cpu_max_reads_both_forms() {
        assert_eq!(parse_cpu_max("max 100000\n"), Ok(None));
        assert_eq!(parse_cpu_max("max"), Ok(None));
        assert_eq!(parse_cpu_max("150000 100000\n"), Ok(Some(Quota { quota_us: 150_000, period_us: 100_000 })));
        assert_eq!(parse_cpu_max("50000 100000").unwrap().unwrap().cpus(), 1);
        assert_eq!(parse_cpu_max("150000 100000").unwrap().unwrap().cpus(), 2, "1.5 CPUs round up");
        assert_eq!(parse_cpu_max("garbage 1"), Err(Unreadable));
        assert_eq!(parse_cpu_max(""), Err(Unreadable));
    }

    #[test]
    fn v1_values_read_minus_one_as_no_limit() {
        assert_eq!(parse_v1_quota("-1\n", "100000\n"), Ok(None));
        assert_eq!(parse_v1_quota("200000", "100000"), Ok(Some(Quota { quota_us: 200_000, period_us: 100_000 })));
        assert_eq!(parse_v1_quota("x", "100000"), Err(Unreadable));
        assert_eq!(parse_v1_quota("100", "0"), Err(Unreadable));
    }

    #[test]
    fn proc_cgroup_finds_the_v2_path_and_the_v1_cpu_path() {
        let hybrid =
            "12:cpuset:/\n5:cpu,cpuacct:/gixd/limited\n1:name=systemd:/user.slice\n0::/user.slice/session-1.scope\n";
        assert_eq!(
            parse_proc_cgroup(hybrid),
            (Some("/user.slice/session-1.scope".into()), Some("/gixd/limited".into()))
        );
        assert_eq!(parse_proc_cgroup("0::/\n"), (Some("/".into()), None));
        // cpuacct alone is not the cpu controller.
        assert_eq!(parse_proc_cgroup("4:cpuacct:/x\n"), (None, None));
    }

    #[test]
    fn mountinfo_finds_the_cgroup2_mount_and_the_v1_cpu_mount() {
        let text = "\
30 24 0:26 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
31 24 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:9 - cgroup cgroup rw,cpu,cpuacct
32 24 0:28 / /sys/fs/cgroup/cpuset rw,nosuid - cgroup cgroup rw,cpuset
";
        assert_eq!(
            parse_mountinfo(text),
            (Some("/sys/fs/cgroup/unified".into()), Some("/sys/fs/cgroup/cpu,cpuacct".into()))
        );
    }

    #[test]
    fn a_nested_cgroup_is_limited_by_any_ancestor_and_the_tightest_wins() {
        let chain = cgroup_chain(Path::new("/cg"), "/a/b/c");
        assert_eq!(
            chain,
            vec![PathBuf::from("/cg/a/b/c"), PathBuf::from("/cg/a/b"), PathBuf::from("/cg/a"), PathBuf::from("/cg")]
        );
        let q = |quota_us| Quota { quota_us, period_us: 100_000 };
        let limits = |d: &Path| match d.to_str().unwrap() {
            "/cg/a" => Some(q(300_000)),
            "/cg/a/b" => Some(Quota { quota_us: 50_000, period_us: 50_000 }),
            _ => None,
        };
        assert_eq!(tightest(&chain, limits), Some(Quota { quota_us: 50_000, period_us: 50_000 }));
    }

    #[test]
    fn effective_parallelism_is_the_smaller_of_affinity_and_quota_and_at_least_one() {
        let q = |quota_us| Some(Quota { quota_us, period_us: 100_000 });
        assert_eq!(Budget { affinity: 32, quota: q(800_000), memory: None }.effective(), 8);
        assert_eq!(Budget { affinity: 2, quota: q(800_000), memory: None }.effective(), 2);
        assert_eq!(Budget { affinity: 4, quota: None, memory: None }.effective(), 4);
        assert_eq!(Budget { affinity: 4, quota: q(1_000), memory: None }.effective(), 1);
        assert_eq!(Budget { affinity: 0, quota: None, memory: None }.effective(), 1);
    }

    #[test]
    fn the_warning_fires_at_twice_the_quota_and_not_below_nor_without_a_quota() {
        let q = |cpus: u64| Some(Quota { quota_us: cpus * 100_000, period_us: 100_000 });
        assert!(Budget { affinity: 32, quota: q(8), memory: None }.spread_thin());
        assert!(Budget { affinity: 16, quota: q(8), memory: None }.spread_thin(), "exactly twice fires");
        assert!(!Budget { affinity: 15, quota: q(8), memory: None }.spread_thin(), "under twice is silent");
        assert!(!Budget { affinity: 8, quota: q(8), memory: None }.spread_thin(), "pinned to the quota is silent");
        assert!(!Budget { affinity: 32, quota: None, memory: None }.spread_thin(), "no quota is silent");
        let (line, warning) = Budget { affinity: 2, quota: q(1), memory: None }.describe("workers 1");
        assert!(line.contains("affinity 2 CPU") && line.contains("effective 1"), "{line}");
        assert!(warning.unwrap().contains("AllowedCPUs="));
    }
}
