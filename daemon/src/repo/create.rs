//! Making repositories (`gixd repo create`, and push-to-create). A new repository is made whole in
//! a hidden directory beside its final path (`.gixd-new-<pid>-<n>-<name>`), under a lock file
//! (`<name>.gixd-create`, holding `<host> <pid>`) that a second creator of the same path meets,
//! and renamed into place only when it is complete — for push-to-create, with its first push in
//! it. A creation that fails, or a process killed while creating, leaves no repository; the next
//! start removes what a dead creator on this host left ([`clean_stale`]).
//!
//! gixd's defaults for a new repository: bare, no hook (git's samples are not written), objects
//! checked on push (`receive.fsckObjects`), a description, and the export marker when public.

use std::io::Write;
use std::path::{Path, PathBuf};

/// What a new repository is made with.
#[derive(Debug, Clone)]
pub struct Options {
    pub object_hash: gix_hash::Kind,
    /// Exported: anyone may read it (the `git-daemon-export-ok` marker).
    pub public: bool,
    pub description: Option<String>,
    /// Refs in reftable (`git init --ref-format=reftable`) instead of files.
    pub reftable: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { object_hash: gix_hash::Kind::Sha1, public: false, description: None, reftable: false }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error("'{0}' cannot name a repository: {1}")]
    BadName(String, &'static str),
    #[error("repository '{0}' exists already")]
    Exists(String),
    #[error("repository '{0}' is being created by another request")]
    Busy(String),
    #[error("repository '{0}' would be outside the base path")]
    OutsideBase(String),
    #[error("could not create repository '{name}': {source}")]
    Io { name: String, source: std::io::Error },
    #[error("could not initialize repository '{name}': {message}")]
    Init { name: String, message: String },
}

/// The suffix of a creation's lock file, beside the path being created.
const LOCK_SUFFIX: &str = ".gixd-create";
/// The prefix of a repository being made; URL paths never reach it
/// ([`super::relative_repo_path`] refuses it).
pub const NEW_PREFIX: &str = ".gixd-new-";
/// How deep below the base path a repository may be made (the start's cleaning walks this far).
const MAX_DEPTH: usize = 5;

/// The path below the base a repository called `name` gets: checked segment by segment (no
/// `..`, no hidden segment — so no `.git` nesting and no temporary directory —, letters, digits,
/// `-`, `_` and `.` only), `.git` appended when missing. Also what push-to-create checks first.
pub fn checked_name(name: &str) -> Result<PathBuf, CreateError> {
    let bad = |why| CreateError::BadName(crate::error::quoted(name, 200), why);
    let trimmed = name.trim_matches('/');
    let mut rel = super::relative_repo_path(trimmed).ok_or_else(|| bad("empty, or a segment is '..' or '.'"))?;
    let segments: Vec<&str> = trimmed.split('/').collect();
    if segments.len() > MAX_DEPTH {
        return Err(bad("too deep"));
    }
    for (i, segment) in segments.iter().enumerate() {
        if segment.starts_with('.') {
            return Err(bad("a segment starts with '.'"));
        }
        if !segment.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')) {
            return Err(bad("only letters, digits, '-', '_' and '.' may be used"));
        }
        if i + 1 < segments.len() && segment.ends_with(".git") {
            return Err(bad("a repository cannot be made inside another"));
        }
    }
    if !trimmed.ends_with(".git") {
        rel.set_file_name(format!("{}.git", segments.last().expect("one segment at least")));
    }
    Ok(rel)
}

/// A repository being made: a complete git directory in a hidden place, and the lock on its
/// final path. [`Creation::commit`] puts it in place; dropped before, it is removed.
#[derive(Debug)]
pub struct Creation {
    name: String,
    temp: PathBuf,
    target: PathBuf,
    lock: PathBuf,
    done: bool,
}

impl Creation {
    /// The git directory being made (serve a push into it, then commit).
    pub fn git_dir(&self) -> &Path {
        &self.temp
    }

    /// Where it will be.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Put it in place (an atomic rename that never replaces anything).
    pub fn commit(mut self) -> Result<PathBuf, CreateError> {
        rename_no_replace(&self.temp, &self.target).map_err(|source| match source.kind() {
            std::io::ErrorKind::AlreadyExists => CreateError::Exists(self.name.clone()),
            _ => CreateError::Io { name: self.name.clone(), source },
        })?;
        self.done = true;
        let _ = std::fs::remove_file(&self.lock);
        Ok(self.target.clone())
    }
}

