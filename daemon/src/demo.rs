//! What `gixd serve` serves with no configuration: the git repository it was started in, or, if
//! there is none, a small demo repository it creates with gix (no git binary needed).

use std::path::{Path, PathBuf};

use crate::config::Exports;

/// The base path, export rule and URL path that serve one repository.
pub struct Default {
    pub base_path: PathBuf,
    pub exports: Exports,
    pub url_path: String,
}

/// Serve the repository containing `cwd`, or else the demo repository under `data_dir`.
pub fn default_repository(cwd: &Path, data_dir: &Path) -> Result<Default, gix::Error> {
    if let Ok(repo) = gix::discover(cwd) {
        let git_dir = repo.git_dir().to_owned();
        let top = repo.workdir().map(Path::to_owned).unwrap_or_else(|| git_dir.clone());
        if let (Some(base), Some(name)) = (top.parent(), top.file_name()) {
            return Ok(Default {
                base_path: base.to_owned(),
                exports: Exports::Only(git_dir),
                url_path: name.to_string_lossy().into_owned(),
            });
        }
    }
    let demo = data_dir.join("demo.git");
    if !demo.join("HEAD").is_file() {
        create_demo(&demo)?;
    }
    Ok(Default { base_path: data_dir.to_owned(), exports: Exports::Only(demo), url_path: "demo.git".into() })
}

/// A bare repository with one commit on `main` holding a README.
fn create_demo(path: &Path) -> Result<(), gix::Error> {
    let repo = gix::init_bare(path)?;
    let readme = repo.write_blob(b"# demo\n\nServed by gixd. Clone it, change it, look around.\n".as_slice())?.detach();
    let tree = gix::objs::Tree {
        entries: vec![gix::objs::tree::Entry {
            mode: gix::objs::tree::EntryKind::Blob.into(),
            filename: "README.md".into(),
            oid: readme,
        }],
    };
    let tree = repo.write_object(&tree)?.detach();
    let who =
        gix::actor::SignatureRef { name: "gixd".into(), email: "gixd@localhost".into(), time: "1700000000 +0000" };
    repo.commit_as(who, who, "refs/heads/main", "Initial commit", tree, Vec::<gix_hash::ObjectId>::new())?;
    // HEAD of a new repository names the configured default branch; make it `main`.
    std::fs::write(path.join("HEAD"), "ref: refs/heads/main\n").map_err(|e| gix::Error::from_error(e))?;
    Ok(())
}
