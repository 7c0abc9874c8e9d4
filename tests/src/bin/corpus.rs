//! Build the deterministic corpus (cached under target/corpus/<key>/) and list it with object
//! counts: `cargo xtask corpus`.

use gixd_tests::corpus::{self, Hash, REPOS};

fn main() {
    println!("corpus: {}", corpus::dir().display());
    println!("| repository | hash | objects | refs | about |\n|---|---|---|---|---|");
    let mut rows = Vec::new();
    for spec in REPOS {
        for hash in Hash::ALL {
            rows.push((spec.name, hash, corpus::ensure(spec.name, hash), spec.about));
        }
    }
    if let Some(path) = corpus::ensure_self() {
        rows.push(("self", Hash::Sha1, path, "this project's own history at a fixed commit"));
    }
    for (name, hash, path, about) in rows {
        let objects = gixd_tests::git_out(&path, &["count-objects", "-v"])
            .lines()
            .filter_map(|l| l.split_once(": "))
            .filter(|(k, _)| *k == "count" || *k == "in-pack")
            .map(|(_, v)| v.parse::<u64>().unwrap())
            .sum::<u64>();
        let refs = gixd_tests::git_out(&path, &["for-each-ref", "--format=x"]).lines().count();
        println!("| {name} | {} | {objects} | {refs} | {about} |", hash.name());
    }
}
