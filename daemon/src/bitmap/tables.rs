//! A bitmap's tables where its files lie (object selection layer): the pack order read from the
//! mapped `.rev` file (or a multi-pack-index's `RIDX` chunk) instead of a copy, the commit
//! bitmaps decoded from the mapped `.bitmap` when a walk meets their commit, and the closures
//! composed from them kept under a byte bound. A served repository's bitmap is held for as long
//! as its files do not change, by every request at once: what it holds in memory is paid once
//! per repository, and what it maps is page cache, shared with git and charged to no request.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::{BitmapError, Bits};

/// The file at `path` mapped (a `.bitmap`, a `.rev`, a multi-pack-index), with the file it was
/// mapped from (whose identity says whether its checksum was found right before:
/// [`crate::repo::checked`]); `Ok(None)` if there is none.
pub(super) fn map(path: &Path) -> Result<Option<(memmap2::Mmap, std::fs::File)>, BitmapError> {
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(BitmapError::Io { path: path.to_owned(), source }),
    };
    // SAFETY: git writes these files once, under a temporary name, and renames them into place;
    // a private read-only map sees the bytes it was opened on.
    unsafe { memmap2::MmapOptions::new().map_copy_read_only(&file) }
        .map(|map| Some((map, file)))
        .map_err(|source| BitmapError::Io { path: path.to_owned(), source })
}

/// A mapped file shared by what reads it (a multi-pack-index: its parsed index and the reverse
/// index in its `RIDX` chunk).
#[derive(Clone)]
pub(super) struct Shared(pub(super) Arc<memmap2::Mmap>);

impl std::ops::Deref for Shared {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// Pack position → index position.
pub(super) enum Order {
    /// A pack's `.rev` file (`RIDX`, version, hash id, then the table), mapped.
    Rev(memmap2::Mmap),
    /// The `RIDX` chunk of a multi-pack-index, which the parsed index holds.
    Chunk { raw: Shared, start: usize },
    /// Computed (no `.rev` beside the pack).
    Owned(Vec<u32>),
}

impl Order {
    /// The table of the `.rev` file at `path` for a pack of `n` objects whose checksum is
    /// `pack_checksum`; `None` if there is none, or it is not that pack's
    /// ([`crate::packs::rev_table`]).
    pub(super) fn map_rev(path: &Path, n: usize, pack_checksum: &gix_hash::oid, hash: gix_hash::Kind) -> Option<Order> {
        let (map, _) = map(path).ok()??;
        crate::packs::rev_table(&map, n, pack_checksum, hash)?;
        Some(Order::Rev(map))
    }

    /// The `RIDX` chunk at `start..start + 4 * n` of a multi-pack-index's bytes.
    pub(super) fn chunk(raw: Shared, start: usize, n: usize) -> Option<Order> {
        raw.get(start..start + 4 * n)?;
        Some(Order::Chunk { raw, start })
    }

    /// The index position at pack position `pos`.
    pub(super) fn get(&self, pos: usize) -> u32 {
        let be32 = |bytes: &[u8], at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().expect("four bytes"));
        match self {
            Order::Rev(map) => be32(map, 12 + 4 * pos),
            Order::Chunk { raw, start } => be32(raw, start + 4 * pos),
            Order::Owned(order) => order[pos],
        }
    }

    /// Index position → pack position, the inverse of this order over `0..n`; `None` unless it
    /// is a permutation of `0..n`.
    pub(super) fn inverse(&self, n: usize) -> Option<Vec<u32>> {
        let mut position = vec![u32::MAX; n];
        for pack_pos in 0..n {
            let slot = position.get_mut(self.get(pack_pos) as usize)?;
            if *slot != u32::MAX {
                return None;
            }
            *slot = pack_pos as u32;
        }
        Some(position)
    }
}

/// The commit bitmaps of a `.bitmap` file: the file mapped, and where each entry's EWAH bitmap
/// starts in it with the entry it is XOR'ed against (0: none; else this many places before).
pub(super) struct Stored {
    pub(super) file: memmap2::Mmap,
    pub(super) entries: Vec<(usize, usize)>,
}

