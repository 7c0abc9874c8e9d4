//! Repository access, pack files: a repository's packs as gix-pack reads them — each index with
//! its data mapped and the size of every entry (up to the next in pack order, as git sizes
//! entries from its reverse index) — so pack writing copies an object's stored entry without
//! inflating it to learn where the entry ends, which gix-odb's `location_by_oid` does for every
//! object (a ninth of a clone of git.git). [`Locating`] is the object database gix-pack's entry
//! generation is given: it locates entries here and finds objects through gix-odb; an object in
//! no pack listed here (loose, in an alternate, in a pack newer than the list) is not located and
//! gix-pack deflates it anew, as it does a loose object.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use gix_pack::data::entry::Location;

/// One pack: its index, its data (mapped when opened: a repack that deletes the files meanwhile
/// does not take them from under a request) and each entry's size, by index position.
struct PackFile {
    index: gix_pack::index::File,
    data: crate::pack_ranges::PackData,
    sizes: Vec<u64>,
}

/// The packs of one repository, in gix-odb's look-up order.
pub struct Packs {
    files: Vec<PackFile>,
    /// Bytes of entries copied out of the maps since their pages were last let go
    /// ([`Packs::copied`]).
    copied: std::sync::atomic::AtomicUsize,
    /// Whether the maps' pages are let go as entries are read ([`Packs::letting_pages_go`]).
    let_pages_go: bool,
}

impl std::fmt::Debug for Packs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packs").field("packs", &self.files.len()).finish()
    }
}

/// A pack that could not be read as one.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct PackError {
    path: PathBuf,
    message: String,
}

impl Packs {
    /// The packs of `pack_dir` (`objects/pack`): every `.idx` with its `.pack`, git's temporary
    /// files (still being written) left out.
    pub fn open(pack_dir: &Path, hash: gix_hash::Kind) -> Result<Packs, PackError> {
        Self::from_files(&index_files(pack_dir), hash)
    }

    fn from_files(listed: &[(PathBuf, std::fs::Metadata)], hash: gix_hash::Kind) -> Result<Packs, PackError> {
        let mut files = Vec::new();
        for (idx, _) in listed {
            let error = |e: &dyn std::fmt::Display| PackError { path: idx.clone(), message: e.to_string() };
            let opened = gix_pack::index::File::at(idx, hash).map_err(|e| error(&e)).and_then(|index| {
                Ok((index, crate::pack_ranges::open_data(&idx.with_extension("pack"), hash).map_err(|e| error(&e))?))
            });
            let (index, data) = match opened {
                Ok(opened) => opened,
                // Deleted since it was listed (a repack replaced it): not one of the packs now,
                // and its objects are in the pack that replaced it, or located by gix-odb.
                Err(_) if !idx.is_file() || !idx.with_extension("pack").is_file() => continue,
                Err(err) => return Err(err),
            };
            if index.pack_checksum() != data.checksum() || index.num_objects() != data.num_objects() {
                return Err(error(&"the index is not of its pack"));
            }
            let order = read_rev(&idx.with_extension("rev"), index.num_objects() as usize, &index, hash);
            let sizes = entry_sizes(&index, data.pack_end() as u64, order)
                .ok_or_else(|| error(&"entries overlap or run past the pack's end"))?;
            files.push(PackFile { index, data, sizes });
        }
        Ok(Packs { files, copied: Default::default(), let_pages_go: false })
    }

    /// These packs, their maps' resident pages let go every [`Self::RESIDENT_BYTES`] read
    /// ([`Self::copied`]): for a pass over most of them once (a repack), whose peak would
    /// otherwise count every page of every pack. Not for serving: the packs a server keeps open
    /// are read again by every request, and pages let go are faulted back in (a clone of tokio
    /// spent a tenth of its CPU there).
    pub fn letting_pages_go(mut self) -> Packs {
        self.let_pages_go = true;
        self
    }

    /// Note `bytes` of entries copied out of the maps; every [`Self::RESIDENT_BYTES`] of them, let
    /// the maps' resident pages go. A pack written from these packs copies nearly every entry,
    /// once: without this every page of every pack stayed resident until the writer was done
    /// (counted in the process's peak beside the copies themselves), where git's pack-objects
    /// holds no copies. The pages stay in the page cache; one read again faults back in.
    fn copied(&self, bytes: usize) {
        use std::sync::atomic::Ordering;
        if !self.let_pages_go {
            return;
        }
        if self.copied.fetch_add(bytes, Ordering::Relaxed) + bytes < Self::RESIDENT_BYTES {
            return;
        }
        self.copied.store(0, Ordering::Relaxed);
        for file in &self.files {
            let_resident_pages_go(&file.data, 0..file.data.data_len() as u64);
        }
    }

