//! Maintenance (repository access layer): repack everything reachable from the refs into one
//! pack, in-process, and write its reverse index (`.rev`) and bitmap (`.bitmap`) the way git
//! reads them — so a repository that only ever received pushes gets bitmaps without an external
//! git; then move loose refs into packed-refs, as `git pack-refs --all --prune` (git gc) does.
//! Nothing is lost: an old pack is deleted only when every one of its objects is in the new
//! pack or the cruft pack beside it, a loose object only when it is; what no ref reaches is kept
//! there until `gc.pruneExpire` (two weeks) has passed over it, and longer while anything live
//! reaches it; a loose ref is removed only after packed-refs holds its value, under its lock.
//!
//! By concern: `repack` (the full repack, its bitmap and cruft pack), `geometric` (the roll-up
//! of small packs that runs after pushes, and what a repository is due), `loose` (loose objects
//! and their removal), `refs` (packing refs), `prune` (unreachable objects, their cruft pack and
//! their expiry), `recovery` (what replaced packs and killed runs leave), `rerun` (a run again
//! while other writers change the packs), `midx`, `commit_graph` and `bundles` (what serving
//! reads beside the packs). This module: the entries ([`run`], [`aggressive`], [`full`]), the
//! repository's maintenance lock, the report and the errors.

use std::io::Write;
use std::path::{Path, PathBuf};

use gix_hash::ObjectId;

use crate::bitmap::write::{pack_order, write_bitmap, write_rev};
use crate::error::RepoError;
use crate::pack::PackError;

pub mod bundles;
pub mod commit_graph;
pub mod geometric;
pub mod lfs;
mod loose;
pub mod midx;
pub mod prune;
mod recovery;
mod refs;
mod repack;
mod rerun;
use loose::{loose_objects, loose_path, remove_loose, retire_contained};
pub use recovery::{clean_after_kill, expire};
use recovery::{expire_rolled, remove_leftovers};
use refs::pack_refs;
pub use repack::Bases;
use repack::{full_once, write_pack};

