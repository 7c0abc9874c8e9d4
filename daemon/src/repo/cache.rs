//! A value of one type per repository, kept with the state it was computed from (a fingerprint of
//! the files or refs it depends on) and replaced when that state changes. Each layer that computes
//! something per repository owns the cell of its type — the pack bitmap's in [`crate::bitmap`],
//! the pack files' in [`crate::packs`], the readable set's in [`crate::select`], the ref snapshot
//! and the decoded commits in [`super::Repos`] — so a cache is found by its type, never by a name.
//!
//! A value no request has used for `Config::cache_idle` is dropped ([`PerRepository::forget_unused`],
//! called by the server's clock): kept for the process's life, every repository ever served held
//! its decoded commits, bitmap and ref snapshot, and an idle gixd grew from 1 to 22 MiB after
//! one clone each of three repositories of 300 000–420 000 objects.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::Served;

/// One cache: a value of `T` per repository (by git directory) and the state it is valid for.
pub struct PerRepository<T> {
    entries: Mutex<HashMap<PathBuf, Entry<T>>>,
    /// Held per repository while its value is computed: requests that miss together wait for
    /// the one computing (a burst of clones of a repository opened its bitmap once per
    /// generating slot, each copy a whole bitmap's tables) and take its value.
    computing: Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>,
}

/// What [`PerRepository::forget_unused`] did: values dropped, values kept.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    pub forgotten: usize,
    pub kept: usize,
}

impl std::ops::Add for Swept {
    type Output = Swept;
    fn add(self, other: Swept) -> Swept {
        Swept { forgotten: self.forgotten + other.forgotten, kept: self.kept + other.kept }
    }
}

/// A kept value: the state it was computed from, and when a request last used it.
struct Entry<T> {
    state: u64,
    value: Arc<T>,
    used: Instant,
}

impl<T> Default for PerRepository<T> {
    fn default() -> Self {
        PerRepository { entries: Mutex::new(HashMap::new()), computing: Mutex::new(HashMap::new()) }
    }
}

impl<T> PerRepository<T> {
    /// The value for `served` computed from `state`: the kept one if it was computed from the same
    /// state, else `compute`'s (kept for next time; a failure is not kept).
    pub fn get_or_compute<E>(
        &self,
        served: &Served,
        state: u64,
        compute: impl FnOnce() -> Result<T, E>,
    ) -> Result<Arc<T>, E> {
        if let Some(value) = self.get(served, state) {
            return Ok(value);
        }
        let turn = self.computing.lock().expect("not poisoned").entry(served.git_dir.clone()).or_default().clone();
        let _turn = turn.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // Computed by another request while this one waited its turn.
        if let Some(value) = self.get(served, state) {
            return Ok(value);
        }
        let value = Arc::new(compute()?);
        let entry = Entry { state, value: value.clone(), used: Instant::now() };
        self.entries.lock().expect("not poisoned").insert(served.git_dir.clone(), entry);
        Ok(value)
    }

    /// As [`Self::get_or_compute`] for a computation that cannot fail.
    pub fn get_or_insert_with(&self, served: &Served, state: u64, compute: impl FnOnce() -> T) -> Arc<T> {
        match self.get_or_compute(served, state, || Ok::<_, std::convert::Infallible>(compute())) {
            Ok(value) => value,
            Err(never) => match never {},
        }
    }

    /// The kept value for `served` if it was computed from `state`; never computes.
    pub fn get(&self, served: &Served, state: u64) -> Option<Arc<T>> {
        let mut entries = self.entries.lock().expect("not poisoned");
        let entry = entries.get_mut(&served.git_dir).filter(|entry| entry.state == state)?;
        entry.used = Instant::now();
        Some(entry.value.clone())
    }

    /// Drop every value no request has used since `cutoff` and none holds now (a value a long
    /// transfer still holds stays: dropping it here would free nothing); say how many went and
    /// how many stay.
    pub fn forget_unused(&self, cutoff: Instant) -> Swept {
        let mut entries = self.entries.lock().expect("not poisoned");
        let before = entries.len();
        entries.retain(|_, entry| entry.used >= cutoff || Arc::strong_count(&entry.value) > 1);
        let swept = Swept { forgotten: before - entries.len(), kept: entries.len() };
        // The turns of repositories whose values went (no request is computing: it would hold it).
        let mut computing = self.computing.lock().expect("not poisoned");
        computing.retain(|git_dir, turn| entries.contains_key(git_dir) || Arc::strong_count(turn) > 1);
        swept
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn requests_that_miss_together_compute_the_value_once() {
        let cache: PerRepository<usize> = PerRepository::default();
        let dir = tempfile::tempdir().unwrap();
        let repo = gix::init_bare(dir.path()).unwrap();
        let served = Served { name: "r".into(), git_dir: dir.path().to_owned(), repo: repo.into_sync() };
        let computed = AtomicUsize::new(0);
        let start = std::sync::Barrier::new(4);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    start.wait();
                    let value = cache.get_or_insert_with(&served, 7, || {
                        computed.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(100));
                        42
                    });
                    assert_eq!(*value, 42);
                });
            }
        });
        assert_eq!(computed.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_value_unused_since_the_cutoff_is_forgotten_unless_a_request_holds_it() {
        let cache: PerRepository<usize> = PerRepository::default();
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let served = |dir: &std::path::Path| Served {
            name: "r".into(),
            git_dir: dir.to_owned(),
            repo: gix::init_bare(dir).unwrap().into_sync(),
        };
        let (a, b) = (served(a.path()), served(b.path()));
        let held = cache.get_or_insert_with(&a, 1, || 1);
        cache.get_or_insert_with(&b, 1, || 2);
        let cutoff = Instant::now();
        let swept = cache.forget_unused(cutoff);
        assert_eq!(swept, Swept { forgotten: 1, kept: 1 }, "b is unused since the cutoff and nobody holds it");
        assert!(cache.get(&b, 1).is_none());
        assert!(cache.get(&a, 1).is_some(), "a is held by a request");
        drop(held);
        assert_eq!(cache.forget_unused(cutoff).forgotten, 0, "a was used after the cutoff (by the get above)");
        assert_eq!(cache.forget_unused(Instant::now()), Swept { forgotten: 1, kept: 0 });
        assert!(cache.get(&a, 1).is_none());
    }
}
