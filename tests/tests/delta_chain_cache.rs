//! Guard of patches/gix-pack/0005-delta-chain-base-cache.patch: decoding an object at the end of
//! a delta chain leaves every object reconstructed on the way (its base and each intermediate
//! result) in a delta cache that asks for them (`keep_chain_bases`, as a cache capped by bytes
//! does), as git's delta base cache keeps them, so that the next object of the same chain costs
//! its own delta rather than the whole chain again. A cache that does not ask gets what it got.
//! A cache of bases only (`keep_asked_for` false, as git's delta base cache is) gets the chain
//! but not the object asked for.

use std::collections::HashMap;
use std::path::Path;

use gix_pack::cache::DecodeEntry;
use gixd_tests::{git, git_command, git_out, temp_repo};

/// `id → (offset, depth, base id)` of each object of a pack.
type Layout = HashMap<String, (u64, usize, Option<String>)>;

/// A cache that keeps everything it is given, by pack offset; `chain_bases` is what it answers
/// to `keep_chain_bases`.
#[derive(Default)]
struct Keeping {
    entries: HashMap<u64, (Vec<u8>, gix::object::Kind, usize)>,
    hits: usize,
    chain_bases: bool,
    /// What it answers to `keep_asked_for` (the default, `true`, where `None`).
    asked_for: Option<bool>,
}

impl DecodeEntry for Keeping {
    fn put(&mut self, _pack_id: u32, offset: u64, data: &[u8], kind: gix::object::Kind, compressed_size: usize) {
        self.entries.insert(offset, (data.to_vec(), kind, compressed_size));
    }
    fn get(&mut self, _pack_id: u32, offset: u64, out: &mut Vec<u8>) -> Option<(gix::object::Kind, usize)> {
        let (data, kind, size) = self.entries.get(&offset)?;
        self.hits += 1;
        out.clear();
        out.extend_from_slice(data);
        Some((*kind, *size))
    }
    fn keep_chain_bases(&self) -> bool {
        self.chain_bases
    }
    fn keep_asked_for(&self) -> bool {
        self.asked_for.unwrap_or(true)
    }
}

/// One version of the file: `n` numbered lines, so that each version is a prefix of the next.
fn version(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| format!("line {i} of a file that grows by a few lines per commit\n"))
        .collect::<String>()
        .into_bytes()
}

/// `id → (offset, depth, base id)` of every object of the one pack, from `git verify-pack -v`.
fn pack_layout(repo: &Path) -> (std::path::PathBuf, Layout) {
    let (idx, rows) = gixd_tests::verify_pack(&repo.join("objects"));
    let layout = rows
        .into_iter()
        .map(|w| {
            let delta = (w.len() == 7).then(|| (w[5].parse().unwrap(), w[6].clone()));
            (w[0].clone(), (w[4].parse().unwrap(), delta.as_ref().map_or(0, |d| d.0), delta.map(|d| d.1)))
        })
        .collect();
    (idx.with_extension("pack"), layout)
}