/// Why a maintenance run did not finish. It serves no request: the service counts it
/// (`skipped` for [`MaintenanceError::Busy`] and [`MaintenanceError::Repo`], else `failed`), the
/// command line prints it.
#[derive(Debug, thiserror::Error)]
pub enum MaintenanceError {
    /// Another run holds the repository's maintenance lock (a second replica, `gixd maintenance`
    /// by hand): it does the work.
    #[error("another maintenance of this repository is running")]
    Busy,
    /// A repository gixd does not maintain (a format it cannot read whole, precious objects).
    #[error(transparent)]
    Repo(#[from] RepoError),
    #[error(transparent)]
    Pack(#[from] PackError),
    #[error(transparent)]
    Graph(#[from] crate::graph::GraphError),
    #[error(transparent)]
    Refs(#[from] crate::repo::RefsError),
    #[error(transparent)]
    Bitmap(#[from] crate::bitmap::write::WriteError),
    #[error("repository access failed: {0}")]
    Git(#[from] gix::Error),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The repository's configuration says something maintenance cannot act on.
    #[error("configuration: {0}")]
    Config(String),
}

impl MaintenanceError {
    /// A gitoxide error while reading or writing packs.
    fn pack(err: impl std::error::Error + Send + Sync + 'static) -> Self {
        MaintenanceError::Pack(PackError::gix(err))
    }

    /// What gixd found wrong with the packs it wrote.
    fn corrupt(message: impl Into<String>) -> Self {
        MaintenanceError::Pack(PackError::corrupt(message))
    }
}

/// What a maintenance run did.
#[derive(Debug, Default)]
pub struct Report {
    pub objects: usize,
    pub pack: PathBuf,
    pub bitmaps: usize,
    pub packs_removed: usize,
    pub loose_removed: usize,
    /// What earlier runs, killed before they finished, left behind and this one removed.
    pub leftovers_removed: usize,
    /// Objects stored whole before that the new pack holds as deltas the search found.
    pub deltas_computed: usize,
    /// Loose refs moved into packed-refs.
    pub refs_packed: usize,
    /// Unreachable objects kept in the cruft pack (younger than `gc.pruneExpire`, or reached by
    /// such an object or by something live).
    pub unreachable_kept: usize,
    /// Unreachable objects left out: expired, and reached by nothing kept.
    pub pruned: usize,
    /// Commits in the commit-graph it wrote (none when the history cannot have one).
    pub commit_graph: Option<usize>,
    /// The bytes of the bundle it wrote for bundle-uri ([`bundles`]; none unless the repository
    /// asks for bundles and has new tips).
    pub bundle: Option<u64>,
}

/// Repack `git_dir` into one pack with a `.rev` and a `.bitmap`, with a delta search among the
/// objects stored whole.
pub fn run(git_dir: &Path) -> Result<Report, MaintenanceError> {
    let mut report = full(git_dir, Bases::Search)?;
    report.bundle = bundles::write(git_dir)?;
    Ok(report)
}

/// [`run`] with every delta searched anew, as `git gc --aggressive` / `git repack -adf` do: a
/// smaller pack for the CPU of decoding and searching every object (stored deltas are kept by
/// [`run`]).
pub fn aggressive(git_dir: &Path) -> Result<Report, MaintenanceError> {
    let mut report = full(git_dir, Bases::Anew)?;
    report.bundle = bundles::write(git_dir)?;
    Ok(report)
}

/// Repack `git_dir` into one pack with a `.rev` and a `.bitmap`; `bases` says whether objects
/// stored whole are searched for deltas (a run by hand or on the clock) or kept as they are (the
/// automatic run after pushes: memory bounded by the entries, not by the objects' data).
pub fn full(git_dir: &Path, bases: Bases) -> Result<Report, MaintenanceError> {
    rerun::while_packs_change(&git_dir.join("objects/pack"), || full_once(git_dir, bases))
}

/// Give the heap a phase freed back to the system (glibc keeps it otherwise, and the next phase's
/// peak stacks on it): maintenance runs its phases one after the other, each sized by the
/// repository.
fn release_freed_memory() {
    // SAFETY: malloc_trim only returns free heap pages; no pointer is invalidated.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    unsafe {
        libc::malloc_trim(0);
    }
}

/// `git_dir` opened for maintenance, if gixd can read it whole: a repository gixd cannot read is
/// left as it is (repacked by what gixd sees of it, its refs or objects elsewhere would be lost),
/// and so is one whose objects are precious.
fn open(git_dir: &Path) -> Result<gix::Repository, MaintenanceError> {
    let unsupported = |reason| RepoError::Unsupported { path: git_dir.display().to_string(), exported: true, reason };
    match crate::repo::format::check(git_dir) {
        Ok(format) if format.precious_objects => {
            return Err(unsupported(crate::repo::format::Unsupported::PreciousObjects).into());
        }
        Ok(_) => {}
        Err(reason) => return Err(unsupported(reason).into()),
    }
    gix::open_opts(git_dir, crate::repo::open_options(&crate::repo::midx::check(git_dir)))
        .map_err(MaintenanceError::pack)
}

/// One maintenance of a repository at a time: an advisory lock (`flock`) on
/// `objects/gixd-maintenance.lock`. The kernel releases it when its holder exits, however it
/// exits, so a run killed at any point leaves no lock behind.
struct Lock(#[allow(dead_code)] std::fs::File);

impl Lock {
    /// The lock of `objects_dir`; refused (busy) while another gixd run holds it, or while stock
    /// git repacks the repository ([`git_repacking`]): two maintainers deleting packs at once
    /// leave a multi-pack-index naming packs the other deleted.
    fn take(objects_dir: &Path) -> Result<Lock, MaintenanceError> {
        use std::os::fd::AsRawFd;
        if objects_dir.parent().is_some_and(git_repacking) {
            return Err(MaintenanceError::Busy);
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(objects_dir.join("gixd-maintenance.lock"))?;
        // SAFETY: flock on a descriptor this function owns; the lock goes with the descriptor.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(MaintenanceError::Busy);
        }
        Ok(Lock(file))
    }
}

/// Whether stock git is repacking `git_dir` now: `git gc` and `git repack` hold `gc.pid`
/// (`<pid> <host>`) while they may delete packs, and git takes it as held while it is less than
/// 12 hours old and names a live process of this host, or any process of another.
pub(crate) fn git_repacking(git_dir: &Path) -> bool {
    let path = git_dir.join("gc.pid");
    let Ok(meta) = std::fs::metadata(&path) else { return false };
    let recent = meta.modified().ok().and_then(|t| t.elapsed().ok()).is_none_or(|age| age.as_secs() <= 12 * 3600);
    let Ok(text) = std::fs::read_to_string(&path) else { return false };
    let Some((pid, host)) = text.trim_end().split_once(' ') else { return false };
    let Ok(pid) = pid.parse::<i32>() else { return false };
    recent && (host != crate::repo::host_name() || crate::repo::alive(pid))
}

#[cfg(test)]
mod lock_tests {
    use super::*;

    #[test]
    fn one_maintenance_of_a_repository_at_a_time_and_the_lock_goes_with_its_holder() {
        let dir = tempfile::tempdir().unwrap();
        let first = Lock::take(dir.path()).unwrap();
        let refused = Lock::take(dir.path()).err().expect("a second run is refused while the first holds the lock");
        assert!(matches!(&refused, MaintenanceError::Busy), "{refused:?}");
        drop(first);
        assert!(Lock::take(dir.path()).is_ok(), "the lock is free once its holder is gone");
    }
}
