//! Reusing what the repository's packs store: a whole pack sent verbatim (a bitmap said the
//! selection is all of it), and stored entries copied as they are (a delta kept, or re-deflated
//! where its base does not go out), located through [`crate::packs`] without inflating them.

use std::collections::HashMap;
use std::io::Write;

use gix_hash::ObjectId;
use gix_pack::data::output;
use gix_pack::data::output::entry::iter_from_counts::DeltaBase;

use super::PackError;
use super::*;
use crate::select::Selection;

/// Verbatim reuse: the selection is every object of one pack (a bitmap said so) and maybe some
/// objects outside it (`extra`, pushed since the repack). The pack file's entries go out as they
/// are — no object decoded; the extra objects follow, as gix-pack gives them, a delta against an
/// object of the big pack referring to it by id (it is in this pack). Header count and trailer
/// checksum are written for the whole; without extras the file is sent as it is.
pub(super) fn write_verbatim<W: Sink>(
    repo: &gix::Repository,
    bitmap: &crate::bitmap::PackBitmap,
    selection: &Selection,
    options: &Options,
    out: &mut W,
) -> Result<Stats, PackError> {
    let extra = &selection.extra;
    let objects = selection.len() - extra.len();
    let hash = repo.object_hash();
    // The pack as the bitmap mapped it: a repack that renames or deletes the file meanwhile
    // does not take it from under this answer.
    let pack = &*bitmap.data;
    if pack.num_objects() as usize != objects {
        return Err(PackError::corrupt(format!("{}: not the pack the bitmap describes", bitmap.pack.display())));
    }
    let total = u32::try_from(objects + extra.len()).map_err(|_| PackError::TooManyObjects)?;
    let header = gix_pack::data::header::encode(pack.version(), total);
    // Without extras the file's own trailer is right; with them, everything is hashed anew.
    let mut answer = if extra.is_empty() { Hashed::unhashed(out) } else { Hashed::new(out, hash) };
    answer.emit(&header)?;
    let entries_end = if extra.is_empty() { pack.data_len() } else { pack.pack_end() } as u64;
    let mut at = 12u64;
    while at < entries_end {
        let end = (at + 256 * 1024).min(entries_end);
        let bytes = pack
            .entry_slice(at..end)
            .ok_or_else(|| PackError::corrupt(format!("{}: shorter than it says", bitmap.pack.display())))?;
        // Sent later, from an async worker, as a range of the file: read ahead now.
        crate::pack_ranges::read_ahead(bytes);
        answer.emit(bytes)?;
        at = end;
    }
    let mut stats = Stats { entries: objects, copied: objects, verbatim: true, ..Stats::default() };
    if !extra.is_empty() {
        // A delta whose base is in the big pack refers to it by id (it is in this answer); any
        // other base is not, and its delta is re-deflated.
        let decide =
            |id: &gix_hash::oid| if bitmap.pos(id).is_some() { DeltaBase::Thin } else { DeltaBase::Recompress };
        // Their stored entries located in the pack files as read now, not by gix-odb: its
        // locations, taken while a repack swaps packs under its snapshot, can pair an index
        // with another pack (seen: a clone sent an entry that did not inflate, and gix-odb's
        // own "index must always be present" panic, with git gc running beside gixd).
        // The pack went out from its first byte: an entry's offset in it is its offset here.
        let before = |id: &gix_hash::oid| bitmap.pos(id).map(|pos| bitmap.entry_at(pos).0);
        let earlier = Earlier { ofs_delta: options.ofs_delta, before: Some(&before) };
        let mut search = DeltaSearch::outside_the_bitmap(repo, selection, options, extra.len());
        write_through_gix_pack(
            repo,
            extra.iter().copied(),
            decide,
            (options.packs)(),
            &mut answer,
            earlier,
            Some((&mut search, options.progress_every, &|_| false)),
            |_| stats.entries += 1,
        )?;
        stats.deltas_computed = search.found;
    }
    stats.bytes = answer.finish()?;
    Ok(stats)
}

/// Where each entry gix-pack generated went in the answer, so that an ofs-delta against an
/// earlier one (gix-pack names its base by index) gets its distance.
#[derive(Default)]
pub(super) struct EntryOffsets {
    pub(super) offsets: Vec<u64>,
    pub(super) head: Vec<u8>,
    /// Every entry written, as the pack's index holds it ([`super::write_indexed`]).
    pub(super) index: Option<Vec<super::IndexEntry>>,
    /// Where gix-pack's entries were copied from, to send those stored bytes instead.
    pub(super) copies: Option<std::sync::Arc<crate::packs::Copies>>,
    /// The packs a repack's hollow entries' data is read from ([`crate::packs::Hollow`]).
    pub(super) hollow_in: Option<std::sync::Arc<crate::packs::Packs>>,
}

