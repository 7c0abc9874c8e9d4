//! A pack's index (`.idx`, version 2) written from what the pack writer noted about each entry
//! ([`super::write_indexed`]): its object, offset and CRC-32 — as git's pack-objects writes the
//! index of the pack it wrote, instead of decoding every object again to learn its id (what
//! gix-pack's indexer does, and must, for a pack it receives). gix-pack's own encoder for this
//! (`index::encode`) is not public, so this is gixd's.

use std::path::Path;

use super::IndexEntry;

/// Write the version-2 index of the pack whose trailer is `pack_checksum` and whose entries are
/// `entries` to `path` (through `<path>.tmp`, renamed into place).
pub fn write(
    path: &Path,
    mut entries: Vec<IndexEntry>,
    pack_checksum: &gix_hash::oid,
    hash: gix_hash::Kind,
) -> std::io::Result<()> {
    entries.sort_unstable_by_key(|(id, _, _)| *id);
    if entries.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err(std::io::Error::other("an object is in the pack twice"));
    }
    let n = entries.len();
    let mut out = Vec::with_capacity(8 + 256 * 4 + n * (hash.len_in_bytes() + 12) + 2 * hash.len_in_bytes());
    out.extend_from_slice(&[0xff, b't', b'O', b'c', 0, 0, 0, 2]);
    let mut count = 0usize;
    for byte in 0..=255u8 {
        count += entries[count..].iter().take_while(|(id, _, _)| id.as_bytes()[0] == byte).count();
        out.extend_from_slice(&(count as u32).to_be_bytes());
    }
    for (id, _, _) in &entries {
        out.extend_from_slice(id.as_bytes());
    }
    for (_, _, crc) in &entries {
        out.extend_from_slice(&crc.to_be_bytes());
    }
    let mut large = Vec::new();
    for (_, offset, _) in &entries {
        let small = if *offset < 0x8000_0000 {
            *offset as u32
        } else {
            large.push(*offset);
            0x8000_0000 | (large.len() as u32 - 1)
        };
        out.extend_from_slice(&small.to_be_bytes());
    }
    for offset in large {
        out.extend_from_slice(&offset.to_be_bytes());
    }
    out.extend_from_slice(pack_checksum.as_bytes());
    let mut hasher = gix_hash::hasher(hash);
    hasher.update(&out);
    let checksum = hasher.try_finalize().map_err(std::io::Error::other)?;
    out.extend_from_slice(checksum.as_bytes());
    let tmp = path.with_extension("idx.tmp");
    std::fs::write(&tmp, &out)?;
    std::fs::rename(&tmp, path)
}
