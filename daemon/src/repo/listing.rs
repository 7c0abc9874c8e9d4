//! What a base path holds, for an operator (`gixd repo list`) and for the start's and
//! maintenance's walks: the git directories below it, each with its format, whether it is
//! public, and its size on disk.

use std::path::{Path, PathBuf};

use super::format::{self, Unsupported};

/// What one walk below the base path finds: the git directories (at most `max_depth`
/// directories down) and every directory above them (where a repository creation keeps its lock:
/// [`super::create::clean_stale`]).
#[derive(Debug, Default)]
pub struct Below {
    pub repositories: Vec<PathBuf>,
    pub directories: Vec<PathBuf>,
}

/// Walk below `base` once.
pub fn below(base: &Path, max_depth: usize) -> Below {
    let mut found = Below::default();
    let mut stack = vec![(base.to_owned(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        if dir.join("objects").is_dir() && dir.join("HEAD").is_file() {
            found.repositories.push(dir);
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        if depth < max_depth {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push((entry.path(), depth + 1));
                }
            }
        }
        found.directories.push(dir);
    }
    found.repositories.sort();
    found.directories.sort();
    found
}

/// The git directories below `base`, at most `max_depth` directories down.
pub fn repositories_below(base: &Path, max_depth: usize) -> Vec<PathBuf> {
    below(base, max_depth).repositories
}

/// One repository below the base path.
#[derive(Debug)]
pub struct Listed {
    /// Its path below the base.
    pub name: String,
    /// `sha1` or `sha256`, or why gixd does not serve it.
    pub format: Result<&'static str, Unsupported>,
    /// It holds the export marker.
    pub public: bool,
    /// Bytes of its objects directory.
    pub bytes: u64,
}

/// Every repository below `base` (as deep as a start looks), in name order.
pub fn list(base: &Path) -> Vec<Listed> {
    repositories_below(base, 6)
        .into_iter()
        .map(|git_dir| {
            let name = git_dir.strip_prefix(base).unwrap_or(&git_dir).display().to_string();
            let format = format::check(&git_dir).map(|format| match format.object_hash {
                gix_hash::Kind::Sha256 => "sha256",
                _ => "sha1",
            });
            Listed {
                name,
                format,
                public: git_dir.join(super::EXPORT_OK).is_file(),
                bytes: size(&git_dir.join("objects")),
            }
        })
        .collect()
}

/// Bytes of the files below `dir`.
fn size(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            match entry.metadata() {
                Ok(meta) if meta.is_dir() => stack.push(entry.path()),
                Ok(meta) => total += meta.len(),
                Err(_) => {}
            }
        }
    }
    total
}
