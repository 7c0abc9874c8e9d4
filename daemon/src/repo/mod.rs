//! Repository access: a URL path to a repository below the base path (never outside it), git
//! daemon's export rule, the snapshot of refs one request sees (kept per ref state), and the typed
//! per-repository cache cells ([`cache`]) every layer that computes from a repository keeps, and
//! the files whose trailing checksum was found right, by identity ([`checked`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::config::{Exports, PathRules};
use crate::error::RepoError;

pub mod cache;
pub mod checked;
pub mod commit_graph;
pub mod create;
pub mod format;
pub mod listing;
mod loose;
pub mod midx;
mod paths;
pub mod ref_store;
mod refs;

pub use listing::repositories_below;
pub use loose::loose_refs_state;
use paths::{git_dir_of, home_of, is_git_dir};
pub use paths::{percent_decode, relative_repo_path};
pub use refs::{AdvertisedRef, HeadState, RefSnapshot, RefsError, WantPolicy, is_hidden, upload_ref_state};

/// How gixd opens a repository: isolated from the user's and system's config, git's delta-base
/// cache, and without a multi-pack-index that would hide objects ([`midx`]).
pub fn open_options(midx: &midx::Midx) -> gix::open::Options {
    // The delta cache as git's (96 MiB by bytes, every base a chain reconstructs kept): gix's
    // default, a list of 64 objects, would be flushed by one long chain.
    let overrides = std::iter::once(DELTA_BASE_CACHE).chain(midx.override_needed());
    gix::open::Options::isolated().strict_config(false).config_overrides(overrides)
}

/// The header of `id` in `repo`, looked up once more through `again` when the handle misses it
/// ([`reopened`], opened at the first miss and kept by the caller for the rest of its request):
/// gix-odb misses an object now and then while repacks swap packs under a store's snapshot (a
/// loose object packed and deleted between two looks; a slot refilled by another pack), and a
/// want, a pushed command or an object-info question refused for that is refused for nothing.
pub fn header(
    repo: &gix::Repository,
    again: &mut Option<gix::Repository>,
    id: gix_hash::ObjectId,
) -> Option<gix::odb::find::Header> {
    repo.find_header(id).ok().or_else(|| {
        let found = again.get_or_insert_with(|| reopened(repo)).find_header(id).ok();
        if found.is_some() {
            tracing::debug!(%id, "object found again through the repository opened anew");
        }
        found
    })
}

/// `repo` opened anew, for one more look after a miss: an object store of its own (nothing
/// shared with the handles already open — their snapshot, their slots) reading each pack's own
/// index (a multi-pack-index may name packs a repack just deleted). A handle on the same store
/// if the repository cannot be opened again.
pub fn reopened(repo: &gix::Repository) -> gix::Repository {
    gix::open_opts(repo.git_dir(), open_options(&midx::Midx::not_used())).unwrap_or_else(|_| repo.clone())
}

/// The file that marks a repository as exported (git daemon's rule).
pub const EXPORT_OK: &str = "git-daemon-export-ok";

/// git's `core.deltaBaseCacheLimit` default; with it set, gix gives each repository handle a
/// cache capped by bytes, which keeps the bases of delta chains (patches/gix-pack/0005).
pub(crate) const DELTA_BASE_CACHE: &str = "core.deltaBaseCacheLimit=96m";

/// One walk's delta cache at most ([`crate::config::WALK_DELTA_BASE_CACHE`]).
const WALK_DELTA_BASE_CACHE: usize = crate::config::WALK_DELTA_BASE_CACHE as usize;

/// A handle on `repo` whose delta cache is up to [`WALK_DELTA_BASE_CACHE`] bytes, for one walk;
/// its memory goes when the handle does. The walks running at once share one budget
/// ([`set_walk_cache_budget`]): each takes what is left of it, up to its cap and at least
/// [`WALK_DELTA_BASE_CACHE_FLOOR`], so concurrent walks do not add up past the budget (but for
/// the floors, when more walks run than the budget has room for).
pub fn with_walk_cache(repo: &gix::Repository) -> gix::Repository {
    let mut walk = repo.clone();
    walk.objects.set_pack_cache(|| {
        let share = WalkShare::take();
        Box::new(SharedBudgetCache {
            cache: gix_pack::cache::lru::MemoryCappedHashmap::new(share.0 as usize),
            _share: share,
        })
    });
    walk
}

