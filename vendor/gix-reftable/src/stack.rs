//! `reftable/tables.list` and the tables it names: the merged view, appending a table under
//! `tables.list.lock`, and git's geometric auto-compaction.

use std::{
    hash::{BuildHasher, Hasher},
    io::Write,
    ops::Range,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use bstr::BStr;

use crate::{Error, LogRecord, Options, RefRecord, RefValue, Table, table, write_table};

/// The tables `tables.list` names, oldest first, read at one moment.
#[derive(Debug, Clone)]
pub struct Stack {
    dir: PathBuf,
    names: Vec<String>,
    tables: Vec<Table>,
}

/// How many times `tables.list` is read again when a table it names vanished meanwhile (a
/// compaction replaced it).
const READ_TRIES: usize = 16;

impl Stack {
    /// Read `dir/tables.list` and every table it names (none when it does not exist). A table
    /// that vanished between the two reads means a compaction replaced it: read again.
    pub fn open(dir: &Path) -> Result<Stack, Error> {
        for _ in 0..READ_TRIES {
            let list = dir.join("tables.list");
            let text = match std::fs::read(&list) {
                Ok(text) => text,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(err) => return Err(Error::io(list, err)),
            };
            let names: Vec<String> = text
                .split(|b| *b == b'\n')
                .filter(|line| !line.is_empty())
                .map(|line| String::from_utf8_lossy(line).into_owned())
                .collect();
            let mut tables = Vec::with_capacity(names.len());
            let mut vanished = false;
            for name in &names {
                if name.contains('/') || name.starts_with('.') {
                    return Err(Error::Table { name: name.clone(), problem: "not a table name".into() });
                }
                match Table::open(&dir.join(name)) {
                    Ok(t) => tables.push(t),
                    Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                        vanished = true;
                        break;
                    }
                    Err(err) => return Err(err),
                }
            }
            if !vanished {
                let hashes: Vec<_> = tables.iter().map(Table::object_hash).collect();
                if hashes.windows(2).any(|w| w[0] != w[1]) {
                    return Err(Error::Format("tables of two hash kinds in one stack".into()));
                }
                return Ok(Stack { dir: dir.to_owned(), names, tables });
            }
        }
        Err(Error::Unstable(READ_TRIES))
    }

    /// The table names, oldest first, as `tables.list` lists them.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    pub fn tables(&self) -> &[Table] {
        &self.tables
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The update index the next transaction gets.
    pub fn next_update_index(&self) -> u64 {
        self.tables.last().map_or(1, |t| t.max_update_index() + 1)
    }

    /// Every ref the stack holds (the newest table's record of each name), sorted by name;
    /// deleted refs left out.
    pub fn refs(&self) -> Result<Vec<RefRecord>, Error> {
        merged_refs(&self.tables, true)
    }

    /// The newest record of `name`, `None` when it does not exist (or was deleted).
    pub fn find(&self, name: &BStr) -> Result<Option<RefRecord>, Error> {
        for table in self.tables.iter().rev() {
            if let Some(r) = table.refs()?.into_iter().find(|r| r.name == name) {
                return Ok((r.value != RefValue::Deletion).then_some(r));
            }
        }
        Ok(None)
    }

    /// Every log record of every table, newest table's record of each key, in key order (by
    /// name, newest entry first); deletion records left out with what they delete.
    pub fn logs(&self) -> Result<Vec<LogRecord>, Error> {
        merged_logs(&self.tables, true)
    }

    /// Take `tables.list.lock`, waiting up to `timeout` for another writer, and read the stack
    /// as it is under the lock.
    pub fn lock(dir: &Path, timeout: Duration) -> Result<Lock, Error> {
        let path = dir.join("tables.list.lock");
        let file = create_lock(&path, timeout)?;
        let mut lock = Lock { path, file: Some(file), stack: None };
        lock.stack = Some(Stack::open(dir)?);
        Ok(lock)
    }

    /// Restore git's geometric sequence of table sizes (each table at least twice the size of
    /// the ones after it together) by compacting the segment [`suggest_compaction_segment`]
    /// names. `Ok(false)`: nothing to do, or another process holds a lock it needs.
    pub fn auto_compact(dir: &Path, options: Options, timeout: Duration) -> Result<bool, Error> {
        let lock = match Stack::lock(dir, timeout) {
            Ok(lock) => lock,
            Err(Error::Locked(_)) => return Ok(false),
            Err(err) => return Err(err),
        };
        let stack = lock.stack().clone();
        let sizes: Vec<u64> = stack.tables.iter().map(|t| (t.len() as u64).saturating_sub(overhead(t))).collect();
        let Some(segment) = suggest_compaction_segment(&sizes, 2) else { return Ok(false) };
        lock.compact(segment, options, timeout)
    }
}

