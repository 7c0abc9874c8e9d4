//! `gixd mirror add|sync|list`: pull mirrors below a base path ([`crate::mirror`]).

use clap::Subcommand;

use super::repos::BaseArg;

#[derive(Subcommand)]
pub enum MirrorCmd {
    /// Make a repository below the base path a mirror of an upstream (git://, ssh:// or a local
    /// path) and sync it once. Nobody pushes to it; `gixd mirror sync` brings it up to date.
    Add {
        /// Its path below the base path (`mirrors/tokio` makes `mirrors/tokio.git`).
        path: String,
        /// The upstream's URL.
        url: String,
        /// The upstream's object format.
        #[arg(long, value_parser = ["sha1", "sha256"], default_value = "sha1")]
        object_format: String,
        /// Anyone may read it (writes git daemon's export marker).
        #[arg(long)]
        public: bool,
        #[command(flatten)]
        base: BaseArg,
    },
    /// Bring a mirror up to its upstream: its branches and tags, exactly (force-pushes
    /// followed, deleted refs deleted).
    Sync {
        /// Its path below the base path.
        path: String,
        #[command(flatten)]
        base: BaseArg,
    },
    /// List the mirrors below the base path and their upstreams.
    List {
        #[command(flatten)]
        base: BaseArg,
    },
}

/// `gixd mirror add|sync|list`.
pub fn mirror(command: MirrorCmd) -> Result<(), Box<dyn std::error::Error>> {
    match command {
        MirrorCmd::Add { path, url, object_format, public, base } => {
            let object_hash = if object_format == "sha256" { gix_hash::Kind::Sha256 } else { gix_hash::Kind::Sha1 };
            let options = crate::repo::create::Options { object_hash, public, description: None, reftable: false };
            let base = base.path()?;
            let made = crate::mirror::create(&base, &path, &url, &options)?;
            println!("{}", made.display());
            sync(&base, &path)
        }
        MirrorCmd::Sync { path, base } => sync(&base.path()?, &path),
        MirrorCmd::List { base } => {
            let base = base.path()?;
            for listed in crate::repo::listing::list(&base) {
                let upstream = gix::open(base.join(&listed.name)).ok().and_then(|r| crate::mirror::upstream(&r));
                if let Some(upstream) = upstream {
                    println!("{}\t{upstream}", listed.name);
                }
            }
            Ok(())
        }
    }
}

/// Sync the mirror `path` below `base`, saying what changed.
fn sync(base: &std::path::Path, path: &str) -> Result<(), Box<dyn std::error::Error>> {
    let mut config = crate::config::Config::new(base.to_owned());
    config.exports = crate::config::Exports::All;
    let repos = crate::repo::Repos::new(base, config.exports.clone())?;
    let state = crate::session::State::new(config, repos, None, None)?;
    let served = state.repos.resolve(path)?;
    let tally = crate::session::Tally::default();
    let ctx = state.context(&served, Some("gixd-mirror"), &tally);
    let synced = crate::mirror::sync(&ctx)?;
    println!("{path}: {} ref(s) updated, {} object(s) fetched", synced.updated, synced.objects);
    Ok(())
}