    /// The stored data (deflated, after the entry's header) a [`Hollow::PACKED`] mark stands
    /// for, read from its pack's map (counted as copied: [`Self::letting_pages_go`]); `None` for
    /// anything else.
    pub fn hollow_data(&self, mark: &[u8]) -> Option<&[u8]> {
        let (pack_id, offset, len) = Hollow::packed_at(mark)?;
        let data = self.files.get(pack_id as usize)?.data.entry_slice(offset..offset + u64::from(len))?;
        // A search reads them in its order, not the pack's: each read faults its neighbours in.
        self.copied(data.len().max(Self::HEADER_READ));
        Some(data)
    }

    /// Bytes copied out of the maps between two releases of their resident pages.
    const RESIDENT_BYTES: usize = 8 << 20;

    /// What reading an entry's header counts for: what a read fault of a file mapping makes
    /// resident ([`FAULT_AROUND`]). A repack locates every object in every pack holding it, and
    /// those reads, not the copies, kept most of a pushed repository's packs resident.
    const HEADER_READ: usize = FAULT_AROUND;

    /// Where `id`'s entry is and how long it is: the smallest copy stored as a delta (pushes store
    /// an object against whatever base the pusher had; the smallest delta is most often against
    /// the closest version), else the first copy. After pushes an object is often in two packs: as the delta it came as, and whole in
    /// a later pack (a thin push's base, appended to complete it). The whole copy would go out
    /// whole where the delta goes out as it is (its base sent too, or the client's), as git's
    /// pack-objects prefers a stored delta; gix-pack names a base chosen from another pack by id,
    /// and re-deflates a delta whose base's chain would lead back to it (patches/gix-pack/0001).
    pub fn locate(&self, id: &gix_hash::oid) -> Option<Location> {
        let mut first = None;
        let mut smallest_delta: Option<Location> = None;
        for (pack_id, file) in self.files.iter().enumerate() {
            let Some(i) = file.index.lookup(id) else { continue };
            let location = Location {
                pack_id: pack_id as u32,
                pack_offset: file.index.pack_offset_at_index(i),
                entry_size: usize::try_from(file.sizes[i as usize]).ok()?,
            };
            // A header read makes its page and its neighbours resident ([`Self::HEADER_READ`]).
            self.copied(Self::HEADER_READ);
            if file.data.entry(location.pack_offset).is_ok_and(|entry| entry.header.is_delta()) {
                if smallest_delta.as_ref().is_none_or(|s| location.entry_size < s.entry_size) {
                    smallest_delta = Some(location);
                }
                continue;
            }
            first.get_or_insert(location);
        }
        smallest_delta.or(first)
    }

    /// The pack `id` is stored whole in, if it is in one and in none as a delta ([`Self::locate`]
    /// would give that delta): its writer tried it against the other whole objects there.
    pub fn stored_whole_in(&self, id: &gix_hash::oid) -> Option<u32> {
        let location = self.locate(id)?;
        let file = &self.files[location.pack_id as usize];
        self.copied(Self::HEADER_READ);
        let whole = file.data.entry(location.pack_offset).is_ok_and(|entry| !entry.header.is_delta());
        whole.then_some(location.pack_id)
    }
}

/// What a read fault of a file mapping makes resident: the kernel maps the cached pages around
/// the one read too (its fault-around, 64 KiB by default).
pub const FAULT_AROUND: usize = 64 << 10;

/// Let the resident pages of every map of a pack file of `pack_dir` in this process go (gix-odb's
/// own maps too, found in `/proc/self/maps`), as [`let_resident_pages_go`] does for one: for a
/// walk over most of a repository's commits and trees through gix-odb (a repack's), whose reads
/// otherwise keep most of its packs resident until it is done.
pub fn let_mapped_pages_go(pack_dir: &Path) {
    #[cfg(target_os = "linux")]
    {
        let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return };
        for line in maps.lines() {
            // start-end perms offset dev inode path
            let mut fields = line.split_whitespace();
            let (Some(range), Some(perms)) = (fields.next(), fields.next()) else { continue };
            let Some(path) = fields.nth(3).map(Path::new) else { continue };
            if perms != "r--p" || path.parent() != Some(pack_dir) || path.extension().is_none_or(|e| e != "pack") {
                continue;
            }
            let Some((Ok(start), Ok(end))) =
                range.split_once('-').map(|(s, e)| (usize::from_str_radix(s, 16), usize::from_str_radix(e, 16)))
            else {
                continue;
            };
            // SAFETY: a private read-only map of a file: its pages are read again from the file
            // (the page cache) when next touched; nothing is unmapped.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
            }
        }
    }
}

