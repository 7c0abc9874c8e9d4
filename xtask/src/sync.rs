//! What follows the queue and the workspace's gitoxide versions, so that a rebase leaves no
//! version to type by hand:
//!
//! - every `gix-*` requirement of `[workspace.dependencies]` is the version `gix` itself resolves
//!   that crate to ([`align_gix_family`]), so the graph holds one version of each;
//! - `bench/patch-costs/Cargo.toml` (a workspace of its own) requires what the workspace requires
//!   ([`bench_requirements`]), so its stock arm is the release the queue is on;
//! - PATCH.md's table names each patch's `crate@version` ([`patch_md_table`]) and its history
//!   gets one line per rebase ([`append_history`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::queue::Queue;
use crate::tree::Scratch;

pub const BENCH_MANIFEST: &str = "bench/patch-costs/Cargo.toml";

/// The requirement written for a resolved version: `0.78.0` → `"0.78"`, `0.50.2` → `"0.50.2"`.
pub fn requirement_for(version: &str) -> String {
    match version.split('.').collect::<Vec<_>>().as_slice() {
        [major, minor, "0"] => format!("{major}.{minor}"),
        _ => version.to_owned(),
    }
}

/// Whether `version` satisfies the caret requirement `req` (`"0.78"`, `"0.50.1"`, `"1.2"`).
pub fn caret_matches(req: &str, version: &str) -> bool {
    let parse = |s: &str| {
        s.trim_start_matches(['^', '=']).split('.').map(|p| p.parse::<u64>().ok()).collect::<Option<Vec<u64>>>()
    };
    let (Some(r), Some(v)) = (parse(req), parse(version)) else { return false };
    let (Some(&r0), Some(&v0)) = (r.first(), v.first()) else { return false };
    let at = |x: &[u64], i: usize| x.get(i).copied().unwrap_or(0);
    let at_least = (at(&v, 0), at(&v, 1), at(&v, 2)) >= (r0, at(&r, 1), at(&r, 2));
    if r0 > 0 {
        v0 == r0 && at_least
    } else if r.len() >= 2 && at(&r, 1) > 0 {
        v0 == 0 && at(&v, 1) == at(&r, 1) && at_least
    } else {
        v0 == 0 && at(&v, 1) == 0 && at(&v, 2) == at(&r, 2)
    }
}

/// The version requirement of a dependency entry (`"0.88"` or `{ version = "0.78", … }`).
pub fn requirement(item: &toml_edit::Item) -> Option<&str> {
    item.as_str().or_else(|| item.get("version").and_then(|v| v.as_str()))
}

fn set_requirement(item: &mut toml_edit::Item, req: &str) {
    if item.is_str() {
        *item = toml_edit::value(req);
    } else if let Some(t) = item.as_table_like_mut() {
        t.insert("version", toml_edit::value(req));
    }
}

fn read_doc(path: &Path) -> Result<toml_edit::DocumentMut> {
    std::fs::read_to_string(path)
        .with_context(|| format!("reading {}", path.display()))?
        .parse()
        .with_context(|| format!("parsing {}", path.display()))
}

/// Name → versions of every package in a lock file (`[[patch.unused]]` entries are not packages).
pub fn lock_versions(lock: &Path) -> Result<BTreeMap<String, Vec<String>>> {
    let doc = read_doc(lock)?;
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in doc["package"].as_array_of_tables().context("lock packages")? {
        if let (Some(n), Some(v)) = (p["name"].as_str(), p["version"].as_str()) {
            out.entry(n.to_owned()).or_default().push(v.to_owned());
        }
    }
    Ok(out)
}

/// The gitoxide crates (`gix`, `gix-*`) that the lock file holds in more than one version.
pub fn duplicate_gix_versions(lock: &Path) -> Result<Vec<String>> {
    Ok(lock_versions(lock)?
        .into_iter()
        .filter(|(n, vs)| (n == "gix" || n.starts_with("gix-")) && vs.len() > 1)
        .map(|(n, vs)| format!("{n} {}", vs.join(" and ")))
        .collect())
}

