//! `gixd repo create|list` and `gixd maintenance`: the repositories below a base path, and
//! their maintenance by hand.

use std::path::PathBuf;

use clap::Subcommand;

use crate::config::Settings;

/// Where the repositories are: the base path given, or the configuration's.
#[derive(clap::Args)]
pub struct BaseArg {
    /// The directory of repositories.
    #[arg(long, env = "GIXD_BASE_PATH", conflicts_with = "config")]
    pub base_path: Option<PathBuf>,
    /// The configuration file whose base path to use.
    #[arg(long)]
    pub config: Option<PathBuf>,
}

impl BaseArg {
    pub(super) fn path(&self) -> Result<PathBuf, Box<dyn std::error::Error>> {
        if let Some(path) = &self.base_path {
            return Ok(path.clone());
        }
        let Some(file) = &self.config else { return Err("give --base-path (or GIXD_BASE_PATH) or --config".into()) };
        Settings::load(file)?.base_path.ok_or_else(|| format!("{} names no base_path", file.display()).into())
    }
}

#[derive(Subcommand)]
pub enum RepoCmd {
    /// Create a bare repository below the base path (hooks off, objects checked on push).
    Create {
        /// Its path below the base path (`team/app` makes `team/app.git`).
        path: String,
        #[arg(long, value_parser = ["sha1", "sha256"], default_value = "sha1")]
        object_format: String,
        /// Where its refs are kept: loose files and packed-refs, or reftable (git 3.0's default).
        #[arg(long, value_parser = ["files", "reftable"], default_value = "files")]
        ref_format: String,
        /// Anyone may read it (writes git daemon's export marker).
        #[arg(long)]
        public: bool,
        #[arg(long)]
        description: Option<String>,
        #[command(flatten)]
        base: BaseArg,
    },
    /// List the repositories below the base path: format, public or private, size.
    List {
        #[command(flatten)]
        base: BaseArg,
    },
}

/// `gixd repo create|list`.
pub fn repo(command: RepoCmd) -> Result<(), Box<dyn std::error::Error>> {
    match command {
        RepoCmd::Create { path, object_format, ref_format, public, description, base } => {
            let object_hash = if object_format == "sha256" { gix_hash::Kind::Sha256 } else { gix_hash::Kind::Sha1 };
            let reftable = ref_format == "reftable";
            let options = crate::repo::create::Options { object_hash, public, description, reftable };
            let made = crate::repo::create::create(&base.path()?, &path, &options)?;
            println!("{}", made.display());
        }
        RepoCmd::List { base } => {
            let base = base.path()?;
            println!("{:<40} {:<8} {:<8} {:>12}", "repository", "format", "access", "bytes");
            for listed in crate::repo::listing::list(&base) {
                let format = match &listed.format {
                    Ok(format) => (*format).to_owned(),
                    Err(reason) => format!("unsupported: {reason}"),
                };
                let access = if listed.public { "public" } else { "private" };
                println!("{:<40} {:<8} {:<8} {:>12}", listed.name, format, access, listed.bytes);
            }
        }
    }
    Ok(())
}

/// `gixd maintenance`: the repository repacked (or rolled up, or searched anew), and what was done.
pub fn maintenance(repo: PathBuf, geometric: bool, aggressive: bool) -> Result<(), Box<dyn std::error::Error>> {
    let git_dir = if repo.join(".git").is_dir() { repo.join(".git") } else { repo };
    let report = if geometric {
        crate::maintenance::geometric::run(&git_dir).map(|r| r.unwrap_or_default())
    } else if aggressive {
        crate::maintenance::aggressive(&git_dir)
    } else {
        crate::maintenance::run(&git_dir)
    };
    let r = report?;
    let (dir, pack) = (git_dir.display(), r.pack.display());
    println!(
        "{dir}: {} objects in {pack} ({} deltas found by the search), {} commit bitmaps; removed {} pack(s) and {} loose object(s) now in it; {} loose ref(s) packed; {} unreachable object(s) kept, {} expired",
        r.objects,
        r.deltas_computed,
        r.bitmaps,
        r.packs_removed,
        r.loose_removed,
        r.refs_packed,
        r.unreachable_kept,
        r.pruned
    );
    if let Some((count, bytes)) = crate::maintenance::lfs::unreferenced(&git_dir)? {
        println!("{dir}: {count} LFS object(s), {bytes} bytes, named by no pointer (kept; nothing is deleted)");
    }
    Ok(())
}