/// Let the resident pages of `pack`'s map within `range` go (the whole pages in it, and the one
/// it ends in): they stay in the page cache, and a later read faults them back in. What a pass
/// over a pack has read no longer counts in the process's resident set.
pub fn let_resident_pages_go<T: std::ops::Deref<Target = [u8]>>(
    pack: &gix_pack::data::File<T>,
    range: std::ops::Range<u64>,
) {
    #[cfg(target_os = "linux")]
    if let Some(map) = pack.entry_slice(0..pack.data_len() as u64) {
        const PAGE: usize = 4096;
        let start = usize::try_from(range.start).unwrap_or(usize::MAX).min(map.len()).div_ceil(PAGE) * PAGE;
        let end = usize::try_from(range.end).unwrap_or(usize::MAX).min(map.len());
        if start < end {
            // SAFETY: the map is a private, read-only mapping of a pack file, which is never
            // written, and `start` is page-aligned within it: MADV_DONTNEED drops page-table
            // entries, and a later read of any byte faults the same byte in from the file. No
            // reference into it changes.
            unsafe {
                libc::madvise(map[start..].as_ptr() as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
            }
        }
    }
}

/// Each entry's size by index position: the distance to the next entry in pack order (the
/// `.rev` file's `order` when there is one, else the index's offsets sorted), the last one's to
/// the pack's trailer. `None` if two entries start at one offset or one starts past
/// `entries_end`.
fn entry_sizes(index: &gix_pack::index::File, entries_end: u64, order: Option<Vec<u32>>) -> Option<Vec<u64>> {
    let n = index.num_objects();
    let order: Vec<(u64, u32)> = match order {
        Some(order) => order.into_iter().map(|i| (index.pack_offset_at_index(i), i)).collect(),
        None => {
            let mut order: Vec<(u64, u32)> = (0..n).map(|i| (index.pack_offset_at_index(i), i)).collect();
            order.sort_unstable();
            order
        }
    };
    let mut sizes = vec![0; n as usize];
    for (k, (offset, i)) in order.iter().enumerate() {
        let end = order.get(k + 1).map_or(entries_end, |(next, _)| *next);
        sizes[*i as usize] = end.checked_sub(*offset).filter(|size| *size > 0)?;
    }
    Some(sizes)
}

/// The `.rev` file's pack order, when it is there and sound.
pub fn read_rev(path: &Path, n: usize, index: &gix_pack::index::File, hash: gix_hash::Kind) -> Option<Vec<u32>> {
    let data = std::fs::read(path).ok()?;
    let body = rev_table(&data, n, &index.pack_checksum(), hash)?;
    let order: Vec<u32> = body.chunks_exact(4).map(|c| u32::from_be_bytes(c.try_into().expect("four"))).collect();
    order.iter().all(|i| (*i as usize) < n).then_some(order)
}

/// The table of a `.rev` file's bytes (`RIDX`, version 1, hash id, the table, the pack's
/// checksum, its own) for a pack of `n` objects with the checksum `pack_checksum`; `None` if it
/// is not one, or not that pack's.
pub fn rev_table<'a>(
    data: &'a [u8],
    n: usize,
    pack_checksum: &gix_hash::oid,
    hash: gix_hash::Kind,
) -> Option<&'a [u8]> {
    if data.get(0..4)? != b"RIDX" || u32::from_be_bytes(data.get(4..8)?.try_into().ok()?) != 1 {
        return None;
    }
    let checksum = data.get(12 + 4 * n..12 + 4 * n + hash.len_in_bytes())?;
    (checksum == pack_checksum.as_bytes()).then(|| &data[12..12 + 4 * n])
}

/// The `.idx` files of `pack_dir` with a `.pack` beside them, git's temporaries left out, in the
/// order gix-odb looks packs up in and numbers them (the largest index first, equal ones in
/// directory order): an object two packs hold is located in the pack gix-odb would have found
/// it in, and entries come out in the order they did when gix-odb located them.
fn index_files(pack_dir: &Path) -> Vec<(PathBuf, std::fs::Metadata)> {
    let mut files: Vec<(PathBuf, std::fs::Metadata)> = std::fs::read_dir(pack_dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.extension().is_some_and(|e| e == "idx") && !is_temporary(p) && p.with_extension("pack").is_file()
                })
                .filter_map(|p| Some((p.clone(), std::fs::metadata(&p).ok()?)))
                .collect()
        })
        .unwrap_or_default();
    // Stable, as gix-odb's: equal sizes stay in directory order.
    files.sort_by_key(|(_, meta)| std::cmp::Reverse(meta.len()));
    files
}

