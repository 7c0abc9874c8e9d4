//! Tree entries a walk need not look up: those a tree shares with the version of it walked last
//! at the same path. A walk over many commits' trees meets each entry of every new tree version
//! (a clone of git.git: 59 million), and almost every one is unchanged from the version before;
//! each look-up among the objects met missed the CPU cache and was a third of that clone's CPU.
//! An entry byte-for-byte equal to one of a tree the walk already walked names an object that
//! walk met (or left out by the same rule), so it is skipped as a look-up would have skipped
//! it; the comparison runs over two tree buffers in the cache, and only a changed entry is
//! parsed. Selection's walk ([`crate::select`]) and the bitmap reach's ([`crate::bitmap`]) use it.

use std::collections::HashMap;

/// The last tree walked at each path (by its hash), with the bytes they hold, up to a cap.
#[derive(Default)]
pub struct LastAtPath {
    trees: HashMap<u64, Vec<u8>>,
    bytes: usize,
}

/// Bytes of trees [`LastAtPath`] keeps (past it, it starts over): a version of every directory
/// of a large tree.
const LAST_AT_PATH_BYTES: usize = 8 << 20;

impl LastAtPath {
    /// The tree walked last at `path`, taken out (to be given back with [`Self::keep`]).
    pub fn take(&mut self, path: u64) -> Vec<u8> {
        let tree = self.trees.remove(&path).unwrap_or_default();
        self.bytes -= tree.capacity();
        tree
    }

    /// Keep `tree` (walked, every entry met or left out) as the last at `path`.
    pub fn keep(&mut self, path: u64, tree: Vec<u8>) {
        if self.bytes + tree.capacity() > LAST_AT_PATH_BYTES {
            self.trees.clear();
            self.bytes = 0;
        }
        self.bytes += tree.capacity();
        self.trees.insert(path, tree);
    }
}

/// The entries of `newer` (a tree's bytes) that are not unchanged from `walked` (the version of it
/// walked before at its path; empty: none), in order, each parsed; the rest are skipped unparsed.
/// An entry that does not parse is the last item.
pub fn changed_entries<'a>(newer: &'a [u8], walked: &'a [u8], hash: gix_hash::Kind) -> ChangedEntries<'a> {
    ChangedEntries { rest: newer, unchanged: Unchanged::new(walked, hash.len_in_bytes()), hash }
}

/// [`changed_entries`].
pub struct ChangedEntries<'a> {
    rest: &'a [u8],
    unchanged: Unchanged<'a>,
    hash: gix_hash::Kind,
}

impl<'a> Iterator for ChangedEntries<'a> {
    type Item = gix_error::Result<gix_object::tree::EntryRef<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let same = self.unchanged.same_prefix(self.rest);
        self.rest = &self.rest[same..];
        let entry = match gix_object::TreeRefIter::from_bytes(self.rest, self.hash).next()? {
            Ok(entry) => entry,
            Err(err) => {
                self.rest = &[];
                return Some(Err(err));
            }
        };
        // Past the entry: its id ends it.
        let id = entry.oid.as_bytes();
        self.rest = &self.rest[id.as_ptr() as usize - self.rest.as_ptr() as usize + id.len()..];
        self.unchanged.pass(entry.filename);
        Some(Ok(entry))
    }
}

/// A cursor over the entries of a walked tree, in order, for the entries of a newer version of it.
struct Unchanged<'a> {
    walked: &'a [u8],
    hash_len: usize,
}

impl<'a> Unchanged<'a> {
    fn new(walked: &'a [u8], hash_len: usize) -> Self {
        Unchanged { walked, hash_len }
    }

    /// How many bytes at the start of `newer` (a newer version's entries, from one on) are whole
    /// entries equal to the walked tree's at the cursor; the cursor passes them. An entry's bytes
    /// are its mode, name and id; mode and name hold no NUL, so equal bytes up to the walked
    /// entry's end are one equal entry.
    fn same_prefix(&mut self, newer: &[u8]) -> usize {
        let mut same = 0;
        while let Some(entry) = self.first()
            && newer.get(same..same + entry.len()) == Some(entry)
        {
            same += entry.len();
            self.walked = &self.walked[entry.len()..];
        }
        same
    }

