//! Maintenance as a service: pushes ask for it ([`asked_after_push`]), so does a fetch that finds
//! the refs moved since the server last served them (written by another: stock git's
//! receive-pack, a second server; `service::negotiation`), the clock asks for it
//! (`--maintenance-every`), and each run holds one transfer slot on a blocking thread, so it
//! costs at most one transfer's share of the CPU and waits its turn behind clones and pushes.
//! Asked, a repository gets what it is due ([`crate::maintenance::geometric::due`], which counts
//! every pack and loose object, whoever wrote them); asks for one repository within [`QUIET`] of
//! each other ask once.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use crate::maintenance::{self, geometric};
use crate::session::State;

/// How long a repository's pushes are let settle before its maintenance runs: a push of several
/// commits in a row, or a CI fleet's pushes to one repository, ask for one run.
pub const QUIET: std::time::Duration = std::time::Duration::from_secs(2);

/// Where pushes ask for maintenance: the sending side lives in the server's state.
pub fn channel() -> (UnboundedSender<PathBuf>, UnboundedReceiver<PathBuf>) {
    tokio::sync::mpsc::unbounded_channel()
}

/// A push into `git_dir` landed: ask for its maintenance (nothing if the server runs none).
pub fn asked_after_push(state: &State, git_dir: &Path) {
    if let Some(asks) = &state.maintenance {
        let _ = asks.send(git_dir.to_owned());
    }
}

/// Run what the repositories pushes asked for, each once [`QUIET`] after its last push, one at a
/// time, each under a transfer slot.
pub async fn after_pushes(state: Arc<State>, mut asks: UnboundedReceiver<PathBuf>) {
    let mut pending: HashSet<PathBuf> = HashSet::new();
    loop {
        let Some(first) = asks.recv().await else { return };
        pending.insert(first);
        let settled = tokio::time::sleep(QUIET);
        tokio::pin!(settled);
        loop {
            tokio::select! {
                more = asks.recv() => match more {
                    Some(git_dir) => { pending.insert(git_dir); }
                    None => return,
                },
                _ = &mut settled => break,
            }
        }
        for git_dir in pending.drain() {
            let Ok(permit) = state.transfers.clone().acquire_owned().await else { return };
            let state = state.clone();
            let _ = tokio::task::spawn_blocking(move || {
                let _permit = permit;
                due(&state, &git_dir);
            })
            .await;
        }
    }
}

/// The opt-in schedule: every `every`, each repository below the base path is repacked with a
/// bitmap (and a delta search), one after the other on a blocking thread (one transfer slot
/// while it runs).
pub async fn on_the_clock(state: Arc<State>, every: std::time::Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Ok(permit) = state.transfers.clone().acquire_owned().await else { return };
        let state = state.clone();
        let _ = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            for git_dir in crate::repo::repositories_below(state.repos.base(), 6) {
                counted(&state, &git_dir, "repacked", maintenance::run(&git_dir).map(Some));
            }
        })
        .await;
    }
}

/// Run what `git_dir` is due now, on this thread. A run leaves the packs it replaced for
/// [`geometric::GRACE`]: the repository is asked for again once that has passed, to remove them.
pub fn due(state: &State, git_dir: &Path) {
    maintenance::expire(git_dir, geometric::GRACE);
    let (done, result) = match geometric::due(git_dir) {
        geometric::Due::Nothing => return,
        geometric::Due::Geometric => ("geometric", geometric::run(git_dir)),
        geometric::Due::Full => ("repacked", maintenance::full(git_dir, maintenance::Bases::Keep).map(Some)),
    };
    if matches!(&result, Ok(Some(report)) if report.packs_removed > 0)
        && let (Some(asks), Ok(runtime)) = (state.maintenance.clone(), tokio::runtime::Handle::try_current())
    {
        let git_dir = git_dir.to_owned();
        runtime.spawn(async move {
            tokio::time::sleep(geometric::GRACE + std::time::Duration::from_secs(1)).await;
            let _ = asks.send(git_dir);
        });
    }
    counted(state, git_dir, done, result)
}

/// A run's outcome, in the metrics (`gixd_maintenance_runs_total{outcome}`) and the log.
fn counted(
    state: &State,
    git_dir: &Path,
    done: &str,
    result: Result<Option<maintenance::Report>, maintenance::MaintenanceError>,
) {
    match result {
        Ok(Some(report)) => {
            state.metrics.maintenance(done);
            tracing::info!(
                repo = %git_dir.display(),
                kind = done,
                objects = report.objects,
                packs_removed = report.packs_removed,
                bitmaps = report.bitmaps,
                deltas = report.deltas_computed,
                refs_packed = report.refs_packed,
                unreachable_kept = report.unreachable_kept,
                pruned = report.pruned,
                "maintenance"
            )
        }
        Ok(None) => {}
        Err(err @ maintenance::MaintenanceError::Repo(crate::error::RepoError::Unsupported { .. })) => {
            state.metrics.maintenance("skipped");
            tracing::debug!(repo = %git_dir.display(), %err, "maintenance skipped")
        }
        // Another run holds the repository's maintenance lock (a second replica, or `gixd
        // maintenance` by hand): it does the work.
        Err(err @ maintenance::MaintenanceError::Busy) => {
            state.metrics.maintenance("skipped");
            tracing::debug!(repo = %git_dir.display(), %err, "maintenance skipped")
        }
        Err(err) => {
            state.metrics.maintenance("failed");
            tracing::warn!(repo = %git_dir.display(), %err, "maintenance failed")
        }
    }
}
