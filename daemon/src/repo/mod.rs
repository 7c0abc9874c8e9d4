//! Repository access: a URL path to a repository below the base path (never outside it), git
//! daemon's export rule, the snapshot of refs one request sees, and a cache per repository for
//! what the layers above compute from it (the readable set, the pack bitmap).

use std::any::Any;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::os::fd::{FromRawFd, IntoRawFd};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use gix::bstr::{BString, ByteSlice};
use gix_hash::ObjectId;

use crate::config::{Exports, PathRules};
use crate::error::{RepoError, ServeError};

pub mod format;

/// The file that marks a repository as exported (git daemon's rule).
pub const EXPORT_OK: &str = "git-daemon-export-ok";

/// git's `core.deltaBaseCacheLimit` default; with it set, gix gives each repository handle a
/// cache capped by bytes, which keeps the bases of delta chains (patches/gix-pack/0005).
pub(crate) const DELTA_BASE_CACHE: &str = "core.deltaBaseCacheLimit=96m";

/// The delta cache of a whole-history walk (a clone or fetch without a bitmap, the readable
/// set): it decodes every tree of the repository once, newest first, each the base of older
/// versions decoded later; at 96 MiB the bases were evicted before their deltas came (git.git
/// clone, gixd CPU: 96 MiB 22.8 s, 256 MiB 18.9 s, 1 GiB 18.7 s). Held only while the walk
/// runs ([`with_walk_cache`]).
pub(crate) const WALK_DELTA_BASE_CACHE: usize = 256 << 20;

/// A handle on `repo` whose delta cache is [`WALK_DELTA_BASE_CACHE`] bytes, for one walk; its
/// memory goes when the handle does.
pub fn with_walk_cache(repo: &gix::Repository) -> gix::Repository {
    let mut walk = repo.clone();
    walk.objects.set_pack_cache(|| Box::new(gix_pack::cache::lru::MemoryCappedHashmap::new(WALK_DELTA_BASE_CACHE)));
    walk
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
    /// Values the layers above compute per repository (the pack bitmap, the readable set), by git
    /// directory and kind, each with the state it was computed from (`u64`: a fingerprint of
    /// the files or refs it depends on); a value is replaced when its state changes.
    caches: Mutex<HashMap<(PathBuf, &'static str), Computed>>,
}

/// A repository as opened (or found unreadable) when its config file had this modification time.
type OpenRepository = (Option<std::time::SystemTime>, Result<gix::ThreadSafeRepository, format::Unsupported>);

/// A per-repository value and the state it was computed from.
type Computed = (u64, Arc<dyn Any + Send + Sync>);

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
            caches: Mutex::new(HashMap::new()),
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
        if let Some((time, repo)) = self.open.lock().expect("not poisoned").get(git_dir)
            && *time == config_time
        {
            return Ok(repo.clone());
        }
        if let Err(reason) = format::check(git_dir) {
            tracing::warn!(repo = %name, %reason, "repository not served: gixd cannot read it");
            self.open.lock().expect("not poisoned").insert(git_dir.to_owned(), (config_time, Err(reason.clone())));
            return Ok(Err(reason));
        }
        // The delta cache as git's (96 MiB by bytes, every base a chain reconstructs kept): gix's
        // default, a list of 64 objects, would be flushed by one long chain.
        let options = gix::open::Options::isolated().strict_config(false).config_overrides([DELTA_BASE_CACHE]);
        let repo = gix::ThreadSafeRepository::open_opts(git_dir, options)
            .map_err(|e| RepoError::Open { path: name.to_owned(), source: Box::new(e) })?;
        self.open.lock().expect("not poisoned").insert(git_dir.to_owned(), (config_time, Ok(repo.clone())));
        Ok(Ok(repo))
    }

    /// The cached value of `kind` for `served` if it was computed from `state`; never computes.
    pub fn cached_only<T: Any + Send + Sync>(&self, served: &Served, kind: &'static str, state: u64) -> Option<Arc<T>> {
        let caches = self.caches.lock().expect("not poisoned");
        let (cached_state, value) = caches.get(&(served.git_dir.clone(), kind))?;
        (*cached_state == state).then(|| value.clone().downcast::<T>().ok()).flatten()
    }

    /// The repository's decoded commits, kept for the life of the process (a commit's id fixes
    /// its content: the cache never needs a state).
    pub fn commits(&self, served: &Served) -> Arc<crate::graph::CommitCache> {
        match self
            .cached(served, "commits", 0, || Ok::<_, std::convert::Infallible>(crate::graph::CommitCache::default()))
        {
            Ok(cache) => cache,
            Err(never) => match never {},
        }
    }

    /// The refs upload-pack serves of `served` ([`RefSnapshot::load`]), read again only when
    /// their state changed ([`upload_ref_state`]): a stateless fetch is a request per round of
    /// negotiation, each of which read and parsed every packed ref (a thousand tags) again.
    pub fn upload_refs(&self, served: &Served, repo: &gix::Repository) -> Result<Arc<RefSnapshot>, ServeError> {
        let state = upload_ref_state(repo)?;
        self.cached(served, "upload-refs", state, || RefSnapshot::load(repo))
    }

    /// The value of `kind` for `served` computed from `state`: the cached one if it was computed
    /// from the same state, else `compute`'s (kept for next time; a failure is not kept).
    pub fn cached<T: Any + Send + Sync, E>(
        &self,
        served: &Served,
        kind: &'static str,
        state: u64,
        compute: impl FnOnce() -> Result<T, E>,
    ) -> Result<Arc<T>, E> {
        let key = (served.git_dir.clone(), kind);
        if let Some((cached_state, value)) = self.caches.lock().expect("not poisoned").get(&key)
            && *cached_state == state
            && let Ok(value) = value.clone().downcast::<T>()
        {
            return Ok(value);
        }
        let value = Arc::new(compute()?);
        self.caches.lock().expect("not poisoned").insert(key, (state, value.clone()));
        Ok(value)
    }
}