impl EntryOffsets {
    /// Write every entry of `entries`, each base before its deltas (the search may have made an
    /// entry the base of an earlier one; a cycle of deltas has a member go out whole, as `whole`
    /// makes it: [`super::entries::base_first`]). A delta against another entry is an
    /// ofs-delta where the client takes them, else it names its base by id; a thin one names
    /// the object the client has.
    pub(super) fn emit_in_base_order<W: Write>(
        &mut self,
        entries: &[output::Entry],
        ofs_delta: bool,
        whole: &dyn Fn(&ObjectId) -> Result<output::Entry, PackError>,
        answer: &mut Hashed<'_, W>,
    ) -> Result<(), PackError> {
        // Only the entries a delta names by id are looked up by id (the search's few thousand,
        // not a repack's every entry: the map of all of them was a tenth of its peak).
        let named: std::collections::HashSet<ObjectId> = entries
            .iter()
            .filter_map(|e| match e.kind {
                output::entry::Kind::DeltaOid { id } => Some(id),
                _ => None,
            })
            .collect();
        let by_id: HashMap<ObjectId, usize> =
            entries.iter().enumerate().filter(|(_, e)| named.contains(&e.id)).map(|(i, e)| (e.id, i)).collect();
        drop(named);
        if let Some(index) = &mut self.index {
            index.reserve_exact(entries.len());
        }
        let mut at: Vec<u64> = vec![u64::MAX; entries.len()];
        let Some(mut entry) = entries.first().cloned() else { return Ok(()) };
        let base_of = |i: usize| base_in_pack(&entries[i], &by_id);
        super::entries::base_first(entries.len(), base_of, |i, as_whole| {
            if as_whole {
                entry = whole(&entries[i].id)?;
            } else {
                entry.clone_from(&entries[i]);
                if crate::packs::Hollow::is_mark(&entry.compressed_data) {
                    let data = self.hollow_in.as_ref().and_then(|packs| packs.hollow_data(&entries[i].compressed_data));
                    let data = data.ok_or_else(|| {
                        PackError::corrupt(format!("the stored data of {} is not where it was found", entry.id))
                    })?;
                    entry.compressed_data.clear();
                    entry.compressed_data.extend_from_slice(data);
                }
                if let Some(base) = base_of(i) {
                    entry.kind = if ofs_delta {
                        output::entry::Kind::DeltaRef { object_index: base }
                    } else {
                        output::entry::Kind::DeltaOid { id: entries[base].id }
                    };
                }
            }
            let here = write_entry(&mut self.head, &entry, answer, |index| at[index], None)?;
            at[i] = here;
            self.offsets.push(here);
            self.note(&entry, here);
            Ok(())
        })
    }

    /// Write `entry` (header and compressed data) to `answer`; an invalid entry (a missing
    /// object) is skipped, as gix-pack's own writer skips it.
    pub(super) fn emit<W: Write>(
        &mut self,
        entry: &output::Entry,
        answer: &mut Hashed<'_, W>,
    ) -> Result<(), PackError> {
        if entry.is_invalid() {
            self.offsets.push(u64::MAX);
            return Ok(());
        }
        // Hollow entries are a repack search's, written in base order: never here.
        if crate::packs::Hollow::is_mark(&entry.compressed_data) {
            return Err(PackError::corrupt(format!("the entry of {} holds no data", entry.id)));
        }
        let offsets = &self.offsets;
        let stored = self.copies.as_ref().and_then(|copies| copies.take(&entry.compressed_data));
        let here = write_entry(&mut self.head, entry, answer, |index| offsets[index], stored)?;
        self.offsets.push(here);
        self.note(entry, here);
        Ok(())
    }

    /// Note `entry`, just written at `here` (its header still in `head`), for the index.
    fn note(&mut self, entry: &output::Entry, here: u64) {
        if let Some(index) = &mut self.index {
            let mut crc = crc32fast::Hasher::new();
            crc.update(&self.head);
            crc.update(&entry.compressed_data);
            index.push((entry.id, here, crc.finalize()));
        }
    }
}

/// Write `entry`'s header (through the scratch `head`) and compressed data at the end of
/// `answer`; `at` says where an earlier entry, by index, starts (an ofs-delta's base); `stored`
/// where a pack file stores the entry, when it was copied from there ([`Hashed::emit_entry`]).
/// Returns where this one starts.
pub(super) fn write_entry<W: Write>(
    head: &mut Vec<u8>,
    entry: &output::Entry,
    answer: &mut Hashed<'_, W>,
    at: impl Fn(usize) -> u64,
    stored: Option<crate::pack_ranges::Range>,
) -> Result<u64, PackError> {
    let here = answer.written;
    let header = entry.to_entry_header(gix_pack::data::Version::V2, |index| here - at(index));
    head.clear();
    header.write_to(entry.decompressed_size as u64, head)?;
    answer.emit_entry(head, &entry.compressed_data, stored)?;
    Ok(here)
}