/// A bare repository whose one pack holds `file.txt` as a chain of deltas (six versions, each a
/// delta of the one before, as git fast-import stores them); returns it, the pack, its layout and
/// the chain from its deepest object down to the chain's base.
fn repo_with_a_delta_chain() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf, Layout, Vec<String>) {
    let (tmp, repo) = temp_repo(true);
    // git fast-import stores each version of a path as a delta of the version before it: a chain.
    let mut stream = String::new();
    for (i, n) in [40, 48, 56, 64, 72, 80].into_iter().enumerate() {
        let content = String::from_utf8(version(n)).unwrap();
        stream.push_str(&format!(
            "commit refs/heads/main\ncommitter C <c@example.com> {} +0000\ndata 2\nc{i}\n",
            1_600_000_000 + i
        ));
        stream.push_str(&format!("M 100644 inline file.txt\ndata {}\n{content}\n", content.len()));
    }
    let mut import = git_command(&repo)
        .args(["-c", "fastimport.unpackLimit=0", "fast-import", "--quiet"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut import.stdin.take().unwrap(), stream.as_bytes()).unwrap();
    assert!(import.wait().unwrap().success());
    let blobs: Vec<String> = (0..6).map(|i| git_out(&repo, &["rev-parse", &format!("main~{i}:file.txt")])).collect();
    let (pack_path, layout) = pack_layout(&repo);
    let deepest = blobs.iter().max_by_key(|id| layout[*id].1).unwrap().clone();
    let depth = layout[&deepest].1;
    assert!(depth >= 3, "precondition: git stored a chain of at least 3 deltas, got {depth}");
    // The chain, from the deepest object to its base.
    let mut chain = vec![deepest.clone()];
    while let Some(base) = layout[chain.last().unwrap()].2.clone() {
        chain.push(base);
    }
    assert_eq!(chain.len(), depth + 1);

    (tmp, repo, pack_path, layout, chain)
}

#[test]
fn decoding_the_end_of_a_delta_chain_keeps_every_base_of_it_in_the_cache() {
    let (_tmp, repo, pack_path, layout, chain) = repo_with_a_delta_chain();
    let (deepest, depth) = (chain[0].clone(), chain.len() - 1);
    let pack = gix_pack::data::File::at(&pack_path, gix_hash::Kind::Sha1).unwrap();
    let mut inflate = gix::zlib::Inflate::default();
    let no_ref_deltas = |_: &gix_hash::oid, _: &mut Vec<u8>| Ok(None);
    let decode = |offset: u64, cache: &mut dyn DecodeEntry, inflate: &mut gix::zlib::Inflate| {
        let mut out = Vec::new();
        let outcome = pack.decode_entry(pack.entry(offset).unwrap(), &mut out, inflate, &no_ref_deltas, cache).unwrap();
        (out, outcome)
    };

    let mut cache = Keeping { chain_bases: true, ..Default::default() };
    let (data, outcome) = decode(layout[&deepest].0, &mut cache, &mut inflate);
    assert_eq!(outcome.num_deltas as usize, depth, "the first decode walks the whole chain");
    assert_eq!(data, git(&repo, &["cat-file", "blob", &deepest]).stdout);
    for id in &chain {
        // The cache is keyed by where an entry's data starts, after its header.
        let offset = pack.entry(layout[id].0).unwrap().data_offset;
        let (kept, kind, _) = cache
            .entries
            .get(&offset)
            .unwrap_or_else(|| panic!("{id} (data at {offset}) of the chain is in the cache"));
        assert_eq!(*kind, gix::object::Kind::Blob);
        assert_eq!(kept, &git(&repo, &["cat-file", "blob", id]).stdout, "{id} is kept as its exact content");
    }

    // The next object up the chain is now a cache hit, reported as decoding it without a cache does.
    let next = &chain[1];
    let (uncached_data, uncached) = decode(layout[next].0, &mut gix_pack::cache::Never, &mut inflate);
    let hits = cache.hits;
    let (data, outcome) = decode(layout[next].0, &mut cache, &mut inflate);
    assert_eq!(cache.hits, hits + 1, "served from the cache");
    assert_eq!(data, uncached_data);
    assert_eq!(
        (outcome.kind, outcome.compressed_size, outcome.object_size),
        (uncached.kind, uncached.compressed_size, uncached.object_size)
    );
}

#[test]
fn a_cache_that_does_not_ask_for_chain_bases_gets_only_the_object_decoded() {
    let (_tmp, _repo, pack_path, layout, chain) = repo_with_a_delta_chain();
    let pack = gix_pack::data::File::at(&pack_path, gix_hash::Kind::Sha1).unwrap();
    let mut cache = Keeping::default();
    let mut out = Vec::new();
    let entry = pack.entry(layout[&chain[0]].0).unwrap();
    let data_offset = entry.data_offset;
    let no_ref_deltas = |_: &gix_hash::oid, _: &mut Vec<u8>| Ok(None);
    pack.decode_entry(entry, &mut out, &mut gix::zlib::Inflate::default(), &no_ref_deltas, &mut cache).unwrap();
    assert_eq!(cache.entries.keys().copied().collect::<Vec<_>>(), vec![data_offset]);
}

#[test]
fn the_cache_capped_by_bytes_asks_for_chain_bases_and_the_list_of_64_does_not() {
    assert!(gix_pack::cache::lru::MemoryCappedHashmap::new(1 << 20).keep_chain_bases());
    assert!(!gix_pack::cache::lru::StaticLinkedList::<64>::default().keep_chain_bases());
}

#[test]
fn a_cache_of_bases_only_gets_the_chain_but_not_the_object_asked_for() {
    let (_tmp, repo, pack_path, layout, chain) = repo_with_a_delta_chain();
    let pack = gix_pack::data::File::at(&pack_path, gix_hash::Kind::Sha1).unwrap();
    let mut cache = Keeping { chain_bases: true, asked_for: Some(false), ..Default::default() };
    let mut out = Vec::new();
    let data_offset = |id: &str| pack.entry(layout[id].0).unwrap().data_offset;
    let no_ref_deltas = |_: &gix_hash::oid, _: &mut Vec<u8>| Ok(None);
    let entry = pack.entry(layout[&chain[0]].0).unwrap();
    pack.decode_entry(entry, &mut out, &mut gix::zlib::Inflate::default(), &no_ref_deltas, &mut cache).unwrap();
    assert_eq!(out, git(&repo, &["cat-file", "blob", &chain[0]]).stdout, "decoded as ever");
    let mut kept: Vec<u64> = cache.entries.keys().copied().collect();
    kept.sort_unstable();
    let mut bases: Vec<u64> = chain[1..].iter().map(|id| data_offset(id)).collect();
    bases.sort_unstable();
    assert_eq!(kept, bases, "every base of the chain, and not {} (asked for)", chain[0]);
}