/// Resolve `[dependencies]` made of `entries` (`name = <toml>`) in a throwaway manifest, without
/// the workspace's patches; name → versions of the resulting lock file.
pub fn resolve(entries: &[(String, String)]) -> Result<BTreeMap<String, Vec<String>>> {
    let scratch = Scratch::new("resolve")?;
    std::fs::create_dir_all(scratch.0.join("src"))?;
    std::fs::write(scratch.0.join("src/lib.rs"), "")?;
    let mut manifest = String::from(
        "[package]\nname = \"resolve\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n[workspace]\n\n[dependencies]\n",
    );
    for (k, v) in entries {
        manifest.push_str(&format!("{k} = {v}\n"));
    }
    std::fs::write(scratch.0.join("Cargo.toml"), manifest)?;
    let out = Command::new("cargo").args(["generate-lockfile", "--quiet"]).current_dir(&scratch.0).output()?;
    if !out.status.success() {
        bail!(
            "cargo could not resolve {:?}:\n{}",
            entries.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    lock_versions(&scratch.0.join("Cargo.lock"))
}

/// Set `gix` to `gix_req` (if given), then every other `gix-*` requirement of
/// `[workspace.dependencies]` to the version `gix` (with the workspace's features) resolves it to,
/// and bench/patch-costs to match. Returns what changed, one line each.
pub fn align_gix_family(root: &Path, gix_req: Option<&str>) -> Result<Vec<String>> {
    let path = root.join("Cargo.toml");
    let mut doc = read_doc(&path)?;
    let deps = doc["workspace"]["dependencies"].as_table_mut().context("[workspace.dependencies]")?;
    let mut changes = Vec::new();
    if let Some(req) = gix_req {
        let item = deps.get_mut("gix").context("[workspace.dependencies] has no gix")?;
        if requirement(item) != Some(req) {
            changes.push(format!("Cargo.toml: gix \"{}\" -> \"{req}\"", requirement(item).unwrap_or("?")));
            set_requirement(item, req);
        }
    }
    let gix_entry = deps.get("gix").context("[workspace.dependencies] has no gix")?.to_string().trim().to_owned();
    let family = resolve(&[("gix".into(), gix_entry)])?;
    let gix_version = family.get("gix").and_then(|v| v.first()).cloned().unwrap_or_default();
    for (name, item) in deps.iter_mut() {
        let name = name.get().to_owned();
        if !name.starts_with("gix-") {
            continue;
        }
        let Some(versions) = family.get(&name) else {
            changes.push(format!(
                "Cargo.toml: {name} is not in gix {gix_version}'s graph; left at \"{}\"",
                requirement(item).unwrap_or("?")
            ));
            continue;
        };
        if versions.len() > 1 {
            bail!("gix {gix_version} itself resolves {name} to several versions {versions:?}");
        }
        let want = requirement_for(&versions[0]);
        if requirement(item) != Some(want.as_str()) {
            changes.push(format!(
                "Cargo.toml: {name} \"{}\" -> \"{want}\" (what gix {gix_version} uses)",
                requirement(item).unwrap_or("?")
            ));
            set_requirement(item, &want);
        }
    }
    std::fs::write(&path, doc.to_string())?;
    changes.extend(bench_requirements(root, true)?);
    Ok(changes)
}

/// Make `requirement` of `[workspace.dependencies]` admit `version` (a single-crate rebase).
pub fn require(root: &Path, krate: &str, version: &str) -> Result<Option<String>> {
    let path = root.join("Cargo.toml");
    let mut doc = read_doc(&path)?;
    let Some(item) = doc["workspace"]["dependencies"].get_mut(krate) else { return Ok(None) };
    let have = requirement(item).unwrap_or("").to_owned();
    if caret_matches(&have, version) {
        return Ok(None);
    }
    let want = requirement_for(version);
    set_requirement(item, &want);
    std::fs::write(&path, doc.to_string())?;
    Ok(Some(format!("Cargo.toml: {krate} \"{have}\" -> \"{want}\"")))
}

/// bench/patch-costs's gitoxide requirements against the workspace's: with `write`, set them and
/// return what changed; without, return one problem per difference.
pub fn bench_requirements(root: &Path, write: bool) -> Result<Vec<String>> {
    let ws = read_doc(&root.join("Cargo.toml"))?;
    let ws_deps = ws["workspace"]["dependencies"].as_table().context("[workspace.dependencies]")?;
    let path = root.join(BENCH_MANIFEST);
    let mut doc = read_doc(&path)?;
    let deps = doc["dependencies"].as_table_like_mut().context("bench/patch-costs [dependencies]")?;
    let mut out = Vec::new();
    for (name, item) in deps.iter_mut() {
        let name = name.get().to_owned();
        if !(name == "gix" || name.starts_with("gix-")) {
            continue;
        }
        let Some(want) = ws_deps.get(&name).and_then(requirement) else { continue };
        let have = requirement(item).unwrap_or("?").to_owned();
        if have != want {
            if write {
                set_requirement(item, want);
                out.push(format!("{BENCH_MANIFEST}: {name} \"{have}\" -> \"{want}\""));
            } else {
                out.push(format!(
                    "{BENCH_MANIFEST} requires {name} \"{have}\", the workspace \"{want}\": its stock arm would measure another release (`cargo xtask patches apply` sets it)"
                ));
            }
        }
    }
    if write && !out.is_empty() {
        std::fs::write(&path, doc.to_string())?;
    }
    Ok(out)
}

/// PATCH.md with its table's `crate@version` cell set from the queue, and the rows of patches no
/// longer in the series dropped; plus one line per difference found.
pub fn patch_md_table(text: &str, queue: &Queue) -> (String, Vec<String>) {
    let mut out = String::new();
    let mut problems = Vec::new();
    let mut seen = Vec::new();
    for line in text.split_inclusive('\n') {
        let row = line
            .strip_prefix("| `")
            .and_then(|rest| rest.split_once("` |"))
            .filter(|(file, _)| file.ends_with(".patch"));
        let Some((file, tail)) = row else {
            out.push_str(line);
            continue;
        };
        let Some(p) = queue.patches.iter().find(|p| p.file == file) else {
            problems.push(format!("PATCH.md's table has a row for {file}, which the series does not hold (landed or dropped): the row goes"));
            continue;
        };
        seen.push(file.to_owned());
        let (cell, after) = tail.split_once(" |").unwrap_or((tail, "\n"));
        let want = format!("{}@{}", p.krate, p.version);
        if cell.trim() != want {
            problems.push(format!("PATCH.md's table says {file} is on {}, its header says {want}", cell.trim()));
        }
        out.push_str(&format!("| `{file}` | {want} |{after}"));
    }
    for p in &queue.patches {
        if !seen.contains(&p.file) {
            problems.push(format!("PATCH.md's table has no row for {} (add one: why, upstream status, guard)", p.file));
        }
    }
    (out, problems)
}

/// `text` with `entry` added as the last line of its `## History` section (made at the end if
/// there is none).
pub fn append_history(text: &str, entry: &str) -> String {
    let heading = "## History\n";
    let line = format!("- {entry}\n");
    let Some(at) = text.find(heading) else {
        let sep = if text.ends_with("\n\n") {
            ""
        } else if text.ends_with('\n') {
            "\n"
        } else {
            "\n\n"
        };
        return format!("{text}{sep}{heading}\n{line}");
    };
    let body_start = at + heading.len();
    let end = text[body_start..].find("\n## ").map(|i| body_start + i + 1).unwrap_or(text.len());
    let (before, after) = text.split_at(end);
    let before = before.trim_end_matches('\n');
    let gap = if after.is_empty() { "" } else { "\n" };
    format!("{before}\n{line}{gap}{after}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::Patch;
    use std::path::PathBuf;

    #[test]
    fn requirements_are_written_short_when_the_patch_level_is_zero() {
        assert_eq!(requirement_for("0.78.0"), "0.78");
        assert_eq!(requirement_for("0.50.2"), "0.50.2");
        assert_eq!(requirement_for("27.0.0"), "27.0");
    }

    #[test]
    fn caret_requirements_match_as_cargo_reads_them() {
        assert!(caret_matches("0.78", "0.78.0"));
        assert!(caret_matches("0.50.1", "0.50.2"));
        assert!(!caret_matches("0.50.2", "0.50.1"));
        assert!(!caret_matches("0.77", "0.78.0"));
        assert!(caret_matches("1.2", "1.9.0"));
        assert!(!caret_matches("1.2", "2.0.0"));
        assert!(caret_matches("0.0.3", "0.0.3") && !caret_matches("0.0.3", "0.0.4"));
    }

    fn queue() -> Queue {
        let mk = |f: &str, k: &str, v: &str| Patch::parse(f, &format!("Crate: {k} {v}\n")).unwrap();
        Queue {
            dir: PathBuf::new(),
            patches: vec![mk("a/0001-x.patch", "a", "0.2.0"), mk("b/0001-y.patch", "b", "1.1.0")],
        }
    }

    #[test]
    fn the_table_follows_the_headers_and_loses_rows_of_landed_patches() {
        let text = "x\n| patch | crate@version | why |\n|---|---|---|\n| `a/0001-x.patch` | a@0.1.0 | because | g |\n| `c/0001-z.patch` | c@1.0.0 | gone | g |\n| `b/0001-y.patch` | b@1.1.0 | ok | g |\nend\n";
        let (new, problems) = patch_md_table(text, &queue());
        assert_eq!(
            new,
            "x\n| patch | crate@version | why |\n|---|---|---|\n| `a/0001-x.patch` | a@0.2.0 | because | g |\n| `b/0001-y.patch` | b@1.1.0 | ok | g |\nend\n"
        );
        assert_eq!(problems.len(), 2, "{problems:?}");
        let (again, none) = patch_md_table(&new, &queue());
        assert_eq!(again, new);
        assert!(none.is_empty());
    }

    #[test]
    fn a_missing_row_is_named() {
        let (_, problems) = patch_md_table("| `a/0001-x.patch` | a@0.2.0 | w |\n", &queue());
        assert_eq!(
            problems,
            vec!["PATCH.md's table has no row for b/0001-y.patch (add one: why, upstream status, guard)"]
        );
    }

    #[test]
    fn history_lines_go_to_the_end_of_their_section() {
        assert_eq!(append_history("# T\n\ntext\n", "one"), "# T\n\ntext\n\n## History\n\n- one\n");
        assert_eq!(append_history("# T\n\n## History\n\n- one\n", "two"), "# T\n\n## History\n\n- one\n- two\n");
        assert_eq!(
            append_history("## History\n\n- one\n\n## Next\n\nz\n", "two"),
            "## History\n\n- one\n- two\n\n## Next\n\nz\n"
        );
    }
}
