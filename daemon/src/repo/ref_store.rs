//! Where a repository keeps its refs (repository access layer): the files backend (loose refs
//! over packed-refs, HEAD in its own file) or reftable (`reftable/tables.list` and its tables,
//! HEAD a record of the stack; `extensions.refStorage = reftable`). Every ref read and write of
//! gixd asks this seam — a snapshot of every ref with what the store knows of its peeled value,
//! HEAD, the fingerprint of the ref state, one ref's stored value, the names (for directory/file
//! conflicts), the lock files a transaction holds — and a reftable transaction is here too: one
//! table per transaction under `tables.list.lock`, compare-and-swap checked under the lock.

use std::hash::{Hash, Hasher};
use std::path::PathBuf;

use gix::bstr::{BString, ByteSlice};
use gix_hash::ObjectId;
use gix_reftable::{RefValue, Stack};

use super::RefsError;

/// A ref as the ref store holds it.
pub(super) struct StoredRef {
    pub(super) target: gix::refs::Target,
    pub(super) peel: Peel,
}

/// What the ref store knows of a ref's peeled value.
pub(super) enum Peel {
    /// packed-refs' `^` line: an annotated tag, peeling to this.
    To(ObjectId),
    /// packed-refs under `fully-peeled` without a `^` line: no tag.
    Itself,
    /// Nothing (a loose ref): the object database is asked.
    Unknown,
}

/// Every ref as stored: the packed ones (with what packed-refs knows of their peeled value)
/// overridden by loose ones of the same name, sorted by name. packed-refs is decoded once (the
/// merged iterator of gix-ref decodes it too, so reading it for its peel knowledge as well
/// decoded it twice — a fifth of a no-op fetch on git.git's thousand tags). packed-refs is
/// sorted already (git writes it so), the loose refs are few: a merge of two sorted lists, where
/// inserting every ref into a map was a seventh of that no-op fetch.
/// What another process does between the moment the files backend's refs are read from
/// packed-refs and the moment the loose ones are listed (for tests: `git pack-refs` there).
#[doc(hidden)]
pub static BETWEEN_PACKED_AND_LOOSE: std::sync::Mutex<Option<Box<dyn FnMut() + Send>>> = std::sync::Mutex::new(None);

pub(super) fn files_refs(repo: &gix::Repository) -> Result<Vec<(BString, StoredRef)>, RefsError> {
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
    if let Some(between) = BETWEEN_PACKED_AND_LOOSE.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        between();
    }
    let mut loose: Vec<(BString, StoredRef)> = Vec::new();
    for reference in repo.refs.loose_iter().map_err(RefsError::Io)?.flatten() {
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

/// A repository's ref storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefStore {
    Files,
    /// The stack's directory, `<common dir>/reftable`.
    Reftable(PathBuf),
}

/// HEAD as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredHead {
    Symbolic(BString),
    Detached(ObjectId),
    Missing,
}

impl RefStore {
    /// The storage `extensions.refStorage` names (the format check let only these two through).
    pub fn of(repo: &gix::Repository) -> RefStore {
        let config = repo.config_snapshot();
        match config.string("extensions.refStorage") {
            Some(value) if value.eq_ignore_ascii_case(b"reftable") => {
                RefStore::Reftable(repo.common_dir().join("reftable"))
            }
            _ => RefStore::Files,
        }
    }

