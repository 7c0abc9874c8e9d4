//! `cargo xtask report`: render measured numbers into the documents that quote them. Each document
//! holds a block between `<!-- generated: NAME -->` and `<!-- end generated -->`; the block is
//! rewritten from the result file, so no number in it was typed by hand. `--check` fails when a
//! block is not what the results render to (a result re-measured without re-rendering, or an edit).

use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// Documents and the generated blocks they hold.
const TARGETS: &[(&str, &str)] = &[
    ("upstream/serial-stepwise.md", "patch-costs"),
    ("upstream/delta-base-inclusion.md", "patch-costs"),
    ("upstream/serial-delta-resolution.md", "index-costs"),
    ("upstream/delta-chain-base-cache.md", "decode-costs"),
    ("upstream/deflate-stream-reuse.md", "loose-entry-costs"),
    ("upstream/delta-search.md", "real-fetches"),
    ("upstream/delta-search.md", "maintenance"),
    ("bench/README.md", "clone-cost"),
    ("bench/README.md", "clone-commit-graph"),
    ("bench/README.md", "writes"),
    ("bench/README.md", "ramp"),
    ("bench/README.md", "narrow"),
    ("bench/README.md", "push"),
    ("bench/README.md", "ingest"),
    ("bench/README.md", "maintenance"),
    ("bench/README.md", "maintenance-as-cloned"),
    ("bench/README.md", "maintenance-loose-by-git"),
    ("bench/README.md", "refs"),
    ("bench/README.md", "bitmaps"),
    ("bench/README.md", "real-repos"),
    ("bench/README.md", "bursts"),
    ("bench/README.md", "bursts-secure"),
    ("bench/README.md", "tls"),
    ("bench/README.md", "ssh"),
    ("bench/README.md", "reftable"),
    ("bench/README.md", "bundles"),
];

pub fn run(root: &Path, check: bool) -> Result<()> {
    let queue = crate::queue::Queue::load(&root.join("patches"))?;
    // The patch costs must be of the release the queue is on (a rebase re-measures them), and a
    // report on a patch must not name another release of its crate than the one it is carried on.
    let mut behind = measured_behind(root, &queue)?;
    behind.extend(reports_naming_other_releases(root, &queue)?);
    for b in &behind {
        eprintln!("{b}");
    }
    let mut stale = Vec::new();
    for (doc, block) in TARGETS {
        let rendered = match *block {
            "patch-costs" => patch_costs(root)?,
            "index-costs" => index_costs(root)?,
            "decode-costs" => decode_costs(root)?,
            "loose-entry-costs" => loose_entry_costs(root)?,
            "real-fetches" => real_fetches(root)?,
            "clone-cost" => clone_cost(root, crate::bench::clone::CLONE_RESULTS, "cargo xtask bench clone")?,
            "clone-commit-graph" => clone_cost(
                root,
                CLONE_COMMIT_GRAPH_RESULTS,
                "cargo xtask bench clone --repo …; then move bench/results/clone-cost.json there",
            )?,
            "writes" => writes(root)?,
            "ramp" => ramp(root)?,
            "narrow" => narrow(root)?,
            "push" => push(root)?,
            "ingest" => ingest(root)?,
            "maintenance" => maintenance(root, crate::bench::maintenance::MAINTENANCE_RESULTS, "")?,
            "maintenance-as-cloned" => {
                maintenance(root, crate::bench::maintenance::MAINTENANCE_AS_CLONED_RESULTS, " --as-cloned")?
            }
            "maintenance-loose-by-git" => maintenance_loose_by_git(root)?,
            "refs" => refs(root)?,
            "bitmaps" => bitmaps(root)?,
            "real-repos" => real_repos(root)?,
            "bursts" => bursts(root, crate::bench::bursts::BURSTS_RESULTS, "", &PLAIN_PAIRS)?,
            "bursts-secure" => bursts(root, crate::bench::bursts::BURSTS_SECURE_RESULTS, " --secure", &SECURE_PAIRS)?,
            "tls" => tls(root)?,
            "ssh" => ssh(root)?,
            "reftable" => reftable(root)?,
            "bundles" => bundles(root)?,
            other => bail!("no renderer for block {other}"),
        };
        let path = root.join(doc);
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {doc}"))?;
        let new = replace_block(&text, block, &rendered).with_context(|| format!("{doc}: block '{block}'"))?;
        if new != text {
            if check {
                stale.push(*doc);
            } else {
                std::fs::write(&path, new)?;
                println!("{doc}: '{block}' rendered");
            }
        }
    }
    // The reports that are whole files: the bake-off's and the life benchmark's.
    crate::bench::bakeoff::render::run(root, check)?;
    crate::bench::life::render(root, check)?;
    if !stale.is_empty() {
        bail!("not rendered from the current results: {stale:?}; run `cargo xtask report`");
    }
    if check && !behind.is_empty() {
        bail!("{} place(s) above are not of the release the queue is on", behind.len());
    }
    Ok(())
}

/// `(crate, version)` pairs of a results file's conditions: the arm's own record (`arms.stock`,
/// "gix-pack 0.78.0"), else the queue it was run with ("file (gix-pack 0.77.0)").
fn measured_versions(c: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let words = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    let items: Vec<Vec<String>> = match c["arms"]["stock"].as_array() {
        Some(stock) => stock.iter().filter_map(|v| v.as_str()).map(words).collect(),
        None => c["queue"]
            .as_array()
            .map(|q| q.iter().filter_map(|v| v.as_str()?.rsplit_once('(')?.1.strip_suffix(')').map(words)).collect())
            .unwrap_or_default(),
    };
    for w in items {
        if let [k, v, ..] = w.as_slice()
            && !out.iter().any(|(ok, _)| ok == k)
        {
            out.push((k.clone(), v.clone()));
        }
    }
    out
}

fn versions_line(c: &Value) -> String {
    let v = measured_versions(c);
    if v.is_empty() {
        return String::new();
    }
    let list = v.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ");
    format!(" Checked against {list}: as published (stock arm) and with patches/ (patched arm).")
}

fn measured_behind(root: &Path, queue: &crate::queue::Queue) -> Result<Vec<String>> {
    let Ok(Ok(doc)) = load(root, crate::bench::patches::RESULTS, "") else { return Ok(Vec::new()) };
    let measured = measured_versions(&doc["conditions"]);
    let mut out = Vec::new();
    for (krate, version) in queue.published_crates() {
        match measured.iter().find(|(k, _)| *k == krate) {
            Some((_, v)) if *v == version => {}
            Some((_, v)) => out.push(format!(
                "{} was measured on {krate} {v}, the queue is on {krate} {version}: run `cargo xtask bench patches`, then `cargo xtask report`",
                crate::bench::patches::RESULTS
            )),
            None => out.push(format!("{} does not say which {krate} it measured: run `cargo xtask bench patches`", crate::bench::patches::RESULTS)),
        }
    }
    Ok(out)
}

/// In every upstream/ report on a patch of the series (it names `patches/<file>`), each
/// "<crate> <version>" of that patch's crate must be the version the queue carries.
fn reports_naming_other_releases(root: &Path, queue: &crate::queue::Queue) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(root.join("upstream")) else { return Ok(out) };
    let mut docs: Vec<_> =
        entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|e| e == "md")).collect();
    docs.sort();
    for doc in docs {
        let text = std::fs::read_to_string(&doc)?;
        let name = format!("upstream/{}", doc.file_name().unwrap_or_default().to_string_lossy());
        for p in queue.patches.iter().filter(|p| text.contains(&format!("patches/{}", p.file))) {
            for (n, line) in text.lines().enumerate() {
                for v in versions_named(line, &p.krate) {
                    if v != p.version {
                        out.push(format!(
                            "{name}:{}: names {} {v}, the queue carries {} on {} {}: re-check that text against the new release",
                            n + 1,
                            p.krate,
                            p.file,
                            p.krate,
                            p.version
                        ));
                    }
                }
            }
        }
    }
    out.dedup();
    Ok(out)
}

/// The versions written right after `krate ` in `line` ("gix-pack 0.77.0," → "0.77.0").
fn versions_named(line: &str, krate: &str) -> Vec<String> {
    let needle = format!("{krate} ");
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find(&needle) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + needle.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_') {
            continue;
        }
        let v: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
        let v = v.trim_end_matches('.');
        if v.split('.').count() == 3 {
            out.push(v.to_owned());
        }
    }
    out
}

