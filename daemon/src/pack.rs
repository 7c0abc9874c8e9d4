//! Pack writing: a selection becomes a pack through gix-pack (`iter_from_counts_with_delta_bases`,
//! `PackCopyAndBaseObjects`, one thread: the caller's), streamed through side-band to any
//! `io::Write`. Unselected delta bases are added only when the client may read them; thin-pack
//! bases only when the client has them and may read them.

use std::cell::RefCell;
use std::io::{self, Write};
use std::rc::Rc;
use std::sync::Arc;

use gix_hash::ObjectId;
use gix_pack::data::output;
use gix_pack::data::output::entry::iter_from_counts::DeltaBase;
use gix_packetline::Channel;

use crate::error::ServeError;
use crate::protocol::pkt;
use crate::select::Selection;

/// How the pack travels inside the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `side-band-64k` (and every v2 packfile section): packets of up to 65515 payload bytes.
    SideBand64k,
    /// `side-band`: packets of up to 995 payload bytes.
    SideBand,
    /// Neither: the raw pack, and no progress.
    Raw,
}

/// Pack bytes, progress and errors multiplexed onto `out`. Pack data is gathered into full
/// packets: one write per packet, header and payload together.
pub struct Bands<W: Write> {
    out: W,
    framing: Framing,
    progress: bool,
    pending: Vec<u8>,
}

impl<W: Write> Bands<W> {
    pub fn new(out: W, framing: Framing, progress: bool) -> Self {
        let cap = match framing {
            Framing::SideBand64k => pkt::MAX_SIDEBAND_64K,
            Framing::SideBand => pkt::MAX_SIDEBAND,
            Framing::Raw => 64 * 1024,
        };
        Bands {
            out,
            framing,
            progress: progress && framing != Framing::Raw,
            pending: Vec::with_capacity(cap),
        }
    }

    fn max_payload(&self) -> usize {
        self.pending.capacity()
    }

    fn emit(&mut self, band: Channel, data: &[u8]) -> io::Result<()> {
        match self.framing {
            Framing::Raw => self.out.write_all(data),
            _ => {
                let mut w = pkt::Writer { buf: Vec::with_capacity(data.len() + 5) };
                w.band(band, data);
                self.out.write_all(&w.buf)
            }
        }
    }

    fn emit_pending(&mut self) -> io::Result<()> {
        if !self.pending.is_empty() {
            let cap = self.max_payload();
            let data = std::mem::replace(&mut self.pending, Vec::with_capacity(cap));
            self.emit(Channel::Data, &data)?;
        }
        Ok(())
    }

    /// A progress message (band 2), unless the client asked for none.
    pub fn progress(&mut self, message: &str) -> io::Result<()> {
        if self.progress {
            self.emit_pending()?;
            self.emit(Channel::Progress, message.as_bytes())?;
        }
        Ok(())
    }

    /// Output of the server's side (hooks) for the client to show (band 2, `remote: …`), quiet
    /// or not; raw framing cannot carry it.
    pub fn remote_message(&mut self, message: &[u8]) -> io::Result<()> {
        if self.framing == Framing::Raw || message.is_empty() {
            return Ok(());
        }
        self.emit_pending()?;
        let max = self.max_payload();
        for chunk in message.chunks(max) {
            self.emit(Channel::Progress, chunk)?;
        }
        Ok(())
    }

    /// A fatal error for the client (band 3; raw framing cannot carry one).
    pub fn error(&mut self, message: &str) -> io::Result<()> {
        self.emit_pending()?;
        if self.framing != Framing::Raw {
            let mut message = message.to_owned();
            message.truncate(pkt::MAX_SIDEBAND.min(message.len()));
            self.emit(Channel::Error, format!("error: {message}\n").as_bytes())?;
        }
        Ok(())
    }

    /// Emit what is pending and return the inner writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.emit_pending()?;
        Ok(self.out)
    }
}

impl<W: Write> Write for Bands<W> {
    fn write(&mut self, mut data: &[u8]) -> io::Result<usize> {
        let written = data.len();
        while !data.is_empty() {
            let room = self.max_payload() - self.pending.len();
            let take = room.min(data.len());
            self.pending.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.pending.len() == self.max_payload() {
                self.emit_pending()?;
            }
        }
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        // Packets stay full: pending data leaves with the next packet or at `finish`.
        Ok(())
    }
}