/// A file git is still writing: `git repack` makes its pack, index and bitmap as
/// `.tmp-<pid>-pack-*` and renames them to `pack-*` when done (pack-objects' `tmp_*` likewise).
pub fn is_temporary(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|name| name.as_encoded_bytes().starts_with(b".") || name.as_encoded_bytes().starts_with(b"tmp_"))
}

/// Each repository's pack files (or the `None` they were refused with), per state of its pack
/// directory: what [`of`] keeps.
pub type Cache = crate::repo::cache::PerRepository<Option<Arc<Packs>>>;

/// The pack files of a repository, read once per state of its pack directory (names, sizes and
/// modification times of the index files); `None`, logged once, when one does not read as a pack.
pub fn of(cache: &Cache, served: &crate::repo::Served, repo: &gix::Repository) -> Option<Arc<Packs>> {
    let listed = index_files(&repo.objects.store_ref().path().join("pack"));
    let cached = cache.get_or_compute(
        served,
        listing_state(&listed),
        || -> Result<Option<Arc<Packs>>, std::convert::Infallible> {
            match Packs::from_files(&listed, repo.object_hash()) {
                Ok(packs) => Ok(Some(Arc::new(packs))),
                Err(err) => {
                    tracing::warn!(repo = %served.name, %err, "pack entries located through the object database");
                    Ok(None)
                }
            }
        },
    );
    match cached {
        Ok(packs) => (*packs).clone(),
        Err(never) => match never {},
    }
}

/// A fingerprint of the pack directory: its index files' names, sizes and modification times
/// (a repack, a push's new pack, a pack deleted).
pub fn directory_state(repo: &gix::Repository) -> u64 {
    listing_state(&index_files(&repo.objects.store_ref().path().join("pack")))
}

fn listing_state(listed: &[(PathBuf, std::fs::Metadata)]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for (idx, meta) in listed {
        (idx, meta.len(), meta.modified().ok()).hash(&mut h);
    }
    h.finish()
}

/// The object database pack generation reads: objects through gix-odb, entries located in
/// [`Packs`] when there are (its pack ids are positions in that list, never gix-odb's), else
/// by gix-odb as well.
#[derive(Clone)]
pub struct Locating {
    pub odb: gix::odb::Handle,
    pub packs: Option<Arc<Packs>>,
    /// Where each entry copied out of `packs` came from, for a writer that sends the stored
    /// bytes instead of the copy ([`Copies`]).
    pub copies: Option<Arc<Copies>>,
    /// A repack's: entries are left [`Hollow`], their data read where it is needed.
    pub hollow: Option<Arc<Hollow>>,
}

/// A repack's entries without their data (git's pack-objects holds none either: it reads each
/// entry as it searches or writes it). An entry of `packs` gets, in place of its stored data,
/// [`Hollow::PACKED`] and where that data lies (pack, offset, length: [`Packs::hollow_data`]);
/// an object gix-pack would decode and deflate anew (loose, or a delta it cannot keep) gets
/// [`Hollow::LOOSE`] and its size, noted here, and is read from the object database when the
/// search or the writer needs it. Neither mark can start a zlib stream (its method nibble is not
/// 8), so no stored or deflated data is ever mistaken for one.
#[derive(Default)]
pub struct Hollow {
    loose: std::sync::Mutex<std::collections::HashMap<gix_hash::ObjectId, usize>>,
}

impl Hollow {
    /// The mark of an entry whose data is in a pack map: 0xFF, then pack id (u32), offset of the
    /// data (u64) and its length (u32), little-endian.
    pub const PACKED: u8 = 0xFF;
    /// The mark of an entry whose data is read from the object database.
    pub const LOOSE: u8 = 0xFE;

    /// The size of `id`, noted when its entry was left [`Self::LOOSE`]; forgotten when taken.
    pub fn take_loose(&self, id: &gix_hash::oid) -> Option<usize> {
        self.loose.lock().expect("not poisoned").remove(id)
    }

    /// Whether `data` (an entry's) is one of the marks, not data.
    pub fn is_mark(data: &[u8]) -> bool {
        matches!(data.first(), Some(&(Self::PACKED | Self::LOOSE)))
    }