    /// Every ref but HEAD, sorted by name, and HEAD.
    pub(super) fn stored(&self, repo: &gix::Repository) -> Result<(Vec<(BString, StoredRef)>, StoredHead), RefsError> {
        match self {
            RefStore::Files => {
                let head = match repo.head_name() {
                    Ok(Some(name)) => StoredHead::Symbolic(name.as_bstr().to_owned()),
                    Ok(None) => repo.head_id().map_or(StoredHead::Missing, |id| StoredHead::Detached(id.detach())),
                    Err(_) => StoredHead::Missing,
                };
                Ok((files_refs(repo)?, head))
            }
            RefStore::Reftable(dir) => {
                let mut head = StoredHead::Missing;
                let records = Stack::open(dir)?.refs()?;
                let mut refs = Vec::with_capacity(records.len());
                for r in records {
                    let (target, peel) = match r.value {
                        // git writes an annotated tag as a value and its peeled object, everything
                        // else as one value: a one-value record is known not to be a tag.
                        RefValue::Val1(id) => (gix::refs::Target::Object(id), Peel::Itself),
                        RefValue::Val2 { value, peeled } => (gix::refs::Target::Object(value), Peel::To(peeled)),
                        RefValue::Symref(target) => match gix::refs::FullName::try_from(target) {
                            Ok(target) => (gix::refs::Target::Symbolic(target), Peel::Unknown),
                            Err(_) => continue,
                        },
                        RefValue::Deletion => continue,
                    };
                    if r.name == "HEAD" {
                        head = match target {
                            gix::refs::Target::Symbolic(name) => StoredHead::Symbolic(name.as_bstr().to_owned()),
                            gix::refs::Target::Object(id) => StoredHead::Detached(id),
                        };
                    } else if r.name.starts_with(b"refs/") {
                        refs.push((r.name, StoredRef { target, peel }));
                    }
                }
                Ok((refs, head))
            }
        }
    }

    /// Hash what the stored refs depend on into `h`: for the files backend the caller hashes
    /// packed-refs, the loose refs and HEAD; for reftable `tables.list` names every table, and
    /// tables never change under their name.
    pub fn hash_state(&self, h: &mut impl Hasher) -> Result<bool, RefsError> {
        match self {
            RefStore::Files => Ok(false),
            RefStore::Reftable(dir) => {
                let list = dir.join("tables.list");
                match std::fs::read(&list) {
                    Ok(text) => text.hash(h),
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => "no tables.list".hash(h),
                    Err(err) => return Err(RefsError::Io(err)),
                }
                Ok(true)
            }
        }
    }

    /// The object `name` holds as stored (an annotated tag's own id), `None` when it does not
    /// exist or is symbolic.
    pub fn value(&self, repo: &gix::Repository, name: &str) -> Option<ObjectId> {
        match self {
            RefStore::Files => {
                repo.try_find_reference(name).ok().flatten().and_then(|mut r| match r.target().try_id() {
                    Some(id) => Some(id.to_owned()),
                    None => r.peel_to_id().ok().map(|id| id.detach()),
                })
            }
            RefStore::Reftable(dir) => {
                let record = Stack::open(dir).ok()?.find(name.as_bytes().as_bstr()).ok()??;
                match record.value {
                    RefValue::Val1(id) | RefValue::Val2 { value: id, .. } => Some(id),
                    _ => None,
                }
            }
        }
    }

    /// Every object id the reflogs of a reftable stack name (old and new values), for what prune
    /// must keep; the files backend's reflogs are read by the caller (`logs/`).
    pub fn reftable_log_values(&self) -> Result<Vec<ObjectId>, RefsError> {
        let RefStore::Reftable(dir) = self else { return Ok(Vec::new()) };
        let mut values = Vec::new();
        for log in Stack::open(dir)?.logs()? {
            if let Some(u) = log.update {
                values.extend([u.old_id, u.new_id].into_iter().filter(|id| !id.is_null()));
            }
        }
        Ok(values)
    }

    /// Whether a ref under `prefix` exists, for reftable (`None` for the files backend, which
    /// the caller asks itself).
    pub fn reftable_has_prefix(&self, prefix: &str) -> Result<Option<bool>, RefsError> {
        let RefStore::Reftable(dir) = self else { return Ok(None) };
        Ok(Some(Stack::open(dir)?.refs()?.iter().any(|r| r.name.starts_with(prefix.as_bytes()))))
    }

    /// Every ref name (for the directory/file conflict check).
    pub fn names(&self, repo: &gix::Repository) -> Vec<String> {
        match self {
            RefStore::Files => repo
                .references()
                .ok()
                .and_then(|refs| {
                    refs.all().ok().map(|all| all.flatten().map(|r| r.name().as_bstr().to_string()).collect())
                })
                .unwrap_or_default(),
            RefStore::Reftable(dir) => Stack::open(dir)
                .and_then(|s| s.refs())
                .map(|refs| refs.into_iter().map(|r| r.name.to_string()).collect())
                .unwrap_or_default(),
        }
    }
}