/// Verbatim reuse: the selection is every object of one pack (a bitmap said so) and maybe some
/// objects outside it (`extra`, pushed since the repack). The pack file's entries go out as they
/// are — no object decoded; the extra objects follow, as gix-pack gives them, a delta against an
/// object of the big pack referring to it by id (it is in this pack). Header count and trailer
/// checksum are written for the whole; without extras the file is sent as it is.
fn write_verbatim<W: Write>(repo: &gix::Repository, pack: &std::path::Path, objects: usize, extra: &[ObjectId], bands: &mut Bands<W>) -> Result<Stats, ServeError> {
    use std::io::Read;
    let gone = |err: std::io::Error| if is_disconnect(&err) { ServeError::Disconnected } else { ServeError::Io(err) };
    let hash = repo.object_hash();
    let hash_len = hash.len_in_bytes() as u64;
    let mut file = std::fs::File::open(pack)?;
    let file_len = file.metadata()?.len();
    let mut header = [0u8; 12];
    file.read_exact(&mut header)?;
    let count = u32::from_be_bytes(header[8..12].try_into().expect("four bytes"));
    if &header[..4] != b"PACK" || count as usize != objects || file_len < 12 + hash_len {
        return Err(ServeError::pack(format!("{}: not the pack the bitmap describes", pack.display())));
    }
    let total = u32::try_from(objects + extra.len()).map_err(|_| ServeError::pack("more than 2^32 objects"))?;
    header[8..12].copy_from_slice(&total.to_be_bytes());
    // Without extras the file's own trailer is right; with them, everything is hashed anew.
    let mut hasher = (!extra.is_empty()).then(|| gix_hash::hasher(hash));
    let mut emit = |bands: &mut Bands<W>, data: &[u8]| -> Result<(), ServeError> {
        if let Some(h) = hasher.as_mut() {
            h.update(data);
        }
        bands.write_all(data).map_err(gone)
    };
    emit(bands, &header)?;
    let mut bytes = header.len() as u64;
    let entries_end = if extra.is_empty() { file_len } else { file_len - hash_len };
    let mut left = entries_end - 12;
    let mut buf = vec![0u8; 256 * 1024];
    while left > 0 {
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = file.read(&mut buf[..want])?;
        if n == 0 {
            return Err(ServeError::pack(format!("{}: shorter than it says", pack.display())));
        }
        emit(bands, &buf[..n])?;
        bytes += n as u64;
        left -= n as u64;
    }
    let mut stats = Stats { entries: objects, copied: objects, verbatim: true, ..Stats::default() };
    if let Some(mut hasher) = hasher {
        use gix_pack::data::output;
        let counts: Vec<output::Count> = extra.iter().map(|id| output::Count { id: *id, entry_pack_location: output::count::PackLocation::NotLookedUp }).collect();
        let mut db = repo.objects.clone().into_inner();
        db.prevent_pack_unload();
        // A delta whose base is in the big pack refers to it by id (it is in this answer); any
        // other base is not, and its delta is re-deflated.
        let index = gix_pack::index::File::at(pack.with_extension("idx"), hash).map_err(ServeError::pack)?;
        let (_, chunks) = output::entry::iter_from_counts_with_delta_bases(
            counts,
            db,
            Box::new(gix_utils::progress::Discard),
            output::entry::iter_from_counts::Options { thread_limit: Some(1), allow_thin_pack: true, ..Default::default() },
            Some(move |id: &gix_hash::oid| {
                if index.lookup(id).is_some() {
                    output::entry::iter_from_counts::DeltaBase::Thin
                } else {
                    output::entry::iter_from_counts::DeltaBase::Recompress
                }
            }),
        )
        .map_err(ServeError::pack)?;
        let mut offsets: Vec<u64> = Vec::with_capacity(extra.len());
        let mut offset = entries_end;
        for chunk in chunks {
            let (_, entries) = chunk.map_err(ServeError::pack)?;
            for entry in entries {
                if entry.is_invalid() {
                    return Err(ServeError::MissingObject(entry.id));
                }
                let header = entry.to_entry_header(gix_pack::data::Version::V2, |index| offset - offsets[index]);
                let mut out = Vec::with_capacity(entry.compressed_data.len() + 32);
                header.write_to(entry.decompressed_size as u64, &mut out)?;
                out.extend_from_slice(&entry.compressed_data);
                hasher.update(&out);
                bands.write_all(&out).map_err(gone)?;
                offsets.push(offset);
                offset += out.len() as u64;
                bytes += out.len() as u64;
                stats.entries += 1;
            }
        }
        let digest = hasher.try_finalize().map_err(ServeError::pack)?;
        bands.write_all(digest.as_bytes()).map_err(gone)?;
        bytes += hash_len;
    }
    stats.bytes = bytes;
    Ok(stats)
}