pub fn replace_block(text: &str, name: &str, body: &str) -> Result<String> {
    let open = format!("<!-- generated: {name} -->\n");
    let close = "<!-- end generated -->";
    let start = text.find(&open).context("opening marker missing")? + open.len();
    let end = start + text[start..].find(close).context("closing marker missing")?;
    Ok(format!("{}{}{}", &text[..start], body, &text[end..]))
}

/// The results file `file`, parsed; `Err` holds the block to render when it is not there yet,
/// saying to run `how`.
fn load(root: &Path, file: &str, how: &str) -> Result<Result<Value, String>> {
    match std::fs::read_to_string(root.join(file)) {
        Ok(text) => Ok(Ok(serde_json::from_str(&text)?)),
        Err(_) => Ok(Err(format!("NOT MEASURED: no {file}. Run {how}.\n"))),
    }
}

/// A results document as its report starts: the runs, the conditions, and the line saying how
/// and where they were measured (`command`).
fn measured<'d>(doc: &'d Value, command: &str) -> Result<(&'d Vec<Value>, &'d Value, String)> {
    let c = &doc["conditions"];
    Ok((doc["runs"].as_array().context("runs")?, c, conditions_line(c, command)))
}

/// The real-repository results (both reports read them), or how to make them.
fn real_results(root: &Path) -> Result<Result<Value, String>> {
    load(
        root,
        crate::bench::real::REAL_RESULTS,
        "`cargo xtask bench real --repo PATH…` (by hand: it needs the repositories)",
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A count that must be the same in every run of an arm: shown once, or as `min–max` if not.
fn count(runs: &[&Value], key: &str) -> String {
    let vals: Vec<u64> = runs.iter().filter_map(|r| r[key].as_u64()).collect();
    match (vals.iter().min(), vals.iter().max()) {
        (Some(a), Some(b)) if a == b => a.to_string(),
        (Some(a), Some(b)) => format!("{a}–{b}"),
        _ => "NOT MEASURED".into(),
    }
}

fn ratio(stock: f64, patched: f64) -> String {
    if stock > 0.0 && patched.is_finite() { format!("{:.3}", patched / stock) } else { "—".into() }
}

/// The stock-vs-patched table of one measurement: counts (the same in every run of an arm) and
/// times in milliseconds (medians of microsecond fields).
fn stock_vs_patched(stock: &[&Value], patched: &[&Value], counts: &[(&str, &str)], times: &[(&str, &str)]) -> String {
    let mut out = String::from("| measure | stock crates | patched (vendor/) | patched ÷ stock |\n|---|---|---|---|\n");
    for (label, key) in counts {
        let (s, p) = (count(stock, key), count(patched, key));
        let r = match (s.parse::<f64>(), p.parse::<f64>()) {
            (Ok(s), Ok(p)) => ratio(s, p),
            _ => "—".into(),
        };
        out.push_str(&format!("| {label} | {s} | {p} | {r} |\n"));
    }
    let ms = |runs: &[&Value], key: &str| median(runs.iter().filter_map(|r| r[key].as_f64()).collect()) / 1000.0;
    for (label, key) in times {
        let (s, p) = (ms(stock, key), ms(patched, key));
        out.push_str(&format!("| {label} | {s:.2} | {p:.2} | {} |\n", ratio(s, p)));
    }
    out
}

fn patch_costs(root: &Path) -> Result<String> {
    let doc = match load(root, crate::bench::patches::RESULTS, "`cargo xtask bench patches`")? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let runs = doc["runs"].as_array().context("runs")?;
    let arm = |name: &str| runs.iter().filter(|r| r["arm"] == name).collect::<Vec<_>>();
    let (stock, patched) = (arm("stock"), arm("patched"));
    let c = &doc["conditions"];
    let mut out = conditions_line(c, "cargo xtask bench patches");
    out.push_str(&versions_line(c));
    out.push_str(&format!(
        " {}. Fixture: the deterministic `patch-costs` repository (bench/patch-costs), pack of `{}`'s objects with `thread_limit: Some(1)`.\n\n",
        c["rustc"].as_str().unwrap_or("?"),
        c["rev"].as_str().unwrap_or("?"),
    ));
    out.push_str(&stock_vs_patched(
        &stock,
        &patched,
        &[
            ("threads started during generation", "threads_started"),
            ("objects selected", "selected_objects"),
            ("pack entries written", "pack_entries"),
            ("entries copied from the pack", "copied_from_pack"),
            ("entries decoded and re-deflated", "re_deflated"),
            ("pack bytes", "pack_bytes"),
        ],
        &[("process CPU per generation, median (ms)", "cpu_us"), ("wall per generation, median (ms)", "wall_us")],
    ));
    Ok(out)
}

/// Clone cost rows, worst first (gixd's CPU over git's): of the corpus (`CLONE_RESULTS`), or of
/// real repositories without a bitmap, with and without a commit-graph (kept apart in
/// [`CLONE_COMMIT_GRAPH_RESULTS`]).
fn clone_cost(root: &Path, results: &str, command: &str) -> Result<String> {
    let doc = match load(root, results, &format!("`{command}`"))? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench clone")?;
    out.push_str(&format!(
        " gixd: {}. git: {}. Medians per repository, worst first.\n\n",
        c["gixd"].as_str().unwrap_or("?"),
        c["git_arm"].as_str().unwrap_or("?"),
    ));
    out.push_str("| repository | objects | server CPU per clone, gixd (ms) | git (ms) | gixd ÷ git | peak RSS, gixd (MiB) | git (MiB) | gixd ÷ git |\n|---|---|---|---|---|---|---|---|\n");
    let mut repos: Vec<&str> = runs.iter().filter_map(|r| r["repo"].as_str()).collect();
    repos.sort();
    repos.dedup();
    let mut rows = Vec::new();
    for repo in repos {
        let of = |arm: &str, key: &str| {
            median(
                runs.iter().filter(|r| r["repo"] == repo && r["arm"] == arm).filter_map(|r| r[key].as_f64()).collect(),
            )
        };
        let objects = runs.iter().find(|r| r["repo"] == repo).and_then(|r| r["objects"].as_u64()).unwrap_or(0);
        let (cg, ct) = (of("gixd", "cpu_us") / 1000.0, of("git", "cpu_us") / 1000.0);
        let (rg, rt) = (of("gixd", "peak_rss_kb") / 1024.0, of("git", "peak_rss_kb") / 1024.0);
        let row = format!(
            "| {repo} | {objects} | {cg:.1} | {ct:.1} | {} | {rg:.1} | {rt:.1} | {} |\n",
            ratio(ct, cg),
            ratio(rt, rg)
        );
        rows.push((cg / ct, row));
    }
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    rows.into_iter().for_each(|(_, row)| out.push_str(&row));
    Ok(out)
}

/// Where `cargo xtask bench clone --repo` results on real repositories without a bitmap are kept
/// (moved there by hand from `CLONE_RESULTS`, which holds the corpus's).
const CLONE_COMMIT_GRAPH_RESULTS: &str = "bench/results/clone-commit-graph.json";

/// The results of `cargo xtask bench patches` if they hold `key` (a measurement added after the
/// first runs): the document, or the NOT MEASURED text to render instead.
fn patch_results(root: &Path, key: &str, what: &str) -> Result<Result<Value, String>> {
    let doc = match load(root, crate::bench::patches::RESULTS, "`cargo xtask bench patches`")? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(Err(not_measured)),
    };
    if doc["runs"].as_array().context("runs")?.iter().all(|r| r.get(key).is_none()) {
        return Ok(Err(format!(
            "NOT MEASURED: {} predates the {what} measurement. Run `cargo xtask bench patches`.\n",
            crate::bench::patches::RESULTS
        )));
    }
    Ok(Ok(doc))
}

/// The stock and the patched arm's runs of a `cargo xtask bench patches` document.
fn stock_and_patched(doc: &Value) -> Result<(Vec<&Value>, Vec<&Value>)> {
    let runs = doc["runs"].as_array().context("runs")?;
    let arm = |name: &str| runs.iter().filter(|r| r["arm"] == name).collect::<Vec<_>>();
    Ok((arm("stock"), arm("patched")))
}

/// The conditions and crate versions of a `cargo xtask bench patches` run, as a sentence.
fn patch_conditions(doc: &Value) -> String {
    let c = &doc["conditions"];
    let mut out = conditions_line(c, "cargo xtask bench patches");
    out.push_str(&versions_line(c));
    out
}

/// Indexing a pack as a push is indexed, from the same run as `patch-costs`.
fn index_costs(root: &Path) -> Result<String> {
    let doc = match patch_results(root, "index_threads_started", "indexing")? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (stock, patched) = stock_and_patched(&doc)?;
    let mut out = patch_conditions(&doc);
    out.push_str(" Fixture: the `patch-costs` repository's pack, indexed by `Bundle::write_to_directory` with `thread_limit: Some(1)` (threads seen by a sampler of /proc/self/task during the call).\n\n");
    out.push_str(&stock_vs_patched(
        &stock,
        &patched,
        &[("objects indexed", "index_objects"), ("threads started during indexing", "index_threads_started")],
        &[
            ("process CPU per indexing, median (ms)", "index_cpu_us"),
            ("wall per indexing, median (ms)", "index_wall_us"),
        ],
    ));
    Ok(out)
}

fn decode_costs(root: &Path) -> Result<String> {
    let doc = match patch_results(root, "decode_capped_reversed_deltas_applied", "decoding")? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (stock, patched) = stock_and_patched(&doc)?;
    let c = &doc["conditions"];
    let mut out = patch_conditions(&doc);
    out.push_str(&format!(
        " Fixture: the `patch-costs` repository's pack (`git repack -adf --window=50 --depth=50`); every object of `{}`, in `git rev-list --objects` order, decoded by `File::decode_entry` through each of gix's delta caches: the list of 64 objects a repository gets by default, and the cache capped by bytes (96 MiB here, git's default) it gets with `core.deltaBaseCacheLimit` set — the one that asks for chain bases; with it also in the opposite order (oldest versions first, as a walk from old tags meets the deep end of chains first).\n\n",
        c["rev"].as_str().unwrap_or("?"),
    ));
    out.push_str(&stock_vs_patched(
        &stock,
        &patched,
        &[
            ("objects decoded", "decode_objects"),
            ("deltas applied, `StaticLinkedList<64>`", "decode_deltas_applied"),
            ("deltas applied, `MemoryCappedHashmap`", "decode_capped_deltas_applied"),
            ("deltas applied, `MemoryCappedHashmap`, opposite order", "decode_capped_reversed_deltas_applied"),
        ],
        &[
            ("process CPU per pass, `StaticLinkedList<64>`, median (ms)", "decode_cpu_us"),
            ("process CPU per pass, `MemoryCappedHashmap`, median (ms)", "decode_capped_cpu_us"),
            (
                "process CPU per pass, `MemoryCappedHashmap`, opposite order, median (ms)",
                "decode_capped_reversed_cpu_us",
            ),
        ],
    ));
    Ok(out)
}

/// Pack entries made of loose objects, from the same run as `patch-costs`.
fn loose_entry_costs(root: &Path) -> Result<String> {
    let doc = match patch_results(root, "loose_stored_cpu_us", "loose entries")? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (stock, patched) = stock_and_patched(&doc)?;
    let mut out = patch_conditions(&doc);
    out.push_str(" Fixture: every object of the `patch-costs` repository's pack written loose by `git unpack-objects` into a scratch repository, then made into pack entries by `iter_from_counts` with `thread_limit: Some(1)` at the default compression, then at level 0 (stored, as a writer that searches deltas next asks for): each read, inflated and deflated again by `Entry::from_data`; the entries' bytes summed.\n\n");
    out.push_str(&stock_vs_patched(
        &stock,
        &patched,
        &[
            ("loose objects", "loose_objects"),
            ("entries deflated from the object's data", "loose_re_deflated"),
            ("entries' compressed bytes", "loose_entry_bytes"),
            ("entries' bytes, level 0", "loose_stored_entry_bytes"),
        ],
        &[
            ("process CPU per pass, median (ms)", "loose_cpu_us"),
            ("process CPU per pass, level 0, median (ms)", "loose_stored_cpu_us"),
        ],
    ));
    Ok(out)
}

fn narrow(root: &Path) -> Result<String> {
    let doc = match load(root, crate::bench::narrow::NARROW_RESULTS, "`cargo xtask bench narrow`")? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench narrow")?;
    out.push_str(&format!(
        " Repository {} ({} objects). gixd: {}. git: {}. Bytes: {}. Objects: what the client holds after the clone. CPU: medians.\n\n",
        c["repo"].as_str().unwrap_or("?"),
        c["objects"],
        c["gixd"].as_str().unwrap_or("?"),
        c["git_arm"].as_str().unwrap_or("?"),
        c["bytes"].as_str().unwrap_or("?"),
    ));
    out.push_str("| clone | objects, gixd | git daemon | bytes, gixd | git daemon | gixd ÷ git | server CPU, gixd (ms) | git daemon (ms) | gixd ÷ git |\n|---|---|---|---|---|---|---|---|---|\n");
    let mut ops: Vec<&str> = Vec::new();
    for r in runs {
        if let Some(op) = r["op"].as_str()
            && !ops.contains(&op)
        {
            ops.push(op);
        }
    }
    for op in ops {
        let arm = |name: &str| runs.iter().filter(|r| r["op"] == op && r["arm"] == name).collect::<Vec<_>>();
        let (g, t) = (arm("gixd"), arm("git daemon"));
        let med = |runs: &[&Value], key: &str| median(runs.iter().filter_map(|r| r[key].as_f64()).collect());
        let (bg, bt) = (med(&g, "bytes"), med(&t, "bytes"));
        let (cg, ct) = (med(&g, "cpu_us") / 1000.0, med(&t, "cpu_us") / 1000.0);
        out.push_str(&format!(
            "| {op} | {} | {} | {bg:.0} | {bt:.0} | {} | {cg:.1} | {ct:.1} | {} |\n",
            count(&g, "client_objects"),
            count(&t, "client_objects"),
            ratio(bt, bg),
            ratio(ct, cg)
        ));
    }
    Ok(out)
}

fn push(root: &Path) -> Result<String> {
    let doc = match load(root, crate::bench::push::PUSH_RESULTS, "`cargo xtask bench push`")? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench push")?;
    out.push_str(&format!(
        " Repository {} ({} objects), one new commit per push. gixd: {}. git: {}. Medians.\n\n",
        c["repo"].as_str().unwrap_or("?"),
        c["objects"],
        c["gixd"].as_str().unwrap_or("?"),
        c["git_arm"].as_str().unwrap_or("?"),
    ));
    let med = |arm: &str| {
        median(runs.iter().filter(|r| r["arm"] == arm).filter_map(|r| r["cpu_us"].as_f64()).collect()) / 1000.0
    };
    let (g, t) = (med("gixd"), med("git"));
    out.push_str("| measure | gixd | git receive-pack | gixd ÷ git |\n|---|---|---|---|\n");
    out.push_str(&format!("| server CPU per push (ms) | {g:.1} | {t:.1} | {} |\n", ratio(t, g)));
    Ok(out)
}

/// A whole history pushed into an empty repository: a row per repository, the worst CPU ratio
/// (gixd ÷ git receive-pack) first.
fn ingest(root: &Path) -> Result<String> {
    let doc = match load(
        root,
        crate::bench::ingest::INGEST_RESULTS,
        "`cargo xtask bench ingest --repo PATH…` (by hand: it needs the repositories)",
    )? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench ingest")?;
    out.push_str(&format!(
        " Pushed: {}. gixd: {}. git: {}. Medians.\n\n",
        c["pushed"].as_str().unwrap_or("?"),
        c["gixd"].as_str().unwrap_or("?"),
        c["git_arm"].as_str().unwrap_or("?"),
    ));
    out.push_str("| repository | objects | refs | CPU s: gixd | git | ÷ | wall s: gixd | git | ÷ | wall s: gixd git:// | ÷ | wall s: git http-backend | gixd ÷ it | peak MiB: gixd | git | ÷ |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    let mut rows = Vec::new();
    for repo in c["repos"].as_array().context("repos")? {
        let name = repo["repo"].as_str().context("repo")?;
        let med = |arm: &str, key: &str| {
            median(
                runs.iter().filter(|r| r["repo"] == name && r["arm"] == arm).filter_map(|r| r[key].as_f64()).collect(),
            )
        };
        let (cg, ct) = (med("gixd", "cpu_us") / 1e6, med("git", "cpu_us") / 1e6);
        let (wg, wt) = (med("gixd", "wall_ms") / 1e3, med("git", "wall_ms") / 1e3);
        let (pg, pt) = (med("gixd", "peak_kb") / 1024.0, med("git", "peak_kb") / 1024.0);
        // Runs of before the git:// arm have none: a dash.
        let wn = med("gixd git://", "wall_ms") / 1e3;
        let wh = med("git http-backend", "wall_ms") / 1e3;
        let seconds = |s: f64| if s.is_finite() { format!("{s:.1}") } else { "—".into() };
        let row = format!(
            "| {name} | {} | {} | {cg:.1} | {ct:.1} | {} | {wg:.1} | {wt:.1} | {} | {} | {} | {} | {} | {pg:.0} | {pt:.0} | {} |\n",
            repo["objects"],
            repo["refs"],
            ratio(ct, cg),
            ratio(wt, wg),
            seconds(wn),
            ratio(wt, wn),
            seconds(wh),
            ratio(wh, wg),
            ratio(pt, pg)
        );
        rows.push((cg / ct, row));
    }
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    rows.into_iter().for_each(|(_, row)| out.push_str(&row));
    Ok(out)
}

/// Pack bytes after repacking a push-only repository: gixd maintenance against git's two
/// repacks, a row per repository, the worst bytes ratio (gixd's aggressive repack ÷ `git repack -adf`)
/// first.
/// `gixd maintenance` against `git repack -adb` on a repository stock git pushed into (small
/// pushes loose): bytes, CPU and peak memory, worst first by CPU or peak.
fn maintenance_loose_by_git(root: &Path) -> Result<String> {
    use crate::bench::maintenance::LOOSE_ARMS;
    let doc = match load(
        root,
        crate::bench::maintenance::MAINTENANCE_LOOSE_BY_GIT_RESULTS,
        "`cargo xtask bench maintenance --loose-by-git --pushes 300 --repo PATH…` (by hand: it needs the repositories)",
    )? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench maintenance --loose-by-git")?;
    out.push_str(&format!(" Setup: {}; {} pushes. gixd: {}. Bytes: every `.pack` file after the repack; CPU and peak memory (maximum resident set) of the repacking process and its children: medians; ÷ is gixd's over git's.\n\n", c["how"].as_str().unwrap_or("?"), c["pushes"], c["gixd"].as_str().unwrap_or("?")));
    out.push_str(&format!(
        "| repository | objects | before: packs, loose | {} bytes | {} bytes | ÷ | CPU ms: gixd | git | ÷ | peak MB: gixd | git | ÷ |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        LOOSE_ARMS[0], LOOSE_ARMS[1]
    ));
    let mut rows = Vec::new();
    for repo in c["repos"].as_array().context("repos")? {
        let name = repo["repo"].as_str().context("repo")?;
        let of = |arm: &str| -> Vec<&Value> { runs.iter().filter(|r| r["repo"] == name && r["arm"] == arm).collect() };
        let (b, c, p) = arm_medians(runs, name, LOOSE_ARMS);
        let row = format!(
            "| {name} | {} | {}, {} | {} | {} | {} | {:.0} | {:.0} | {} | {:.1} | {:.1} | {} |\n",
            repo["objects"],
            repo["as_pushed"]["packs"],
            repo["as_pushed"]["loose"],
            count(&of(LOOSE_ARMS[0]), "pack_bytes"),
            count(&of(LOOSE_ARMS[1]), "pack_bytes"),
            ratio(b[1], b[0]),
            c[0],
            c[1],
            ratio(c[1], c[0]),
            p[0],
            p[1],
            ratio(p[1], p[0]),
        );
        rows.push(((c[0] / c[1]).max(p[0] / p[1]), row));
    }
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    rows.into_iter().for_each(|(_, row)| out.push_str(&row));
    Ok(out)
}

/// Per arm of a maintenance run on `repo`: its pack bytes (the same every round), and its CPU
/// (ms) and peak memory (MB), medians.
fn arm_medians<const N: usize>(runs: &[Value], repo: &str, arms: [&str; N]) -> ([f64; N], [f64; N], [f64; N]) {
    let of = |arm: &str| -> Vec<&Value> { runs.iter().filter(|r| r["repo"] == repo && r["arm"] == arm).collect() };
    let bytes = |arm: &str| of(arm).first().and_then(|r| r["pack_bytes"].as_f64()).unwrap_or(f64::NAN);
    let cpu = |arm: &str| median(of(arm).iter().filter_map(|r| r["cpu_us"].as_f64()).collect()) / 1000.0;
    let peak = |arm: &str| median(of(arm).iter().filter_map(|r| r["peak_rss_kb"].as_f64()).collect()) / 1024.0;
    (arms.map(bytes), arms.map(cpu), arms.map(peak))
}

fn maintenance(root: &Path, results: &str, flag: &str) -> Result<String> {
    use crate::bench::maintenance::ARMS;
    let doc = match load(
        root,
        results,
        &format!("`cargo xtask bench maintenance{flag} --repo PATH…` (by hand: it needs the repositories)"),
    )? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, &format!("cargo xtask bench maintenance{flag}"))?;
    let as_cloned = c["pushes"].is_null();
    let pushes = if as_cloned { String::new() } else { format!("; {} pushes", c["pushes"]) };
    out.push_str(&format!(" Setup: {}{pushes}. gixd: {}. Bytes: every `.pack` file after the repack (the same every round); CPU and peak memory (maximum resident set): medians; ÷ is gixd's over git's.\n\n", c["how"].as_str().unwrap_or("?"), c["gixd"].as_str().unwrap_or("?")));
    out.push_str(&format!(
        "| repository | objects | before: packs, bytes | {} bytes | {} bytes | ÷ | {} bytes | ÷ | CPU ms: gixd | -adf | ÷ | -ad | ÷ | peak MB: gixd | -adf | ÷ | -ad | ÷ | {} bytes | ÷ -adf | CPU ms | ÷ -adf | peak MB | ÷ -adf |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        ARMS[0], ARMS[1], ARMS[2], ARMS[3]
    ));
    let mut rows = Vec::new();
    for repo in c["repos"].as_array().context("repos")? {
        let name = repo["repo"].as_str().context("repo")?;
        let of = |arm: &str| -> Vec<&Value> { runs.iter().filter(|r| r["repo"] == name && r["arm"] == arm).collect() };
        let (b, c, p) = arm_medians(runs, name, ARMS);
        let row = format!(
            "| {name} | {} | {}, {} | {} | {} | {} | {} | {} | {:.0} | {:.0} | {} | {:.0} | {} | {:.0} | {:.0} | {} | {:.0} | {} | {} | {} | {:.0} | {} | {:.0} | {} |\n",
            repo["objects"],
            repo["as_pushed"]["packs"],
            repo["as_pushed"]["pack_bytes"],
            count(&of(ARMS[0]), "pack_bytes"),
            count(&of(ARMS[1]), "pack_bytes"),
            ratio(b[1], b[0]),
            count(&of(ARMS[2]), "pack_bytes"),
            ratio(b[2], b[0]),
            c[0],
            c[1],
            ratio(c[1], c[0]),
            c[2],
            ratio(c[2], c[0]),
            p[0],
            p[1],
            ratio(p[1], p[0]),
            p[2],
            ratio(p[2], p[0]),
            count(&of(ARMS[3]), "pack_bytes"),
            ratio(b[1], b[3]),
            c[3],
            ratio(c[1], c[3]),
            p[3],
            ratio(p[1], p[3]),
        );
        // Worst first: after pushes by the aggressive repack's bytes against git's -adf (what the
        // two compare); as cloned, by plain maintenance's CPU or peak against -ad (the bytes are
        // git's own pack's).
        let worst = if as_cloned {
            (c[0] / c[2]).max(p[0] / p[2])
        } else if b[3].is_finite() {
            b[3] / b[1]
        } else {
            b[0] / b[1]
        };
        rows.push((worst, row));
    }
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, row) in rows {
        out.push_str(&row);
    }
    Ok(out)
}