    /// Pass the walked entries up to a changed (or added) entry `name` of the newer version: those
    /// named before it, and the one named as it. Entries are sorted by name in both trees; git's
    /// order puts a directory as if its name ended in `/`, and where that differs from the bytes'
    /// order an unchanged entry is only looked up (never skipped wrongly: skipping needs equal
    /// bytes).
    fn pass(&mut self, name: &[u8]) {
        while let Some(entry) = self.first() {
            let space = memchr::memchr(b' ', entry).unwrap_or(0);
            let walked_name = entry.get(space + 1..entry.len() - 1 - self.hash_len).unwrap_or_default();
            match walked_name.cmp(name) {
                std::cmp::Ordering::Greater => return,
                order => {
                    self.walked = &self.walked[entry.len()..];
                    if order == std::cmp::Ordering::Equal {
                        return;
                    }
                }
            }
        }
    }

    /// The walked tree's entry at the cursor; `None` at its end (or where it is cut short). Its
    /// entries parsed when it was walked (each was parsed, or equal to one parsed before), so
    /// its end is all there is to find.
    fn first(&self) -> Option<&'a [u8]> {
        let nul = memchr::memchr(0, self.walked)?;
        self.walked.get(..nul + 1 + self.hash_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(entries: &[(&str, &str, u8)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (mode, name, id) in entries {
            out.extend_from_slice(format!("{mode} {name}\0").as_bytes());
            out.extend_from_slice(&[*id; 20]);
        }
        out
    }

    /// For each entry of `newer`: skipped as unchanged from `walked`, as the walk asks.
    fn unchanged_entries(walked: &[u8], newer: &[u8]) -> Vec<bool> {
        let mut unchanged = Unchanged::new(walked, 20);
        let mut rest = newer;
        let mut out = Vec::new();
        while !rest.is_empty() {
            let same = unchanged.same_prefix(rest);
            if same > 0 {
                let mut n = 0;
                while n < same {
                    n += memchr::memchr(0, &rest[n..]).unwrap() + 21;
                    out.push(true);
                }
                rest = &rest[same..];
                continue;
            }
            let entry = gix_object::TreeRefIter::from_bytes(rest, gix_hash::Kind::Sha1).next().unwrap().unwrap();
            unchanged.pass(entry.filename);
            out.push(false);
            rest = &rest[memchr::memchr(0, rest).unwrap() + 21..];
        }
        out
    }

    #[test]
    fn only_entries_equal_in_mode_name_and_id_are_unchanged() {
        let walked =
            tree(&[("100644", "a", 1), ("100644", "b", 2), ("40000", "d", 3), ("100644", "e", 4), ("100644", "g", 6)]);
        let newer = tree(&[
            ("100644", "a", 1), // unchanged
            ("100755", "b", 2), // mode changed
            ("100644", "c", 9), // added
            ("160000", "d", 3), // a directory become a submodule at the same id
            ("100644", "e", 5), // changed
            ("100644", "f", 6), // another name, same id
            ("100644", "g", 6), // unchanged after a skipped entry
        ]);
        assert_eq!(unchanged_entries(&walked, &newer), [true, false, false, false, false, false, true]);
        assert_eq!(unchanged_entries(&walked, &walked), [true; 5], "a run of equal entries at once");
    }

    #[test]
    fn an_empty_or_unparsable_walked_tree_has_nothing() {
        let newer = tree(&[("100644", "a", 1)]);
        assert_eq!(unchanged_entries(&[], &newer), [false]);
        assert_eq!(unchanged_entries(&newer[..newer.len() - 1], &newer), [false], "cut short");
        assert_eq!(unchanged_entries(b"no entry here", &newer), [false]);
    }

    #[test]
    fn kept_trees_start_over_past_their_cap() {
        let mut last = LastAtPath::default();
        last.keep(1, vec![0; LAST_AT_PATH_BYTES / 2]);
        last.keep(2, vec![0; LAST_AT_PATH_BYTES / 2]);
        assert_eq!(last.take(1).len(), LAST_AT_PATH_BYTES / 2);
        last.keep(1, vec![0; LAST_AT_PATH_BYTES / 2]);
        last.keep(3, vec![0; 1]);
        assert!(last.take(1).is_empty() && last.take(2).is_empty(), "started over");
        assert_eq!(last.take(3).len(), 1);
        assert_eq!(last.bytes, 0);
    }
}