/// What a pack request asks for beyond the objects.
pub struct Options {
    pub thin_pack: bool,
    pub ofs_delta: bool,
    /// Add a selected delta's unselected base (one the client may read) to the pack instead of
    /// re-deflating the delta. Right for a clone, where the client has nothing; for a fetch the
    /// client most likely holds the base already, and a deep delta chain can add many objects it
    /// holds (measured: 22 added for 3 deltas on the corpus's linear fetch), so there the delta is
    /// re-deflated unless it can refer to a base the client is known to have (thin).
    pub include_unselected_bases: bool,
}

/// What went into a pack; counts, so they can be compared and snapshot.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub entries: usize,
    pub copied: usize,
    pub re_deflated: usize,
    pub bases_included: usize,
    pub thin_deltas: usize,
    pub bytes: u64,
    /// The pack file was sent as it is (verbatim reuse).
    pub verbatim: bool,
}

/// Write the pack of `selection` to `bands`. `readable` answers whether the client may be sent an
/// object (it is reachable from a ref the client may read); it is asked only about delta bases
/// outside the selection.
pub fn write<W: Write>(
    repo: &gix::Repository,
    selection: &Selection,
    options: Options,
    mut readable: impl FnMut() -> Result<Arc<crate::repo::Readable>, ServeError>,
    bands: &mut Bands<W>,
) -> Result<Stats, ServeError> {
    if let Some(pack) = &selection.whole_pack
        && options.ofs_delta
    {
        return write_verbatim(repo, pack, selection.objects.len() - selection.extra.len(), &selection.extra, bands);
    }
    let counts: Vec<output::Count> = selection
        .objects
        .iter()
        .map(|id| output::Count {
            id: *id,
            entry_pack_location: output::count::PackLocation::NotLookedUp,
        })
        .collect();
    let mut db = repo.objects.clone().into_inner();
    db.prevent_pack_unload();
    // The decision function moves into gix-pack, so the one failure it can meet comes back through a cell.
    let readable_error: Rc<RefCell<Option<ServeError>>> = Rc::default();
    let decide = {
        let readable_error = readable_error.clone();
        let mut readable_set: Option<Arc<crate::repo::Readable>> = None;
        move |id: &gix_hash::oid| {
            // What this base would be, were the client allowed it; the (costly, cached) readable
            // set is consulted only when that is more than re-deflating.
            let wanted = if options.thin_pack && selection.client_has(id) {
                DeltaBase::Thin
            } else if options.include_unselected_bases {
                DeltaBase::Include
            } else {
                return DeltaBase::Recompress;
            };
            if readable_set.is_none() {
                match readable() {
                    Ok(set) => readable_set = Some(set),
                    Err(err) => {
                        readable_error.borrow_mut().get_or_insert(err);
                        return DeltaBase::Recompress;
                    }
                }
            }
            if readable_set.as_ref().is_some_and(|set| set.contains(id)) {
                wanted
            } else {
                DeltaBase::Recompress
            }
        }
    };
    let (num_entries, mut chunks) = output::entry::iter_from_counts_with_delta_bases(
        counts,
        db,
        Box::new(gix_utils::progress::Discard),
        output::entry::iter_from_counts::Options {
            thread_limit: Some(1),
            allow_thin_pack: options.thin_pack,
            ..Default::default()
        },
        Some(decide),
    )
    .map_err(ServeError::pack)?;
    if let Some(err) = readable_error.borrow_mut().take() {
        tracing::warn!(%err, "could not tell which delta bases are readable; their deltas were re-deflated");
    }
    let num_entries_u32 = u32::try_from(num_entries).map_err(|_| ServeError::pack("more than 2^32 objects"))?;

    // Without ofs-delta, a delta refers to its base by id; keep the ids written so far for that.
    let mut ids: Vec<ObjectId> = Vec::new();
    let mut missing = None;
    let entries = chunks.by_ref().map(|chunk| {
        let (_seq, mut entries) = chunk?;
        for entry in &mut entries {
            if entry.is_invalid() {
                missing.get_or_insert(entry.id);
            }
            if !options.ofs_delta {
                if let output::entry::Kind::DeltaRef { object_index } = entry.kind {
                    entry.kind = output::entry::Kind::DeltaOid { id: ids[object_index] };
                }
                ids.push(entry.id);
            }
        }
        Ok(entries)
    });
    let mut bytes = 0;
    let mut writer = output::bytes::FromEntriesIter::new(entries, &mut *bands, num_entries_u32, gix_pack::data::Version::V2, repo.object_hash());
    for step in writer.by_ref() {
        bytes += step.map_err(|err| {
            if is_disconnect(&err) { ServeError::Disconnected } else { ServeError::pack(err) }
        })?;
    }
    drop(writer);
    if missing.is_some() {
        return Err(ServeError::pack("an object to send is missing from the repository"));
    }
    let outcome = gix_parallel::Finalize::finalize(chunks).map_err(ServeError::pack)?;
    Ok(Stats {
        entries: num_entries,
        copied: outcome.objects_copied_from_pack,
        re_deflated: outcome.decoded_and_recompressed_objects,
        bases_included: outcome.delta_bases_included,
        thin_deltas: outcome.ref_delta_objects,
        bytes,
        verbatim: false,
    })
}

