//! Whether gixd can read a repository at all: git's repository format (`core.repositoryformatversion`
//! and the `extensions.*` that version 1 makes binding). gixd reads refs and objects itself, so a
//! repository that keeps them where gixd does not look (a ref backend other than files and
//! reftable, a promisor's missing
//! objects, a second hash) would be served as empty or incomplete; such a repository is refused
//! with the reason instead, on every service and in maintenance.

use std::path::Path;

pub use crate::error::Unsupported;

/// What the repository's format says beyond that gixd can read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Format {
    /// `extensions.objectFormat` (SHA-1 without it).
    pub object_hash: gix_hash::Kind,
    /// `extensions.preciousObjects`: no object may ever be deleted (maintenance leaves it alone).
    pub precious_objects: bool,
}

impl Default for Format {
    fn default() -> Self {
        Format { object_hash: gix_hash::Kind::Sha1, precious_objects: false }
    }
}

/// Read the format of the repository at `git_dir` from its `config` (no includes: git reads the
/// format from the repository's own file) and say whether gixd can serve it, as git's
/// `setup.c` decides: version 0 ignores extensions it does not know, version 1 refuses them.
pub fn check(git_dir: &Path) -> Result<Format, Unsupported> {
    let path = git_dir.join("config");
    if !path.exists() {
        return Ok(Format::default());
    }
    let config = gix::config::File::from_path_no_includes(path, gix::config::Source::Local)
        .map_err(|err| Unsupported::Config(err.to_string()))?;
    let version = match config.integer("core.repositoryformatversion") {
        Ok(version) => version.unwrap_or(0),
        Err(err) => return Err(Unsupported::Config(err.to_string())),
    };
    if !(0..=1).contains(&version) {
        return Err(Unsupported::Version(version));
    }
    let mut format = Format::default();
    let Some(sections) = config.sections_by_name("extensions") else { return Ok(format) };
    for section in sections {
        for name in section.value_names() {
            let value = section.value(&name).map(|v| v.to_string()).unwrap_or_default();
            let key = name.to_ascii_lowercase();
            match key.as_str() {
                "noop" | "noop-v1" | "worktreeconfig" => {}
                "preciousobjects" => format.precious_objects = truthy(&value),
                "objectformat" => {
                    format.object_hash = match value.to_ascii_lowercase().as_str() {
                        "sha1" => gix_hash::Kind::Sha1,
                        "sha256" => gix_hash::Kind::Sha256,
                        _ => return Err(Unsupported::ObjectFormat(value)),
                    }
                }
                // Both backends are read through the ref-storage seam (`ref_store`).
                "refstorage" if value.eq_ignore_ascii_case("files") || value.eq_ignore_ascii_case("reftable") => {}
                "refstorage" => return Err(Unsupported::RefStorage(value)),
                // A partial clone names its promisor remote; the extension with no value is no promise.
                "partialclone" if !value.is_empty() => return Err(Unsupported::PartialClone),
                "partialclone" => {}
                "compatobjectformat" => return Err(Unsupported::CompatObjectFormat),
                // Version 0 predates extensions: git ignores the ones it does not know there.
                _ if version == 0 => {}
                _ => return Err(Unsupported::Unknown(name)),
            }
        }
    }
    Ok(format)
}

/// git's boolean spelling (`true`, `yes`, `on`, a non-zero number, or a key with no value).
fn truthy(value: &str) -> bool {
    match value.to_ascii_lowercase().as_str() {
        "" | "true" | "yes" | "on" => true,
        "false" | "no" | "off" => false,
        number => number.parse::<i64>().is_ok_and(|n| n != 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_config(text: &str) -> Result<Format, Unsupported> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config"), text).unwrap();
        check(dir.path())
    }

    #[test]
    fn formats_gixd_reads_pass_and_the_others_are_named() {
        assert_eq!(with_config("[core]\n\trepositoryformatversion = 0\n"), Ok(Format::default()));
        assert_eq!(
            with_config("[core]\n\trepositoryformatversion = 1\n[extensions]\n\tobjectformat = sha256\n"),
            Ok(Format { object_hash: gix_hash::Kind::Sha256, ..Format::default() })
        );
        assert_eq!(
            with_config("[core]\n\trepositoryformatversion = 1\n[extensions]\n\trefStorage = files\n"),
            Ok(Format::default())
        );
        assert_eq!(
            with_config("[core]\n\trepositoryformatversion = 1\n[extensions]\n\tpreciousObjects = true\n"),
            Ok(Format { precious_objects: true, ..Format::default() })
        );
        assert_eq!(
            with_config("[core]\n\trepositoryformatversion = 1\n[extensions]\n\trefstorage = reftable\n"),
            Ok(Format::default())
        );
        assert_eq!(
            with_config("[core]\n\trepositoryformatversion = 1\n[extensions]\n\trefstorage = lmdb\n"),
            Err(Unsupported::RefStorage("lmdb".into()))
        );
        assert_eq!(with_config("[core]\n\trepositoryformatversion = 2\n"), Err(Unsupported::Version(2)));
        assert_eq!(
            with_config("[core]\n\trepositoryformatversion = 1\n[extensions]\n\tfrobnicate = yes\n"),
            Err(Unsupported::Unknown("frobnicate".into()))
        );
        assert_eq!(
            with_config("[core]\n\trepositoryformatversion = 0\n[extensions]\n\tfrobnicate = yes\n"),
            Ok(Format::default())
        );
        assert_eq!(
            with_config("[core]\n\trepositoryformatversion = 1\n[extensions]\n\tobjectformat = sha3\n"),
            Err(Unsupported::ObjectFormat("sha3".into()))
        );
        assert_eq!(
            with_config("[core]\n\trepositoryformatversion = 1\n[extensions]\n\tpartialclone = origin\n"),
            Err(Unsupported::PartialClone)
        );
        assert!(matches!(with_config("[core\n"), Err(Unsupported::Config(_))));
    }
}
