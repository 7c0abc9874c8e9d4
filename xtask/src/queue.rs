//! The patch queue as data: `patches/series` (apply order) and each patch's header.
//!
//! A patch file is a header of `Key: value` lines (a `Why:` paragraph may span lines), then the
//! unified diff, starting at the first `diff --git` line. `git apply` skips the header.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The version of a crate upstream has not published: its patch applies to an empty tree (the
/// whole crate is the patch), the workspace depends on `vendor/<crate>` by path, and there is no
/// stock arm to measure it against or release to rebase it onto.
pub const UNPUBLISHED: &str = "0.0.0";

/// One patch of the series.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    /// Path relative to `patches/`, as written in the series.
    pub file: String,
    /// The crate the diff applies to.
    pub krate: String,
    /// The exact published version the diff is made against.
    pub version: String,
    /// The text before the diff.
    pub header: String,
    /// The unified diff itself.
    pub diff: String,
}

impl Patch {
    pub fn subject(&self) -> &str {
        header_field(&self.header, "Subject").unwrap_or("(no subject)")
    }

    /// The full file text.
    pub fn text(&self) -> String {
        format!("{}{}", self.header, self.diff)
    }

    /// Parse a patch file's text.
    pub fn parse(file: &str, text: &str) -> Result<Patch> {
        let split = text
            .find("\ndiff --git ")
            .map(|at| at + 1)
            .or_else(|| text.starts_with("diff --git ").then_some(0))
            .unwrap_or(text.len());
        let (header, diff) = text.split_at(split);
        let krate_line =
            header_field(header, "Crate").with_context(|| format!("{file}: no 'Crate: <name> <version>' line"))?;
        let mut words = krate_line.split_whitespace();
        let (Some(krate), Some(version), None) = (words.next(), words.next(), words.next()) else {
            bail!("{file}: 'Crate:' must be '<name> <version>', got '{krate_line}'");
        };
        Ok(Patch {
            file: file.to_owned(),
            krate: krate.to_owned(),
            version: version.to_owned(),
            header: header.to_owned(),
            diff: diff.to_owned(),
        })
    }

    /// The same patch re-targeted at another version of its crate, with a new diff.
    pub fn retarget(&self, version: &str, diff: String) -> Patch {
        let old = format!("Crate: {} {}", self.krate, self.version);
        let new = format!("Crate: {} {}", self.krate, version);
        Patch { header: self.header.replacen(&old, &new, 1), version: version.to_owned(), diff, ..self.clone() }
    }
}

/// The value of a `Key: value` header line.
pub fn header_field<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    header.lines().find_map(|line| line.strip_prefix(key)?.strip_prefix(':')).map(str::trim)
}

/// The queue: `patches/series` and the patches it names, in apply order.
#[derive(Debug, Clone)]
pub struct Queue {
    pub dir: PathBuf,
    pub patches: Vec<Patch>,
}

impl Queue {
    pub fn load(dir: &Path) -> Result<Queue> {
        let series =
            std::fs::read_to_string(dir.join("series")).with_context(|| format!("reading {}/series", dir.display()))?;
        let mut patches = Vec::new();
        for file in parse_series(&series) {
            let text = std::fs::read_to_string(dir.join(file)).with_context(|| format!("reading patch {file}"))?;
            patches.push(Patch::parse(file, &text)?);
        }
        let queue = Queue { dir: dir.to_owned(), patches };
        queue.validate()?;
        Ok(queue)
    }

    /// All patches of one crate must target the same version.
    fn validate(&self) -> Result<()> {
        for p in &self.patches {
            if let Some(other) = self.patches.iter().find(|o| o.krate == p.krate && o.version != p.version) {
                bail!(
                    "{} targets {} {} but {} targets {} {}: one crate, one version",
                    p.file,
                    p.krate,
                    p.version,
                    other.file,
                    other.krate,
                    other.version
                );
            }
        }
        Ok(())
    }

    /// The patched crates that upstream has published (everything but [`UNPUBLISHED`] ones): the
    /// ones reached through `[patch.crates-io]`, measured against a stock arm, rebased.
    pub fn published_crates(&self) -> Vec<(String, String)> {
        self.crates().into_iter().filter(|(_, v)| v != UNPUBLISHED).collect()
    }

    /// The patched crates with their version, in order of first appearance.
    pub fn crates(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for p in &self.patches {
            if !out.iter().any(|(k, _)| *k == p.krate) {
                out.push((p.krate.clone(), p.version.clone()));
            }
        }
        out
    }

