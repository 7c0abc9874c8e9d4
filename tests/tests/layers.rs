//! The layer map in `daemon/src/lib.rs` is true of the imports: read from the code, the module
//! graph of `daemon/src` has no cycle, and every module imports only modules of its own layer or
//! of the layers below it (the map lists layers top to bottom, one bullet each).
//!
//! And no module is longer than 700 lines before its tests (a file does one thing).
//!
//! `cargo nextest run -p gixd-tests --test layers --no-capture` prints the graph.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("daemon/src")
}

/// Every `.rs` file below `daemon/src`.
fn rust_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![src()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files
}

/// Every module of the crate (`a`, `a::b`) and its source, without comments and test modules.
fn modules() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for path in rust_files() {
        let rel = path.strip_prefix(src()).unwrap().with_extension("");
        let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        if parts.last().is_some_and(|p| p == "mod") {
            parts.pop();
        }
        if parts == ["lib"] || parts == ["main"] {
            continue;
        }
        out.insert(parts.join("::"), strip(&std::fs::read_to_string(&path).unwrap()));
    }
    out
}

/// Source without `//` comments (doc links name modules without importing them) and without
/// the `#[cfg(test)]` module at the end.
fn strip(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(at) if !l[..at].contains('"') => &l[..at],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The modules each module names by path (`crate::x::y`, `super::x`), resolved to the longest
/// existing module.
fn graph(mods: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, text) in mods {
        let mut targets = BTreeSet::new();
        let bytes = text.as_bytes();
        for prefix in ["crate::", "super::"] {
            let mut from = 0;
            while let Some(at) = text[from..].find(prefix) {
                let start = from + at + prefix.len();
                from = start;
                if at > 0
                    && (bytes[from - prefix.len() - 1].is_ascii_alphanumeric()
                        || bytes[from - prefix.len() - 1] == b'_')
                {
                    continue;
                }
                let path: String =
                    text[start..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':').collect();
                let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
                let base: Vec<String> = if prefix == "super::" {
                    let mut p: Vec<String> = name.split("::").map(str::to_owned).collect();
                    p.pop();
                    p
                } else {
                    Vec::new()
                };
                // The longest prefix of base + segments that is a module.
                for n in (1..=segments.len()).rev() {
                    let mut candidate = base.clone();
                    candidate.extend(segments[..n].iter().map(|s| s.to_string()));
                    let candidate = candidate.join("::");
                    if mods.contains_key(&candidate) {
                        if candidate != *name {
                            targets.insert(candidate);
                        }
                        break;
                    }
                }
                if segments.is_empty() && !base.is_empty() {
                    targets.insert(base.join("::"));
                }
            }
        }
        // A parent names its children with `pub mod`; that is not an import.
        targets.retain(|t| !t.starts_with(&format!("{name}::")));
        edges.insert(name.clone(), targets);
    }
    edges
}

