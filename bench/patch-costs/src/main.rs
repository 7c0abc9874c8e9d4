//! What the patch queue changes in pack generation, measured by one program built twice: on
//! stock gitoxide crates and (feature `patched`) on vendor/. `cargo xtask bench patches` drives it.
//!
//! - `patch-costs fixture DIR` writes the deterministic fixture repository (git fast-import).
//! - `patch-costs measure --repo DIR --rev REV --arm NAME` generates the pack of `REV`'s objects
//!   once with `thread_limit: Some(1)`, then indexes the repository's pack as a received push is
//!   indexed (`Bundle::write_to_directory`, `thread_limit: Some(1)`), and prints one JSON line:
//!   counts first (threads, objects copied and re-deflated, bytes), then CPU and wall time;
//!   then it decodes every object of `REV` in `git rev-list --objects` order (the order a walk
//!   meets them) through each of gix's two delta caches, counting the deltas applied; last it
//!   makes pack entries of every object of the pack stored loose (`git unpack-objects` into a
//!   scratch repository), as a server or a repack does for loose objects.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use gix_hash::ObjectId;
use gix_pack::data::output;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("fixture") => fixture(Path::new(args.get(1).expect("fixture DIR"))),
        Some("measure") => {
            let flag = |name: &str| {
                args.iter()
                    .position(|a| a == name)
                    .and_then(|i| args.get(i + 1))
                    .unwrap_or_else(|| panic!("{name} is required"))
                    .clone()
            };
            measure(&PathBuf::from(flag("--repo")), &flag("--rev"), &flag("--arm"));
        }
        _ => {
            eprintln!("usage: patch-costs fixture DIR | measure --repo DIR --rev REV --arm NAME");
            std::process::exit(2);
        }
    }
}

fn git(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir).env("GIT_CONFIG_NOSYSTEM", "1").env("GIT_CONFIG_GLOBAL", "/dev/null").args([
        "-c",
        "pack.threads=1",
        "-c",
        "gc.auto=0",
        "-c",
        "init.defaultBranch=main",
    ]);
    cmd
}

fn run(mut cmd: Command) -> String {
    let out = cmd.output().expect("git runs");
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf8")
}

/// A deterministic pseudo-random sequence (an LCG): the fixture is the same on every machine.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

const WORDS: &[&str] = &[
    "pack", "delta", "base", "object", "tree", "commit", "blob", "tag", "ref", "want", "have", "ack", "window",
    "depth", "offset", "index", "stream", "thread", "chunk", "count", "server", "client", "fetch", "clone",
];

fn line(rng: &mut Lcg) -> String {
    let n = 4 + rng.next() % 8;
    let mut s: Vec<&str> = (0..n).map(|_| WORDS[(rng.next() % WORDS.len() as u64) as usize]).collect();
    s.push("\n");
    s.join(" ")
}