impl Stack {
    /// Compact every table into one (git's `pack-refs` on a reftable repository), deletion
    /// records dropped. `Ok(false)`: one table or none already, or another process holds a lock.
    pub fn compact_all(dir: &Path, options: Options, timeout: Duration) -> Result<bool, Error> {
        let lock = match Stack::lock(dir, timeout) {
            Ok(lock) => lock,
            Err(Error::Locked(_)) => return Ok(false),
            Err(err) => return Err(err),
        };
        let n = lock.stack().tables.len();
        if n < 2 {
            return Ok(false);
        }
        lock.compact(0..n, options, timeout)
    }
}

/// What a table costs before any record (header and footer), left out of its size for the
/// geometric rule as git does.
fn overhead(t: &Table) -> u64 {
    let version = if t.object_hash() == gix_hash::Kind::Sha1 { 1 } else { 2 };
    (table::header_len(version) + table::footer_len(version)) as u64
}

/// The refs of `tables` merged: the newest table's record of each name; deletions dropped
/// with `drop_deletions` (else kept, to hide older tables' values).
fn merged_refs(tables: &[Table], drop_deletions: bool) -> Result<Vec<RefRecord>, Error> {
    let mut refs = if tables.len() == 1 {
        tables[0].refs()?
    } else {
        let mut all: Vec<(usize, RefRecord)> = Vec::new();
        for (i, table) in tables.iter().enumerate() {
            all.extend(table.refs()?.into_iter().map(|r| (i, r)));
        }
        all.sort_by(|a, b| a.1.name.cmp(&b.1.name).then(b.0.cmp(&a.0)));
        all.dedup_by(|later, earlier| later.1.name == earlier.1.name);
        all.into_iter().map(|(_, r)| r).collect()
    };
    if drop_deletions {
        refs.retain(|r| r.value != RefValue::Deletion);
    }
    Ok(refs)
}

/// The log records of `tables` merged: the newest table's record of each key, in key order;
/// deletion records dropped with `drop_deletions` (else kept, to hide older tables' entries).
fn merged_logs(tables: &[Table], drop_deletions: bool) -> Result<Vec<LogRecord>, Error> {
    let mut all: Vec<(Vec<u8>, usize, LogRecord)> = Vec::new();
    for (i, table) in tables.iter().enumerate() {
        all.extend(table.logs()?.into_iter().map(|l| (l.key(), i, l)));
    }
    all.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    all.dedup_by(|later, earlier| later.0 == earlier.0);
    Ok(all.into_iter().map(|(_, _, l)| l).filter(|l| !drop_deletions || l.update.is_some()).collect())
}

/// git's `suggest_compaction_segment`: walking from the newest table, the segment ends at the
/// first table whose predecessor is less than `factor` times its size, and starts at the oldest
/// table smaller than `factor` times what the segment holds after it. `None` when the sizes are
/// a geometric sequence already.
pub fn suggest_compaction_segment(sizes: &[u64], factor: u64) -> Option<Range<usize>> {
    let n = sizes.len();
    if n < 2 {
        return None;
    }
    let mut i = n - 1;
    let mut end = None;
    let mut bytes = 0u64;
    while i > 0 {
        if sizes[i - 1] < sizes[i].saturating_mul(factor) {
            end = Some(i + 1);
            bytes = sizes[i];
            break;
        }
        i -= 1;
    }
    let end = end?;
    let mut start = None;
    while i > 0 {
        let current = bytes;
        bytes = bytes.saturating_add(sizes[i - 1]);
        if sizes[i - 1] < current.saturating_mul(factor) {
            start = Some(i - 1);
        }
        i -= 1;
    }
    let start = start?;
    (end - start >= 2).then_some(start..end)
}

/// `tables.list.lock`, held: the stack as read under it, and the transaction that appends a
/// table. Dropped without committing, the lock file is removed.
#[derive(Debug)]
pub struct Lock {
    path: PathBuf,
    file: Option<std::fs::File>,
    stack: Option<Stack>,
}

impl Lock {
    /// The stack as it was when the lock was taken: compare-and-swap checks read it.
    pub fn stack(&self) -> &Stack {
        self.stack.as_ref().expect("read when locked")
    }

    /// Append one table holding `refs` (sorted by name) and `logs`, all at the next update
    /// index (their own update indices are set here), and replace `tables.list`; the lock is
    /// released. The new stack.
    pub fn commit(
        mut self,
        mut refs: Vec<RefRecord>,
        mut logs: Vec<LogRecord>,
        options: Options,
    ) -> Result<Stack, Error> {
        let stack = self.stack.take().expect("read when locked");
        let index = stack.next_update_index();
        for r in &mut refs {
            r.update_index = index;
        }
        for l in &mut logs {
            l.update_index = index;
        }
        let data = write_table(options, index, index, &refs, &logs)?;
        let name = write_table_file(&stack.dir, index, index, &data)?;
        let mut names = stack.names.clone();
        names.push(name);
        self.replace_list(&names)?;
        Stack::open(&stack.dir)
    }