/// What loose refs cost a request: a row per repository, the largest loose ÷ packed CPU first.
fn refs(root: &Path) -> Result<String> {
    use crate::bench::refs::ARMS;
    let doc = match load(
        root,
        crate::bench::refs::REFS_RESULTS,
        "`cargo xtask bench refs --repo PATH…` (by hand: it needs the repositories)",
    )? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench refs")?;
    out.push_str(&format!(" Setup: {}; {} requests per arm and round. gixd: {}. Syscalls: of one request (min–max over the rounds); CPU: medians per request.\n\n", c["how"].as_str().unwrap_or("?"), c["requests"], c["gixd"].as_str().unwrap_or("?")));
    out.push_str(&format!(
        "| repository | refs | mirror push: server CPU (ms) | loose files: {0} | {1} | syscalls per ls-remote: {0} | {1} | CPU µs per ls-remote: {0} | {1} | {1} ÷ {0} |\n|---|---|---|---|---|---|---|---|---|---|\n",
        ARMS[0].0, ARMS[1].0
    ));
    let mut rows = Vec::new();
    for repo in c["repos"].as_array().context("repos")? {
        let name = repo["repo"].as_str().context("repo")?;
        let of = |arm: &str| -> Vec<&Value> { runs.iter().filter(|r| r["repo"] == name && r["arm"] == arm).collect() };
        let cpu = |arm: &str| {
            median(of(arm).iter().filter_map(|r| Some(r["cpu_us"].as_f64()? / r["requests"].as_f64()?)).collect())
        };
        let (loose, packed) = (cpu(ARMS[0].0), cpu(ARMS[1].0));
        let row = format!(
            "| {name} | {} | {:.0} | {} | {} | {} | {} | {loose:.0} | {packed:.0} | {} |\n",
            repo["refs"],
            repo["push_cpu_us"].as_f64().unwrap_or(f64::NAN) / 1000.0,
            repo["loose_files"][ARMS[0].0],
            repo["loose_files"][ARMS[1].0],
            count(&of(ARMS[0].0), "syscalls"),
            count(&of(ARMS[1].0), "syscalls"),
            ratio(loose, packed),
        );
        rows.push((loose / packed, row));
    }
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, row) in rows {
        out.push_str(&row);
    }
    Ok(out)
}

