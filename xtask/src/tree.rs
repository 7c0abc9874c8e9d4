//! Source trees on disk: pristine crate sources fetched through cargo, copies, and the two git
//! plumbing calls the queue needs (`git apply` to apply, `git diff --no-index` to compare).
//!
//! Every scratch tree lives under the system temp directory, outside this repository, so that
//! `git apply` treats it as plain files and nothing here touches the index.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// A scratch directory removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(label: &str) -> Result<Scratch> {
        let dir = std::env::temp_dir().join(format!("gixd-xtask-{label}-{}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The pristine published source of `krate` at exactly `version`, cached under `cache`.
///
/// It comes through cargo itself: a throwaway manifest depends on `=version` and `cargo vendor`
/// unpacks it, so no registry address appears here. `.cargo-checksum.json` is dropped: it belongs
/// to cargo's vendoring, not to the crate, and a patched tree could not keep it anyway.
pub fn pristine(cache: &Path, krate: &str, version: &str) -> Result<PathBuf> {
    let dest = cache.join(format!("{krate}-{version}"));
    if dest.join("Cargo.toml").is_file() {
        return Ok(dest);
    }
    if version == crate::queue::UNPUBLISHED {
        // Not on the registry: the crate's first patch creates every file of it.
        if dest.exists() {
            std::fs::remove_dir_all(&dest)?;
        }
        std::fs::create_dir_all(&dest)?;
        return Ok(dest);
    }
    let scratch = Scratch::new(&format!("fetch-{krate}-{version}"))?;
    let manifest = scratch.0.join("Cargo.toml");
    std::fs::create_dir_all(scratch.0.join("src"))?;
    std::fs::write(scratch.0.join("src/lib.rs"), "")?;
    std::fs::write(
        &manifest,
        format!(
            "[package]\nname = \"pristine-fetch\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n[workspace]\n\n[dependencies]\n{krate} = \"={version}\"\n"
        ),
    )?;
    let out = scratch.0.join("vendor");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["vendor", "--quiet", "--versioned-dirs", "--manifest-path"])
        .arg(&manifest)
        .arg(&out)
        .current_dir(&scratch.0)
        .stdout(std::process::Stdio::null())
        .status()
        .context("running cargo vendor")?;
    if !status.success() {
        bail!("cargo could not fetch {krate} {version}: does that version exist?");
    }
    let fetched = out.join(format!("{krate}-{version}"));
    if !fetched.is_dir() {
        bail!("cargo vendor did not produce {}", fetched.display());
    }
    std::fs::remove_file(fetched.join(".cargo-checksum.json")).ok();
    std::fs::create_dir_all(cache)?;
    let staging = cache.join(format!(".{krate}-{version}.partial"));
    if staging.exists() {
        std::fs::remove_dir_all(&staging)?;
    }
    copy_dir(&fetched, &staging)?;
    std::fs::rename(&staging, &dest)?;
    Ok(dest)
}

/// Copy a directory tree (files and directories; symlinks are copied as the files they name).
pub fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target).with_context(|| format!("copying {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// Replace `dest` by a copy of `src`.
pub fn replace_dir(src: &Path, dest: &Path) -> Result<()> {
    if dest.exists() {
        std::fs::remove_dir_all(dest)?;
    }
    copy_dir(src, dest)
}

/// What `git apply` said when a patch did not apply.
pub struct ApplyFailure {
    pub output: String,
}

/// Apply a diff (paths `a/…`, `b/…`) to the tree at `dir`. `reverse` un-applies it; `check_only`
/// changes nothing.
pub fn git_apply(
    dir: &Path,
    diff: &str,
    reverse: bool,
    check_only: bool,
) -> Result<std::result::Result<(), ApplyFailure>> {
    if diff.trim().is_empty() {
        // A patch being written (header only) changes nothing; it is never "already upstream".
        return Ok(if reverse { Err(ApplyFailure { output: "empty patch".into() }) } else { Ok(()) });
    }
    let patch_file = dir.with_extension("patch-input");
    std::fs::write(&patch_file, diff)?;
    let mut cmd = Command::new("git");
    cmd.arg("apply").arg("-p1").arg("--whitespace=nowarn");
    if reverse {
        cmd.arg("--reverse");
    }
    if check_only {
        cmd.arg("--check");
    }
    // Inside a repository (target/ of this checkout, say) git apply takes the patch's paths from
    // the repository's top and silently skips those outside the current directory: it "applies"
    // nothing and succeeds. The ceiling keeps git from finding any repository above `dir`.
    let ceiling = dir.parent().unwrap_or(dir);
    let out = cmd
        .arg(&patch_file)
        .current_dir(dir)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env("GIT_CEILING_DIRECTORIES", ceiling)
        .output()
        .context("running git apply")?;
    std::fs::remove_file(&patch_file).ok();
    if out.status.success() {
        Ok(Ok(()))
    } else {
        Ok(Err(ApplyFailure { output: String::from_utf8_lossy(&out.stderr).into_owned() }))
    }
}

/// The unified diff turning tree `a` into tree `b`, with paths relative to the trees (`a/src/x.rs`).
/// Empty when they are identical to the byte.
pub fn git_diff(a: &Path, b: &Path) -> Result<String> {
    let scratch = Scratch::new("diff")?;
    copy_dir(a, &scratch.0.join("a"))?;
    copy_dir(b, &scratch.0.join("b"))?;
    let out = Command::new("git")
        .args([
            "-c",
            "core.quotepath=off",
            "diff",
            "--no-index",
            "--no-prefix",
            "--no-color",
            "--no-ext-diff",
            "--binary",
            "--full-index",
            "a",
            "b",
        ])
        .current_dir(&scratch.0)
        .env_remove("GIT_DIR")
        .output()
        .context("running git diff --no-index")?;
    match out.status.code() {
        Some(0) | Some(1) => Ok(String::from_utf8(out.stdout).context("diff is not UTF-8")?),
        _ => bail!("git diff failed: {}", String::from_utf8_lossy(&out.stderr)),
    }
}

/// The hunk of `diff` that `git apply`'s complaint names (`patch failed: <file>:<line>`), for a
/// conflict message a person can act on.
pub fn failing_hunk(diff: &str, apply_output: &str) -> Option<String> {
    let spot = apply_output.lines().find_map(|l| l.split("patch failed: ").nth(1))?;
    let (file, line) = spot.trim().rsplit_once(':')?;
    let line: usize = line.parse().ok()?;
    let mut in_file = false;
    let mut hunk: Option<String> = None;
    for l in diff.lines() {
        if l.starts_with("diff --git ") {
            if hunk.is_some() {
                break;
            }
            in_file = l.ends_with(&format!(" b/{file}"));
            continue;
        }
        if !in_file {
            continue;
        }
        if l.starts_with("@@ ") {
            if hunk.is_some() {
                break;
            }
            let old_start = l.trim_start_matches("@@ -").split([',', ' ']).next()?.parse::<usize>().ok()?;
            if old_start == line {
                hunk = Some(String::new());
            }
        }
        if let Some(h) = hunk.as_mut() {
            h.push_str(l);
            h.push('\n');
        }
    }
    hunk
}

#[cfg(test)]
mod tests {
    use super::{Scratch, failing_hunk, git_apply};

    #[test]
    fn a_tree_inside_a_repository_is_patched_all_the_same() {
        let scratch = Scratch::new("apply-in-repo").unwrap();
        let repo = scratch.0.join("repo");
        let tree = repo.join("target/tree");
        std::fs::create_dir_all(tree.join("src")).unwrap();
        assert!(std::process::Command::new("git").args(["init", "-q"]).arg(&repo).status().unwrap().success());
        std::fs::write(tree.join("src/a.rs"), "x\n").unwrap();
        let diff = "diff --git a/src/a.rs b/src/a.rs\n--- a/src/a.rs\n+++ b/src/a.rs\n@@ -1 +1 @@\n-x\n+y\n";
        assert!(git_apply(&tree, diff, false, false).unwrap().is_ok());
        assert_eq!(std::fs::read_to_string(tree.join("src/a.rs")).unwrap(), "y\n");
    }

    const DIFF: &str = "diff --git a/src/a.rs b/src/a.rs\n--- a/src/a.rs\n+++ b/src/a.rs\n@@ -3,2 +3,2 @@\n-x\n+y\n@@ -40,2 +40,2 @@ fn f()\n-p\n+q\ndiff --git a/src/b.rs b/src/b.rs\n@@ -40,1 +40,1 @@\n-r\n+s\n";

    #[test]
    fn the_hunk_named_by_git_apply_is_the_one_shown() {
        let hunk =
            failing_hunk(DIFF, "error: patch failed: src/a.rs:40\nerror: src/a.rs: patch does not apply\n").unwrap();
        assert_eq!(hunk, "@@ -40,2 +40,2 @@ fn f()\n-p\n+q\n");
        let other = failing_hunk(DIFF, "error: patch failed: src/b.rs:40\n").unwrap();
        assert_eq!(other, "@@ -40,1 +40,1 @@\n-r\n+s\n");
        assert!(failing_hunk(DIFF, "error: something else\n").is_none());
    }
}