    /// Merge the tables of `segment` into one (deletions dropped when it starts at the base) as
    /// git does, so that writers wait for `tables.list.lock` only while the list is replaced:
    /// each table's `<name>.lock` taken, the list lock released, the merged table written, the
    /// list lock taken again, the segment found where it was (writers only append meanwhile,
    /// and other compactions cannot take these tables) and replaced by the new table.
    /// `Ok(false)` when another process holds a lock it needs.
    fn compact(mut self, segment: Range<usize>, options: Options, timeout: Duration) -> Result<bool, Error> {
        let stack = self.stack.take().expect("read when locked");
        let mut table_locks = Vec::new();
        for name in &stack.names[segment.clone()] {
            let path = stack.dir.join(format!("{name}.lock"));
            match create_lock(&path, Duration::ZERO) {
                Ok(_) => table_locks.push(LockFile(path)),
                Err(Error::Locked(_)) => return Ok(false),
                Err(err) => return Err(err),
            }
        }
        drop(self);
        let tables = &stack.tables[segment.clone()];
        let refs = merged_refs(tables, segment.start == 0)?;
        let logs = merged_logs(tables, segment.start == 0)?;
        let (min, max) = (tables[0].min_update_index(), tables[tables.len() - 1].max_update_index());
        let data = write_table(options, min, max, &refs, &logs)?;
        let name = write_table_file(&stack.dir, min, max, &data)?;
        let new_path = stack.dir.join(&name);
        let discard = |err: Error| {
            let _ = std::fs::remove_file(&new_path);
            err
        };
        let mut relocked = match Stack::lock(&stack.dir, timeout) {
            Ok(lock) => lock,
            Err(Error::Locked(_)) => {
                let _ = std::fs::remove_file(&new_path);
                return Ok(false);
            }
            Err(err) => return Err(discard(err)),
        };
        let old = &stack.names[segment];
        let current = relocked.stack().names.clone();
        let Some(at) = current.windows(old.len()).position(|w| w == old) else {
            let _ = std::fs::remove_file(&new_path);
            return Ok(false);
        };
        let mut names = current[..at].to_vec();
        names.push(name);
        names.extend_from_slice(&current[at + old.len()..]);
        relocked.stack = None;
        relocked.replace_list(&names).map_err(discard)?;
        for table in old {
            let _ = std::fs::remove_file(stack.dir.join(table));
        }
        drop(table_locks);
        Ok(true)
    }

    /// Write `names` into the lock file and rename it over `tables.list`.
    fn replace_list(&mut self, names: &[String]) -> Result<(), Error> {
        let mut file = self.file.take().expect("held");
        let mut text = String::new();
        for name in names {
            text.push_str(name);
            text.push('\n');
        }
        file.write_all(text.as_bytes()).and_then(|_| file.sync_all()).map_err(|err| Error::io(&self.path, err))?;
        let list = self.path.with_file_name("tables.list");
        std::fs::rename(&self.path, &list).map_err(|err| Error::io(list, err))
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if self.file.is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A lock file removed when dropped.
struct LockFile(PathBuf);

impl Drop for LockFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Create `path` exclusively, retrying with backoff for up to `timeout`.
fn create_lock(path: &Path, timeout: Duration) -> Result<std::fs::File, Error> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        match std::fs::OpenOptions::new().write(true).create_new(true).open(path) {
            Ok(file) => return Ok(file),
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
                if start.elapsed() >= timeout {
                    return Err(Error::Locked(path.to_owned()));
                }
                std::thread::sleep(pause.min(timeout.saturating_sub(start.elapsed())));
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            Err(err) => return Err(Error::io(path, err)),
        }
    }
}

/// Write `data` as a new table of `dir` named as git names them
/// (`0x<min>-0x<max>-<random>.ref`), durably, through a temporary file; its name.
fn write_table_file(dir: &Path, min: u64, max: u64, data: &[u8]) -> Result<String, Error> {
    let random = {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
        h.write_u32(std::process::id());
        h.finish() as u32
    };
    let name = format!("0x{min:012x}-0x{max:012x}-{random:08x}.ref");
    let tmp = dir.join(format!("tmp_{name}"));
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        file.write_all(data)?;
        file.sync_all()
    };
    if let Err(err) = write() {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io(tmp, err));
    }
    let path = dir.join(&name);
    std::fs::rename(&tmp, &path).map_err(|err| Error::io(path, err))?;
    Ok(name)
}