fn bitmaps(root: &Path) -> Result<String> {
    let doc = match load(root, crate::bench::bitmaps::BITMAP_RESULTS, "`cargo xtask bench bitmaps`")? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench bitmaps")?;
    out.push_str(&format!(
        " gixd: {}. git: {}. Repacked by git: {}. Medians.\n\n",
        c["gixd"].as_str().unwrap_or("?"),
        c["git_arm"].as_str().unwrap_or("?"),
        c["repack"].as_str().unwrap_or("?"),
    ));
    out.push_str("| repository | objects | gixd with bitmap (ms) | git with bitmap (ms) | gixd ÷ git, bitmaps | gixd walking (ms) | git walking (ms) | gixd ÷ git, walking |\n|---|---|---|---|---|---|---|---|\n");
    let mut repos: Vec<&str> = runs.iter().filter_map(|r| r["repo"].as_str()).collect();
    repos.dedup();
    for repo in repos {
        let of = |arm: &str| {
            median(
                runs.iter()
                    .filter(|r| r["repo"] == repo && r["arm"] == arm)
                    .filter_map(|r| r["cpu_us"].as_f64())
                    .collect(),
            ) / 1000.0
        };
        let objects = runs.iter().find(|r| r["repo"] == repo).and_then(|r| r["objects"].as_u64()).unwrap_or(0);
        let (gb, tb, gw, tw) = (of("gixd bitmap"), of("git bitmap"), of("gixd walk"), of("git walk"));
        out.push_str(&format!(
            "| {repo} | {objects} | {gb:.1} | {tb:.1} | {} | {gw:.1} | {tw:.1} | {} |\n",
            ratio(tb, gb),
            ratio(tw, gw)
        ));
    }
    Ok(out)
}