/// The git directory at `path`: a bare repository, or the `.git` of a work tree.
fn git_dir_of(path: &Path) -> Option<PathBuf> {
    let dot_git = path.join(".git");
    if is_git_dir(&dot_git) {
        return Some(dot_git);
    }
    is_git_dir(path).then(|| path.to_owned())
}

fn is_git_dir(path: &Path) -> bool {
    path.join("HEAD").is_file() && path.join("objects").is_dir()
}

/// A user's home directory from the password database (for `~user` paths).
fn home_of(user: &str) -> Option<PathBuf> {
    if user.is_empty() || user.len() > 256 {
        return None;
    }
    let name = std::ffi::CString::new(user).ok()?;
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; the strings it fills in live in `buf`.
    let rc = unsafe { libc::getpwnam_r(name.as_ptr(), &mut pwd, buf.as_mut_ptr(), buf.len(), &mut result) };
    if rc != 0 || result.is_null() || pwd.pw_dir.is_null() {
        return None;
    }
    // SAFETY: `pw_dir` points into `buf`, NUL-terminated, set by a successful call.
    let dir = unsafe { std::ffi::CStr::from_ptr(pwd.pw_dir) };
    use std::os::unix::ffi::OsStrExt;
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(dir.to_bytes())))
}

/// A URL path made relative and checked: no `..`, no `.`, no empty or absolute tricks, no NUL or
/// backslash. `None` when the path is not acceptable.
pub fn relative_repo_path(decoded: &str) -> Option<PathBuf> {
    if decoded.contains('\0') || decoded.contains('\\') {
        return None;
    }
    let trimmed = decoded.trim_start_matches('/').trim_end_matches('/');
    if trimmed.is_empty() {
        return None;
    }
    let mut out = PathBuf::new();
    for segment in trimmed.split('/') {
        if segment.is_empty() || segment == "." || segment == ".." {
            return None;
        }
        out.push(segment);
    }
    out.components().all(|c| matches!(c, Component::Normal(_))).then_some(out)
}

/// Decode `%XX` escapes; `None` for a broken escape or a result that is not UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// One ref as advertised.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AdvertisedRef {
    /// Full name, e.g. `refs/heads/main`.
    pub name: BString,
    /// What the ref points at (symbolic refs followed).
    pub id: ObjectId,
    /// For an annotated tag: the object it finally points at.
    pub peeled: Option<ObjectId>,
    /// For a symbolic ref: the ref it points to.
    pub symref_target: Option<BString>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HeadState {
    /// HEAD names a branch that exists.
    Symbolic {
        target: BString,
        id: ObjectId,
    },
    /// HEAD names a branch that does not exist yet (an empty repository).
    Unborn {
        target: BString,
    },
    Detached {
        id: ObjectId,
    },
    /// No readable HEAD.
    Missing,
}