    /// Whether `data` (an entry's) is the [`Self::LOOSE`] mark.
    pub fn is_loose(data: &[u8]) -> bool {
        data == [Self::LOOSE]
    }

    /// Where the data a [`Self::PACKED`] mark stands for lies: pack id, offset, length.
    pub fn packed_at(mark: &[u8]) -> Option<(u32, u64, u32)> {
        let (&Self::PACKED, rest) = mark.split_first()? else { return None };
        let rest: &[u8; 16] = rest.try_into().ok()?;
        let pack_id = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes"));
        let offset = u64::from_le_bytes(rest[4..12].try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(rest[12..].try_into().expect("4 bytes"));
        Some((pack_id, offset, len))
    }

    fn packed(pack_id: u32, offset: u64, len: u32, header: &[u8]) -> Vec<u8> {
        let mut mark = Vec::with_capacity(header.len() + 17);
        mark.extend_from_slice(header);
        mark.push(Self::PACKED);
        mark.extend_from_slice(&pack_id.to_le_bytes());
        mark.extend_from_slice(&offset.to_le_bytes());
        mark.extend_from_slice(&len.to_le_bytes());
        mark
    }
}

/// Where the entries a [`Locating`] copied out of the pack maps lie in them, by the address of
/// each copy: gix-pack cuts the stored header off the front of the copy and keeps its
/// allocation, so a writer holding gix-pack's entry finds the stored entry (header and data) by
/// the address of the entry's data, and sends it as a range of the pack file
/// ([`crate::pack_ranges`]) instead of the copy. A hint only, forgotten when taken: an address
/// is reused once a copy is freed, so the taker compares the stored bytes with the copy's.
#[derive(Default)]
pub struct Copies(std::sync::Mutex<std::collections::HashMap<usize, (usize, usize)>>);

impl Copies {
    fn note(&self, copy: &[u8], stored: &[u8]) {
        self.0.lock().expect("not poisoned").insert(copy.as_ptr() as usize, (stored.as_ptr() as usize, stored.len()));
    }

    /// The stored entry (header and data, in the map of its pack) that `data`, an entry's data
    /// from gix-pack, was last noted as copied from — if its map is still registered. Not yet
    /// compared with `data`.
    pub fn take(&self, data: &[u8]) -> Option<crate::pack_ranges::Range> {
        let (at, len) = self.0.lock().expect("not poisoned").remove(&(data.as_ptr() as usize))?;
        crate::pack_ranges::Range::at(at, len)
    }
}

impl gix_pack::Find for Locating {
    fn contains(&self, id: &gix_hash::oid) -> bool {
        gix_pack::Find::contains(&self.odb, id)
    }

    fn try_find_cached<'a>(
        &self,
        id: &gix_hash::oid,
        buffer: &'a mut Vec<u8>,
        pack_cache: &mut dyn gix_pack::cache::DecodeEntry,
    ) -> gix_error::Result<Option<(gix_object::Data<'a>, Option<Location>)>> {
        if let Some(hollow) = &self.hollow
            && let Ok(Some(header)) = gix_odb::Header::try_header(&self.odb, id)
        {
            // gix-pack makes an entry of nothing; the writer gives it its mark and size.
            hollow.loose.lock().expect("not poisoned").insert(id.to_owned(), header.size() as usize);
            buffer.clear();
            return Ok(Some((
                gix_object::Data { kind: header.kind(), object_hash: id.kind(), data: buffer.as_slice() },
                None,
            )));
        }
        let first = gix_pack::Find::try_find_cached(&self.odb, id, buffer, pack_cache)
            .map(|found| found.map(|(data, location)| (data.kind, location)));
        let (kind, location) = match first {
            // With `packs`, the location gix-odb gives is in its own pack ids: not passed on.
            Ok(Some((kind, location))) => (kind, location.filter(|_| self.packs.is_none())),
            // The object is in no pack or loose file of this handle's snapshot, or its entry did
            // not decode: what gix-odb answers while a repack swaps packs under a snapshot (a
            // loose object packed and deleted between two looks; a pack's slot refilled by
            // another pack, whose entry at the old offset is not this object). Once more through
            // a fresh snapshot and no cache, as git re-reads the pack directory on a miss; its
            // location is left out (the first snapshot's pack ids may not be the fresh one's).
            Ok(None) | Err(_) => {
                let fresh = self.odb.clone();
                match gix_pack::Find::try_find_cached(&fresh, id, buffer, &mut gix_pack::cache::Never)? {
                    Some((data, _)) => {
                        tracing::debug!(%id, "object found again through a fresh snapshot of the packs");
                        (data.kind, None)
                    }
                    None => return Ok(None),
                }
            }
        };
        Ok(Some((gix_object::Data { kind, object_hash: id.kind(), data: buffer.as_slice() }, location)))
    }