/// One row of the real-repository table: medians of both arms for a repository × variant × operation.
struct RealRow {
    repo: String,
    variant: String,
    op: String,
    cpu: (f64, f64),
    /// gixd's CPU when the operation is the first request of its process (NaN if not measured).
    fresh_cpu: f64,
    bytes: (f64, f64),
    objects: (String, String),
}

impl RealRow {
    fn cpu_ratio(&self) -> f64 {
        if self.cpu.1 > 0.0 { self.cpu.0 / self.cpu.1 } else { f64::NAN }
    }
}

/// Rows with the worst CPU ratio (gixd ÷ git) first; a row without a ratio goes last.
fn worst_first(rows: &mut [RealRow]) {
    rows.sort_by(|a, b| {
        let key = |r: &RealRow| if r.cpu_ratio().is_finite() { r.cpu_ratio() } else { f64::NEG_INFINITY };
        key(b).total_cmp(&key(a)).then_with(|| (&a.repo, &a.variant, &a.op).cmp(&(&b.repo, &b.variant, &b.op)))
    });
}

fn real_repos(root: &Path) -> Result<String> {
    let doc = match real_results(root)? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench real")?;
    let repos: Vec<String> = c["repos"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| {
                    let origin =
                        r["origin"].as_str().filter(|o| !o.is_empty()).map(|o| format!(" ({o})")).unwrap_or_default();
                    format!(
                        "{}{origin}: {} objects, {} refs ({} branches, {} tags of which {} annotated), {} at {}",
                        r["name"].as_str().unwrap_or("?"),
                        r["objects"],
                        r["refs"],
                        r["branches"],
                        r["tags"],
                        r["annotated_tags"],
                        r["default_branch"].as_str().unwrap_or("?").trim_start_matches("refs/heads/"),
                        r["default_tip"].as_str().unwrap_or("?").get(..10).unwrap_or("?"),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    out.push_str(&format!(
        " Machine: {}. gixd: {}, {}. git: {}. Variants: {}. Fetches: {}. Bytes: {}. Objects: what the client holds afterwards (both arms leave it the same refs, or the run is aborted). Repositories: {}. The run took {} min. Medians; rows sorted by the CPU ratio, worst first.\n\n",
        c["machine"].as_str().unwrap_or("?"),
        c["gixd"].as_str().unwrap_or("?"),
        c["gixd_binary"]["built"].as_str().unwrap_or("?"),
        c["git_arm"].as_str().unwrap_or("?"),
        c["variants"].as_str().unwrap_or("?"),
        c["fetches"].as_str().unwrap_or("?"),
        c["bytes"].as_str().unwrap_or("?"),
        repos.join("; "),
        c["duration_s"].as_u64().map_or("?".to_owned(), |s| s.div_ceil(60).to_string()),
    ));
    out.push_str("Arm `gixd` is a serving process: it answered one `git ls-remote` of the repository before the operation (not counted), as a daemon has; `gixd fresh` is a process whose first request the operation is (its thread stacks, heap and ref snapshot are cold). `git upload-pack` starts per connection either way.\n\n");
    out.push_str("| repository | variant | operation | server CPU, gixd (ms) | git (ms) | gixd ÷ git | gixd fresh (ms) | fresh ÷ git | bytes, gixd | git | gixd ÷ git | client objects, gixd | git |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    let mut rows = real_rows(runs);
    worst_first(&mut rows);
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | `{}` | {:.1} | {:.1} | {} | {} | {} | {:.0} | {:.0} | {} | {} | {} |\n",
            r.repo,
            r.variant,
            r.op,
            r.cpu.0,
            r.cpu.1,
            ratio(r.cpu.1, r.cpu.0),
            if r.fresh_cpu.is_finite() { format!("{:.1}", r.fresh_cpu) } else { "–".to_owned() },
            if r.fresh_cpu.is_finite() { ratio(r.cpu.1, r.fresh_cpu) } else { "–".to_owned() },
            r.bytes.0,
            r.bytes.1,
            ratio(r.bytes.1, r.bytes.0),
            r.objects.0,
            r.objects.1,
        ));
    }
    Ok(out)
}

/// One row per repository, variant and operation of the real-repository results: medians of each arm.
fn real_rows(runs: &[Value]) -> Vec<RealRow> {
    let mut keys: Vec<(&str, &str, &str)> = Vec::new();
    for r in runs {
        if let (Some(repo), Some(variant), Some(op)) = (r["repo"].as_str(), r["variant"].as_str(), r["op"].as_str())
            && !keys.contains(&(repo, variant, op))
        {
            keys.push((repo, variant, op));
        }
    }
    keys.into_iter()
        .map(|(repo, variant, op)| {
            let arm = |name: &str| {
                runs.iter()
                    .filter(|r| r["repo"] == repo && r["variant"] == variant && r["op"] == op && r["arm"] == name)
                    .collect::<Vec<_>>()
            };
            let (g, f, t) = (arm("gixd"), arm("gixd fresh"), arm("git"));
            let med = |runs: &[&Value], key: &str| median(runs.iter().filter_map(|r| r[key].as_f64()).collect());
            RealRow {
                repo: repo.to_owned(),
                variant: variant.to_owned(),
                op: op.to_owned(),
                cpu: (med(&g, "cpu_us") / 1000.0, med(&t, "cpu_us") / 1000.0),
                fresh_cpu: if f.is_empty() { f64::NAN } else { med(&f, "cpu_us") / 1000.0 },
                bytes: (med(&g, "bytes"), med(&t, "bytes")),
                objects: (count(&g, "client_objects"), count(&t, "client_objects")),
            }
        })
        .collect()
}

/// The fetch rows of the real-repository benchmark, for the delta-search report: what a fetch
/// costs in bytes and server CPU against git's, every repository and variant, worst bytes first.
fn real_fetches(root: &Path) -> Result<String> {
    let doc = match real_results(root)? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench real")?;
    out.push_str(&format!(
        " gixd: {}, arm `gixd` (a serving process). git: {}. Fetches: {}. Bytes: {}. The whole table, with clones and no-op fetches, is in bench/README.md.\n\n",
        c["gixd"].as_str().unwrap_or("?"),
        c["git_arm"].as_str().unwrap_or("?"),
        c["fetches"].as_str().unwrap_or("?"),
        c["bytes"].as_str().unwrap_or("?"),
    ));
    out.push_str("| repository | variant | bytes, gixd | git | gixd ÷ git | server CPU, gixd (ms) | git (ms) | gixd ÷ git |\n|---|---|---|---|---|---|---|---|\n");
    let mut rows: Vec<RealRow> = real_rows(runs).into_iter().filter(|r| r.op.starts_with("fetch")).collect();
    rows.sort_by(|a, b| (b.bytes.0 / b.bytes.1).total_cmp(&(a.bytes.0 / a.bytes.1)));
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {:.0} | {:.0} | {} | {:.1} | {:.1} | {} |\n",
            r.repo,
            r.variant,
            r.bytes.0,
            r.bytes.1,
            ratio(r.bytes.1, r.bytes.0),
            r.cpu.0,
            r.cpu.1,
            ratio(r.cpu.1, r.cpu.0),
        ));
    }
    Ok(out)
}

