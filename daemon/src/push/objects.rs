//! What a push's objects must be before any ref may point at them: every object parses (trees
//! checked entry by entry, as `receive.fsckObjects` would), read through a bounded reader.

use std::io::BufRead;
use std::path::Path;

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
/// `.git` or slashed names, sorted, no duplicates). The pack's objects are taken in pack order
/// (a delta's base before it, as pack writers put them) and each one's kind is read from its
/// entry header (a delta's from its base's): blobs, which have no form to check, are never
/// inflated, and commits, trees and tags are decoded through a delta cache that keeps every base
/// a chain reconstructs — the indexer already inflated every object once; this adds one inflation
/// per non-blob, not a chain walk per object.
///
/// Returns whether every object a received one refers to is present — received too, or
/// `present_outside` (in the repository): then every received object is complete, and a
/// connectivity check need not walk them again ([`super::commands::Connectivity`]).
pub(super) fn check_objects(
    pack: Option<&Path>,
    odb: &gix_odb::Handle,
    hash: gix_hash::Kind,
    mut present_outside: impl FnMut(ObjectId) -> bool,
) -> Result<bool, UnpackError> {
    let Some(index_path) = pack else { return Ok(true) };
    let index = gix_pack::index::File::at(index_path, hash).map_err(read_error)?;
    let data = gix_pack::data::File::at(index_path.with_extension("pack"), hash).map_err(read_error)?;
    let mut entries: Vec<(u64, ObjectId)> = index.iter().map(|e| (e.pack_offset, e.oid)).collect();
    entries.sort_unstable();
    let limit = entries.len();
    let mut kinds = std::collections::HashMap::with_capacity(limit);
    let mut buf = Vec::new();
    let (mut children, mut outside, mut complete) = (Vec::new(), std::collections::HashSet::new(), true);
    for (offset, id) in entries {
        if kind_at(&data, &index, offset, limit, &mut kinds)? == Kind::Blob {
            continue;
        }
        let object = odb.try_find(&id, &mut buf).map_err(read_error)?.ok_or(UnpackError::Vanished(id))?;
        let kind = object.kind;
        let bad = |what: &str| UnpackError::Invalid { kind, id, reason: what.to_owned() };
        match object.kind {
            Kind::Commit => {
                gix_object::CommitRef::from_bytes(object.data, hash).map_err(|e| bad(&e.to_string()))?;
            }
            Kind::Tag => {
                gix_object::TagRef::from_bytes(object.data, hash).map_err(|e| bad(&e.to_string()))?;
            }
            Kind::Tree => check_tree(object.data, hash).map_err(|e| bad(&e))?,
            Kind::Blob => {}
        }
        if complete {
            children.clear();
            crate::graph::push_children(id, kind, object.data, &mut children).map_err(|e| bad(&e.to_string()))?;
            for (child, _) in &children {
                if index.lookup(child).is_none() && outside.insert(*child) && !present_outside(*child) {
                    complete = false;
                }
            }
        }
    }
    Ok(complete)
}

/// The kind of the object at `offset` of `data`: its entry header's, or for a delta its base's
/// (followed through the chain, every offset on it remembered in `kinds`). A chain longer than
/// the pack's `limit` entries loops.
fn kind_at(
    data: &gix_pack::data::File,
    index: &gix_pack::index::File,
    offset: u64,
    limit: usize,
    kinds: &mut std::collections::HashMap<u64, Kind>,
) -> Result<Kind, UnpackError> {
    use gix_pack::data::entry::Header;
    let mut chain = Vec::new();
    let mut at = offset;
    let kind = loop {
        if let Some(kind) = kinds.get(&at) {
            break *kind;
        }
        if chain.len() > limit {
            return Err(UnpackError::Read("a delta chain of the pack loops".into()));
        }
        chain.push(at);
        let entry = data.entry(at).map_err(read_error)?;
        at = match entry.header {
            Header::Commit => break Kind::Commit,
            Header::Tree => break Kind::Tree,
            Header::Blob => break Kind::Blob,
            Header::Tag => break Kind::Tag,
            Header::OfsDelta { base_distance } => entry.base_pack_offset(base_distance),
            Header::RefDelta { base_id } => {
                let i = index.lookup(base_id).ok_or(UnpackError::Vanished(base_id))?;
                index.pack_offset_at_index(i)
            }
        };
    };
    for offset in chain {
        kinds.insert(offset, kind);
    }
    Ok(kind)
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