/// Who keeps track of the lock files a transaction holds, so that a start after this process
/// was killed while holding them removes them (a push's quarantine; see [`crate::ref_locks`]).
pub trait LockNotes {
    /// The paths are about to be locked.
    fn intend(&self, paths: &[PathBuf]);
    /// The paths are locked now.
    fn note(&self, paths: &[PathBuf]);
    /// The locks are gone.
    fn forget(&self);
}

/// One ref change of a reftable transaction: `old` null for "must not exist", `new` null for a
/// deletion.
#[derive(Debug, Clone, Copy)]
pub struct Edit<'a> {
    pub name: &'a str,
    pub old: ObjectId,
    pub new: ObjectId,
}

/// Why a reftable transaction wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum TransactionError {
    #[error("{0}")]
    Store(#[from] gix_reftable::Error),
    #[error("{name} is not at the value the push expected")]
    Stale { name: String },
    #[error("{name} exists already")]
    Exists { name: String },
    #[error("{name} conflicts with {existing}")]
    DirectoryFile { name: String, existing: String },
    #[error("cannot peel {0}")]
    Peel(ObjectId),
}

/// The reflog entry's author and message of a reftable transaction.
pub struct LogEntry<'a> {
    pub name: &'a str,
    pub email: &'a str,
    pub message: &'a str,
}