fn conditions_line(c: &Value, command: &str) -> String {
    format!(
        "Measured by `{command}` ({} rounds, arms alternated, order swapped each round), commit {}, {}, {} CPUs, load {} → {}, {}.",
        c["rounds"],
        c["commit"].as_str().unwrap_or("?").get(..10).unwrap_or("?"),
        c["date"].as_str().unwrap_or("?"),
        c["nproc"],
        c["loadavg_start"].as_str().unwrap_or("?"),
        c["loadavg_end"].as_str().unwrap_or("?"),
        c["git"].as_str().unwrap_or("?"),
    )
}

fn writes(root: &Path) -> Result<String> {
    let doc = match load(root, crate::bench::writes::WRITES_RESULTS, "`cargo xtask bench writes`")? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench writes")?;
    out.push_str(&format!(
        " Repository {} ({} objects); clone with protocol v2; every write-family syscall of the serving process tree (strace -f -c).\n\n",
        c["repo"].as_str().unwrap_or("?"),
        c["objects"].as_str().unwrap_or("?")
    ));
    out.push_str(
        "| arm | write calls per clone (median) | pack bytes | calls ÷ (bytes / 65516) |\n|---|---|---|---|\n",
    );
    let mut arms: Vec<&str> = runs.iter().filter_map(|r| r["arm"].as_str()).collect();
    arms.sort();
    arms.dedup();
    arms.sort_by_key(|a| !a.starts_with("gixd"));
    for arm in arms {
        let of = |key: &str| median(runs.iter().filter(|r| r["arm"] == arm).filter_map(|r| r[key].as_f64()).collect());
        let (calls, bytes) = (of("write_calls"), of("pack_bytes"));
        out.push_str(&format!("| {arm} | {calls:.0} | {bytes:.0} | {:.2} |\n", calls / (bytes / 65516.0)));
    }
    Ok(out)
}

/// The bursts' arms side by side: gixd's, git's, and how the row names them.
const PLAIN_PAIRS: [(&str, &str, &str); 2] =
    [("gixd http", "git http-backend", "HTTP, http-backend"), ("gixd git://", "git daemon", "git://, git daemon")];
const SECURE_PAIRS: [(&str, &str, &str); 2] = [
    ("gixd https", "git http-backend https", "HTTPS, http-backend (lighttpd TLS)"),
    ("gixd ssh", "git (sshd)", "SSH, git behind OpenSSH"),
];

/// Bursts of distinct clones: gixd over each transport against git's server for it (HTTP: git
/// http-backend; git://: git daemon), a row per repository state, burst size and transport, the
/// row furthest from its goals first: any refused clone; CPU ≤ 1.0× git's (issue 45); the memory
/// cgroup's peak ≤ 0.3× git's for 8+ clones of a repository of 300 000 objects or more and for
/// 32+ clones of any, and in smaller rows the peak above gixd's idle footprint ≤ 0.3× git's peak
/// (issue 59); gixd's spill per clone beside it.
fn bursts(root: &Path, results: &str, flag: &str, pairs: &[(&str, &str, &str)]) -> Result<String> {
    let doc = match load(
        root,
        results,
        &format!(
            "`cargo xtask bench bursts{flag} --repo PATH…` (by hand, as root: it needs the repositories and cgroups)"
        ),
    )? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, &format!("cargo xtask bench bursts{flag}"))?;
    out.push_str(&format!(
        " gixd: {}. git: {}. http-backend under {}.{} {} Most transfers holding a slot at once in gixd over the run: {}. Medians over rounds; refused clones summed.\n\n",
        c["gixd"].as_str().unwrap_or("?"),
        c["git_daemon"].as_str().unwrap_or("?"),
        c["lighttpd"].as_str().unwrap_or("?").lines().next().unwrap_or("?"),
        c["sshd"].as_str().map_or(String::new(), |v| format!(" sshd: {v}.")),
        c["how"].as_str().unwrap_or("?"),
        c["gixd_transfers_in_flight_max"].as_str().unwrap_or("?"),
    ));
    out.push_str("A clone that failed counts as refused, whatever it said (git daemon resets the connections past its `--max-connections`, 32 by default). CPU is per clone served, so a server that refused some is not credited for the work it did not do.\n\n");
    out.push_str("Peak goal (issue 59): the cgroup peak ≤ 0.3× git's for 8+ clones of 300 000+ objects and 32+ clones of any; in smaller rows the peak above gixd's idle footprint (its cgroup's use as the burst starts) ≤ 0.3× git's peak; one clone: bitmapped, of 300 000+ objects, CPU ≤ 0.2× git's; without a bitmap, peak ≤ 1.0× git's. Spill is what gixd wrote to its spill directory per clone served.\n\n");
    out.push_str("| repository | objects | bitmap | clones | gixd over, against | refused: gixd | git | CPU ms per served clone: gixd | git | ÷ | wall s: gixd | git | ÷ | cgroup peak MiB: gixd | git | ÷ | gixd idle MiB | peak goal | spill MiB per clone: gixd | RSS peak MiB: gixd | git | ÷ |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    let mut rows = Vec::new();
    for repo in c["repos"].as_array().context("repos")? {
        let (name, state) = (repo["repo"].as_str().context("repo")?, repo["state"].as_str().context("state")?);
        // A repository's own burst sizes, else the run's.
        let sizes = repo["sizes"].as_array().or_else(|| c["sizes"].as_array()).context("sizes")?;
        for clients in sizes.iter().filter_map(Value::as_u64) {
            for &(ours, theirs, transport) in pairs {
                let of = |arm: &str| -> Vec<&Value> {
                    runs.iter()
                        .filter(|r| {
                            r["repo"] == name && r["state"] == state && r["clients"] == clients && r["arm"] == arm
                        })
                        .collect()
                };
                let (a, b) = (of(ours), of(theirs));
                if a.is_empty() || b.is_empty() {
                    continue;
                }
                let med = |rs: &[&Value], key: &str| median(rs.iter().filter_map(|r| r[key].as_f64()).collect());
                let sum = |rs: &[&Value], key: &str| rs.iter().filter_map(|r| r[key].as_u64()).sum::<u64>();
                let (ra, rb) = (sum(&a, "refused"), sum(&b, "refused"));
                let per_served = |rs: &[&Value]| {
                    median(
                        rs.iter()
                            .filter_map(|r| Some(r["cpu_us"].as_f64()? / r["served"].as_f64().filter(|n| *n > 0.0)?))
                            .collect(),
                    ) / 1e3
                };
                let (ca, cb) = (per_served(&a), per_served(&b));
                let (wa, wb) = (med(&a, "wall_ms") / 1e3, med(&b, "wall_ms") / 1e3);
                let (ma, mb) = (med(&a, "cgroup_peak_bytes") / 1048576.0, med(&b, "cgroup_peak_bytes") / 1048576.0);
                let (pa, pb) = (med(&a, "peak_rss_kb") / 1024.0, med(&b, "peak_rss_kb") / 1024.0);
                // Older results lack the idle footprint and the spill: not measured.
                let idle = a.iter().all(|r| r["idle_bytes"].is_u64()).then(|| med(&a, "idle_bytes") / 1048576.0);
                let spill = a.iter().all(|r| r["spill_bytes"].is_u64()).then(|| {
                    median(
                        a.iter()
                            .filter_map(|r| {
                                Some(r["spill_bytes"].as_f64()? / r["served"].as_f64().filter(|n| *n > 0.0)?)
                            })
                            .collect(),
                    ) / 1048576.0
                });
                let whole_peak = clients >= 32 || (clients >= 8 && repo["objects"].as_u64().unwrap_or(0) >= 300_000);
                let judged = if whole_peak { Some(ma) } else { idle.map(|idle| (ma - idle).max(0.0)) };
                let met = |ok: bool| if ok { "met" } else { "**missed**" };
                let large = repo["objects"].as_u64().unwrap_or(0) >= 300_000;
                let peak_goal = match judged {
                    // One clone: a bitmapped one of a large repository costs ≤ 0.2× git's CPU, a
                    // clone without a bitmap peaks ≤ 1.0× git's.
                    _ if clients == 1 && state == "bitmap" && large => {
                        format!("{} (CPU {}, goal ≤ 0.2)", met(ca <= 0.2 * cb), ratio(cb, ca))
                    }
                    _ if clients == 1 && state != "bitmap" => {
                        format!("{} (peak {}, goal ≤ 1.0)", met(ma <= mb), ratio(mb, ma))
                    }
                    Some(peak) => format!(
                        "{} ({}{})",
                        met(peak <= 0.3 * mb),
                        if whole_peak { "peak " } else { "above idle " },
                        ratio(mb, peak)
                    ),
                    None => "not measured".into(),
                };
                let badness = if ra > 0 { f64::INFINITY } else { (ca / cb).max(judged.unwrap_or(ma) / mb / 0.3) };
                let row = format!(
                    "| {name} | {} | {} | {clients} | {transport} | {ra} | {rb} | {ca:.1} | {cb:.1} | {} | {wa:.1} | {wb:.1} | {} | {ma:.0} | {mb:.0} | {} | {} | {peak_goal} | {} | {pa:.0} | {pb:.0} | {} |\n",
                    repo["objects"],
                    if state == "bitmap" { "yes" } else { "no" },
                    ratio(cb, ca),
                    ratio(wb, wa),
                    ratio(mb, ma),
                    idle.map_or("not measured".into(), |i| format!("{i:.0}")),
                    spill.map_or("not measured".into(), |s| format!("{s:.1}")),
                    ratio(pb, pa),
                );
                rows.push((badness, row));
            }
        }
    }
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    rows.into_iter().for_each(|(_, row)| out.push_str(&row));
    Ok(out)
}

