//! A value of one type per repository, kept with the state it was computed from (a fingerprint of
//! the files or refs it depends on) and replaced when that state changes. Each layer that computes
//! something per repository owns the cell of its type — the pack bitmap's in [`crate::bitmap`],
//! the pack files' in [`crate::packs`], the readable set's in [`crate::select`], the ref snapshot
//! and the decoded commits in [`super::Repos`] — so a cache is found by its type, never by a name.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::Served;

/// One cache: a value of `T` per repository (by git directory) and the state it is valid for.
pub struct PerRepository<T> {
    entries: Mutex<HashMap<PathBuf, (u64, Arc<T>)>>,
    /// Held per repository while its value is computed: requests that miss together wait for
    /// the one computing (a burst of clones of a repository opened its bitmap once per
    /// generating slot, each copy a whole bitmap's tables) and take its value.
    computing: Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>,
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
        self.entries.lock().expect("not poisoned").insert(served.git_dir.clone(), (state, value.clone()));
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
        let entries = self.entries.lock().expect("not poisoned");
        entries.get(&served.git_dir).filter(|(kept, _)| *kept == state).map(|(_, value)| value.clone())
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
}