/// A repository where a single-branch clone of `main` selects many blobs that git stored as deltas
/// against bigger versions on branch `topic`: 30 files, 600 commits on main editing three files
/// each, and 200 commits on topic (forked at main's 300th) appending to two files each.
fn fixture(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    run({
        let mut c = git(dir);
        c.args(["init", "-q", "--bare"]);
        c
    });
    let mut rng = Lcg(42);
    let mut files: Vec<Vec<String>> = (0..30).map(|_| (0..200).map(|_| line(&mut rng)).collect()).collect();
    let mut stream = String::new();
    let mut mark = 0;
    let commit = |stream: &mut String,
                  branch: &str,
                  parent: Option<usize>,
                  files: &[(usize, String)],
                  time: u64,
                  mark: &mut usize| {
        *mark += 1;
        stream.push_str(&format!("commit refs/heads/{branch}\nmark :{mark}\n"));
        stream.push_str(&format!("author A U Thor <author@example.com> {time} +0000\n"));
        stream.push_str(&format!("committer C O Mitter <committer@example.com> {time} +0000\n"));
        let msg = format!("change {mark} on {branch}\n");
        stream.push_str(&format!("data {}\n{msg}", msg.len()));
        if let Some(p) = parent {
            stream.push_str(&format!("from :{p}\n"));
        }
        for (n, content) in files {
            stream.push_str(&format!("M 100644 inline src/file{n:02}.txt\ndata {}\n{content}\n", content.len()));
        }
        *mark
    };
    let all: Vec<(usize, String)> = files.iter().enumerate().map(|(n, f)| (n, f.concat())).collect();
    let mut tip = commit(&mut stream, "main", None, &all, 1_600_000_000, &mut mark);
    let mut fork = tip;
    for i in 1..600u64 {
        let mut changed = Vec::new();
        for _ in 0..3 {
            let n = (rng.next() % 30) as usize;
            let at = (rng.next() as usize) % files[n].len();
            files[n][at] = line(&mut rng);
            files[n].insert(at, line(&mut rng));
            changed.push((n, files[n].concat()));
        }
        tip = commit(&mut stream, "main", Some(tip), &changed, 1_600_000_000 + i * 60, &mut mark);
        if i == 300 {
            fork = tip;
        }
    }
    let mut topic_files = files.clone();
    let mut topic = fork;
    for i in 0..200u64 {
        let mut changed = Vec::new();
        for _ in 0..2 {
            let n = (rng.next() % 30) as usize;
            for _ in 0..20 {
                topic_files[n].push(line(&mut rng));
            }
            changed.push((n, topic_files[n].concat()));
        }
        topic = commit(&mut stream, "topic", Some(topic), &changed, 1_700_000_000 + i * 60, &mut mark);
    }
    let mut child = git(dir).args(["fast-import", "--quiet"]).stdin(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(stream.as_bytes()).unwrap();
    assert!(child.wait().unwrap().success());
    run({
        let mut c = git(dir);
        c.args(["repack", "-adfq", "--window=50", "--depth=50"]);
        c
    });
}

fn object_ids(repo: &Path, rev: &str) -> Vec<ObjectId> {
    run({
        let mut c = git(repo);
        c.args(["rev-list", "--objects", rev]);
        c
    })
    .lines()
    .map(|l| ObjectId::from_hex(l.split(' ').next().unwrap().as_bytes()).unwrap())
    .collect()
}

fn threads_now() -> usize {
    std::fs::read_dir("/proc/self/task").map(|d| d.count()).unwrap_or(0)
}

fn cpu_micros() -> (i64, i64) {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let us = |t: libc::timeval| t.tv_sec * 1_000_000 + t.tv_usec;
    (us(usage.ru_utime), us(usage.ru_stime))
}

/// Counts the bytes written to it.
struct CountingSink(u64);
impl Write for CountingSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn measure(repo: &Path, rev: &str, arm: &str) {
    let selected = object_ids(repo, rev);
    let counts: Vec<output::Count> = selected
        .iter()
        .map(|id| output::Count { id: *id, entry_pack_location: output::count::PackLocation::NotLookedUp })
        .collect();
    // Bases a client of this repository may be sent: everything reachable from its refs.
    let reachable: HashSet<ObjectId> = object_ids(repo, "--all").into_iter().collect();
    let mut odb = gix_odb::at(repo.join("objects"), gix_hash::Kind::Sha1).unwrap();
    odb.prevent_pack_unload();
    let options = output::entry::iter_from_counts::Options { thread_limit: Some(1), ..Default::default() };

    let threads_before = threads_now();
    let (cpu_user_0, cpu_sys_0) = cpu_micros();
    let start = std::time::Instant::now();

    #[cfg(feature = "patched")]
    let (num_entries, mut chunks) = output::entry::iter_from_counts_with_delta_bases(
        counts,
        odb,
        Box::new(gix_utils::progress::Discard),
        options,
        Some(|id: &gix_hash::oid| {
            if reachable.contains(id) {
                output::entry::iter_from_counts::DeltaBase::Include
            } else {
                output::entry::iter_from_counts::DeltaBase::Recompress
            }
        }),
    )
    .unwrap();
    #[cfg(not(feature = "patched"))]
    let (num_entries, mut chunks) = {
        let _ = &reachable;
        let n = counts.len();
        (n, output::entry::iter_from_counts(counts, odb, Box::new(gix_utils::progress::Discard), options).unwrap())
    };

    let mut most_threads = threads_now();
    let mut entries = Vec::new();
    for chunk in chunks.by_ref() {
        entries.extend(chunk.unwrap().1);
        most_threads = most_threads.max(threads_now());
    }
    let outcome = gix_parallel::Finalize::finalize(chunks).unwrap();
    let mut sink = CountingSink(0);
    for step in output::bytes::FromEntriesIter::new(
        std::iter::once(Ok::<_, gix_error::Error>(entries)),
        &mut sink,
        num_entries as u32,
        gix_pack::data::Version::V2,
        gix_hash::Kind::Sha1,
    ) {
        step.unwrap();
    }
    let wall = start.elapsed();
    let (cpu_user_1, cpu_sys_1) = cpu_micros();

    let index = measure_indexing(repo);
    let decoding = measure_decoding(repo, &selected);
    let loose = measure_loose_entries(repo);
    let row = serde_json::json!({
        "decode_objects": decoding.objects,
        "decode_deltas_applied": decoding.deltas_applied,
        "decode_cpu_us": decoding.cpu_us,
        "decode_capped_deltas_applied": decoding.capped_deltas_applied,
        "decode_capped_cpu_us": decoding.capped_cpu_us,
        "decode_capped_reversed_deltas_applied": decoding.capped_reversed_deltas_applied,
        "decode_capped_reversed_cpu_us": decoding.capped_reversed_cpu_us,
        "loose_objects": loose.objects,
        "loose_re_deflated": loose.re_deflated,
        "loose_entry_bytes": loose.entry_bytes,
        "loose_cpu_us": loose.cpu_us,
        "loose_stored_entry_bytes": loose.stored_entry_bytes,
        "loose_stored_cpu_us": loose.stored_cpu_us,
        "index_objects": index.objects,
        "index_threads_started": index.threads_started,
        "index_cpu_us": index.cpu_us,
        "index_wall_us": index.wall_us,
        "arm": arm,
        "repo": repo.file_name().map(|n| n.to_string_lossy().into_owned()),
        "rev": rev,
        "selected_objects": selected.len(),
        "pack_entries": num_entries,
        "threads_started": most_threads - threads_before,
        "copied_from_pack": outcome.objects_copied_from_pack,
        "re_deflated": outcome.decoded_and_recompressed_objects,
        "pack_bytes": sink.0,
        "cpu_us": (cpu_user_1 - cpu_user_0) + (cpu_sys_1 - cpu_sys_0),
        "wall_us": wall.as_micros() as u64,
    });
    println!("{row}");
}

/// The fixture's pack file with extension `ext` (it has one pack).
fn pack_file(repo: &Path, ext: &str) -> PathBuf {
    std::fs::read_dir(repo.join("objects/pack"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == ext))
        .expect("the fixture has a pack")
}

struct Indexing {
    objects: u32,
    threads_started: usize,
    cpu_us: i64,
    wall_us: u64,
}

/// Index the repository's (first) pack into a scratch directory the way a push is indexed, with
/// one thread allowed. Threads are counted by a sampler that watches /proc/self/task while the
/// call runs (a thread that lives through delta resolution is seen).
fn measure_indexing(repo: &Path) -> Indexing {
    let pack = pack_file(repo, "pack");
    let data = std::fs::read(&pack).unwrap();
    let out = std::env::temp_dir().join(format!("patch-costs-index-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let most = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sampler = {
        let (stop, most) = (stop.clone(), most.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                most.fetch_max(threads_now(), std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(5));
    let baseline = threads_now();
    most.store(baseline, std::sync::atomic::Ordering::Relaxed);
    let (u0, s0) = cpu_micros();
    let start = std::time::Instant::now();
    let outcome = gix_pack::Bundle::write_to_directory(
        &mut std::io::BufReader::new(&data[..]),
        Some(&out),
        &mut gix_utils::progress::Discard,
        &std::sync::atomic::AtomicBool::new(false),
        None::<gix_odb::Handle>,
        gix_hash::Kind::Sha1,
        gix_pack::bundle::write::Options { thread_limit: Some(1), ..Default::default() },
    )
    .unwrap();
    let wall = start.elapsed();
    let (u1, s1) = cpu_micros();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    sampler.join().unwrap();
    let _ = std::fs::remove_dir_all(&out);
    Indexing {
        objects: outcome.index.num_objects,
        threads_started: most.load(std::sync::atomic::Ordering::Relaxed) - baseline,
        // The sampler's own CPU is in both arms alike; it sleeps between samples.
        cpu_us: (u1 - u0) + (s1 - s0),
        wall_us: wall.as_micros() as u64,
    }
}

struct Decoding {
    objects: usize,
    /// With gix's default cache for a repository, `StaticLinkedList<64>`.
    deltas_applied: u64,
    cpu_us: i64,
    /// With the cache gix gives a repository that sets `core.deltaBaseCacheLimit`:
    /// `MemoryCappedHashmap`, here git's 96 MiB.
    capped_deltas_applied: u64,
    capped_cpu_us: i64,
    /// The same cache, the objects in the opposite order: oldest versions first, so a walk
    /// meets the deep end of a chain before the objects nearer its base.
    capped_reversed_deltas_applied: u64,
    capped_reversed_cpu_us: i64,
}

/// Decode `ids` (in the order given) from the repository's pack through each of gix's two delta
/// caches, and count the deltas applied: an object's `num_deltas` is the part of its chain walked
/// before a cache hit.
fn measure_decoding(repo: &Path, ids: &[ObjectId]) -> Decoding {
    let idx = pack_file(repo, "idx");
    let index = gix_pack::index::File::at(&idx, gix_hash::Kind::Sha1).unwrap();
    let pack = gix_pack::data::File::at(idx.with_extension("pack"), gix_hash::Kind::Sha1).unwrap();
    let pass = |cache: &mut dyn gix_pack::cache::DecodeEntry, ids: &mut dyn Iterator<Item = &ObjectId>| {
        let mut inflate = gix_zlib::Inflate::default();
        let mut out = Vec::new();
        let no_ref_deltas = |_: &gix_hash::oid, _: &mut Vec<u8>| Ok(None);
        let (u0, s0) = cpu_micros();
        let mut deltas_applied = 0u64;
        for id in ids {
            let at = index.lookup(id).expect("every object of REV is in the pack");
            let entry = pack.entry(index.pack_offset_at_index(at)).unwrap();
            deltas_applied +=
                u64::from(pack.decode_entry(entry, &mut out, &mut inflate, &no_ref_deltas, cache).unwrap().num_deltas);
        }
        let (u1, s1) = cpu_micros();
        (deltas_applied, (u1 - u0) + (s1 - s0))
    };
    // Unmeasured: the pack's pages mapped in, so that no pass pays for being the first.
    pass(&mut gix_pack::cache::Never, &mut ids.iter());
    let (deltas_applied, cpu_us) = pass(&mut gix_pack::cache::lru::StaticLinkedList::<64>::default(), &mut ids.iter());
    let capped = || gix_pack::cache::lru::MemoryCappedHashmap::new(96 << 20);
    let (capped_deltas_applied, capped_cpu_us) = pass(&mut capped(), &mut ids.iter());
    let (capped_reversed_deltas_applied, capped_reversed_cpu_us) = pass(&mut capped(), &mut ids.iter().rev());
    Decoding {
        objects: ids.len(),
        deltas_applied,
        cpu_us,
        capped_deltas_applied,
        capped_cpu_us,
        capped_reversed_deltas_applied,
        capped_reversed_cpu_us,
    }
}

struct LooseEntries {
    objects: usize,
    re_deflated: usize,
    /// The entries' compressed bytes, summed: the same in both arms.
    entry_bytes: u64,
    cpu_us: i64,
    /// The same at level 0 (stored, as a writer that searches deltas next asks for).
    stored_entry_bytes: u64,
    stored_cpu_us: i64,
}

/// Every object of the repository's pack written loose into a scratch repository (`git
/// unpack-objects`), then made into pack entries by `iter_from_counts` with one thread: each is
/// read, inflated and deflated again (`Entry::from_data`), as for a fetch or a repack of
/// objects a push left loose; at the default level, then at level 0 (stored: what a writer that
/// searches deltas next asks for).
fn measure_loose_entries(repo: &Path) -> LooseEntries {
    let scratch = std::env::temp_dir().join(format!("patch-costs-loose-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    run({
        let mut c = git(&scratch);
        c.args(["init", "-q", "--bare"]);
        c
    });
    let pack = std::fs::File::open(pack_file(repo, "pack")).unwrap();
    let status = git(&scratch).args(["unpack-objects", "-q"]).stdin(pack).status().unwrap();
    assert!(status.success(), "git unpack-objects");
    let ids: Vec<ObjectId> = run({
        let mut c = git(&scratch);
        c.args(["cat-file", "--batch-all-objects", "--batch-check=%(objectname)"]);
        c
    })
    .lines()
    .map(|l| ObjectId::from_hex(l.as_bytes()).unwrap())
    .collect();
    let counts: Vec<output::Count> = ids
        .iter()
        .map(|id| output::Count { id: *id, entry_pack_location: output::count::PackLocation::NotLookedUp })
        .collect();
    let mut odb = gix_odb::at(scratch.join("objects"), gix_hash::Kind::Sha1).unwrap();
    odb.prevent_pack_unload();
    let pass = |compression: gix_zlib::Compression| {
        let options =
            output::entry::iter_from_counts::Options { thread_limit: Some(1), compression, ..Default::default() };
        let (u0, s0) = cpu_micros();
        let mut chunks = output::entry::iter_from_counts(
            counts.clone(),
            odb.clone(),
            Box::new(gix_utils::progress::Discard),
            options,
        )
        .unwrap();
        let entry_bytes: u64 = chunks.by_ref().flat_map(|c| c.unwrap().1).map(|e| e.compressed_data.len() as u64).sum();
        let outcome = gix_parallel::Finalize::finalize(chunks).unwrap();
        let (u1, s1) = cpu_micros();
        (outcome.decoded_and_recompressed_objects, entry_bytes, (u1 - u0) + (s1 - s0))
    };
    let (re_deflated, entry_bytes, cpu_us) = pass(gix_zlib::Compression::DEFAULT);
    let (_, stored_entry_bytes, stored_cpu_us) = pass(gix_zlib::Compression::NONE);
    let _ = std::fs::remove_dir_all(&scratch);
    LooseEntries { objects: ids.len(), re_deflated, entry_bytes, cpu_us, stored_entry_bytes, stored_cpu_us }
}