impl Drop for Creation {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_dir_all(&self.temp);
            let _ = std::fs::remove_file(&self.lock);
        }
    }
}

/// Make the repository `name` below `base` in a hidden place, under its lock; commit it to
/// create it.
pub fn begin(base: &Path, name: &str, options: &Options) -> Result<Creation, CreateError> {
    let rel = checked_name(name)?;
    let display = rel.display().to_string();
    let io = |source| CreateError::Io { name: display.clone(), source };
    let base = base.canonicalize().map_err(io)?;
    let target = base.join(&rel);
    let parent = target.parent().expect("below the base");
    // Every directory on the way must be a plain directory below the base, not a repository.
    let mut dir = base.clone();
    for component in rel.parent().into_iter().flat_map(Path::components) {
        dir.push(component);
        if dir.join("HEAD").is_file() && dir.join("objects").is_dir() {
            return Err(CreateError::BadName(display, "a repository cannot be made inside another"));
        }
    }
    std::fs::create_dir_all(parent).map_err(io)?;
    if !parent.canonicalize().map_err(io)?.starts_with(&base) {
        return Err(CreateError::OutsideBase(display));
    }
    let last = target.file_name().expect("a name").to_string_lossy().into_owned();
    let lock = parent.join(format!("{last}{LOCK_SUFFIX}"));
    let mut file = match std::fs::OpenOptions::new().write(true).create_new(true).open(&lock) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => return Err(CreateError::Busy(display)),
        Err(err) => return Err(io(err)),
    };
    let _ = writeln!(file, "{} {}", super::host_name(), std::process::id());
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let temp = parent.join(format!("{NEW_PREFIX}{}-{n}-{last}", std::process::id()));
    let creation = Creation { name: display.clone(), temp, target, lock, done: false };
    if creation.target.exists() {
        return Err(CreateError::Exists(display));
    }
    init(&creation.temp, options).map_err(|message| CreateError::Init { name: display, message })?;
    Ok(creation)
}

/// Create the repository `name` below `base` now; its git directory.
pub fn create(base: &Path, name: &str, options: &Options) -> Result<PathBuf, CreateError> {
    begin(base, name, options)?.commit()
}

/// A bare repository at `dir` with gixd's defaults.
fn init(dir: &Path, options: &Options) -> Result<(), String> {
    let create = gix::create::Options {
        destination_must_be_empty: Some(true),
        object_hash: Some(options.object_hash),
        ..Default::default()
    };
    gix::create::into(dir, gix::create::Kind::Bare, create).map_err(|err| err.to_string())?;
    let write = |path: PathBuf, text: &str| std::fs::write(path, text).map_err(|err| err.to_string());
    // No hook runs unless an operator puts one there: git's samples are not kept.
    let hooks = dir.join("hooks");
    std::fs::remove_dir_all(&hooks).map_err(|err| err.to_string())?;
    std::fs::create_dir(&hooks).map_err(|err| err.to_string())?;
    let mut config = std::fs::read_to_string(dir.join("config")).map_err(|err| err.to_string())?;
    config.push_str("[receive]\n\tfsckObjects = true\n");
    if options.reftable {
        config = config.replace("repositoryformatversion = 0", "repositoryformatversion = 1");
        config.push_str("[extensions]\n\trefStorage = reftable\n");
        to_reftable(dir, options.object_hash)?;
    }
    write(dir.join("config"), &config)?;
    let description = options.description.as_deref().unwrap_or("Unnamed repository; edit this file to name it.");
    write(dir.join("description"), &format!("{}\n", description.trim_end()))?;
    if options.public {
        write(dir.join(super::EXPORT_OK), "")?;
    }
    Ok(())
}

