use gix_error::{ErrorExt, OptionExt, Result, bail};

fn corrupt(message: &'static str) -> gix_error::Message {
    gix_error::message!("Corrupt delta data: {message}").corrupted()
}

/// Given the decompressed pack delta `d`, decode a size in bytes (either the base object size or the result object size)
/// Equivalent to [this canonical git function](https://github.com/git/git/blob/311531c9de557d25ac087c1637818bd2aad6eb3a/delta.h#L89)
pub(crate) fn decode_header_size(d: &[u8]) -> Result<(u64, usize)> {
    let mut shift = 0;
    let mut size = 0u64;
    let mut consumed = 0;
    for cmd in d.iter() {
        if shift >= u64::BITS {
            bail!(corrupt("delta header size uses more bits than fit into u64"));
        }
        consumed += 1;
        size |= (u64::from(*cmd) & 0x7f) << shift;
        shift += 7;
        if *cmd & 0x80 == 0 {
            return Ok((size, consumed));
        }
    }
    Err(corrupt("delta header size is truncated").raise())
}

pub(crate) fn apply(base: &[u8], mut target: &mut [u8], data: &[u8]) -> Result {
    fn next_byte(data: &[u8], i: &mut usize) -> Result<u8> {
        let byte = *data
            .get(*i)
            .ok_or_raise(|| corrupt("delta copy instruction is truncated"))?;
        *i += 1;
        Ok(byte)
    }

    let mut i = 0;
    while let Some(cmd) = data.get(i) {
        i += 1;
        let bytes = match cmd {
            cmd if cmd & 0b1000_0000 != 0 => {
                let (mut ofs, mut size): (u32, u32) = (0, 0);
                if cmd & 0b0000_0001 != 0 {
                    ofs = u32::from(next_byte(data, &mut i)?);
                }
                if cmd & 0b0000_0010 != 0 {
                    ofs |= u32::from(next_byte(data, &mut i)?) << 8;
                }
                if cmd & 0b0000_0100 != 0 {
                    ofs |= u32::from(next_byte(data, &mut i)?) << 16;
                }
                if cmd & 0b0000_1000 != 0 {
                    ofs |= u32::from(next_byte(data, &mut i)?) << 24;
                }
                if cmd & 0b0001_0000 != 0 {
                    size = u32::from(next_byte(data, &mut i)?);
                }
                if cmd & 0b0010_0000 != 0 {
                    size |= u32::from(next_byte(data, &mut i)?) << 8;
                }
                if cmd & 0b0100_0000 != 0 {
                    size |= u32::from(next_byte(data, &mut i)?) << 16;
                }
                if size == 0 {
                    size = 0x10000; // 65536
                }
                let ofs = ofs as usize;
                let end = ofs
                    .checked_add(size as usize)
                    .ok_or_raise(|| corrupt("delta copy range overflows"))?;
                base.get(ofs..end)
                    .ok_or_raise(|| corrupt("delta copy range exceeds base object size"))?
            }
            0 => {
                bail!(corrupt("delta command 0 is reserved and invalid"));
            }
            size => {
                let end = i
                    .checked_add(*size as usize)
                    .ok_or_raise(|| corrupt("delta insert range overflows"))?;
                let bytes = data
                    .get(i..end)
                    .ok_or_raise(|| corrupt("delta insert data is truncated"))?;
                i = end;
                bytes
            }
        };
        let (out, rest) = target
            .split_at_mut_checked(bytes.len())
            .ok_or_raise(|| corrupt("delta instructions produced more bytes than promised"))?;
        out.copy_from_slice(bytes);
        target = rest;
    }
    debug_assert_eq!(
        i,
        data.len(),
        "delta instructions were not consumed completely, should be impossible"
    );
    if !target.is_empty() {
        bail!(corrupt("delta instructions produced fewer bytes than promised"));
    }

    Ok(())
}