/// Every ref as stored: the packed ones (with what packed-refs knows of their peeled value)
/// overridden by loose ones of the same name, sorted by name. packed-refs is decoded once (the
/// merged iterator of gix-ref decodes it too, so reading it for its peel knowledge as well
/// decoded it twice — a fifth of a no-op fetch on git.git's thousand tags). packed-refs is
/// sorted already (git writes it so), the loose refs are few: a merge of two sorted lists, where
/// inserting every ref into a map was a seventh of that no-op fetch.
fn stored_refs(repo: &gix::Repository) -> Result<Vec<(BString, StoredRef)>, ServeError> {
    let mut packed: Vec<(BString, StoredRef)> = Vec::new();
    if let Ok(Some(buffer)) = repo.refs.cached_packed_buffer() {
        // Under the `fully-peeled` trait (every git since 1.8 writes it), a packed ref without a
        // `^` line is known to peel to itself, and git trusts that instead of reading the object.
        let fully_peeled = (|| -> Option<bool> {
            use std::io::Read;
            let mut head = [0u8; 1024];
            let n = std::fs::File::open(repo.common_dir().join("packed-refs")).ok()?.read(&mut head).ok()?;
            let first = head[..n].split(|b| *b == b'\n').next()?;
            let traits = first.strip_prefix(b"# pack-refs with:")?;
            Some(traits.split(|b| b.is_ascii_whitespace()).any(|t| t == b"fully-peeled"))
        })() == Some(true);
        // One line per ref at most (peeled values take a second): sized once, not grown.
        packed.reserve(AsRef::<[u8]>::as_ref(&**buffer).iter().filter(|b| **b == b'\n').count());
        if let Ok(iter) = buffer.iter() {
            for reference in iter.flatten() {
                let peeled = match reference.object {
                    Some(_) => Peel::To(reference.object()),
                    None if fully_peeled => Peel::Itself,
                    None => Peel::Unknown,
                };
                packed.push((
                    reference.name.as_bstr().to_owned(),
                    StoredRef { target: gix::refs::Target::Object(reference.target()), peel: peeled },
                ));
            }
        }
    }
    let mut loose: Vec<(BString, StoredRef)> = Vec::new();
    for reference in repo.refs.loose_iter().map_err(ServeError::Io)?.flatten() {
        loose.push((reference.name.as_bstr().to_owned(), StoredRef { target: reference.target, peel: Peel::Unknown }));
    }
    for list in [&mut packed, &mut loose] {
        if !list.is_sorted_by(|a, b| a.0 < b.0) {
            list.sort_by(|a, b| a.0.cmp(&b.0));
            list.dedup_by(|later, earlier| later.0 == earlier.0);
        }
    }
    if loose.is_empty() {
        return Ok(packed);
    }
    // Merge by name; a loose ref overrides the packed one of the same name.
    let mut out = Vec::with_capacity(packed.len() + loose.len());
    let (mut packed, mut loose) = (packed.into_iter().peekable(), loose.into_iter().peekable());
    loop {
        let order = match (packed.peek(), loose.peek()) {
            (None, None) => break,
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some(p), Some(l)) => p.0.cmp(&l.0),
        };
        match order {
            std::cmp::Ordering::Less => out.extend(packed.next()),
            std::cmp::Ordering::Equal => {
                packed.next();
                out.extend(loose.next());
            }
            std::cmp::Ordering::Greater => out.extend(loose.next()),
        }
    }
    Ok(out)
}

/// A fingerprint of everything [`RefSnapshot::load`] reads but the objects (an id fixes what a
/// tag peels to): packed-refs by its stat, as git and gix trust it (a rewrite is a new file:
/// new inode, size or times); every loose ref's path and bytes ([`loose_refs_state`]); HEAD;
/// and the settings that hide refs or widen wants. What a request is answered from is
/// keyed by it (the ref snapshot, the pack cache).
pub fn upload_ref_state(repo: &gix::Repository) -> Result<u64, ServeError> {
    use std::os::unix::fs::MetadataExt;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    match std::fs::metadata(repo.common_dir().join("packed-refs")) {
        Ok(m) => (m.dev(), m.ino(), m.len(), m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec()).hash(&mut h),
        Err(_) => "no packed-refs".hash(&mut h),
    }
    loose_refs_state(&repo.common_dir().join("refs")).map_err(ServeError::Io)?.hash(&mut h);
    match repo.head_name() {
        Ok(Some(name)) => name.as_bstr().hash(&mut h),
        Ok(None) => repo.head_id().ok().map(|id| id.detach()).hash(&mut h),
        Err(_) => "no HEAD".hash(&mut h),
    }
    hide_refs_patterns(repo, "uploadpack.hideRefs").hash(&mut h);
    WantPolicy::read(repo).hash(&mut h);
    Ok(h.finish())
}