/// How one entry of a reusable pack goes out when reused.
#[derive(Clone, Copy)]
pub(super) enum Reuse {
    /// Its bytes as they are (a whole object, or a ref-delta whose base is sent or held).
    AsItIs,
    /// An ofs-delta whose base is reused before it: the same delta, its distance rewritten.
    Ofs { base: u32 },
    /// A delta whose base is sent later or held by the client: the same delta, naming its base by id.
    ByBase { base: u32 },
    /// Not reusable (its base is neither sent nor usable): written by gix-pack after the reused
    /// entries, re-deflated.
    Later,
}

/// Partial pack reuse (git's `reuse_partial_packfile_from_bitmap`; with a multi-pack-index, of
/// every disjoint pack, git's `pack.allowPackReuse=multi`): the selection's entries of the
/// reusable packs ([`crate::bitmap::PackBitmap::reusable_pack`]) go out as their stored bytes,
/// pack by pack in pack order — no object is looked up or
/// inflated; an ofs-delta's distance is rewritten for the entries left out between it and its
/// base, a delta whose base is not reused names the base by id when the base is sent anyway or
/// the client has it (thin, where allowed and readable), and only a delta with no usable base
/// is handed to gix-pack (after the reused entries, with the selection's objects outside the
/// pack), which re-deflates it. Every byte is hashed anew for the trailer.
pub(super) fn write_reused<W: Sink>(
    repo: &gix::Repository,
    selection: &Selection,
    bitmap: &crate::bitmap::PackBitmap,
    positions: &crate::select::Positions,
    options: &Options,
    may_send: &mut dyn FnMut(&gix_hash::oid) -> bool,
    out: &mut W,
) -> Result<Stats, PackError> {
    let hash = repo.object_hash();
    let mut sent = crate::bitmap::Bits::new(bitmap.len());
    for pos in positions.iter() {
        sent.set(pos as usize);
    }
    let mut usable_thin = |id: &gix_hash::oid| {
        options.thin_pack && selection.client_has(id) && (selection.client_has_readably(id) || may_send(id))
    };
    // First the decisions (headers only), so the entry count is known before anything is written.
    // With each entry: its pack, where its data starts after the header, and its decompressed size.
    let mut plan: Vec<(u32, usize, Reuse, usize, u64)> = Vec::with_capacity(positions.len());
    let mut reused = crate::bitmap::Bits::new(bitmap.len());
    let mut reused_count = 0usize;
    let mut later: Vec<ObjectId> = Vec::new();
    for pos in positions.iter() {
        let which =
            bitmap.reusable_pack(pos as usize).ok_or_else(|| PackError::corrupt("a reused entry no pack holds"))?;
        let (offset, _) = bitmap.entry_at(pos as usize);
        let entry = bitmap.reusable_data(which).entry(offset).map_err(PackError::gix)?;
        let decision = match entry.header {
            gix_pack::data::entry::Header::OfsDelta { base_distance } => {
                let base =
                    offset.checked_sub(base_distance).and_then(|o| bitmap.pos_at_offset(which, o)).map(|p| p as u32);
                match base {
                    Some(base) if reused.get(base as usize) && options.ofs_delta => Reuse::Ofs { base },
                    Some(base) if sent.get(base as usize) => Reuse::ByBase { base },
                    Some(base) if usable_thin(&bitmap.oid_at(base as usize)) => Reuse::ByBase { base },
                    _ => Reuse::Later,
                }
            }
            gix_pack::data::entry::Header::RefDelta { base_id } => match bitmap.pos(&base_id) {
                Some(base) if sent.get(base) => Reuse::AsItIs,
                _ if usable_thin(&base_id) => Reuse::AsItIs,
                _ => Reuse::Later,
            },
            _ => Reuse::AsItIs,
        };
        match decision {
            Reuse::Later => later.push(bitmap.oid_at(pos as usize)),
            _ => {
                reused.set(pos as usize);
                reused_count += 1;
            }
        }
        plan.push((pos, which, decision, (entry.data_offset - offset) as usize, entry.decompressed_size));
    }
    // What is not in the bitmapped pack: the listed objects past its positions.
    let extra = &selection.objects[positions.len() - selection.unlisted..];
    let total = u32::try_from(reused_count + later.len() + extra.len()).map_err(|_| PackError::TooManyObjects)?;
    let mut answer = Hashed::new(out, hash);
    let mut header = *b"PACK\0\0\0\x02\0\0\0\0";
    header[8..12].copy_from_slice(&total.to_be_bytes());
    answer.emit(&header)?;
    // Where each reused entry went in the answer, by pack position (bases precede their deltas).
    let mut new_offset: Vec<u64> = vec![0; bitmap.len()];
    let mut stats = Stats::default();
    let mut head = Vec::with_capacity(64);
    // Entries that go out as they are and lie one after the other in the pack go out as one run
    // (a range of the pack file, not a copy per entry: [`Hashed::emit_mapped`]).
    for (pos, which, decision, data_start, decompressed_size) in plan {
        let pack = bitmap.reusable_data(which);
        let (offset, size) = bitmap.entry_at(pos as usize);
        let end = offset + size as u64;
        if pack.entry_slice(offset..end).is_none() {
            return Err(PackError::corrupt(format!("{}: entry at {offset} out of bounds", pack.path().display())));
        }
        let here = answer.written;
        match decision {
            Reuse::Later => continue,
            Reuse::AsItIs => answer.emit_mapped(pack.entry_slice(offset..end).expect("checked above"))?,
            // Nothing left out between an ofs-delta and its base: its distance is the same, and
            // its stored bytes go out as they are, continuing the run before it (a header
            // rewritten to the same bytes broke the run at every delta: 18 000 runs for one
            // clone of 29 000 objects, each read ahead with a system call of its own).
            Reuse::Ofs { base } if here - new_offset[base as usize] == offset - bitmap.entry_at(base as usize).0 => {
                answer.emit_mapped(pack.entry_slice(offset..end).expect("checked above"))?
            }
            Reuse::Ofs { base } | Reuse::ByBase { base } => {
                let data = pack.entry_slice(offset + data_start as u64..end).expect("checked above");
                let rewritten = match decision {
                    Reuse::Ofs { .. } => {
                        gix_pack::data::entry::Header::OfsDelta { base_distance: here - new_offset[base as usize] }
                    }
                    _ => {
                        if !sent.get(base as usize) {
                            stats.thin_deltas += 1;
                        }
                        gix_pack::data::entry::Header::RefDelta { base_id: bitmap.oid_at(base as usize) }
                    }
                };
                head.clear();
                rewritten.write_to(decompressed_size, &mut head)?;
                answer.emit(&head)?;
                answer.emit_mapped(data)?;
            }
        }
        new_offset[pos as usize] = here;
        stats.entries += 1;
        stats.copied += 1;
        stats.reused += 1;
    }
    // What could not be reused, and what is not in the bitmapped pack, through gix-pack: a delta
    // against an object this pack sends names it by id; one against an object the client has,
    // where thin packs are allowed, too; any other is re-deflated.
    if !later.is_empty() || !extra.is_empty() {
        let extra_set: std::collections::HashSet<&ObjectId> = extra.iter().collect();
        let later_set: std::collections::HashSet<ObjectId> = later.iter().copied().collect();
        let in_answer =
            |id: &gix_hash::oid| bitmap.pos(id).is_some_and(|p| sent.get(p)) || extra_set.contains(&id.to_owned());
        let decide =
            |id: &gix_hash::oid| if in_answer(id) || usable_thin(id) { DeltaBase::Thin } else { DeltaBase::Recompress };
        let before = |id: &gix_hash::oid| bitmap.pos(id).filter(|p| reused.get(*p)).map(|p| new_offset[p]);
        let earlier = Earlier { ofs_delta: options.ofs_delta, before: Some(&before) };
        let mut search = DeltaSearch::outside_the_bitmap(repo, selection, options, later.len() + extra.len());
        write_through_gix_pack(
            repo,
            later.iter().chain(extra).copied(),
            decide,
            (options.packs)(),
            &mut answer,
            earlier,
            Some((&mut search, options.progress_every, &|id| bitmap.pos(id).is_some())),
            |entry| {
                stats.entries += 1;
                match entry.kind {
                    output::entry::Kind::DeltaOid { .. } => stats.thin_deltas += 1,
                    output::entry::Kind::Base(_) | output::entry::Kind::DeltaRef { .. }
                        if later_set.contains(&entry.id) =>
                    {
                        stats.re_deflated += 1
                    }
                    _ => stats.copied += 1,
                }
            },
        )?;
        // The search's deltas name their bases by id too, and are none of the stored thin ones.
        stats.thin_deltas -= search.found;
        stats.deltas_computed = search.found;
    }
    stats.bytes = answer.finish()?;
    if stats.entries != total as usize {
        return Err(PackError::corrupt(format!("wrote {} entries of the {total} announced", stats.entries)));
    }
    Ok(stats)
}