/// What TLS costs a clone: per repository, the server CPU of each arm, gixd over HTTPS against
/// gixd over HTTP (issue 46's goal: ≤ 1.15) and against lighttpd + git http-backend over HTTPS
/// (goal: ≤ 0.5), the row furthest from its goals first.
fn tls(root: &Path) -> Result<String> {
    let doc = match load(
        root,
        crate::bench::tls::TLS_RESULTS,
        "`cargo xtask bench tls --repo PATH…` (by hand, as root: it needs the repositories and cgroups)",
    )? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench tls")?;
    out.push_str(&format!(
        " gixd: {}. lighttpd: {}. {} Medians.\n\n",
        c["gixd"].as_str().unwrap_or("?"),
        c["lighttpd"].as_str().unwrap_or("?").lines().next().unwrap_or("?"),
        c["how"].as_str().unwrap_or("?"),
    ));
    out.push_str("| repository | objects | bitmap | server CPU ms: gixd http | gixd https | http-backend https | gixd https ÷ gixd http | gixd https ÷ http-backend https | HTTP spoken (gixd https, http-backend) |\n|---|---|---|---|---|---|---|---|---|\n");
    let mut rows = Vec::new();
    for repo in c["repos"].as_array().context("repos")? {
        let name = repo["repo"].as_str().context("repo")?;
        let state = repo["state"].as_str().unwrap_or("no-bitmap");
        let of = |arm: &str| -> Vec<&Value> {
            runs.iter()
                .filter(|r| r["repo"] == name && r["state"].as_str().unwrap_or("no-bitmap") == state && r["arm"] == arm)
                .collect()
        };
        let med = |arm: &str| median(of(arm).iter().filter_map(|r| r["cpu_us"].as_f64()).collect()) / 1000.0;
        let spoke = |arm: &str| of(arm).first().and_then(|r| r["http"].as_str()).unwrap_or("?").to_owned();
        let [plain, tls, peer] = crate::bench::tls::ARMS.map(med);
        let badness = (tls / plain / 1.15).max(tls / peer / 0.5);
        rows.push((
            badness,
            format!(
                "| {name} | {} | {} | {plain:.0} | {tls:.0} | {peer:.0} | {} | {} | {}, {} |\n",
                repo["objects"],
                if state == "bitmap" { "yes" } else { "no" },
                ratio(plain, tls),
                ratio(peer, tls),
                spoke(crate::bench::tls::ARMS[1]),
                spoke(crate::bench::tls::ARMS[2]),
            ),
        ));
    }
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    rows.into_iter().for_each(|(_, row)| out.push_str(&row));
    Ok(out)
}