/// A fingerprint of every loose ref below `refs_dir`: each file's path and bytes, read exactly
/// (never trusted by its stat), in any order (the sum of one hash per file, so the directory
/// order does not matter). Lock files (`*.lock`, a ref being written) are left out, as the ref
/// store leaves them out. A stateless clone asks this twice (ls-refs, fetch): gix-ref's loose
/// iterator sorted names, validated them and read each file with about six system calls; here
/// a file costs `openat` relative to its directory, one `read` and `close`.
pub fn loose_refs_state(refs_dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY).open(refs_dir) {
        Ok(dir) => dir,
        // No refs directory: no loose refs (gix-ref's iterator says the same).
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(err) => return Err(err),
    };
    let mut state = LooseState { sum: 0, files: 0 };
    let mut prefix = b"refs/".to_vec();
    state.directory(dir.into(), &mut prefix, 0)?;
    Ok(state.sum ^ state.files.rotate_left(32))
}

struct LooseState {
    sum: u64,
    files: u64,
}

/// Directories nested deeper than this below `refs/` are an error, not a state that leaves them
/// out (links are never followed, so only a real tree this deep gets here).
const MAX_REF_DEPTH: usize = 256;

impl LooseState {
    fn directory(&mut self, dir: std::os::fd::OwnedFd, prefix: &mut Vec<u8>, depth: usize) -> std::io::Result<()> {
        struct Dir(*mut libc::DIR);
        impl Drop for Dir {
            fn drop(&mut self) {
                // SAFETY: opened by fdopendir below, closed once (with its descriptor).
                unsafe { libc::closedir(self.0) };
            }
        }
        if depth > MAX_REF_DEPTH {
            return Err(std::io::Error::other(format!("refs nested deeper than {MAX_REF_DEPTH} directories")));
        }
        let raw = dir.into_raw_fd();
        // SAFETY: `raw` is an open directory descriptor; the stream owns it from here.
        let stream = unsafe { libc::fdopendir(raw) };
        if stream.is_null() {
            let err = std::io::Error::last_os_error();
            // SAFETY: fdopendir failed, so `raw` is still ours to close.
            unsafe { libc::close(raw) };
            return Err(err);
        }
        let stream = Dir(stream);
        loop {
            // readdir tells an error only through errno.
            // SAFETY: errno is thread-local.
            unsafe { *libc::__errno_location() = 0 };
            // SAFETY: a valid stream; the entry lives until the next readdir on it.
            let entry = unsafe { libc::readdir(stream.0) };
            if entry.is_null() {
                let errno = std::io::Error::last_os_error();
                return match errno.raw_os_error() {
                    Some(0) | None => Ok(()),
                    Some(_) => Err(errno),
                };
            }
            // SAFETY: `d_name` is NUL-terminated within the entry.
            let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) };
            let bytes = name.to_bytes();
            if bytes == b"." || bytes == b".." || bytes.ends_with(b".lock") {
                continue;
            }
            // SAFETY: as above.
            let d_type = unsafe { (*entry).d_type };
            let len = prefix.len();
            prefix.extend_from_slice(bytes);
            let at = unsafe { libc::dirfd(stream.0) };
            let result = if d_type == libc::DT_DIR {
                self.subdirectory(at, name, prefix, depth)
            } else {
                self.file(at, name, prefix, depth, d_type == libc::DT_UNKNOWN)
            };
            prefix.truncate(len);
            result?;
        }
    }

    fn subdirectory(
        &mut self,
        at: i32,
        name: &std::ffi::CStr,
        prefix: &mut Vec<u8>,
        depth: usize,
    ) -> std::io::Result<()> {
        // SAFETY: `at` is the open directory being read, `name` an entry of it.
        let fd = unsafe {
            libc::openat(at, name.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        };
        if fd < 0 {
            let err = std::io::Error::last_os_error();
            // Removed while listed: it is not part of this state.
            return if err.kind() == std::io::ErrorKind::NotFound { Ok(()) } else { Err(err) };
        }
        prefix.push(b'/');
        // SAFETY: a descriptor we just opened and own.
        self.directory(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }, prefix, depth + 1)
    }

    /// One loose ref: its path and bytes. A ref file is tens of bytes: a read that returns
    /// less than the buffer reached the end of the regular file. A symbolic link is read
    /// through, as the ref store reads it; one that leads to a directory counts by its name and
    /// is not followed (no loop). `unknown`: the file system gave no type, so this may be a
    /// directory (followed) or a link (not opened: counted by its name).
    fn file(
        &mut self,
        at: i32,
        name: &std::ffi::CStr,
        prefix: &mut Vec<u8>,
        depth: usize,
        unknown: bool,
    ) -> std::io::Result<()> {
        let flags = libc::O_RDONLY | libc::O_CLOEXEC | if unknown { libc::O_NOFOLLOW } else { 0 };
        // SAFETY: `at` is the open directory being read, `name` an entry of it.
        let fd = unsafe { libc::openat(at, name.as_ptr(), flags) };
        if fd < 0 {
            let err = std::io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(libc::ENOENT) => Ok(()),
                Some(libc::ELOOP) => {
                    self.name_only(prefix);
                    Ok(())
                }
                _ => Err(err),
            };
        }
        // SAFETY: a descriptor we just opened and own.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let mut h = std::collections::hash_map::DefaultHasher::new();
        prefix.hash(&mut h);
        let mut buf = [0u8; 512];
        loop {
            use std::os::fd::AsRawFd;
            // SAFETY: `buf` is writable for its length.
            let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                let err = std::io::Error::last_os_error();
                match err.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EISDIR) if unknown => {
                        prefix.push(b'/');
                        return self.directory(fd, prefix, depth + 1);
                    }
                    Some(libc::EISDIR) => {
                        return {
                            self.name_only(prefix);
                            Ok(())
                        };
                    }
                    _ => return Err(err),
                }
            }
            let n = n as usize;
            buf[..n].hash(&mut h);
            if n < buf.len() {
                break;
            }
        }
        self.sum = self.sum.wrapping_add(h.finish());
        self.files += 1;
        Ok(())
    }

    /// An entry that is not read: it counts by its path.
    fn name_only(&mut self, prefix: &[u8]) {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (prefix, "not read").hash(&mut h);
        self.sum = self.sum.wrapping_add(h.finish());
        self.files += 1;
    }
}