/// The least delta cache a walk gets, whatever the others hold.
pub(crate) const WALK_DELTA_BASE_CACHE_FLOOR: u64 = 16 << 20;

/// Bytes all walks' delta caches may hold together, and what they hold now.
static WALK_BUDGET: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(2 * WALK_DELTA_BASE_CACHE as u64);
static WALK_TAKEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The bytes all walks' delta caches may hold together (the server sets it from its
/// configuration: [`crate::config::Config::walk_cache_bytes`]).
pub fn set_walk_cache_budget(bytes: u64) {
    WALK_BUDGET.store(bytes, std::sync::atomic::Ordering::Relaxed);
}

/// Bytes the walks' delta caches are allowed now, all together.
pub fn walk_caches_taken() -> u64 {
    WALK_TAKEN.load(std::sync::atomic::Ordering::Relaxed)
}

/// One walk's share of the budget, given back when its cache goes.
struct WalkShare(u64);

impl WalkShare {
    fn take() -> WalkShare {
        use std::sync::atomic::Ordering;
        let budget = WALK_BUDGET.load(Ordering::Relaxed);
        let mut taken = WALK_TAKEN.load(Ordering::Relaxed);
        loop {
            let share = budget.saturating_sub(taken).min(WALK_DELTA_BASE_CACHE as u64).max(WALK_DELTA_BASE_CACHE_FLOOR);
            match WALK_TAKEN.compare_exchange_weak(taken, taken + share, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return WalkShare(share),
                Err(now) => taken = now,
            }
        }
    }
}

