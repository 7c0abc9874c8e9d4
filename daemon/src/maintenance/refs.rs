//! Maintenance of the refs: loose refs packed into `packed-refs` as `git pack-refs --all`
//! does, and a reftable stack compacted into one table.

use std::path::Path;

use super::MaintenanceError;

/// Move every loose ref that names an object into packed-refs (with its peeled value) and
/// remove the loose file, as `git pack-refs --all --prune`: a repository that only takes pushes
/// keeps every pushed ref loose, and every ls-refs and fetch reads every loose ref to know the
/// refs' state (`repo::loose_refs_state`). Symbolic refs stay loose. One gix-ref transaction
/// with each ref's value as read as its expected value, under git's lock files (the ones a push
/// takes): packed-refs is written first, and only then is each loose file removed, under its
/// lock, so a reader finds the same value at every moment. A ref a push moves or locks meanwhile
/// fails the transaction, which then changes nothing; the refs stay loose until the next run.
///
/// Between taking the locks and committing, `scratch` notes them ([`crate::ref_locks`]): a run
/// killed there leaves them, and the next run, or the next gixd start, removes them.
pub(super) fn pack_refs(repo: &gix::Repository, scratch: &Path) -> Result<usize, MaintenanceError> {
    use gix::refs::Target;
    if let crate::repo::ref_store::RefStore::Reftable(dir) = crate::repo::ref_store::RefStore::of(repo) {
        return compact_reftable(repo, &dir, scratch);
    }
    use gix::refs::transaction::{Change, LogChange, PreviousValue, RefEdit, RefLog};
    let edits: Vec<RefEdit> = repo
        .refs
        .loose_iter()?
        .flatten()
        .filter_map(|reference| match reference.target {
            Target::Object(id) => Some(RefEdit {
                change: Change::Update {
                    // Old and new are the same value: gix-ref writes no reflog line for it.
                    log: LogChange {
                        mode: RefLog::AndReference,
                        force_create_reflog: false,
                        message: "pack-refs".into(),
                    },
                    expected: PreviousValue::MustExistAndMatch(Target::Object(id)),
                    new: Target::Object(id),
                },
                name: reference.name,
                deref: false,
            }),
            Target::Symbolic(_) => None,
        })
        .collect();
    if edits.is_empty() {
        return Ok(0);
    }
    let count = edits.len();
    let names: Vec<String> = edits.iter().map(|e| e.name.as_bstr().to_string()).collect();
    let packed = gix::refs::file::transaction::PackedRefs::DeletionsAndNonSymbolicUpdatesRemoveLooseSourceReference(
        Box::new(repo.objects.clone()),
    );
    let fail = gix::lock::acquire::Fail::Immediately;
    crate::ref_locks::intend(scratch, &crate::ref_locks::held_for(repo, &names, true));
    let result = repo.refs.transaction().packed_refs(packed).prepare(edits, fail, fail).and_then(|locked| {
        crate::ref_locks::note(scratch, &crate::ref_locks::held_for(repo, &names, true));
        crate::kill_point("maintenance-refs-locked");
        locked.commit(None)
    });
    crate::ref_locks::forget(scratch);
    match result {
        Ok(_) => Ok(count),
        Err(err) => {
            tracing::info!(repo = %repo.git_dir().display(), %err, "loose refs left loose: a ref changed or was locked while they were packed");
            Ok(0)
        }
    }
}

/// A reftable repository's `pack-refs`: every table compacted into one, its locks noted in
/// `scratch` meanwhile as loose refs' are; 1 when it compacted (a busy stack is left as it is).
fn compact_reftable(repo: &gix::Repository, dir: &Path, scratch: &Path) -> Result<usize, MaintenanceError> {
    let stack = gix_reftable::Stack::open(dir).map_err(crate::repo::RefsError::from)?;
    let mut locks = vec![dir.join("tables.list.lock")];
    locks.extend(stack.names().iter().map(|name| dir.join(format!("{name}.lock"))));
    crate::ref_locks::intend(scratch, &locks);
    let options = gix_reftable::Options::new(repo.object_hash());
    let compacted = gix_reftable::Stack::compact_all(dir, options, std::time::Duration::from_millis(100));
    crate::ref_locks::forget(scratch);
    Ok(usize::from(compacted.map_err(crate::repo::RefsError::from)?))
}