/// A ref as the ref store holds it.
struct StoredRef {
    target: gix::refs::Target,
    peel: Peel,
}

/// What the ref store knows of a ref's peeled value.
enum Peel {
    /// packed-refs' `^` line: an annotated tag, peeling to this.
    To(ObjectId),
    /// packed-refs under `fully-peeled` without a `^` line: no tag.
    Itself,
    /// Nothing (a loose ref): the object database is asked.
    Unknown,
}

/// The refs one request sees, read once, sorted by name like git's.
#[derive(Debug, Clone)]
pub struct RefSnapshot {
    pub head: HeadState,
    pub refs: Vec<AdvertisedRef>,
    pub object_hash: gix_hash::Kind,
    /// Which wants beyond the ref tips the repository allows.
    pub wants: WantPolicy,
}

/// What the repository's `uploadpack.*` settings allow a request: wants by id
/// (`allow{Tip,Reachable,Any}SHA1InWant`, as far as the rule "never an object not reachable from
/// a ref the client may read" lets them go), filters and `want-ref`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct WantPolicy {
    /// `allowTipSHA1InWant`: advertised, but hidden refs stay unreadable, so only visible tips
    /// (which are allowed anyway) qualify.
    pub tip: bool,
    /// `allowReachableSHA1InWant` (or `allowAnySHA1InWant`, narrowed to the same): any object
    /// reachable from a visible ref.
    pub reachable: bool,
    /// `uploadpack.allowFilter`: partial-clone filters are advertised and accepted.
    pub filter: bool,
    /// `uploadpack.allowRefInWant`: v2 `want-ref` is advertised and accepted.
    pub ref_in_want: bool,
}