    pub fn of_crate<'a>(&'a self, krate: &'a str) -> impl Iterator<Item = &'a Patch> + 'a {
        self.patches.iter().filter(move |p| p.krate == krate)
    }

    /// The series file as `save` writes it: each patch with the crate version it is made against.
    pub fn series_text(&self) -> String {
        let mut series = String::from(SERIES_PREAMBLE);
        let width = self.patches.iter().map(|p| p.file.len()).max().unwrap_or(0);
        for p in &self.patches {
            series.push_str(&format!("{:<width$}  # {} {}\n", p.file, p.krate, p.version));
        }
        series
    }

    /// Write the series file and every patch file of the queue.
    pub fn save(&self) -> Result<()> {
        for p in &self.patches {
            let path = self.dir.join(&p.file);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&path, p.text())?;
        }
        std::fs::write(self.dir.join("series"), self.series_text())?;
        Ok(())
    }
}

pub const SERIES_PREAMBLE: &str = "# The patch queue, in apply order: one file (relative to patches/) per line, then the\n\
# crate and version it is made against (its `Crate:` header; written by the tool, checked by\n\
# `cargo xtask patches check`). Managed by `cargo xtask patches`; see PATCH.md.\n";

/// The file names listed in a series file: blank lines and `#` comments (whole lines, or after a
/// file name) are skipped.
pub fn parse_series(text: &str) -> Vec<&str> {
    text.lines().map(|l| l.split('#').next().unwrap_or("").trim()).filter(|l| !l.is_empty()).collect()
}

/// One line of `patches/landed.md`, the record of patches that upstream shipped.
pub fn landed_row(patch: &Patch, version: &str, date: &str) -> String {
    format!(
        "| {} | {} | {} {} | {} {} | {} |\n",
        patch.subject(),
        patch.file,
        patch.krate,
        patch.version,
        patch.krate,
        version,
        date
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATCH: &str = "Subject: do a thing\nCrate: gix-parallel 0.50.0\nWhy: because\n  it costs.\n\ndiff --git a/src/lib.rs b/src/lib.rs\n--- a/src/lib.rs\n+++ b/src/lib.rs\n";

    #[test]
    fn header_and_diff_split_at_the_first_diff_line() {
        let p = Patch::parse("x.patch", PATCH).unwrap();
        assert_eq!(p.krate, "gix-parallel");
        assert_eq!(p.version, "0.50.0");
        assert!(p.header.ends_with("it costs.\n\n"));
        assert!(p.diff.starts_with("diff --git a/src/lib.rs"));
        assert_eq!(p.text(), PATCH);
        assert_eq!(p.subject(), "do a thing");
    }

    #[test]
    fn a_patch_without_a_crate_line_is_refused() {
        assert!(Patch::parse("x.patch", "Subject: s\ndiff --git a/x b/x\n").is_err());
        assert!(Patch::parse("x.patch", "Crate: gix-pack\ndiff --git a/x b/x\n").is_err());
    }

    #[test]
    fn retarget_rewrites_only_the_crate_line() {
        let p = Patch::parse("x.patch", PATCH).unwrap().retarget("0.50.1", "diff --git new\n".into());
        assert!(p.header.contains("Crate: gix-parallel 0.50.1\n"));
        assert!(!p.header.contains("0.50.0"));
        assert_eq!(p.diff, "diff --git new\n");
    }

    #[test]
    fn series_skips_comments_and_blank_lines_and_keeps_order() {
        assert_eq!(parse_series("# c\n\nb.patch\n  a.patch \n#x\n"), vec!["b.patch", "a.patch"]);
        assert_eq!(parse_series("b.patch  # b 1.0.0\na.patch # a 2.0.0\n"), vec!["b.patch", "a.patch"]);
    }

    #[test]
    fn the_series_names_each_patch_with_its_crate_version_and_reads_back() {
        let mk = |f: &str, k: &str, v: &str| Patch::parse(f, &format!("Crate: {k} {v}\n")).unwrap();
        let q = Queue {
            dir: PathBuf::new(),
            patches: vec![mk("b/0001-x.patch", "b", "0.50.2"), mk("a/0001-long-name.patch", "a", "0.78.0")],
        };
        let text = q.series_text();
        assert!(text.contains("b/0001-x.patch          # b 0.50.2\n"), "{text}");
        assert!(text.contains("a/0001-long-name.patch  # a 0.78.0\n"), "{text}");
        assert_eq!(parse_series(&text), vec!["b/0001-x.patch", "a/0001-long-name.patch"]);
    }

    #[test]
    fn crates_are_listed_once_in_order_of_first_appearance() {
        let mk = |f: &str, k: &str| Patch::parse(f, &format!("Crate: {k} 1.0.0\n")).unwrap();
        let q = Queue { dir: PathBuf::new(), patches: vec![mk("1", "b"), mk("2", "a"), mk("3", "b")] };
        assert_eq!(q.crates(), vec![("b".into(), "1.0.0".into()), ("a".into(), "1.0.0".into())]);
    }

    #[test]
    fn two_versions_of_one_crate_are_refused() {
        let q = Queue {
            dir: PathBuf::new(),
            patches: vec![
                Patch::parse("1", "Crate: a 1.0.0\n").unwrap(),
                Patch::parse("2", "Crate: a 1.0.1\n").unwrap(),
            ],
        };
        assert!(q.validate().is_err());
    }
}