impl Stored {
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The closure of entry `i` over `len` positions: its bitmap XOR'ed with its base's, down
    /// its chain (XOR is associative: the stored bitmaps are flipped into one set, no
    /// intermediate closure is made). `None` if one does not decode.
    fn compose(&self, mut i: usize, len: usize) -> Option<Bits> {
        let mut bits = Bits::new(len);
        loop {
            let (at, xor) = *self.entries.get(i)?;
            let (ewah, _) = gix_bitmap::ewah::decode(self.file.get(at..)?).ok()?;
            // Bits past the pack's objects (the last word's padding) are none of its positions.
            ewah.for_each_set_bit(|bit| {
                if bit < len {
                    bits.flip(bit);
                }
                Some(())
            })?;
            if xor == 0 {
                return Some(bits);
            }
            i = i.checked_sub(xor)?;
        }
    }
}

/// Closures composed recently, the most recent last, up to [`Closures::BYTES`] of them (at least
/// two): a clone reaches a few dozen tips' closures once; negotiation asks for the same few
/// again each round. Each is a dense set of the pack's positions (an eighth of a byte per
/// object); kept all, a repository's would grow to one per commit bitmap, held for as long as
/// the bitmap (git keeps them compressed, per process).
#[derive(Default)]
pub(super) struct Closures(Mutex<VecDeque<(usize, Arc<Bits>)>>);

impl Closures {
    /// What the kept closures may hold, together.
    pub(super) const BYTES: usize = 1 << 20;

    /// The closure of `stored`'s entry `i` over `len` positions, composed or kept.
    pub(super) fn get(&self, stored: &Stored, i: usize, len: usize) -> Option<Arc<Bits>> {
        {
            let mut kept = self.0.lock().expect("not poisoned");
            if let Some(at) = kept.iter().position(|(entry, _)| *entry == i) {
                let hit = kept.remove(at).expect("present");
                kept.push_back(hit.clone());
                return Some(hit.1);
            }
        }
        let bits = Arc::new(stored.compose(i, len)?);
        let most = (Self::BYTES / len.div_ceil(8).max(1)).max(2);
        let mut kept = self.0.lock().expect("not poisoned");
        if !kept.iter().any(|(entry, _)| *entry == i) {
            kept.push_back((i, bits.clone()));
        }
        while kept.len() > most {
            kept.pop_front();
        }
        Some(bits)
    }

    /// How many are kept (tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.0.lock().expect("not poisoned").len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `.bitmap`-like file of EWAH bitmaps over `len` positions, each with its XOR offset.
    fn stored(len: usize, bitmaps: &[(&[usize], usize)]) -> Stored {
        let mut file = Vec::new();
        let mut entries = Vec::new();
        for (set, xor) in bitmaps {
            let flags: Vec<bool> = (0..len).map(|i| set.contains(&i)).collect();
            entries.push((file.len(), *xor));
            gix_bitmap::ewah::Vec::from_bits(&flags).unwrap().write_to(&mut file).unwrap();
        }
        let mut map = memmap2::MmapMut::map_anon(file.len()).unwrap();
        map.copy_from_slice(&file);
        Stored { file: map.make_read_only().unwrap(), entries }
    }

    #[test]
    fn a_closure_is_its_bitmap_xored_down_its_chain() {
        let stored = stored(16, &[(&[1, 5, 9], 0), (&[5, 7], 1), (&[2], 1), (&[3], 0)]);
        let closures = Closures::default();
        let ones = |i| closures.get(&stored, i, 16).unwrap().ones().collect::<Vec<_>>();
        assert_eq!(ones(0), [1, 5, 9]);
        assert_eq!(ones(1), [1, 7, 9], "{{5, 7}} ^ {{1, 5, 9}}");
        assert_eq!(ones(2), [1, 2, 7, 9], "{{2}} ^ {{5, 7}} ^ {{1, 5, 9}}");
        assert_eq!(ones(3), [3]);
    }

    #[test]
    fn the_closures_kept_stay_within_their_byte_bound() {
        // Each closure an eighth of the bound: eight are kept, however many are composed.
        let len = Closures::BYTES; // bits
        let bitmaps: Vec<(&[usize], usize)> = (0..20).map(|i| (&[0usize, 1][..i % 2 + 1], 0)).collect();
        let stored = stored(len, &bitmaps);
        let closures = Closures::default();
        for i in 0..20 {
            assert!(closures.get(&stored, i, len).is_some());
        }
        assert_eq!(closures.len(), 8);
        // The most recent are the ones kept: the newest composed is found, not composed again.
        let again = closures.get(&stored, 19, len).unwrap();
        assert!(Arc::ptr_eq(&again, &closures.get(&stored, 19, len).unwrap()));
    }
}