/// One reftable transaction, all or nothing: `tables.list.lock` taken (waiting
/// `reftable.lockTimeout`; 1 s by default, where git waits 100 ms), every edit's expected old value and the
/// directory/file rule checked against the stack as it is under the lock, one table with every
/// change (an annotated tag stored with its peeled value, as git does; reflog records when
/// `core.logAllRefUpdates` asks for them or the ref has some) appended; then git's
/// auto-compaction (`reftable.autoCompaction`, on by default).
pub fn reftable_transaction(
    repo: &gix::Repository,
    dir: &std::path::Path,
    edits: &[Edit<'_>],
    log: &LogEntry<'_>,
    notes: &dyn LockNotes,
) -> Result<(), TransactionError> {
    let config = repo.config_snapshot();
    let timeout = match config.integer("reftable.lockTimeout") {
        Some(ms) if ms < 0 => std::time::Duration::from_secs(u64::from(u32::MAX)),
        Some(ms) => std::time::Duration::from_millis(ms as u64),
        // git waits 100 ms; a push that fails because maintenance or another push held the
        // list for a moment is worse for a server than a second's wait (the packed-refs lock's
        // default, the files backend's lock of the whole store).
        None => std::time::Duration::from_millis(1000),
    };
    // The records are made before the lock is taken (a tag's peeled value is an object read):
    // every writer of the stack, stock git among them (100 ms), waits while it is held.
    let mut records = Vec::with_capacity(edits.len());
    for edit in edits {
        let value = if edit.new.is_null() {
            RefValue::Deletion
        } else {
            match crate::graph::peel_tag(repo, edit.new).map_err(|_| TransactionError::Peel(edit.new))? {
                Some(peeled) => RefValue::Val2 { value: edit.new, peeled },
                None => RefValue::Val1(edit.new),
            }
        };
        records.push(gix_reftable::RefRecord { name: edit.name.into(), update_index: 0, value });
    }
    records.sort_by(|a, b| a.name.cmp(&b.name));
    let options = gix_reftable::Options::new(repo.object_hash());
    let list_lock = dir.join("tables.list.lock");
    notes.intend(std::slice::from_ref(&list_lock));
    let lock = match Stack::lock(dir, timeout) {
        Ok(lock) => lock,
        Err(err) => {
            notes.forget();
            return Err(err.into());
        }
    };
    notes.note(std::slice::from_ref(&list_lock));
    crate::kill_point("push-refs-locked");
    let committed = (|| {
        let current = lock.stack().refs()?;
        let find = |name: &str| {
            current.binary_search_by(|r| r.name.as_bstr().cmp(name.as_bytes().as_bstr())).ok().map(|at| &current[at])
        };
        let value_of = |name: &str| {
            find(name).and_then(|r| match r.value {
                RefValue::Val1(id) | RefValue::Val2 { value: id, .. } => Some(id),
                _ => None,
            })
        };
        for edit in edits {
            match (edit.old.is_null(), value_of(edit.name)) {
                (true, Some(_)) => return Err(TransactionError::Exists { name: edit.name.into() }),
                (false, Some(id)) if id == edit.old => {}
                (false, _) => return Err(TransactionError::Stale { name: edit.name.into() }),
                (true, None) => {}
            }
            if !edit.new.is_null()
                && let Some(existing) = conflicting(edit.name, current.iter().map(|r| r.name.to_str_lossy()))
            {
                return Err(TransactionError::DirectoryFile { name: edit.name.into(), existing });
            }
        }
        let logs = reflog_records(repo, lock.stack(), edits, log)?;
        lock.commit(records, logs, options)?;
        Ok(())
    })();
    notes.forget();
    committed?;
    if config.boolean("reftable.autoCompaction").unwrap_or(true) {
        // Compaction locks tables.list and each table it merges: noted as the transaction's were.
        let stack = Stack::open(dir)?;
        let mut locks = vec![list_lock];
        locks.extend(stack.names().iter().map(|name| dir.join(format!("{name}.lock"))));
        notes.intend(&locks);
        let compacted = Stack::auto_compact(dir, options, timeout);
        notes.forget();
        if let Err(err) = compacted {
            // The transaction stands; a table too many is git's to compact next time.
            tracing::warn!(%err, dir = %dir.display(), "reftable auto-compaction failed");
        }
    }
    Ok(())
}

/// An existing ref that `name` cannot live beside: `refs/heads/a` blocks `refs/heads/a/b` and the
/// other way round.
pub fn conflicting<S: AsRef<str>>(name: &str, existing: impl IntoIterator<Item = S>) -> Option<String> {
    existing
        .into_iter()
        .find(|other| {
            let other = other.as_ref();
            other != name && (name.starts_with(&format!("{other}/")) || other.starts_with(&format!("{name}/")))
        })
        .map(|other| other.as_ref().to_owned())
}

/// The reflog records of a transaction: one per edit when `core.logAllRefUpdates` is `true` or
/// `always` (git's default outside bare repositories), else only for refs that have a reflog.
fn reflog_records(
    repo: &gix::Repository,
    stack: &Stack,
    edits: &[Edit<'_>],
    log: &LogEntry<'_>,
) -> Result<Vec<gix_reftable::LogRecord>, TransactionError> {
    let config = repo.config_snapshot();
    let setting = config.string("core.logAllRefUpdates").map(|v| v.to_ascii_lowercase());
    let all = match setting.as_deref() {
        Some(b"always") => true,
        Some(other) => matches!(other, b"true" | b"yes" | b"on" | b"1" | b""),
        None => !repo.is_bare(),
    };
    let with_logs: std::collections::HashSet<BString> =
        if all { Default::default() } else { stack.logs()?.into_iter().map(|l| l.name).collect() };
    let now = gix::date::Time::now_local_or_utc();
    let message = if log.message.ends_with('\n') { log.message.to_owned() } else { format!("{}\n", log.message) };
    let null = ObjectId::null(repo.object_hash());
    Ok(edits
        .iter()
        .filter(|e| all || with_logs.contains(e.name.as_bytes().as_bstr()))
        .map(|e| gix_reftable::LogRecord {
            name: e.name.into(),
            update_index: 0,
            update: Some(gix_reftable::LogUpdate {
                old_id: if e.old.is_null() { null } else { e.old },
                new_id: if e.new.is_null() { null } else { e.new },
                name: log.name.into(),
                email: log.email.into(),
                time: now.seconds.max(0) as u64,
                tz_offset: (now.offset / 60) as i16,
                message: message.clone().into(),
            }),
        })
        .collect())
}
