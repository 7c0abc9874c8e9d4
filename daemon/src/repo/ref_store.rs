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

use super::refs::{Peel, StoredRef, stored_refs as files_refs};
use crate::error::ServeError;

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
    pub(super) fn stored(&self, repo: &gix::Repository) -> Result<(Vec<(BString, StoredRef)>, StoredHead), ServeError> {
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
                let mut refs = Vec::new();
                for r in Stack::open(dir)?.refs()? {
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
    pub fn hash_state(&self, h: &mut impl Hasher) -> Result<bool, ServeError> {
        match self {
            RefStore::Files => Ok(false),
            RefStore::Reftable(dir) => {
                let list = dir.join("tables.list");
                match std::fs::read(&list) {
                    Ok(text) => text.hash(h),
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => "no tables.list".hash(h),
                    Err(err) => return Err(ServeError::Io(err)),
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
