//! Whether one ref update may be applied: its name, its kind of object, the repository's
//! `receive.*` rules, and that the new tip is connected to what the repository holds.

use std::collections::HashSet;

use gix_hash::ObjectId;
use gix_object::{Find, Kind};

use super::*;
use crate::repo::RefSnapshot;

/// Why one command cannot be applied, if it cannot.
#[allow(
    clippy::too_many_arguments,
    reason = "one command against the push's whole state; each argument is a different part of it"
)]
pub(super) fn check_command(
    repo: &gix::Repository,
    received: &gix_odb::Handle,
    refs: &RefSnapshot,
    all_refs: &RefSnapshot,
    rules: &Rules,
    head_target: Option<&str>,
    command: &RefUpdate,
    known: &mut Connectivity,
) -> Result<(), Refusal> {
    let name = command.name.as_str();
    let full: Result<gix::refs::FullName, _> = name.try_into();
    if !name.starts_with("refs/") || full.is_err() {
        return Err(Refusal::FunnyRefname);
    }
    if command.old.is_null() && command.new.is_null() {
        return Err(Refusal::NothingToDo);
    }
    let visible = refs.refs.iter().any(|r| r.name == name.as_bytes());
    if !visible && all_refs.refs.iter().any(|r| r.name == name.as_bytes()) {
        return Err(Refusal::HiddenRef);
    }
    let is_branch = name.starts_with("refs/heads/");
    if command.is_delete() {
        if rules.deny_deletes && is_branch {
            return Err(Refusal::DeletionProhibited);
        }
        if rules.deny_delete_current && head_target == Some(name) {
            return Err(Refusal::DeleteCurrent);
        }
        return Ok(());
    }
    if rules.deny_current_branch && head_target == Some(name) {
        return Err(Refusal::CurrentBranch);
    }
    let kind = object_kind(repo, received, &command.new).ok_or(Refusal::MissingObjects)?;
    if is_branch && kind != Kind::Commit {
        return Err(Refusal::NonCommitToBranch);
    }
    connected(repo, received, command.new, known)?;
    if rules.deny_non_fast_forwards
        && is_branch
        && !command.old.is_null()
        && !is_ancestor(repo, received, command.old, command.new)?
    {
        return Err(Refusal::NonFastForward);
    }
    Ok(())
}

pub(super) fn object_kind(repo: &gix::Repository, received: &gix_odb::Handle, id: &ObjectId) -> Option<Kind> {
    use gix_object::FindHeader;
    if let Ok(Some(h)) = received.try_header(id) {
        return Some(h.kind);
    }
    crate::repo::header(repo, &mut None, *id).map(|h| h.kind())
}

/// `repo` has `id`, looked up once more through a fresh snapshot of its packs (made once per
/// check, in `fresh`) when its handle does not find it: gix-odb misses an object now and then
/// while a repack swaps packs under a handle's snapshot, and a push refused for that would be
/// refused for nothing.
pub(super) fn has_object(repo: &gix::Repository, fresh: &mut Option<gix::Repository>, id: ObjectId) -> bool {
    repo.has_object(id) || fresh.get_or_insert_with(|| crate::repo::reopened(repo)).has_object(id)
}

/// What the connectivity checks of one push share. `complete`: objects a successful walk
/// proved complete (each is in the repository, or received with everything it reaches), so a
/// push of many refs into one history (`git push --mirror` of 470 refs) walks each received
/// object once, not once per ref. `quick`: the repository through a handle that never rescans
/// its pack directory when it misses an object — every received object is a miss there, and
/// gix-odb's default rescans the directory (and resolves alternates) on each; its miss only
/// means the object is walked from the quarantine, never that it counts as present.
/// `received_complete`: the object check found every object a received one refers to present,
/// so every received object is complete and a present tip needs no walk.
pub(super) struct Connectivity {
    pub(super) complete: HashSet<ObjectId>,
    pub(super) quick: gix::Repository,
    pub(super) received_complete: bool,
}

impl Connectivity {
    pub(super) fn new(repo: &gix::Repository) -> Connectivity {
        let mut quick = repo.clone();
        quick.objects.refresh_never();
        Connectivity { complete: HashSet::new(), quick, received_complete: false }
    }
}

/// Every object the new tip needs is in the quarantine or the repository. Objects the
/// repository already has are taken as complete (as git's quick check does), so the walk covers
/// only what was received, and only what no earlier command of the push walked.
pub(super) fn connected(
    repo: &gix::Repository,
    received: &gix_odb::Handle,
    tip: ObjectId,
    known: &mut Connectivity,
) -> Result<(), Refusal> {
    use gix_object::FindHeader;
    if known.received_complete {
        let present = matches!(received.try_header(&tip), Ok(Some(_)))
            || known.quick.has_object(tip)
            || has_object(repo, &mut None, tip);
        return if present { Ok(()) } else { Err(Refusal::MissingObjects) };
    }
    let mut buf = Vec::new();
    let mut seen = HashSet::new();
    let mut stack = vec![(tip, Kind::Commit)];
    let mut fresh = None;
    while let Some((id, _)) = stack.pop() {
        if known.complete.contains(&id) || !seen.insert(id) {
            continue;
        }
        let header = match received.try_header(&id) {
            Ok(Some(header)) => Some(header),
            _ => None,
        };
        if header.is_none() || known.quick.has_object(id) {
            if has_object(repo, &mut fresh, id) {
                continue;
            }
            return Err(Refusal::MissingObjects);
        }
        if header.is_some_and(|header| header.kind == Kind::Blob) {
            continue; // present, and nothing below it: not inflated
        }
        let data = received
            .try_find(&id, &mut buf)
            .map_err(|e| Refusal::Check(e.to_string()))?
            .ok_or(Refusal::MissingObjects)?;
        crate::graph::push_children(id, data.kind, data.data, &mut stack).map_err(|e| Refusal::Check(e.to_string()))?;
    }
    known.complete.extend(seen);
    Ok(())
}

/// Is `old` an ancestor of (or equal to) `new`? Parents are read from the quarantine or the
/// repository.
pub(super) fn is_ancestor(
    repo: &gix::Repository,
    received: &gix_odb::Handle,
    old: ObjectId,
    new: ObjectId,
) -> Result<bool, Refusal> {
    let mut buf = Vec::new();
    let mut seen = HashSet::new();
    let mut stack = vec![new];
    while let Some(id) = stack.pop() {
        if id == old {
            return Ok(true);
        }
        if !seen.insert(id) {
            continue;
        }
        let parents: Vec<ObjectId> = match received.try_find(&id, &mut buf) {
            Ok(Some(data)) if data.kind == Kind::Commit => {
                gix_object::CommitRefIter::from_bytes(data.data, id.kind()).parent_ids().collect()
            }
            _ => match repo.find_commit(id) {
                Ok(commit) => commit.parent_ids().map(|p| p.detach()).collect(),
                Err(_) => continue,
            },
        };
        stack.extend(parents);
    }
    Ok(false)
}
