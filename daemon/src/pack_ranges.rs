//! Repository access, a pack file's bytes as ranges: a pack's data mapped from a descriptor that
//! stays open beside the map, and known by its address, so that a slice of it written anywhere
//! above (the pack writer, the side-band framing, the transfer buffers) is recognised as a range
//! of that file ([`Range::of`]) and kept and sent as one — by `sendfile(2)` from the descriptor,
//! or as the mapped pages — instead of being copied. The map and the descriptor were taken
//! together when the pack was opened and live as long as any range of them: a repack that
//! renames or deletes the file meanwhile changes nothing for a response already chosen (the
//! file's disk space is held until the last range is dropped).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, Weak};

/// A pack's data as gix-pack reads it, mapped through [`Map`].
pub type PackData = gix_pack::data::File<Map>;

/// Where registered maps lie: start address → (length, the map).
static REGISTERED: RwLock<BTreeMap<usize, (usize, Weak<Mapped>)>> = RwLock::new(BTreeMap::new());

struct Mapped {
    map: memmap2::Mmap,
    file: Arc<std::fs::File>,
}

impl Drop for Mapped {
    fn drop(&mut self) {
        REGISTERED.write().expect("not poisoned").remove(&(self.map.as_ptr() as usize));
    }
}

/// A pack file mapped read-only, its descriptor kept open and the map registered.
#[derive(Clone)]
pub struct Map(Arc<Mapped>);

impl std::ops::Deref for Map {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0.map
    }
}

impl Map {
    /// Map the file at `path` (opened once: the map and the descriptor are of the same file).
    pub fn open(path: &Path) -> io::Result<Map> {
        let file = std::fs::File::open(path)?;
        // SAFETY: git writes a pack file once, under a temporary name, and never writes into it
        // again (it renames and deletes); a private read-only map sees the bytes it was opened on.
        let map = unsafe { memmap2::MmapOptions::new().map_copy_read_only(&file)? };
        let mapped = Arc::new(Mapped { map, file: Arc::new(file) });
        if !mapped.map.is_empty() {
            REGISTERED
                .write()
                .expect("not poisoned")
                .insert(mapped.map.as_ptr() as usize, (mapped.map.len(), Arc::downgrade(&mapped)));
        }
        Ok(Map(mapped))
    }
}

/// Open the pack data file at `path` as gix-pack's [`gix_pack::data::File`] over a [`Map`].
pub fn open_data(path: &Path, hash: gix_hash::Kind) -> Result<PackData, String> {
    let map = Map::open(path).map_err(|e| format!("could not open pack data file at {}: {e}", path.display()))?;
    gix_pack::data::File::from_data(map, PathBuf::from(path), hash).map_err(|e| e.to_string())
}

/// The fewest bytes of a pack file kept as a range ([`Range::kept`]); shorter runs are copied.
pub const KEPT: usize = 4096;

/// A run of bytes of a mapped pack file, holding the map (and its descriptor) alive.
#[derive(Clone)]
pub struct Range {
    mapped: Arc<Mapped>,
    start: usize,
    len: usize,
}

impl std::fmt::Debug for Range {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Range({}..{})", self.start, self.start + self.len)
    }
}

impl Range {
    /// The range `bytes` are, when they lie wholly in a registered map (one still alive).
    pub fn of(bytes: &[u8]) -> Option<Range> {
        Range::at(bytes.as_ptr() as usize, bytes.len())
    }

    /// The range of `len` bytes at address `at`, when they lie wholly in a registered map still
    /// alive (the address alone: the bytes may be gone, in which case this is `None`).
    pub fn at(at: usize, len: usize) -> Option<Range> {
        if len == 0 {
            return None;
        }
        let registered = REGISTERED.read().expect("not poisoned");
        let (start, (map_len, mapped)) = registered.range(..=at).next_back()?;
        if at + len > start + map_len {
            return None;
        }
        let mapped = mapped.upgrade()?;
        Some(Range { mapped, start: at - start, len })
    }

    /// The range `bytes` are, when they are one worth keeping as a range rather than copying:
    /// at least [`KEPT`] bytes (a range costs a record where it is kept, and a system call where
    /// it is sent).
    pub fn kept(bytes: &[u8]) -> Option<Range> {
        if bytes.len() < KEPT { None } else { Range::of(bytes) }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `n` bytes of this range from `from` (both within it).
    pub fn sub(&self, from: usize, n: usize) -> Range {
        debug_assert!(from + n <= self.len);
        Range { mapped: self.mapped.clone(), start: self.start + from, len: n }
    }

    /// `next` continues this range in the same file, byte after byte.
    pub fn continued_by(&self, next: &Range) -> bool {
        Arc::ptr_eq(&self.mapped, &next.mapped) && self.start + self.len == next.start
    }

    /// Grow this range by `n` bytes (the caller checked [`Self::continued_by`]).
    pub fn extend(&mut self, n: usize) {
        self.len += n;
    }

    /// The file, and where in it this range starts (the map is of the whole file, from 0).
    pub fn file(&self) -> (&Arc<std::fs::File>, u64) {
        (&self.mapped.file, self.start as u64)
    }

    /// The bytes as a shared slice of the map (no copy).
    pub fn bytes(&self) -> bytes::Bytes {
        bytes::Bytes::from_owner(self.clone())
    }
}

impl AsRef<[u8]> for Range {
    fn as_ref(&self) -> &[u8] {
        &self.mapped.map[self.start..self.start + self.len]
    }
}

/// Ask the kernel to read `bytes` (of a file map) ahead, without waiting: a range chosen now is
/// sent later from an async worker, which must not wait for the disk.
pub fn read_ahead(bytes: &[u8]) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let at = bytes.as_ptr() as usize;
        let start = at / PAGE * PAGE;
        // SAFETY: advice only, over pages of a live mapping (`bytes` lie in it; rounding the start
        // down stays within the map's first page, maps being page-aligned).
        unsafe { libc::madvise(start as *mut libc::c_void, at + bytes.len() - start, libc::MADV_WILLNEED) };
    }
}

/// Write every byte of `bufs` to `out` (`write_all` for slices, which std keeps unstable): how a
/// range goes down the writers with the bytes around it, each slice as it is.
pub fn write_all_vectored(out: &mut impl std::io::Write, mut bufs: &mut [std::io::IoSlice<'_>]) -> std::io::Result<()> {
    std::io::IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        match out.write_vectored(bufs) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => std::io::IoSlice::advance_slices(&mut bufs, n),
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_of_a_map_is_its_range_of_the_file_and_other_memory_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        let content: Vec<u8> = (0..100_000u32).map(|i| (i % 241) as u8).collect();
        std::fs::write(&path, &content).unwrap();
        let map = Map::open(&path).unwrap();
        let range = Range::of(&map[1000..5000]).expect("registered");
        assert_eq!(range.as_ref(), &content[1000..5000]);
        assert_eq!(range.file().1, 1000);
        let next = Range::of(&map[5000..6000]).unwrap();
        assert!(range.continued_by(&next) && !next.continued_by(&range));
        assert!(Range::of(&content[..10]).is_none(), "memory of no map");
        // The file deleted, the map dropped: a range taken before still reads the bytes.
        std::fs::remove_file(&path).unwrap();
        drop(map);
        assert_eq!(&range.bytes()[..], &content[1000..5000]);
        let (file, offset) = range.file();
        let mut back = vec![0u8; 10];
        std::os::unix::fs::FileExt::read_exact_at(&**file, &mut back, offset).unwrap();
        assert_eq!(back, content[1000..1010]);
    }
}