impl WantPolicy {
    fn read(repo: &gix::Repository) -> Self {
        let config = repo.config_snapshot();
        let flag = |key: &str| config.boolean(key).unwrap_or(false);
        let any = flag("uploadpack.allowAnySHA1InWant");
        WantPolicy {
            tip: flag("uploadpack.allowTipSHA1InWant") || any,
            reachable: flag("uploadpack.allowReachableSHA1InWant") || any,
            filter: flag("uploadpack.allowFilter"),
            ref_in_want: flag("uploadpack.allowRefInWant"),
        }
    }
}

impl RefSnapshot {
    /// The refs as upload-pack serves them (`transfer.hideRefs`, `uploadpack.hideRefs`).
    pub fn load(repo: &gix::Repository) -> Result<RefSnapshot, ServeError> {
        Self::load_hiding(repo, Some("uploadpack.hideRefs"))
    }

    /// Every ref, hidden or not (to tell a hidden ref from a new one).
    pub fn load_hiding_nothing(repo: &gix::Repository) -> Result<RefSnapshot, ServeError> {
        Self::load_hiding(repo, None)
    }

    /// The refs as receive-pack shows them (`transfer.hideRefs`, `receive.hideRefs`); a hidden
    /// ref cannot be pushed to either.
    pub fn load_for_push(repo: &gix::Repository) -> Result<RefSnapshot, ServeError> {
        Self::load_hiding(repo, Some("receive.hideRefs"))
    }

    /// What an advertisement of capabilities needs and nothing more: the hash and the
    /// repository's want settings, no ref read (v2's capability advertisement lists no refs).
    pub fn settings_only(repo: &gix::Repository) -> RefSnapshot {
        RefSnapshot {
            head: HeadState::Missing,
            refs: Vec::new(),
            object_hash: repo.object_hash(),
            wants: WantPolicy::read(repo),
        }
    }

    fn load_hiding(repo: &gix::Repository, service_key: Option<&str>) -> Result<RefSnapshot, ServeError> {
        let stored = stored_refs(repo)?;
        let mut refs = Vec::with_capacity(stored.len());
        for (name, stored) in stored {
            let (id, symref_target) = match stored.target {
                gix::refs::Target::Object(id) => (id, None),
                gix::refs::Target::Symbolic(target) => match follow_symbolic(repo, target.as_bstr()) {
                    Some(id) => (id, Some(target.as_bstr().to_owned())),
                    None => continue,
                },
            };
            let peeled = match stored.peel {
                Peel::To(peeled) if symref_target.is_none() && peeled != id => Some(peeled),
                Peel::Itself if symref_target.is_none() => None,
                _ => crate::graph::peel_tag(repo, id)?,
            };
            refs.push(AdvertisedRef { name, id, peeled, symref_target });
        }
        // Sorted by name already (a merge of sorted lists).
        // Hidden refs are not served at all: not advertised, not wantable, and what only they
        // reach is not readable.
        if let Some(key) = service_key {
            let hidden = hide_refs_patterns(repo, key);
            refs.retain(|r| !is_hidden(&r.name, &hidden));
        }
        let head = match repo.head_name() {
            Ok(Some(target)) => match refs.iter().find(|r| r.name == target.as_bstr()) {
                Some(r) => HeadState::Symbolic { target: target.as_bstr().to_owned(), id: r.id },
                None => HeadState::Unborn { target: target.as_bstr().to_owned() },
            },
            Ok(None) => match repo.head_id() {
                Ok(id) => HeadState::Detached { id: id.detach() },
                Err(_) => HeadState::Missing,
            },
            Err(_) => HeadState::Missing,
        };
        Ok(RefSnapshot { head, refs, object_hash: repo.object_hash(), wants: WantPolicy::read(repo) })
    }

    /// HEAD's object, if it has one.
    pub fn head_id(&self) -> Option<ObjectId> {
        match &self.head {
            HeadState::Symbolic { id, .. } | HeadState::Detached { id } => Some(*id),
            _ => None,
        }
    }

    /// Every object a ref (or HEAD) points at: the only objects a client may want.
    pub fn tips(&self) -> Vec<ObjectId> {
        let mut tips: Vec<ObjectId> = self.refs.iter().map(|r| r.id).chain(self.head_id()).collect();
        tips.sort();
        tips.dedup();
        tips
    }