impl Drop for WalkShare {
    fn drop(&mut self) {
        WALK_TAKEN.fetch_sub(self.0, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A walk's delta cache, capped by its share of the budget.
struct SharedBudgetCache {
    cache: gix_pack::cache::lru::MemoryCappedHashmap,
    _share: WalkShare,
}

impl gix_pack::cache::DecodeEntry for SharedBudgetCache {
    fn put(&mut self, pack_id: u32, offset: u64, data: &[u8], kind: gix_object::Kind, compressed_size: usize) {
        self.cache.put(pack_id, offset, data, kind, compressed_size)
    }

    fn get(&mut self, pack_id: u32, offset: u64, out: &mut Vec<u8>) -> Option<(gix_object::Kind, usize)> {
        self.cache.get(pack_id, offset, out)
    }

    fn keep_chain_bases(&self) -> bool {
        self.cache.keep_chain_bases()
    }

    /// Bases only: a walk decodes each tree once, and most are no other's base (the oldest of
    /// their chains); kept, they evicted the bases (rust-analyzer clone without bitmap: peak
    /// 168 → 106 MiB, CPU unchanged; git.git's cache is full either way).
    fn keep_asked_for(&self) -> bool {
        false
    }
}

/// All repositories this server may serve.
pub struct Repos {
    /// Canonical base path: every served git directory is below it.
    base: PathBuf,
    exports: Exports,
    rules: PathRules,
    /// Opened repositories by git directory, with the modification time of their config file:
    /// opening reads config and indices once, and again when the config changes (git reads it
    /// on every request; settings like hideRefs or allowFilter must take effect without a restart).
    open: Mutex<HashMap<PathBuf, OpenRepository>>,
    /// The refs upload-pack serves, per ref state ([`Repos::upload_refs`]).
    refs: cache::PerRepository<RefSnapshot>,
    /// Decoded commits, kept while requests use them ([`Repos::commits`]).
    commits: cache::PerRepository<crate::graph::CommitCache>,
    /// The commit-graph as last read, per state of its files ([`Repos::commit_graph`]).
    commit_graphs: cache::PerRepository<Option<gix_commitgraph::Graph>>,
    /// The ref state each repository was last served in ([`Repos::upload_refs`]'s [`Refs`]): kept
    /// for the process's life (a number per repository), where the snapshots go when idle.
    refs_seen: Mutex<HashMap<PathBuf, u64>>,
}

/// How a repository's refs stand against the last time this server served them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refs {
    /// Never served since the server started.
    FirstSeen,
    Unmoved,
    /// Moved since: a push through this server, or a write by another (stock git's receive-pack,
    /// a second server on the filesystem).
    Moved,
}

/// A repository as opened (or found unreadable) when its config file had this modification time.
/// And the multi-pack-index it was opened with or without ([`midx`]).
type OpenRepository =
    (Option<std::time::SystemTime>, midx::Midx, Result<gix::ThreadSafeRepository, format::Unsupported>);

/// One repository, resolved for one request.
#[derive(Clone)]
pub struct Served {
    /// The URL path as the client gave it (for messages).
    pub name: String,
    pub git_dir: PathBuf,
    pub repo: gix::ThreadSafeRepository,
}

impl Repos {
    pub fn new(base: &Path, exports: Exports) -> std::io::Result<Self> {
        let base = base.canonicalize()?;
        let exports = match exports {
            Exports::Only(dir) => Exports::Only(dir.canonicalize()?),
            other => other,
        };
        Ok(Repos {
            base,
            exports,
            rules: PathRules::default(),
            open: Mutex::new(HashMap::new()),
            refs: Default::default(),
            commits: Default::default(),
            commit_graphs: Default::default(),
            refs_seen: Mutex::new(HashMap::new()),
        })
    }

    /// Apply git daemon's path rules (`--strict-paths`, `--user-path`, a directory whitelist).
    pub fn with_rules(mut self, mut rules: PathRules) -> std::io::Result<Self> {
        rules.whitelist = rules.whitelist.iter().map(|d| d.canonicalize()).collect::<std::io::Result<_>>()?;
        self.rules = rules;
        Ok(self)
    }

    pub fn base(&self) -> &Path {
        &self.base
    }

    /// Resolve a URL path (`/a/b.git`, `/a/b`, percent-encoded) to a served repository; one that
    /// is not exported is an error.
    pub fn resolve(&self, url_path: &str) -> Result<Served, RepoError> {
        match self.locate(url_path)? {
            (served, true) => Ok(served),
            (served, false) => Err(RepoError::NotExported(served.name)),
        }
    }

    /// Resolve a URL path to a repository below the base path, and say whether it is exported
    /// (access control decides what an unexported one allows).
    pub fn locate(&self, url_path: &str) -> Result<(Served, bool), RepoError> {
        let decoded = percent_decode(url_path).ok_or_else(|| RepoError::BadPath(url_path.to_owned()))?;
        let name = decoded.trim_matches('/').to_owned();
        let not_found = || RepoError::NotFound(name.clone());
        // `~user/path`: below the user's home (and `--user-path`'s directory there), if allowed.
        let (root, rel) = match name.strip_prefix('~') {
            Some(rest) => {
                let sub = self.rules.user_path.as_deref().ok_or_else(not_found)?;
                let (user, rest) = rest.split_once('/').unwrap_or((rest, ""));
                let home = home_of(user).ok_or_else(not_found)?;
                let rel = relative_repo_path(rest).ok_or_else(|| RepoError::BadPath(decoded.clone()))?;
                (home.join(sub), rel)
            }
            None => {
                (self.base.clone(), relative_repo_path(&decoded).ok_or_else(|| RepoError::BadPath(decoded.clone()))?)
            }
        };
        let mut candidates = vec![root.join(&rel)];
        if !self.rules.strict && !rel.as_os_str().as_encoded_bytes().ends_with(b".git") {
            let mut with_git = rel.clone().into_os_string();
            with_git.push(".git");
            candidates.push(root.join(with_git));
        }
        let git_dir = candidates
            .iter()
            .find_map(|c| if self.rules.strict { is_git_dir(c).then(|| c.clone()) } else { git_dir_of(c) })
            .ok_or_else(not_found)?;
        // Symlinks are resolved only now: whatever the path said, the repository must be below the base.
        let git_dir = git_dir.canonicalize().map_err(|_| not_found())?;
        if !git_dir.starts_with(&self.base) {
            return Err(not_found());
        }
        let whitelisted = self.rules.whitelist.is_empty()
            || self
                .rules
                .whitelist
                .iter()
                .any(|dir| if self.rules.strict { git_dir == *dir } else { git_dir.starts_with(dir) });
        if !whitelisted {
            return Err(RepoError::NotExported(name));
        }
        let exported = match &self.exports {
            Exports::All => true,
            Exports::DaemonExportOk => git_dir.join(EXPORT_OK).is_file(),
            // Serving one repository: the others below its parent do not exist for clients.
            Exports::Only(dir) if *dir != git_dir => return Err(not_found()),
            Exports::Only(_) => true,
        };
        let repo = match self.open(&git_dir, &name)? {
            Ok(repo) => repo,
            Err(reason) => return Err(RepoError::Unsupported { path: name, exported, reason }),
        };
        Ok((Served { name, git_dir, repo }, exported))
    }

    /// The repository at `git_dir`, opened again when its config changed; `Ok(Err(reason))` when
    /// gixd cannot read its format ([`format::check`]; logged at WARN once per config state).
    fn open(
        &self,
        git_dir: &Path,
        name: &str,
    ) -> Result<Result<gix::ThreadSafeRepository, format::Unsupported>, RepoError> {
        let config_time = std::fs::metadata(git_dir.join("config")).and_then(|m| m.modified()).ok();
        if let Some((time, midx, repo)) = self.open.lock().expect("not poisoned").get(git_dir)
            && *time == config_time
            && midx.still(git_dir)
        {
            return Ok(repo.clone());
        }
        let midx = midx::check(git_dir);
        if let Err(reason) = format::check(git_dir) {
            tracing::warn!(repo = %name, %reason, "repository not served: gixd cannot read it");
            self.open
                .lock()
                .expect("not poisoned")
                .insert(git_dir.to_owned(), (config_time, midx, Err(reason.clone())));
            return Ok(Err(reason));
        }
        if let Some(reason) = &midx.unusable {
            tracing::warn!(repo = %name, %reason, "multi-pack-index not used: each pack's own index serves");
        }
        let repo = gix::ThreadSafeRepository::open_opts(git_dir, open_options(&midx))
            .map_err(|e| RepoError::Open { path: name.to_owned(), source: Box::new(e) })?;
        self.open.lock().expect("not poisoned").insert(git_dir.to_owned(), (config_time, midx, Ok(repo.clone())));
        Ok(Ok(repo))
    }

    /// The repository's decoded commits, kept for the life of the process (a commit's id fixes
    /// its content: the cache never needs a state).
    /// Drop the ref snapshots, decoded commits and commit-graphs no request used since `cutoff`
    /// ([`cache::PerRepository::forget_unused`]); say how many went and stay.
    pub fn forget_unused(&self, cutoff: std::time::Instant) -> cache::Swept {
        self.refs.forget_unused(cutoff) + self.commits.forget_unused(cutoff) + self.commit_graphs.forget_unused(cutoff)
    }

    pub fn commits(&self, served: &Served) -> Arc<crate::graph::CommitCache> {
        self.commits.get_or_insert_with(served, 0, crate::graph::CommitCache::default)
    }

    /// The repository's commit-graph ([`commit_graph`]), read again when its files change; `None`
    /// without one, or when it does not verify (logged once per state of its files).
    pub fn commit_graph(&self, served: &Served, repo: &gix::Repository) -> Arc<Option<gix_commitgraph::Graph>> {
        let objects = repo.objects.store_ref().path().to_owned();
        self.commit_graphs.get_or_insert_with(served, commit_graph::state(&objects), || {
            commit_graph::load(&objects, repo.object_hash()).unwrap_or_else(|err| {
                tracing::warn!(repo = %served.name, %err, "commit-graph not used");
                None
            })
        })
    }

    /// The refs upload-pack serves of `served` ([`RefSnapshot::load`]), read again only when
    /// their state changed ([`upload_ref_state`]): a stateless fetch is a request per round of
    /// negotiation, each of which read and parsed every packed ref (a thousand tags) again. With
    /// them, whether they moved since this server last served the repository.
    pub fn upload_refs(&self, served: &Served, repo: &gix::Repository) -> Result<(Arc<RefSnapshot>, Refs), RefsError> {
        let mut state = upload_ref_state(repo)?;
        // Asked on every request (each round of a stateless negotiation): the path is copied
        // only the first time.
        let mut refs_seen = self.refs_seen.lock().expect("not poisoned");
        let seen = match refs_seen.get_mut(&served.git_dir) {
            Some(before) if *before == state => Refs::Unmoved,
            Some(before) => {
                *before = state;
                Refs::Moved
            }
            None => {
                refs_seen.insert(served.git_dir.clone(), state);
                Refs::FirstSeen
            }
        };
        drop(refs_seen);
        // A read is kept only if the state after it is the state before it: refs that moved
        // while they were read (git's pack-refs rewrites packed-refs, then deletes the loose
        // files) can show a branch where packed-refs had it before, older than the state they
        // were read at, and a fetch of its new tip was refused as "not our ref".
        for _ in 1..REF_READS {
            let read = self.refs.get_or_compute(served, state, || {
                let snapshot = RefSnapshot::load(repo).map_err(Reread::Failed)?;
                match upload_ref_state(repo).map_err(Reread::Failed)? {
                    after if after == state => Ok(snapshot),
                    after => Err(Reread::Moved(after)),
                }
            });
            match read {
                Ok(snapshot) => return Ok((snapshot, seen)),
                Err(Reread::Moved(after)) => state = after,
                Err(Reread::Failed(err)) => return Err(err),
            }
        }
        // Still moving: the last read is served, not kept.
        Ok((Arc::new(RefSnapshot::load(repo)?), seen))
    }
}

/// Reads of a repository's refs while they keep moving, the last one served as it is.
const REF_READS: usize = 8;

/// Why a read of the refs is not kept.
enum Reread {
    /// They moved while they were read: their state after it.
    Moved(u64),
    Failed(RefsError),
}

/// This machine's name (its UTS namespace's: each container has its own).
pub(crate) fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its length; the name is cut to it.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Whether the process `pid` of this host is alive (ours counts as alive).
pub(crate) fn alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks that the process exists.
    pid as u32 == std::process::id() || unsafe { libc::kill(pid, 0) == 0 }
}

/// A ref snapshot in memory, for the parsers' unit tests: `main` (HEAD) at `1…1`, an annotated
/// tag `v1` at `2…2` peeling to `3…3`, SHA-1, no settings.
#[cfg(test)]
pub fn fixture_refs() -> RefSnapshot {
    let id = |c: char| gix_hash::ObjectId::from_hex(c.to_string().repeat(40).as_bytes()).unwrap();
    RefSnapshot {
        head: HeadState::Symbolic { target: "refs/heads/main".into(), id: id('1') },
        refs: vec![
            AdvertisedRef { name: "refs/heads/main".into(), id: id('1'), peeled: None, symref_target: None },
            AdvertisedRef { name: "refs/tags/v1".into(), id: id('2'), peeled: Some(id('3')), symref_target: None },
        ],
        object_hash: gix_hash::Kind::Sha1,
        wants: WantPolicy::default(),
        tip_index: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use gix::bstr::BString;
    use gix_hash::ObjectId;

    use super::ref_store::{Peel, files_refs as stored_refs};
    use super::*;

    /// Walks running at once take their delta caches from one budget: the second gets what the
    /// first left (not another 64 MiB), none gets less than the floor, and a walk's share comes
    /// back when its cache goes. Red with a fixed cap per walk: 128 MiB taken of a 100 MiB budget.
    #[test]
    fn concurrent_walks_share_one_delta_cache_budget() {
        set_walk_cache_budget(100 << 20);
        let first = WalkShare::take();
        let second = WalkShare::take();
        assert_eq!((first.0, second.0), (64 << 20, 36 << 20));
        assert_eq!(walk_caches_taken(), 100 << 20, "within the budget");
        let third = WalkShare::take();
        assert_eq!(third.0, WALK_DELTA_BASE_CACHE_FLOOR, "past it, the floor");
        drop((first, second, third));
        assert_eq!(walk_caches_taken(), 0, "given back");
    }

    fn with_packed_refs(header: &str) -> (tempfile::TempDir, gix::Repository, Vec<ObjectId>, ObjectId) {
        let (dir, _, commits) = crate::graph::fixture::history(&[&[], &[0]]);
        let repo = gix::open(dir.path()).unwrap();
        let tag = crate::graph::fixture::tag(&repo, commits[0], "v0");
        let text = format!(
            "{header}\n{} refs/heads/main\n{tag} refs/tags/v0\n^{}\n{} refs/tags/light\n",
            commits[1], commits[0], commits[0]
        );
        std::fs::write(dir.path().join("packed-refs"), text).unwrap();
        let repo = gix::open(dir.path()).unwrap();
        (dir, repo, commits, tag)
    }

    #[test]
    fn fully_peeled_packed_refs_tell_which_refs_are_no_tags_and_other_headers_tell_nothing() {
        let itself = |repo: &gix::Repository| -> Vec<String> {
            stored_refs(repo)
                .unwrap()
                .into_iter()
                .filter(|(_, r)| matches!(r.peel, Peel::Itself))
                .map(|(n, _)| n.to_string())
                .collect()
        };
        let (_dir, repo, _, _) = with_packed_refs("# pack-refs with: peeled fully-peeled sorted ");
        assert_eq!(itself(&repo), ["refs/heads/main", "refs/tags/light"]);
        let (_dir, repo, _, _) = with_packed_refs("# pack-refs with: peeled sorted ");
        assert!(itself(&repo).is_empty(), "only peeled: a ref without ^ may still be a tag");
    }

    #[test]
    fn a_loose_ref_overrides_its_packed_value_and_is_peeled_by_the_object_database() {
        let (dir, _, commits, tag) = with_packed_refs("# pack-refs with: peeled fully-peeled sorted ");
        // refs/heads/main, packed at commit 1 (no tag), now loose at the annotated tag.
        std::fs::create_dir_all(dir.path().join("refs/heads")).unwrap();
        std::fs::write(dir.path().join("refs/heads/main"), format!("{tag}\n")).unwrap();
        let repo = gix::open(dir.path()).unwrap();
        let refs = RefSnapshot::load(&repo).unwrap();
        let main = refs.refs.iter().find(|r| r.name == "refs/heads/main").unwrap();
        assert_eq!((main.id, main.peeled), (tag, Some(commits[0])));
    }

    #[test]
    fn loose_and_packed_refs_come_out_in_one_name_order_each_name_once() {
        let (dir, _, commits, _) = with_packed_refs("# pack-refs with: peeled fully-peeled sorted ");
        // Loose refs before, between and after the packed ones, and one over a packed name.
        for (name, id) in [
            ("refs/heads/a", commits[0]),
            ("refs/heads/main", commits[0]),
            ("refs/tags/m", commits[1]),
            ("refs/tags/z", commits[1]),
        ] {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, format!("{id}\n")).unwrap();
        }
        let repo = gix::open(dir.path()).unwrap();
        let refs = RefSnapshot::load(&repo).unwrap();
        let names: Vec<String> = refs.refs.iter().map(|r| r.name.to_string()).collect();
        assert_eq!(
            names,
            ["refs/heads/a", "refs/heads/main", "refs/tags/light", "refs/tags/m", "refs/tags/v0", "refs/tags/z"]
        );
        assert_eq!(refs.refs[1].id, commits[0], "the loose main wins over the packed one");
    }

    #[test]
    fn a_snapshot_of_packed_refs_peels_tags_and_only_tags() {
        let (_dir, repo, commits, tag) = with_packed_refs("# pack-refs with: peeled fully-peeled sorted ");
        let refs = RefSnapshot::load(&repo).unwrap();
        let peeled: Vec<_> = refs.refs.iter().map(|r| (r.name.to_string(), r.id, r.peeled)).collect();
        assert_eq!(
            peeled,
            vec![
                ("refs/heads/main".to_owned(), commits[1], None),
                ("refs/tags/light".to_owned(), commits[0], None),
                ("refs/tags/v0".to_owned(), tag, Some(commits[0])),
            ]
        );
    }

    #[test]
    fn served_refs_are_read_again_exactly_when_a_ref_head_or_a_hiding_setting_changes() {
        let (dir, repo, commits, _) = with_packed_refs("# pack-refs with: peeled fully-peeled sorted ");
        let repos = Repos::new(dir.path(), Exports::All).unwrap();
        let served = Served { name: "r".into(), git_dir: dir.path().to_owned(), repo: repo.clone().into_sync() };
        let load = |repo: &gix::Repository| repos.upload_refs(&served, repo).unwrap().0;
        let names = |refs: &RefSnapshot| refs.refs.iter().map(|r| r.name.to_string()).collect::<Vec<_>>();
        let first = load(&repo);
        assert!(Arc::ptr_eq(&first, &load(&repo)), "nothing changed: the same snapshot, not read again");

        std::fs::create_dir_all(dir.path().join("refs/heads")).unwrap();
        std::fs::write(dir.path().join("refs/heads/new"), format!("{}\n", commits[0])).unwrap();
        let loose = load(&repo);
        assert_eq!(
            names(&loose),
            ["refs/heads/main", "refs/heads/new", "refs/tags/light", "refs/tags/v0"],
            "a new loose ref"
        );
        std::fs::write(dir.path().join("refs/heads/new"), format!("{}\n", commits[1])).unwrap();
        assert_eq!(load(&repo).refs[1].id, commits[1], "a loose ref moved");

        std::fs::write(
            dir.path().join("packed-refs"),
            format!("# pack-refs with: peeled fully-peeled sorted \n{} refs/heads/main\n", commits[1]),
        )
        .unwrap();
        assert_eq!(names(&load(&repo)), ["refs/heads/main", "refs/heads/new"], "packed-refs rewritten");

        std::fs::write(dir.path().join("HEAD"), "ref: refs/heads/new\n").unwrap();
        assert!(
            matches!(&load(&repo).head, HeadState::Symbolic { target, .. } if target == "refs/heads/new"),
            "HEAD moved"
        );

        let config = std::fs::read_to_string(dir.path().join("config")).unwrap();
        std::fs::write(dir.path().join("config"), format!("{config}[uploadpack]\n\thideRefs = refs/heads/new\n"))
            .unwrap();
        let reopened = gix::open(dir.path()).unwrap();
        assert_eq!(names(&load(&reopened)), ["refs/heads/main"], "a hideRefs setting");
    }

    #[test]
    fn dot_dot_and_dot_segments_are_refused_wherever_they_are() {
        for bad in ["/../x", "/a/../../x", "/a/..", "..", "/./a", "/a//b", "/", "", "/a\\..\\b", "/a\0"] {
            assert_eq!(relative_repo_path(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn ordinary_paths_become_relative() {
        assert_eq!(relative_repo_path("/a/b.git"), Some(PathBuf::from("a/b.git")));
        assert_eq!(relative_repo_path("/a/b/"), Some(PathBuf::from("a/b")));
        assert_eq!(relative_repo_path("repo"), Some(PathBuf::from("repo")));
    }

    #[test]
    fn hidden_refs_follow_gits_rules() {
        let p = |v: &[&str]| v.iter().map(|s| BString::from(*s)).collect::<Vec<_>>();
        let hide = p(&["refs/heads/secret"]);
        assert!(is_hidden(b"refs/heads/secret", &hide));
        assert!(is_hidden(b"refs/heads/secret/deeper", &hide), "a prefix followed by a slash");
        assert!(!is_hidden(b"refs/heads/secretive", &hide), "not a mere string prefix");
        assert!(!is_hidden(b"refs/heads/main", &hide));
        let all_but_main = p(&["refs/heads", "!refs/heads/main"]);
        assert!(is_hidden(b"refs/heads/topic", &all_but_main));
        assert!(!is_hidden(b"refs/heads/main", &all_but_main), "a later negation wins");
        let main_then_all = p(&["!refs/heads/main", "refs/heads"]);
        assert!(is_hidden(b"refs/heads/main", &main_then_all), "the last match decides");
        assert!(is_hidden(b"refs/tags/v1", &p(&["^refs/tags"])));
        assert!(!is_hidden(b"refs/tags/v1", &[]));
    }

    #[test]
    fn percent_escapes_decode_so_that_encoded_dot_dot_is_caught() {
        let decoded = percent_decode("/%2e%2e/etc").unwrap();
        assert_eq!(decoded, "/../etc");
        assert_eq!(relative_repo_path(&decoded), None);
        assert_eq!(percent_decode("/a%20b").unwrap(), "/a b");
        assert_eq!(percent_decode("/a%2"), None);
        assert_eq!(percent_decode("/a%zz"), None);
    }
}