/// Strongly connected components with more than one module (Tarjan).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        t.index.insert(v, t.next);
        t.low.insert(v, t.next);
        t.next += 1;
        t.stack.push(v);
        t.on.insert(v);
        for w in &t.edges[v] {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let low = t.low[v].min(t.low[w]);
                t.low.insert(v, low);
            } else if t.on.contains(w) {
                let low = t.low[v].min(t.index[w]);
                t.low.insert(v, low);
            }
        }
        if t.low[v] == t.index[v] {
            let mut component = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                component.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                t.out.push(component);
            }
        }
    }
    let mut t = T {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

/// The layer of every top-level module, from lib.rs's "# Layout" list: bullet n (from 0, top)
/// holds the modules it links as [`name`].
fn layers() -> BTreeMap<String, usize> {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let layout = &lib[lib.find("//! # Layout").expect("lib.rs has a Layout section")..];
    let mut out = BTreeMap::new();
    let mut layer = None::<usize>;
    for line in layout.lines().take_while(|l| l.starts_with("//!")) {
        let line = line.trim_start_matches("//!").trim_start();
        if line.starts_with("- ") {
            layer = Some(layer.map_or(0, |l| l + 1));
        }
        let Some(layer) = layer else { continue };
        let mut rest = line;
        while let Some(at) = rest.find("[`") {
            let name: String = rest[at + 2..].chars().take_while(|c| *c != '`').collect();
            rest = &rest[at + 2..];
            let top = name.split("::").next().unwrap().to_owned();
            out.entry(top).or_insert(layer);
        }
    }
    out
}

fn top(module: &str) -> &str {
    module.split("::").next().unwrap()
}

#[test]
fn the_module_graph_has_no_cycle_and_follows_the_layer_map() {
    let mods = modules();
    let edges = graph(&mods);
    for (module, targets) in &edges {
        println!("{module} -> {}", targets.iter().cloned().collect::<Vec<_>>().join(" "));
    }
    let found = cycles(&edges);
    assert!(found.is_empty(), "import cycles among daemon/src modules: {found:?}");

    let layer = layers();
    let mut missing: Vec<&str> = mods.keys().map(|m| top(m)).filter(|m| !layer.contains_key(*m)).collect();
    missing.dedup();
    assert!(missing.is_empty(), "modules lib.rs's layer map does not place: {missing:?}");
    let mut upward = Vec::new();
    for (module, targets) in &edges {
        for target in targets {
            let (from, to) = (layer[top(module)], layer[top(target)]);
            if to < from {
                upward.push(format!("{module} (layer {from}) imports {target} (layer {to})"));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports against the layer map (a layer may use only itself and those below):\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_checker_sees_a_cycle_and_an_upward_import() {
    // The checker itself must be able to fail.
    let mods: BTreeMap<String, String> = [
        ("a".to_owned(), "use crate::b::X;".to_owned()),
        ("b".to_owned(), "fn f() { crate::a::g() } // crate::c in a comment".to_owned()),
        ("c".to_owned(), "use super::a;".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k, strip(&v)))
    .collect();
    let edges = graph(&mods);
    assert_eq!(edges["b"], BTreeSet::from(["a".to_owned()]), "comments are not imports");
    assert_eq!(cycles(&edges), vec![vec!["a".to_owned(), "b".to_owned()]]);
    assert_eq!(strip("x // crate::y\n#[cfg(test)]\nmod tests { crate::z }"), "x ");
}

/// Lines of a source file before its test module (the part a reader of the module reads).
fn lines_before_tests(text: &str) -> usize {
    text.lines().take_while(|l| !l.starts_with("#[cfg(test)]")).count()
}

#[test]
fn no_module_is_longer_than_700_lines_before_its_tests() {
    assert_eq!(lines_before_tests("a\nb\n#[cfg(test)]\nmod tests {}\n"), 2, "the counter stops at the tests");
    let mut long = Vec::new();
    for path in rust_files() {
        let n = lines_before_tests(&std::fs::read_to_string(&path).unwrap());
        if n > 700 {
            long.push(format!("{}: {n}", path.display()));
        }
    }
    assert!(long.is_empty(), "split these (each file does one thing): {long:?}");
}

/// The protocol layer's codecs (upload-pack v0/v1 and v2 and what they share, receive-pack,
/// upload-archive) parse requests and encode answers only: every question about the repository
/// goes to what the service gives them (`protocol::upload::Upload`, `protocol::receive::Receiver`,
/// `protocol::archive::Archiver`). Read from the code: no repository handle, no request context
/// (the codecs take its limits and tally, `session::Bounds`), no push applied, no import of
/// selection, bitmaps, pack files, the graph or the service.
#[test]
fn the_codecs_ask_what_the_service_gives_them_and_touch_no_repository() {
    let mods = modules();
    let edges = graph(&mods);
    for codec in
        ["protocol", "protocol::v0", "protocol::v2", "protocol::upload", "protocol::receive", "protocol::archive"]
    {
        let text = &mods[codec];
        for forbidden in
            ["gix::Repository", ".repos", ".caches", ".served", "to_thread_local", "push::apply", "Context"]
        {
            assert!(!text.contains(forbidden), "{codec} uses {forbidden}");
        }
        for target in &edges[codec] {
            assert!(
                !["select", "bitmap", "packs", "graph", "service", "maintenance"].contains(&top(target)),
                "{codec} imports {target}"
            );
        }
    }
}

/// Every transfer goes through one pipeline (`service::pipeline`): a place among its
/// repository's and its client's transfers and a transfer slot are taken there and nowhere else,
/// in one order, whatever carried the request. Read from the code: no other module enters the
/// shares or asks for a slot, and no connection's transport (git://, SSH, `gixd shell`) writes
/// its request's record (smart HTTP records the responses that are not transfers, advertisements
/// and refusals, where it makes them).
#[test]
fn shares_and_slots_are_taken_in_the_pipeline_only() {
    let mods = modules();
    let takes = |text: &str| {
        ["shares.enter(", ".slot()", "pipeline::enter(", "pipeline::slot(", "pipeline::admit("]
            .into_iter()
            .filter(|call| text.contains(call))
            .collect::<Vec<_>>()
    };
    // The services' stateless entries (smart HTTP) admit through the pipeline's functions.
    let admitting = ["service::pipeline", "service::upload", "service::receive"];
    for (name, text) in &mods {
        let taken = takes(text);
        if name == "service::pipeline" {
            assert!(taken.contains(&"shares.enter(") && taken.contains(&".slot()"), "the pipeline admits");
            continue;
        }
        let direct: Vec<_> = taken.iter().filter(|c| ["shares.enter(", ".slot()"].contains(c)).collect();
        assert!(direct.is_empty(), "{name} takes a share or a slot itself: {direct:?}");
        if !admitting.contains(&name.as_str()) {
            assert!(taken.is_empty(), "{name} admits a transfer outside the services: {taken:?}");
        }
        if ["transport::git", "transport::exec", "transport::ssh", "transport::shell"].contains(&name.as_str()) {
            for record in [".finish(&", "log.finish(", "Request::new("] {
                assert!(!text.contains(record), "{name} writes a request's record itself ({record})");
            }
        }
    }
}

/// Selection, bitmaps, pack writing, repository access and the object graph return errors of
/// their own (`select`'s and the graph's walk errors, `RefsError`, `PackError`, `BitmapError`);
/// the service's error (`ServeError`) wraps them and is known only at and above the service.
#[test]
fn the_layers_below_the_service_return_their_own_errors() {
    let mods = modules();
    let below = ["pack", "bitmap", "select", "repo", "graph", "packs", "pack_ranges"];
    let leaking: Vec<&String> = mods
        .iter()
        .filter(|(name, text)| below.contains(&top(name)) && text.contains("ServeError"))
        .map(|(n, _)| n)
        .collect();
    assert!(leaking.is_empty(), "modules below the service that speak the service's error: {leaking:?}");
}
