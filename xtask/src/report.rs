//! `cargo xtask report`: render measured numbers into the documents that quote them. Each document
//! holds a block between `<!-- generated: NAME -->` and `<!-- end generated -->`; the block is
//! rewritten from the result file, so no number in it was typed by hand. `--check` fails when a
//! block is not what the results render to (a result re-measured without re-rendering, or an edit).

use std::path::Path;

use crate::bench::table::{load, measured_versions};
use anyhow::{Context, Result, bail};

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
    for (doc, block, render) in crate::bench::BLOCKS {
        let rendered = render(root)?;
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
    fn versions_are_read_after_the_crate_name_only() {
        assert_eq!(
            versions_named("on stock gix-pack 0.77.0, and gix-pack 0.78.0.", "gix-pack"),
            vec!["0.77.0", "0.78.0"]
        );
        assert!(versions_named("xgix-pack 0.77.0 and gix-pack 0.78 and gix-pack@0.1.0", "gix-pack").is_empty());
    }
}