/// The ref storage of a new repository made reftable, as `git init --ref-format=reftable` lays
/// it out: HEAD a symref record of the stack's first table, the `HEAD` file and `refs/heads` the
/// placeholders that keep older git from taking the directory for something else.
fn to_reftable(dir: &Path, object_hash: gix_hash::Kind) -> Result<(), String> {
    let text = |err: &dyn std::fmt::Display| err.to_string();
    let head = std::fs::read_to_string(dir.join("HEAD")).map_err(|e| text(&e))?;
    let target = head.trim_end().strip_prefix("ref: ").ok_or("a new repository's HEAD is symbolic")?.to_owned();
    let tables = dir.join("reftable");
    std::fs::create_dir(&tables).map_err(|e| text(&e))?;
    let record = gix_reftable::RefRecord {
        name: "HEAD".into(),
        update_index: 0,
        value: gix_reftable::RefValue::Symref(target.into()),
    };
    let lock = gix_reftable::Stack::lock(&tables, std::time::Duration::ZERO).map_err(|e| text(&e))?;
    lock.commit(vec![record], Vec::new(), gix_reftable::Options::new(object_hash)).map_err(|e| text(&e))?;
    std::fs::write(dir.join("HEAD"), "ref: refs/heads/.invalid\n").map_err(|e| text(&e))?;
    let refs = dir.join("refs");
    std::fs::remove_dir_all(&refs).map_err(|e| text(&e))?;
    std::fs::create_dir(&refs).map_err(|e| text(&e))?;
    std::fs::write(refs.join("heads"), "this repository uses the reftable format\n").map_err(|e| text(&e))?;
    Ok(())
}

/// `rename(2)` that fails with `AlreadyExists` instead of replacing an (empty) directory.
fn rename_no_replace(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let from = std::ffi::CString::new(from.as_os_str().as_bytes())?;
    let to = std::ffi::CString::new(to.as_os_str().as_bytes())?;
    // SAFETY: both are NUL-terminated paths that live across the call.
    let rc =
        unsafe { libc::renameat2(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::RENAME_NOREPLACE) };
    if rc == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// Remove what creators on this host that are gone left in `directories` (the directories
/// above the repositories, [`super::listing::below`]): a lock and the hidden directory it
/// guarded. The number of creations cleaned.
pub fn clean_stale(directories: &[PathBuf]) -> usize {
    let mut cleaned = 0;
    for dir in directories {
        let Ok(entries) = std::fs::read_dir(dir) else { continue };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(last) = name.strip_suffix(LOCK_SUFFIX) else { continue };
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let mut words = text.split_whitespace();
            let (host, pid) = (words.next(), words.next().and_then(|p| p.parse::<i32>().ok()));
            if host != Some(super::host_name().as_str()) || pid.is_none_or(super::alive) {
                continue; // another host's, or alive: not ours to judge or take
            }
            let pid = pid.expect("checked");
            if let Ok(siblings) = std::fs::read_dir(dir) {
                for sibling in siblings.flatten() {
                    let sibling_name = sibling.file_name().to_string_lossy().into_owned();
                    if sibling_name.starts_with(&format!("{NEW_PREFIX}{pid}-")) && sibling_name.ends_with(last) {
                        let _ = std::fs::remove_dir_all(sibling.path());
                    }
                }
            }
            if std::fs::remove_file(entry.path()).is_ok() {
                tracing::warn!(path = %entry.path().display(), "removed what an interrupted repository creation left");
                cleaned += 1;
            }
        }
    }
    cleaned
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_segment_by_segment_and_get_git_appended() {
        assert_eq!(checked_name("team/app").unwrap(), PathBuf::from("team/app.git"));
        assert_eq!(checked_name("/app.git/").unwrap(), PathBuf::from("app.git"));
        for bad in ["", "..", "a/../b", ".git", "a/.git", ".gixd-new-1-0-x", "a.git/b", "a b", "a\\b", "a/b/c/d/e/f"] {
            assert!(checked_name(bad).is_err(), "{bad:?} is refused");
        }
    }

    #[test]
    fn a_creation_is_atomic_a_second_creator_is_told_and_a_dropped_one_leaves_nothing() {
        let base = tempfile::tempdir().unwrap();
        let first = begin(base.path(), "team/app", &Options::default()).unwrap();
        assert!(first.git_dir().join("HEAD").is_file() && !first.target().exists(), "made beside its place");
        assert!(matches!(begin(base.path(), "team/app.git", &Options::default()), Err(CreateError::Busy(_))));
        drop(first);
        let left: Vec<_> = std::fs::read_dir(base.path().join("team")).unwrap().flatten().collect();
        assert!(left.is_empty(), "a dropped creation leaves nothing: {left:?}");
        let made = create(base.path(), "team/app", &Options { public: true, ..Options::default() }).unwrap();
        assert!(made.join(crate::repo::EXPORT_OK).is_file());
        assert_eq!(std::fs::read_dir(made.join("hooks")).unwrap().count(), 0, "no hook sample");
        assert!(matches!(create(base.path(), "team/app", &Options::default()), Err(CreateError::Exists(_))));
        assert!(matches!(
            create(base.path(), "team/app.git/inner", &Options::default()),
            Err(CreateError::BadName(..))
        ));
    }
}