    /// What a short ref name means under git's rev-parse rules (`x`, `refs/x`, `refs/tags/x`,
    /// `refs/heads/x`, `refs/remotes/x`, `refs/remotes/x/HEAD`) among the visible refs: every
    /// match, in that order, as (full name, object).
    pub fn dwim(&self, name: &str) -> Vec<(String, ObjectId)> {
        let candidates = [
            name.to_owned(),
            format!("refs/{name}"),
            format!("refs/tags/{name}"),
            format!("refs/heads/{name}"),
            format!("refs/remotes/{name}"),
            format!("refs/remotes/{name}/HEAD"),
        ];
        let mut found = Vec::new();
        for candidate in candidates {
            let id = if candidate == "HEAD" {
                self.head_id()
            } else {
                self.refs.iter().find(|r| r.name == candidate.as_bytes()).map(|r| r.id)
            };
            if let Some(id) = id {
                found.push((candidate, id));
            }
        }
        found
    }

    pub fn is_tip(&self, id: &ObjectId) -> bool {
        self.head_id().as_ref() == Some(id) || self.refs.iter().any(|r| r.id == *id)
    }

    /// Is `id` what an advertised annotated tag peels to (a `^{}` line)?
    pub fn is_peeled_tip(&self, id: &ObjectId) -> bool {
        self.refs.iter().any(|r| r.peeled.as_ref() == Some(id))
    }

    /// Changes whenever a ref is added, removed or moved.
    pub fn fingerprint(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.head.hash(&mut h);
        self.refs.hash(&mut h);
        h.finish()
    }
}

/// The repository's `transfer.hideRefs` then `<service>.hideRefs` values, trailing slashes
/// removed (as git reads them). Both keys' values keep their order within each key; git orders
/// them as they appear across config files, which only matters when one key negates the other.
fn hide_refs_patterns(repo: &gix::Repository, service_key: &str) -> Vec<BString> {
    let config = repo.config_snapshot();
    ["transfer.hideRefs", service_key]
        .iter()
        .flat_map(|key| config.plumbing().strings(*key).unwrap_or_default())
        .map(|mut p| {
            while p.last() == Some(&b'/') {
                p.pop();
            }
            p
        })
        .filter(|p| !p.is_empty())
        .collect()
}

/// git's `ref_is_hidden`: the last pattern that matches decides; `!` un-hides; a pattern matches
/// a name it equals or that continues with `/` after it; `^` anchors to the full name (without
/// namespaces, the same thing here).
pub fn is_hidden(name: &[u8], patterns: &[BString]) -> bool {
    for pattern in patterns.iter().rev() {
        let (negated, pattern) = match pattern.strip_prefix(b"!") {
            Some(rest) => (true, rest),
            None => (false, &pattern[..]),
        };
        let pattern = pattern.strip_prefix(b"^").unwrap_or(pattern);
        if let Some(rest) = name.strip_prefix(pattern)
            && (rest.is_empty() || rest[0] == b'/')
        {
            return !negated;
        }
    }
    false
}

/// Follow a symbolic ref to an object (a few levels, as git does).
fn follow_symbolic(repo: &gix::Repository, target: &gix::bstr::BStr) -> Option<ObjectId> {
    let mut target: BString = target.to_owned();
    for _ in 0..5 {
        let reference = repo.find_reference(target.as_bstr()).ok()?;
        match reference.target() {
            gix::refs::TargetRef::Object(id) => return Some(id.to_owned()),
            gix::refs::TargetRef::Symbolic(next) => target = next.as_bstr().to_owned(),
        }
    }
    None
}

/// A ref snapshot in memory, for the parsers' unit tests: `main` (HEAD) at `1…1`, an annotated
/// tag `v1` at `2…2` peeling to `3…3`, SHA-1, no settings.
#[cfg(test)]
pub fn fixture_refs() -> RefSnapshot {
    let id = |c: char| ObjectId::from_hex(c.to_string().repeat(40).as_bytes()).unwrap();
    RefSnapshot {
        head: HeadState::Symbolic { target: "refs/heads/main".into(), id: id('1') },
        refs: vec![
            AdvertisedRef { name: "refs/heads/main".into(), id: id('1'), peeled: None, symref_target: None },
            AdvertisedRef { name: "refs/tags/v1".into(), id: id('2'), peeled: Some(id('3')), symref_target: None },
        ],
        object_hash: gix_hash::Kind::Sha1,
        wants: WantPolicy::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let load = |repo: &gix::Repository| repos.upload_refs(&served, repo).unwrap();
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