    fn location_by_oid(&self, id: &gix_hash::oid, buf: &mut Vec<u8>) -> gix_error::Result<Option<Location>> {
        match &self.packs {
            Some(packs) => Ok(packs.locate(id)),
            None => gix_pack::Find::location_by_oid(&self.odb, id, buf),
        }
    }

    fn pack_offsets_and_oid(
        &self,
        pack_id: u32,
    ) -> gix_error::Result<Option<Vec<(gix_pack::data::Offset, gix_hash::ObjectId)>>> {
        match &self.packs {
            Some(packs) => Ok(packs
                .files
                .get(pack_id as usize)
                .map(|file| file.index.iter().map(|e| (e.pack_offset, e.oid)).collect())),
            None => gix_pack::Find::pack_offsets_and_oid(&self.odb, pack_id),
        }
    }

    fn entry_by_location(&self, location: &Location) -> Option<gix_pack::find::Entry> {
        let Some(packs) = &self.packs else {
            return gix_pack::Find::entry_by_location(&self.odb, location);
        };
        let file = packs.files.get(location.pack_id as usize)?;
        let data = file.data.entry_slice(location.entry_range(location.pack_offset))?;
        if self.hollow.is_some()
            && let Ok(entry) = file.data.entry(location.pack_offset)
            && let Ok(len) = u32::try_from(data.len() - entry.header_size().min(data.len()))
            && len > 0
        {
            let header = &data[..entry.header_size()];
            let mark = Hollow::packed(location.pack_id, entry.data_offset, len, header);
            packs.copied(Packs::HEADER_READ);
            return Some(gix_pack::find::Entry { data: mark, version: file.data.version() });
        }
        // Also a read of a header alone (gix-pack's base inclusion reads every entry's) makes
        // its page and its neighbours resident.
        packs.copied(data.len().max(Packs::HEADER_READ));
        let copy = data.to_owned();
        if let Some(copies) = &self.copies {
            copies.note(&copy, data);
        }
        Some(gix_pack::find::Entry { data: copy, version: file.data.version() })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::process::Command;

    /// git with a fixed identity and no automatic gc, in `dir`, `input` on its stdin; its stdout.
    pub(crate) fn git(dir: &Path, args: &[&str], input: Option<&str>) -> String {
        use std::io::Write;
        let mut child = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t", "-c", "gc.auto=0"])
            .args(args)
            .current_dir(dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input.unwrap_or_default().as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    /// Three packs (a deltified one, an incremental one, one repeating objects of both) and a
    /// loose object.
    fn repository() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q"], None);
        let mut text: String = (0..400).map(|i| format!("line {i} of a file that changes a little\n")).collect();
        for round in 0..6 {
            text.push_str(&format!("round {round}\n"));
            std::fs::write(d.join("a.txt"), &text).unwrap();
            std::fs::write(d.join(format!("f{round}")), format!("{round}\n")).unwrap();
            git(d, &["add", "."], None);
            git(d, &["commit", "-qm", &format!("c{round}")], None);
            if round == 2 {
                git(d, &["repack", "-adq", "--window=10"], None);
            }
        }
        git(d, &["repack", "-dq"], None);
        let some = git(d, &["rev-list", "--objects", "HEAD~3"], None);
        git(d, &["pack-objects", "-q", ".git/objects/pack/pack"], Some(&some));
        git(d, &["hash-object", "-w", "--stdin"], Some("loose\n"));
        dir
    }

    /// Resident kilobytes of the maps of `path` in this process, by /proc/self/smaps.
    fn resident_kb(path: &Path) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut in_map = false;
        let mut kb = 0;
        for line in smaps.lines() {
            if line.contains(" /") || line.ends_with(']') || line.split_whitespace().count() == 5 {
                in_map = line.ends_with(&*path.to_string_lossy());
            } else if in_map && let Some(rss) = line.strip_prefix("Rss:") {
                kb += rss.trim().trim_end_matches(" kB").parse::<u64>().unwrap();
            }
        }
        kb
    }

    /// A repository of one commit of `files` blobs of a page of noise each (xorshift from
    /// `seed`), in one pack.
    fn pack_of_page_blobs(files: usize, seed: u64) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q"], None);
        let mut state = seed;
        for i in 0..files {
            std::fs::write(d.join(format!("f{i}")), noise(&mut state, 4096)).unwrap();
        }
        git(d, &["add", "."], None);
        git(d, &["commit", "-qm", "blobs"], None);
        git(d, &["repack", "-adq"], None);
        dir
    }

