//! What a push's objects must be before any ref may point at them: every object parses (trees
//! checked entry by entry, as `receive.fsckObjects` would), read through a bounded reader.

use std::io::BufRead;

use gix::bstr::ByteSlice;
use gix_hash::ObjectId;
use gix_object::{Find, Kind};

use super::*;

/// A reader that stops after `left` bytes (and says so by reaching 0).
pub(super) struct LimitedRead<'a> {
    pub(super) inner: &'a mut dyn BufRead,
    pub(super) left: u64,
}

impl std::io::Read for LimitedRead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let data = self.fill_buf()?;
        let n = data.len().min(buf.len());
        buf[..n].copy_from_slice(&data[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for LimitedRead<'_> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        if self.left == 0 {
            return Err(std::io::Error::other("push larger than the limit"));
        }
        let left = self.left;
        let data = self.inner.fill_buf()?;
        Ok(&data[..data.len().min(left as usize)])
    }

    fn consume(&mut self, n: usize) {
        self.left -= n as u64;
        self.inner.consume(n);
    }
}

/// Every received object parses as its kind; trees are well-formed (no empty, `.`, `..`,
/// `.git` or slashed names, sorted, no duplicates).
pub(super) fn check_objects(odb: &gix_odb::Handle, hash: gix_hash::Kind) -> Result<(), UnpackError> {
    let mut buf = Vec::new();
    let ids: Vec<ObjectId> = odb.iter().map_err(read_error)?.collect::<Result<_, _>>().map_err(read_error)?;
    for id in ids {
        let data = odb.try_find(&id, &mut buf).map_err(read_error)?.ok_or(UnpackError::Vanished(id))?;
        let kind = data.kind;
        let bad = |what: &str| UnpackError::Invalid { kind, id, reason: what.to_owned() };
        match data.kind {
            Kind::Commit => {
                gix_object::CommitRef::from_bytes(data.data, hash).map_err(|e| bad(&e.to_string()))?;
            }
            Kind::Tag => {
                gix_object::TagRef::from_bytes(data.data, hash).map_err(|e| bad(&e.to_string()))?;
            }
            Kind::Tree => check_tree(data.data, hash).map_err(|e| bad(&e))?,
            Kind::Blob => {}
        }
    }
    Ok(())
}

pub(super) fn check_tree(data: &[u8], hash: gix_hash::Kind) -> Result<(), String> {
    let mut previous: Option<(Vec<u8>, bool)> = None;
    for entry in gix_object::TreeRefIter::from_bytes(data, hash) {
        let entry = entry.map_err(|e| e.to_string())?;
        let name: &[u8] = entry.filename.as_ref();
        if name.is_empty()
            || name == b"."
            || name == b".."
            || name.contains(&b'/')
            || name.eq_ignore_ascii_case(b".git")
        {
            return Err(format!("bad entry name '{}'", name.as_bstr()));
        }
        let is_tree = entry.mode.is_tree();
        if let Some((prev, prev_tree)) = &previous {
            // git's order: a tree sorts as if its name ended in '/'.
            let key = |n: &[u8], t: bool| {
                let mut k = n.to_vec();
                if t {
                    k.push(b'/');
                }
                k
            };
            match key(prev, *prev_tree).cmp(&key(name, is_tree)) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => return Err(format!("duplicate entry '{}'", name.as_bstr())),
                std::cmp::Ordering::Greater => return Err("entries not sorted".into()),
            }
            if prev == name {
                return Err(format!("duplicate entry '{}'", name.as_bstr()));
            }
        }
        previous = Some((name.to_vec(), is_tree));
    }
    Ok(())
}