/// True when an error from writing the pack comes from the client going away.
fn is_disconnect(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<io::Error>()
            && io.kind() == io::ErrorKind::BrokenPipe
        {
            return true;
        }
        current = e.source();
    }
    err.to_string().contains("client disconnected")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_data_leaves_in_full_side_band_packets() {
        let mut bands = Bands::new(Vec::new(), Framing::SideBand64k, true);
        for _ in 0..3 {
            bands.write_all(&vec![7u8; 50_000]).unwrap();
        }
        let out = bands.finish().unwrap();
        let lines = pkt::read_all(&out).unwrap();
        let sizes: Vec<usize> = lines
            .iter()
            .map(|l| match l {
                pkt::Line::Data(d) => d.len() - 1,
                _ => 0,
            })
            .collect();
        assert_eq!(sizes, vec![pkt::MAX_SIDEBAND_64K, pkt::MAX_SIDEBAND_64K, 150_000 - 2 * pkt::MAX_SIDEBAND_64K]);
    }

    /// Records every write call it receives.
    #[derive(Default)]
    struct Calls(Vec<Vec<u8>>);

    impl Write for Calls {
        fn write(&mut self, data: &[u8]) -> io::Result<usize> {
            self.0.push(data.to_vec());
            Ok(data.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_packet_leaves_in_one_write_with_its_header() {
        let mut bands = Bands::new(Calls::default(), Framing::SideBand64k, true);
        bands.progress("Enumerating objects: 3, done.\n").unwrap();
        for chunk in [&[1u8; 10][..], &[2u8; 70_000], &[3u8; 5]] {
            bands.write_all(chunk).unwrap();
        }
        bands.error("boom").unwrap();
        let calls = bands.finish().unwrap().0;
        assert!(!calls.is_empty());
        for call in &calls {
            let lines = pkt::read_all(call).expect("a whole pkt-line");
            assert_eq!(lines.len(), 1, "one write, one packet: {} bytes", call.len());
        }
        assert_eq!(calls.len(), 1 + 2 + 1, "progress, two data packets (65515 + rest), error");
    }

    #[test]
    fn progress_is_dropped_when_the_client_asked_for_none() {
        let mut bands = Bands::new(Vec::new(), Framing::SideBand64k, false);
        bands.progress("Counting\n").unwrap();
        assert!(bands.finish().unwrap().is_empty());
    }
}