/// Computing deltas: the inverse of [`apply`], in git's delta format (a varint base size and
/// result size, then copy instructions naming a range of the base and insert instructions
/// carrying up to 127 literal bytes), so every git and gitoxide reader applies them.
///
/// The base is indexed once ([`Index::new`]) in blocks of [`Index::BLOCK`] bytes by a rolling
/// fingerprint of each block; a target is scanned with the same fingerprint rolled one byte at a
/// time, each hit is verified byte for byte and extended as far as base and target agree, and
/// the longest is copied. An index serves any number of targets, as a delta search tries one
/// base against a window of objects.
pub mod encode {
    /// A base, indexed for [`Index::encode`].
    pub struct Index<'a> {
        base: &'a [u8],
        /// Bucket → first entry of its chain (`u32::MAX`: none).
        heads: Vec<u32>,
        /// Entry → next entry of the same bucket.
        next: Vec<u32>,
        /// Entry → offset of its block in the base.
        offsets: Vec<u32>,
        /// Entry → the whole fingerprint of its block: a chain shares only the bucket's bits,
        /// and a block whose fingerprint differs cannot match, so its bytes are never read.
        fingerprints: Vec<u32>,
        mask: u32,
        /// One bit per value of a fingerprint's top bits, set for every block: a target position
        /// whose bit is clear matches no block, and is passed over without walking a chain (most
        /// positions, when a search tries a base the target does not resemble).
        filter: Vec<u64>,
        filter_shift: u32,
    }

    /// The fingerprint of a window: a polynomial over its bytes, rolled in and out one byte at
    /// a time.
    const MULTIPLIER: u32 = 0x0100_0193;

    fn fingerprint(window: &[u8]) -> u32 {
        window.iter().fold(0u32, |h, b| h.wrapping_mul(MULTIPLIER).wrapping_add(u32::from(*b) + 1))
    }

    /// What the first byte of a window counts in its fingerprint (`MULTIPLIER` to the power of
    /// the window length less one): what is taken out when it leaves.
    fn leaving_weight() -> u32 {
        (1..Index::BLOCK).fold(1u32, |w, _| w.wrapping_mul(MULTIPLIER))
    }

    /// Candidates verified per target position at most: a base of repetitive content (one byte
    /// repeated) would otherwise make every position a walk of the whole chain.
    const MAX_CANDIDATES: usize = 64;
    /// The longest run one copy instruction names (the format's size 0 means 0x10000; every
    /// reader supports copies up to this size).
    const MAX_COPY: usize = 0x10000;
    /// Base offsets a copy instruction can name (32 bits).
    const MAX_OFFSET: usize = u32::MAX as usize;

    impl<'a> Index<'a> {
        /// Bytes per indexed block of the base, and the shortest match looked for.
        pub const BLOCK: usize = 16;

        /// Index `base`: one entry per whole block (a block that repeats the one before it is
        /// left out, so a run of one byte does not fill a bucket).
        pub fn new(base: &'a [u8]) -> Self {
            let indexable = base.len().min(MAX_OFFSET);
            let blocks = indexable / Self::BLOCK;
            let buckets = (blocks / 4).max(1).next_power_of_two();
            // About one bit in eight set.
            let filter_bits = (blocks.saturating_mul(8)).next_power_of_two().clamp(64, 1 << 31);
            let mut index = Index {
                base,
                heads: vec![u32::MAX; buckets],
                next: Vec::with_capacity(blocks),
                offsets: Vec::with_capacity(blocks),
                fingerprints: Vec::with_capacity(blocks),
                mask: (buckets - 1) as u32,
                filter: vec![0u64; filter_bits / 64],
                filter_shift: 32 - filter_bits.trailing_zeros(),
            };
            let mut previous: Option<&[u8]> = None;
            for block in 0..blocks {
                let at = block * Self::BLOCK;
                let window = &base[at..at + Self::BLOCK];
                if previous == Some(window) {
                    continue;
                }
                previous = Some(window);
                let print = fingerprint(window);
                let bucket = (print & index.mask) as usize;
                index.next.push(index.heads[bucket]);
                index.offsets.push(at as u32);
                index.fingerprints.push(print);
                index.heads[bucket] = (index.offsets.len() - 1) as u32;
                let bit = (print >> index.filter_shift) as usize;
                index.filter[bit / 64] |= 1 << (bit % 64);
            }
            index
        }

        /// The base this index is of.
        pub fn base(&self) -> &'a [u8] {
            self.base
        }

        /// The delta that turns the base into `target`, or `None` if it would be longer than
        /// `max_size` bytes (0: no limit) — a delta search gives each candidate base the size
        /// to beat and stops encoding as soon as it is lost.
        pub fn encode(&self, target: &[u8], max_size: usize) -> Option<Vec<u8>> {
            let limit = if max_size == 0 { usize::MAX } else { max_size };
            let mut out = Vec::with_capacity(target.len().min(limit).min(1 << 20) / 2 + 16);
            write_size(&mut out, self.base.len() as u64);
            write_size(&mut out, target.len() as u64);
            let weight = leaving_weight();
            let mut pending = 0usize; // literal bytes before `at`, not yet written
            let mut at = 0usize;
            let mut hash = None::<u32>;
            while at < target.len() {
                if out.len() + pending > limit {
                    return None;
                }
                let mut best = (0usize, 0usize); // (length, base offset)
                if at + Self::BLOCK <= target.len() && !self.offsets.is_empty() {
                    let h = match hash {
                        Some(h) => h,
                        None => fingerprint(&target[at..at + Self::BLOCK]),
                    };
                    hash = Some(h);
                    let bit = (h >> self.filter_shift) as usize;
                    let mut entry = if self.filter[bit / 64] & (1 << (bit % 64)) == 0 {
                        u32::MAX
                    } else {
                        self.heads[(h & self.mask) as usize]
                    };
                    let mut tried = 0;
                    while entry != u32::MAX && tried < MAX_CANDIDATES {
                        tried += 1;
                        if self.fingerprints[entry as usize] != h {
                            entry = self.next[entry as usize];
                            continue;
                        }
                        let offset = self.offsets[entry as usize] as usize;
                        let len = common_prefix(&self.base[offset..], &target[at..]);
                        if len > best.0 {
                            best = (len, offset);
                            if at + len == target.len() {
                                break;
                            }
                        }
                        entry = self.next[entry as usize];
                    }
                }
                if best.0 < Self::BLOCK {
                    // No match here: this byte is a literal; roll the window one byte on.
                    if let Some(h) = hash {
                        hash = (at + Self::BLOCK < target.len()).then(|| {
                            h.wrapping_sub((u32::from(target[at]) + 1).wrapping_mul(weight))
                                .wrapping_mul(MULTIPLIER)
                                .wrapping_add(u32::from(target[at + Self::BLOCK]) + 1)
                        });
                    }
                    at += 1;
                    pending += 1;
                    continue;
                }
                // Grow the match backwards over the literals before it, where they agree.
                let (found, mut offset) = best;
                let back = common_suffix(&self.base[..offset], &target[at - pending..at]);
                offset -= back;
                let start = at - back;
                pending -= back;
                // A copy names a 32-bit offset: of a base beyond 4 GiB, only what lies below.
                let mut len = (found + back).min(MAX_OFFSET - offset);
                write_literals(&mut out, &target[start - pending..start]);
                pending = 0;
                at = start + len;
                while len > 0 {
                    let n = len.min(MAX_COPY);
                    write_copy(&mut out, offset, n);
                    offset += n;
                    len -= n;
                }
                hash = None;
            }
            write_literals(&mut out, &target[target.len() - pending..]);
            (out.len() <= limit).then_some(out)
        }
    }

    fn common_prefix(a: &[u8], b: &[u8]) -> usize {
        let n = a.len().min(b.len()).min(MAX_OFFSET);
        let mut i = 0;
        while i + 8 <= n && a[i..i + 8] == b[i..i + 8] {
            i += 8;
        }
        while i < n && a[i] == b[i] {
            i += 1;
        }
        i
    }

    fn common_suffix(a: &[u8], b: &[u8]) -> usize {
        a.iter().rev().zip(b.iter().rev()).take_while(|(x, y)| x == y).count()
    }

    /// A size of the delta header: seven bits a byte, least significant first.
    fn write_size(out: &mut Vec<u8>, mut size: u64) {
        loop {
            let byte = (size & 0x7f) as u8;
            size >>= 7;
            if size == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    fn write_literals(out: &mut Vec<u8>, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let n = bytes.len().min(0x7f);
            out.push(n as u8);
            out.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
    }

    /// A copy of `size` (1..=0x10000) bytes at `offset`: the bytes of both that are not zero,
    /// flagged in the instruction byte.
    fn write_copy(out: &mut Vec<u8>, offset: usize, size: usize) {
        let at = out.len();
        out.push(0x80);
        let mut cmd = 0x80u8;
        for i in 0..4 {
            let byte = (offset >> (8 * i)) as u8;
            if byte != 0 {
                cmd |= 1 << i;
                out.push(byte);
            }
        }
        let size = if size == MAX_COPY { 0 } else { size };
        for i in 0..3 {
            let byte = (size >> (8 * i)) as u8;
            if byte != 0 {
                cmd |= 0x10 << i;
                out.push(byte);
            }
        }
        out[at] = cmd;
    }
}

/// Finding deltas among many objects: git's window search (`pack-heuristics`). Objects are
/// sorted by kind, then by a hash of their path that groups versions of one file (and files of
/// one name), then preferred bases first, then by size, largest first; each is tried against the objects of the same kind
/// in a window of the ones before it, and keeps the smallest delta found, if it is well below
/// the object itself. A *preferred base* (an object the receiver already has) is only ever a
/// base: a delta against it is a thin delta.
pub mod search {
    use super::encode::Index;

    /// One object the search may use: the objects to send and the preferred bases.
    pub struct Object<'a> {
        /// Objects of different kinds are never deltas of each other.
        pub kind: gix_object::Kind,
        /// [`name_hash()`] of the object's path (0 if it has none).
        pub name_hash: u32,
        /// The object's content.
        pub data: &'a [u8],
        /// A base only: never given a delta (the receiver has it).
        pub preferred_base: bool,
        /// The pack this object is stored whole in, if it is: two objects stored whole in one
        /// pack are not tried against each other, as that pack's writer tried them and kept
        /// both whole (git's rule when it reuses stored deltas).
        pub stored_whole_in: Option<u32>,
    }

    /// Limits of a search.
    #[derive(Debug, Clone, Copy)]
    pub struct Options {
        /// Objects before each one tried as its base (git's `pack.window`, 10).
        pub window: usize,
        /// Longest delta chain a new delta may end (git's `pack.depth`, 50).
        pub max_depth: usize,
        /// Objects smaller than this are not worth a delta's header and instructions.
        pub min_size: usize,
        /// Objects larger than this are neither targets nor bases.
        pub max_size: usize,
        /// Bytes of targets and bases a search may compare in all; past it, the rest of the
        /// objects get no delta (a huge input degrades to no search, not to a stall).
        pub budget: usize,
    }

    impl Default for Options {
        fn default() -> Self {
            Options {
                window: 10,
                max_depth: 50,
                min_size: 64,
                max_size: 16 << 20,
                budget: 1 << 30,
            }
        }
    }

    /// A delta the search chose.
    pub struct Delta {
        /// Index (into the input) of the object this delta produces.
        pub target: usize,
        /// Index (into the input) of its base: an object sent too, or a preferred base.
        pub base: usize,
        /// The delta, uncompressed, in git's format.
        pub data: Vec<u8>,
    }

    /// What a search did.
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    pub struct Statistics {
        /// Targets tried against at least one base.
        pub targets: usize,
        /// Target × base pairs encoded.
        pub pairs: usize,
        /// Whether the budget ran out before every object was looked at.
        pub budget_exhausted: bool,
    }

    /// git's `pack_name_hash`: the last sixteen characters of `path` (white space skipped)
    /// weigh most, so versions of one file and files of one name sort next to each other.
    pub fn name_hash(path: &[u8]) -> u32 {
        path.iter().fold(0u32, |hash, c| name_hash_step(hash, *c))
    }

    /// [`name_hash()`] extended by one byte of the path: a walk hashes paths as it goes.
    pub fn name_hash_step(hash: u32, c: u8) -> u32 {
        if c.is_ascii_whitespace() { hash } else { (hash >> 2).wrapping_add(u32::from(c) << 24) }
    }

    /// Find deltas for `objects`: at most one per object that is not a preferred base, each
    /// against an earlier object of the search order, no chain longer than `max_depth`. The
    /// chains form a forest (no object is, through others, its own base).
    pub fn find(objects: &[Object<'_>], options: Options) -> (Vec<Delta>, Statistics) {
        find_with_progress(objects, options, &mut |_, _| {})
    }

    /// [`find()`], telling `progress` after each object it may give a delta how many of those
    /// it has looked at, of how many (git's "Compressing objects: 45% (450/1000)").
    pub fn find_with_progress(
        objects: &[Object<'_>],
        options: Options,
        progress: &mut dyn FnMut(usize, usize),
    ) -> (Vec<Delta>, Statistics) {
        let mut order: Vec<usize> = (0..objects.len())
            .filter(|&i| (options.min_size..=options.max_size).contains(&objects[i].data.len()))
            .collect();
        order.sort_by(|&a, &b| {
            let (x, y) = (&objects[a], &objects[b]);
            (x.kind as u8, x.name_hash, !x.preferred_base, std::cmp::Reverse(x.data.len()))
                .cmp(&(y.kind as u8, y.name_hash, !y.preferred_base, std::cmp::Reverse(y.data.len())))
                .then(a.cmp(&b))
        });
        let total = order.iter().filter(|&&i| !objects[i].preferred_base).count();
        let mut looked_at = 0;
        let mut depth = vec![0usize; objects.len()];
        let mut out = Vec::new();
        let mut stats = Statistics::default();
        let mut budget = options.budget;
        // The window: indices of the last objects looked at, each with its index, built when it
        // is first used as a base.
        let mut window: std::collections::VecDeque<(usize, Option<Index<'_>>)> = std::collections::VecDeque::new();
        for &target in &order {
            let t = &objects[target];
            // The best delta so far: its base's place in the window, the base, the delta, and
            // the depth the target would have through it.
            let mut best: Option<(usize, usize, Vec<u8>, usize)> = None;
            if !t.preferred_base {
                let mut tried = false;
                for (at, (base, index)) in window.iter_mut().enumerate().rev() {
                    let b = &objects[*base];
                    let base_depth = depth[*base];
                    if b.kind != t.kind || base_depth >= options.max_depth {
                        continue;
                    }
                    if t.stored_whole_in.is_some() && t.stored_whole_in == b.stored_whole_in && !b.preferred_base {
                        continue;
                    }
                    // A target far smaller than the base uses little of it.
                    if t.data.len() < b.data.len() / 32 {
                        continue;
                    }
                    // git's limit: a first delta under half the object, then under the best so
                    // far; both scaled by how deep the base is, so that a shallower base may
                    // win with a delta a little larger (it leaves room for longer chains).
                    let hash_len = 20;
                    let room = options.max_depth - base_depth;
                    let limit = match &best {
                        Some((_, _, d, best_depth)) => d.len() * room / (options.max_depth - best_depth + 1),
                        None => (t.data.len() / 2).saturating_sub(hash_len) * room / options.max_depth.max(1),
                    };
                    // A base shorter than the target by the limit leaves more than that to insert.
                    if limit < 8 || t.data.len().saturating_sub(b.data.len()) >= limit {
                        continue;
                    }
                    let cost = t.data.len() + if index.is_none() { b.data.len() } else { 0 };
                    if cost > budget {
                        stats.budget_exhausted = true;
                        break;
                    }
                    budget -= cost;
                    let index = index.get_or_insert_with(|| Index::new(b.data));
                    tried = true;
                    stats.pairs += 1;
                    let Some(delta) = index.encode(t.data, limit) else { continue };
                    // Of deltas of one size, only a shallower one replaces the best.
                    if best
                        .as_ref()
                        .is_some_and(|(_, _, d, best_depth)| d.len() == delta.len() && base_depth + 1 >= *best_depth)
                    {
                        continue;
                    }
                    best = Some((at, *base, delta, base_depth + 1));
                }
                if tried {
                    stats.targets += 1;
                }
                looked_at += 1;
                progress(looked_at, total);
            }
            match best {
                // At the greatest depth it can be no base: it takes no place in the window.
                Some((_, base, data, target_depth)) if target_depth >= options.max_depth => {
                    depth[target] = target_depth;
                    out.push(Delta { target, base, data });
                }
                // git keeps the base that served longer: it moves to the window's newest place,
                // after the target, and is the first tried for the next object.
                Some((at, base, data, target_depth)) => {
                    depth[target] = target_depth;
                    out.push(Delta { target, base, data });
                    let kept = window.remove(at).expect("the base is in the window");
                    window.push_back((target, None));
                    window.push_back(kept);
                }
                None => window.push_back((target, None)),
            }
            while window.len() > options.window {
                window.pop_front();
            }
            if stats.budget_exhausted {
                break;
            }
        }
        (out, stats)
    }
}

/// Apply `delta` to `base`: the object it describes, after checking the base size it names.
/// The oracle of [`encode`], and what a caller that made a delta uses to check it.
pub fn apply_to_vec(base: &[u8], delta: &[u8]) -> Result<Vec<u8>> {
    let (base_size, consumed) = decode_header_size(delta)?;
    if base_size != base.len() as u64 {
        bail!(corrupt("delta names a base of another size"));
    }
    let (size, more) = decode_header_size(&delta[consumed..])?;
    let size = usize::try_from(size).map_err(|_| corrupt("delta result does not fit in memory").raise())?;
    let mut out = vec![0; size];
    apply(base, &mut out, &delta[consumed + more..])?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn instructions_cannot_exceed_the_declared_result_size() {
        let mut error_snapshots = Vec::new();
        for instructions in [b"\x90\x02".as_slice(), b"\x02ab".as_slice()] {
            let err = super::apply(b"ab", &mut [0], instructions)
                .expect_err("neither copying nor inserting may truncate the result");
            error_snapshots.push(gix_testtools::redact_debug_snapshot(&err, &[]));
        }
        insta::assert_debug_snapshot!(error_snapshots, "instructions cannot exceed the declared result size", @"
        [
            Corrupt delta data: delta instructions produced more bytes than promised,
            Corrupt delta data: delta instructions produced more bytes than promised,
        ]
        ");
    }
}