    /// `len` bytes no compressor makes smaller (xorshift from `state`).
    fn noise(state: &mut u64, len: usize) -> Vec<u8> {
        (0..len)
            .map(|_| {
                *state ^= *state << 13;
                *state ^= *state >> 7;
                *state ^= *state << 17;
                *state as u8
            })
            .collect()
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn copying_entries_lets_the_maps_resident_pages_go_every_few_megabytes_and_they_read_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q"], None);
        // Incompressible content: the pack is as large as it.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        std::fs::write(d.join("noise"), noise(&mut state, 3 * Packs::RESIDENT_BYTES / 2)).unwrap();
        git(d, &["add", "."], None);
        git(d, &["commit", "-qm", "noise"], None);
        git(d, &["repack", "-adq"], None);
        let packs = Packs::open(&d.join(".git/objects/pack"), gix_hash::Kind::Sha1).unwrap().letting_pages_go();
        let file = &packs.files[0];
        let path = file.data.path().canonicalize().unwrap();
        let whole = file.data.entry_slice(0..file.data.data_len() as u64).unwrap();
        let before: u64 = whole.iter().step_by(4096).map(|b| u64::from(*b)).sum();
        let touched = resident_kb(&path);
        assert!(touched * 1024 >= Packs::RESIDENT_BYTES as u64, "every page read: {touched} kB resident");
        packs.copied(Packs::RESIDENT_BYTES / 2);
        assert_eq!(resident_kb(&path), touched, "below the threshold nothing is let go");
        packs.copied(Packs::RESIDENT_BYTES / 2);
        let after = resident_kb(&path);
        assert!(after * 8 < touched, "past it the pages go: {touched} kB resident before, {after} kB after");
        // What the map holds reads the same, faulted in again from the file.
        assert_eq!(whole.iter().step_by(4096).map(|b| u64::from(*b)).sum::<u64>(), before);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn locating_every_object_lets_the_pages_its_header_reads_touched_go_as_copies_do() {
        // Incompressible blobs of a page each: every header read touches a page of its own.
        let files = 2 * Packs::RESIDENT_BYTES / 4096;
        let dir = pack_of_page_blobs(files, 0x9e37_79b9_7f4a_7c15);
        let d = dir.path();
        let repo = gix::open(d).unwrap();
        let packs = Packs::open(&d.join(".git/objects/pack"), gix_hash::Kind::Sha1).unwrap().letting_pages_go();
        let path = packs.files[0].data.path().canonicalize().unwrap();
        let pack_kb = std::fs::metadata(&path).unwrap().len() / 1024;
        let ids: Vec<gix_hash::ObjectId> = packs.files[0].index.iter().map(|e| e.oid).collect();
        for id in &ids {
            assert!(packs.locate(id).is_some());
        }
        assert!(ids.len() > files && repo.find_header(ids[0]).is_ok());
        let resident = resident_kb(&path);
        assert!(
            resident * 1024 <= (Packs::RESIDENT_BYTES + Packs::HEADER_READ) as u64 && resident * 3 < pack_kb * 2,
            "the headers read went on letting their pages go: {resident} of {pack_kb} kB resident"
        );
    }

    /// A walk through gix-odb (a repack's) reads its packs through gix-odb's own maps: those are
    /// let go too, found by their files. Red before: nothing reached gix-odb's maps, and every
    /// page the walk read stayed resident until the walk was done.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_pages_gix_odb_mapped_for_a_walk_are_let_go_by_their_pack_directory() {
        let dir = pack_of_page_blobs(256, 0x2545_f491_4f6c_dd1d);
        let d = dir.path();
        let repo = gix::open(d).unwrap();
        let pack_dir = d.join(".git/objects/pack").canonicalize().unwrap();
        let pack = std::fs::read_dir(&pack_dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "pack"))
            .unwrap();
        let ids = git(d, &["cat-file", "--batch-all-objects", "--batch-check=%(objectname)"], None);
        for id in ids.lines() {
            repo.find_object(gix_hash::ObjectId::from_hex(id.as_bytes()).unwrap()).unwrap();
        }
        let read = resident_kb(&pack);
        assert!(read >= 256 * 4, "gix-odb read every blob through its map: {read} kB resident");
        let_mapped_pages_go(&pack_dir);
        let resident = resident_kb(&pack);
        assert!(resident < 64, "{resident} kB still resident of the {read} kB read");
    }

    #[test]
    fn every_entry_is_located_where_gix_odb_finds_it_or_at_a_smaller_copy_and_sized_as_it_sizes_it() {
        let dir = repository();
        let repo = gix::open(dir.path()).unwrap();
        let packs = Packs::open(&dir.path().join(".git/objects/pack"), repo.object_hash()).unwrap();
        assert_eq!(packs.files.len(), 3);
        let mut odb = repo.objects.clone().into_inner();
        odb.prevent_pack_unload();
        let ours = Locating { odb: odb.clone(), packs: Some(Arc::new(packs)), copies: None, hollow: None };
        let ids = git(dir.path(), &["cat-file", "--batch-all-objects", "--batch-check=%(objectname)"], None);
        // What the third pack holds a second copy of.
        let copied = git(dir.path(), &["rev-list", "--objects", "HEAD~3"], None);
        let (mut packed, mut loose, mut deltas) = (0, 0, 0);
        let mut buf = Vec::new();
        for id in ids.lines().map(|l| gix_hash::ObjectId::from_hex(l.as_bytes()).unwrap()) {
            let theirs = gix_pack::Find::location_by_oid(&odb, &id, &mut buf).unwrap();
            let found = gix_pack::Find::location_by_oid(&ours, &id, &mut buf).unwrap();
            let (theirs, found) = match (theirs, found) {
                (Some(theirs), Some(found)) => (theirs, found),
                (None, None) => {
                    loose += 1;
                    continue;
                }
                _ => panic!("{id}: located by one side only"),
            };
            if (found.pack_offset, found.entry_size) != (theirs.pack_offset, theirs.entry_size) {
                // Stored in two packs (the third holds a copy of some objects): ours is the
                // smaller copy ([`Packs::locate`]), gix-odb's the one of the pack it tries first.
                assert!(found.entry_size < theirs.entry_size, "{id}: {found:?} is no smaller than {theirs:?}");
                assert!(copied.contains(&id.to_string()), "{id} is in one pack only, yet located elsewhere");
                continue;
            }
            let entry = gix_pack::Find::entry_by_location(&ours, &found).unwrap().data;
            assert_eq!(entry, gix_pack::Find::entry_by_location(&odb, &theirs).unwrap().data, "{id}");
            let header = gix_pack::data::Entry::from_bytes(&entry, found.pack_offset, id.kind()).unwrap();
            deltas += usize::from(header.header.is_delta());
            packed += 1;
        }
        assert_eq!(loose, 1);
        assert!(packed > 20 && deltas > 0, "{packed} packed, {deltas} deltas");
    }

    #[test]
    fn entry_sizes_from_the_reverse_index_equal_those_from_sorted_offsets_and_a_reordered_one_is_refused() {
        let dir = repository();
        let hash = gix_hash::Kind::Sha1;
        let mut with_rev = 0;
        for (idx, _) in index_files(&dir.path().join(".git/objects/pack")) {
            let index = gix_pack::index::File::at(&idx, hash).unwrap();
            let end = gix_pack::data::File::at(idx.with_extension("pack"), hash).unwrap().pack_end() as u64;
            let Some(order) = read_rev(&idx.with_extension("rev"), index.num_objects() as usize, &index, hash) else {
                continue;
            };
            with_rev += 1;
            let sorted = entry_sizes(&index, end, None).unwrap();
            assert_eq!(entry_sizes(&index, end, Some(order.clone())).unwrap(), sorted, "{}", idx.display());
            let mut swapped = order;
            swapped.swap(0, 1);
            assert_eq!(entry_sizes(&index, end, Some(swapped)), None, "out of pack order");
        }
        assert_eq!(with_rev, 3, "git wrote a .rev beside every pack");
    }

    #[test]
    fn a_pack_deleted_after_the_listing_is_left_out_and_the_others_are_still_read() {
        let dir = repository();
        let pack_dir = dir.path().join(".git/objects/pack");
        let listed = index_files(&pack_dir);
        assert_eq!(listed.len(), 3);
        let (gone, _) = &listed[1];
        for ext in ["idx", "pack", "rev"] {
            std::fs::remove_file(gone.with_extension(ext)).unwrap();
        }
        let packs = Packs::from_files(&listed, gix_hash::Kind::Sha1).expect("the packs still there are read");
        assert_eq!(packs.files.len(), 2);
    }
}
