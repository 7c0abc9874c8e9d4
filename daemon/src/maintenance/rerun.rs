//! A maintenance run that failed while another process changed the pack files under it — stock
//! git's `gc --auto` after a push, its `repack -d` deleting a pack this run had listed and not yet
//! opened ("Could not open pack index file") — is run again on the packs as they are now. One
//! that fails with the packs unchanged is a failure of its own and is returned as it is.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::Path;

use super::MaintenanceError;

/// Runs of one maintenance at most, the first included.
const ATTEMPTS: usize = 3;

/// The names of the files in `pack_dir` (packs, their indexes, a MIDX).
fn pack_files(pack_dir: &Path) -> BTreeSet<OsString> {
    std::fs::read_dir(pack_dir).map(|dir| dir.flatten().map(|e| e.file_name()).collect()).unwrap_or_default()
}

/// `attempt`, again while it fails and the files of `pack_dir` changed during the failed run
/// ([`ATTEMPTS`] runs at most). A run that cannot take the lock ([`MaintenanceError::Busy`]) is
/// not run again: the other run does the work.
pub(super) fn while_packs_change<T>(
    pack_dir: &Path,
    mut attempt: impl FnMut() -> Result<T, MaintenanceError>,
) -> Result<T, MaintenanceError> {
    for _ in 1..ATTEMPTS {
        let before = pack_files(pack_dir);
        match attempt() {
            Err(err) if !matches!(err, MaintenanceError::Busy) && pack_files(pack_dir) != before => {
                tracing::info!(%err, dir = %pack_dir.display(), "the packs changed under maintenance: running it again");
            }
            done => return done,
        }
    }
    attempt()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed() -> MaintenanceError {
        MaintenanceError::Io(std::io::Error::other("Could not open pack index file"))
    }

    #[test]
    fn a_run_that_failed_while_the_packs_changed_runs_again_and_one_with_the_packs_unchanged_does_not() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("pack-1.idx"), b"").unwrap();
        let mut runs = 0;
        let done = while_packs_change(dir.path(), || {
            runs += 1;
            if runs == 1 {
                // Another process repacks during the first run.
                std::fs::remove_file(dir.path().join("pack-1.idx")).unwrap();
                std::fs::write(dir.path().join("pack-2.idx"), b"").unwrap();
                return Err(failed());
            }
            Ok(runs)
        });
        assert_eq!(done.unwrap(), 2, "run again on the new packs");

        let mut runs = 0;
        let done: Result<(), _> = while_packs_change(dir.path(), || {
            runs += 1;
            Err(failed())
        });
        assert!(done.is_err());
        assert_eq!(runs, 1, "the packs did not change: its own failure");

        let mut runs = 0;
        let done: Result<(), _> = while_packs_change(dir.path(), || {
            runs += 1;
            std::fs::write(dir.path().join(format!("pack-x{runs}.idx")), b"").unwrap();
            Err(failed())
        });
        assert!(done.is_err());
        assert_eq!(runs, ATTEMPTS, "not forever while they keep changing");
    }
}