/// What SSH costs: per repository, the server CPU of a clone and of a whole-history push from each
/// arm; gixd over SSH against gixd over HTTP (issue 47's goal on the clone: ≤ 1.15) and against
/// git behind sshd (goal: ≤ 0.5), the row furthest from its goals first.
fn ssh(root: &Path) -> Result<String> {
    let doc = match load(
        root,
        crate::bench::ssh::SSH_RESULTS,
        "`cargo xtask bench ssh --repo PATH…` (by hand, as root: it needs the repositories, sshd and cgroups)",
    )? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench ssh")?;
    out.push_str(&format!(
        " gixd: {}. {}; ciphers: gixd ssh {}, sshd {}. {} Medians.\n\n",
        c["gixd"].as_str().unwrap_or("?"),
        c["openssh"].as_str().unwrap_or("?"),
        c["cipher"]["gixd ssh"].as_str().unwrap_or("?"),
        c["cipher"]["sshd"].as_str().unwrap_or("?"),
        c["how"].as_str().unwrap_or("?"),
    ));
    out.push_str("| repository | objects | bitmap | operation | server CPU ms: gixd http | gixd ssh | git (sshd) | gixd shell (sshd) | gixd ssh ÷ gixd http | gixd ssh ÷ git (sshd) | gixd shell ÷ git (sshd) |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    let mut rows = Vec::new();
    for repo in c["repos"].as_array().context("repos")? {
        let name = repo["repo"].as_str().context("repo")?;
        let state = repo["state"].as_str().unwrap_or("no-bitmap");
        for (operation, field) in [("clone", "clone_cpu_us"), ("push", "push_cpu_us")] {
            let med = |arm: &str| {
                median(
                    runs.iter()
                        .filter(|r| r["repo"] == name && r["state"] == state && r["arm"] == arm)
                        .filter_map(|r| r[field].as_f64())
                        .collect(),
                ) / 1000.0
            };
            let [http, ssh, git, shell] = crate::bench::ssh::ARMS.map(med);
            let badness = (ssh / http / 1.15).max(ssh / git / 0.5);
            rows.push((
                badness,
                format!(
                    "| {name} | {} | {} | {operation} | {http:.0} | {ssh:.0} | {git:.0} | {shell:.0} | {} | {} | {} |\n",
                    repo["objects"],
                    if state == "bitmap" { "yes" } else { "no" },
                    ratio(http, ssh),
                    ratio(git, ssh),
                    ratio(git, shell),
                ),
            ));
        }
    }
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    rows.into_iter().for_each(|(_, row)| out.push_str(&row));
    Ok(out)
}

fn bundles(root: &Path) -> Result<String> {
    let doc = match load(
        root,
        crate::bench::bundles::BUNDLE_RESULTS,
        "`cargo xtask bench bundles --repo PATH…` (by hand: it needs the repositories)",
    )? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench bundles")?;
    out.push_str(&format!(
        " gixd: {}. {} Medians.\n\n",
        c["gixd"].as_str().unwrap_or("?"),
        c["how"].as_str().unwrap_or("?")
    ));
    out.push_str("| repository | objects | bundle MiB | server CPU ms: plain | bundle-uri | bundle-uri ÷ plain | MiB sent: plain | bundle-uri | client wall s: plain | bundle-uri | bundle-uri ÷ plain | maintenance CPU with ÷ without bundles |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    let mut rows = Vec::new();
    for repo in c["repos"].as_array().context("repos")? {
        let name = repo["repo"].as_str().context("repo")?;
        let med = |arm: &str, field: &str| {
            median(
                runs.iter()
                    .filter(|r| r["repo"] == name && r["arm"] == arm)
                    .filter_map(|r| r[field].as_f64())
                    .collect(),
            )
        };
        let [plain, bundled] = crate::bench::bundles::ARMS;
        let (cpu_p, cpu_b) = (med(plain, "cpu_us") / 1000.0, med(bundled, "cpu_us") / 1000.0);
        let (mib_p, mib_b) = (med(plain, "bytes") / 1048576.0, med(bundled, "bytes") / 1048576.0);
        let (wall_p, wall_b) = (med(plain, "wall_us") / 1e6, med(bundled, "wall_us") / 1e6);
        let m = &repo["maintenance_cpu_us"];
        let maintenance =
            ratio(m["without bundles"].as_f64().unwrap_or(f64::NAN), m["with bundles"].as_f64().unwrap_or(f64::NAN));
        rows.push((
            cpu_b / cpu_p,
            format!(
                "| {name} | {} | {:.1} | {cpu_p:.0} | {cpu_b:.0} | {} | {mib_p:.1} | {mib_b:.1} | {wall_p:.2} | {wall_b:.2} | {} | {maintenance} |\n",
                repo["objects"].as_str().unwrap_or("?"),
                repo["bundle_bytes"].as_f64().unwrap_or(0.0) / 1048576.0,
                ratio(cpu_p, cpu_b),
                ratio(wall_p, wall_b),
            ),
        ));
    }
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    rows.into_iter().for_each(|(_, row)| out.push_str(&row));
    Ok(out)
}

fn reftable(root: &Path) -> Result<String> {
    let doc = match load(
        root,
        crate::bench::reftable::REFTABLE_RESULTS,
        "`cargo xtask bench reftable --repo PATH…` (by hand: it needs the repositories)",
    )? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench reftable")?;
    out.push_str(&format!(
        " gixd: {}. {} Medians of the rounds, per request.\n\n",
        c["gixd"].as_str().unwrap_or("?"),
        c["how"].as_str().unwrap_or("?")
    ));
    out.push_str("| repository | refs | request | state | refs in | server CPU ms: gixd | git | gixd ÷ git | reftable ÷ files (gixd) |\n|---|---|---|---|---|---|---|---|---|\n");
    let mut rows = Vec::new();
    for repo in c["repos"].as_array().context("repos")? {
        let name = repo["repo"].as_str().context("repo")?;
        for request in crate::bench::reftable::REQUESTS {
            for state in crate::bench::reftable::STATES {
                let med = |format: &str, server: &str| {
                    median(
                        runs.iter()
                            .filter(|r| r["repo"] == name && r["request"] == request && r["state"] == state)
                            .filter(|r| r["format"] == format && r["server"] == server)
                            .filter_map(|r| Some(r["cpu_us"].as_f64()? / r["requests"].as_f64()?))
                            .collect(),
                    ) / 1000.0
                };
                for format in crate::bench::reftable::FORMATS {
                    let (ours, theirs) = (med(format, "gixd"), med(format, "git upload-pack"));
                    let vs_files = if format == "reftable" { ratio(med("files", "gixd"), ours) } else { "—".into() };
                    rows.push((
                        ours / theirs,
                        format!(
                            "| {name} | {} | {request} | {state} | {format} | {ours:.2} | {theirs:.2} | {} | {vs_files} |\n",
                            repo["refs"],
                            ratio(theirs, ours),
                        ),
                    ));
                }
            }
        }
    }
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    rows.into_iter().for_each(|(_, row)| out.push_str(&row));
    Ok(out)
}

fn ramp(root: &Path) -> Result<String> {
    let doc = match load(root, crate::bench::ramp::RAMP_RESULTS, "`cargo xtask bench ramp` (root, cgroup v1 cpu)")? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench ramp")?;
    out.push_str(&format!(
        " Repository {}; clones with protocol v2 over HTTP. Kernel read-back: quota {} µs per {} µs; {}.\n\n",
        c["repo"].as_str().unwrap_or("?"),
        c["cgroup_readback"]["quota_us"].as_str().unwrap_or("?"),
        c["cgroup_readback"]["period_us"].as_str().unwrap_or("?"),
        c["affinity"]
            .as_array()
            .map(|a| a.iter().filter_map(|v| v.as_str()).collect::<Vec<_>>().join("; "))
            .unwrap_or_default(),
    ));
    out.push_str("| concurrent clients | server CPU per clone, quota without cpuset (ms) | ÷ 1 client | pinned to 1 CPU (ms) | ÷ 1 client |\n|---|---|---|---|---|\n");
    let mut rungs: Vec<u64> = runs.iter().filter_map(|r| r["clients"].as_u64()).collect();
    rungs.sort();
    rungs.dedup();
    let per = |arm: &str, n: u64| {
        median(
            runs.iter()
                .filter(|r| r["arm"] == arm && r["clients"] == n)
                .filter_map(|r| r["cpu_per_clone_us"].as_f64())
                .collect(),
        ) / 1000.0
    };
    let first = rungs.first().copied().unwrap_or(1);
    for n in &rungs {
        let (q, p) = (per("quota", *n), per("pinned", *n));
        out.push_str(&format!(
            "| {n} | {q:.1} | {} | {p:.1} | {} |\n",
            ratio(per("quota", first), q),
            ratio(per("pinned", first), p)
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_replaced_between_its_markers_only() {
        let text = "a\n<!-- generated: x -->\nold\n<!-- end generated -->\nb\n";
        assert_eq!(
            replace_block(text, "x", "new\n").unwrap(),
            "a\n<!-- generated: x -->\nnew\n<!-- end generated -->\nb\n"
        );
        assert!(replace_block(text, "y", "new\n").is_err());
    }

    #[test]
    fn counts_that_vary_between_runs_show_their_range() {
        let a = serde_json::json!({"k": 3});
        let b = serde_json::json!({"k": 5});
        assert_eq!(count(&[&a, &a], "k"), "3");
        assert_eq!(count(&[&a, &b], "k"), "3–5");
        assert_eq!(count(&[], "k"), "NOT MEASURED");
    }

    #[test]
    fn versions_are_read_after_the_crate_name_only() {
        assert_eq!(
            versions_named("on stock gix-pack 0.77.0, and gix-pack 0.78.0.", "gix-pack"),
            vec!["0.77.0", "0.78.0"]
        );
        assert!(versions_named("xgix-pack 0.77.0 and gix-pack 0.78 and gix-pack@0.1.0", "gix-pack").is_empty());
    }

    #[test]
    fn measured_versions_come_from_the_arm_record_or_the_queue() {
        let new = serde_json::json!({"arms": {"stock": ["gix-parallel 0.50.2", "gix-pack 0.78.0"]}, "queue": ["a (gix-pack 0.77.0)"]});
        assert_eq!(
            measured_versions(&new),
            vec![("gix-parallel".into(), "0.50.2".into()), ("gix-pack".into(), "0.78.0".into())]
        );
        let old = serde_json::json!({"queue": ["gix-parallel/0001-x.patch (gix-parallel 0.50.1)", "gix-pack/0001-y.patch (gix-pack 0.77.0)", "gix-pack/0002-z.patch (gix-pack 0.77.0)"]});
        assert_eq!(
            measured_versions(&old),
            vec![("gix-parallel".into(), "0.50.1".into()), ("gix-pack".into(), "0.77.0".into())]
        );
    }

    #[test]
    fn real_repository_rows_come_worst_ratio_first() {
        let row = |op: &str, g: f64, t: f64| RealRow {
            repo: "r".into(),
            variant: "bitmap".into(),
            op: op.into(),
            cpu: (g, t),
            fresh_cpu: f64::NAN,
            bytes: (0.0, 0.0),
            objects: (String::new(), String::new()),
        };
        let mut rows = vec![row("a", 1.0, 2.0), row("b", 9.0, 0.0), row("c", 30.0, 1.0), row("d", 3.0, 2.0)];
        worst_first(&mut rows);
        assert_eq!(rows.iter().map(|r| r.op.as_str()).collect::<Vec<_>>(), ["c", "d", "a", "b"]);
    }

    #[test]
    fn median_of_even_and_odd_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
