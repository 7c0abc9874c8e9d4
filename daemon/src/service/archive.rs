//! upload-archive's repository side: the tree-ish a client names, resolved among the refs it may
//! read and peeled to a tree, and the archive of it written by gix-archive from gix's worktree
//! stream (which honours `export-ignore` and filters). The codec is [`crate::protocol::archive`].

use std::io::{Seek, Write};

use crate::protocol::archive::{Archiver, Refusal, Request, Source, clip, repository};
use crate::repo::RefSnapshot;
use crate::serve_error::ServeError;
use crate::session::Context;

/// One upload-archive request's repository and the refs it may name.
pub struct Archive<'a> {
    ctx: &'a Context<'a>,
    repo: gix::Repository,
    refs: RefSnapshot,
}

impl<'a> Archive<'a> {
    pub fn open(ctx: &'a Context<'a>) -> Result<Self, ServeError> {
        let repo = ctx.served.repo.to_thread_local();
        let refs = RefSnapshot::load(&repo)?;
        Ok(Archive { ctx, repo, refs })
    }
}

impl Archiver for Archive<'_> {
    fn resolve(&mut self, req: &Request) -> Result<Source, Refusal> {
        resolve(&self.repo, &self.refs, req)
    }

    fn write(
        &mut self,
        source: &Source,
        format: gix_archive::Format,
        prefix: Option<String>,
        out: &mut dyn Write,
    ) -> Result<(), ServeError> {
        write_archive(&self.repo, source, format, prefix, out)?;
        tracing::info!(repo = %self.ctx.served.name, tree = %source.tree, "archive sent");
        Ok(())
    }
}

/// `<ref>[:<path>]` among the visible refs, peeled to a tree. One path may follow, naming a
/// directory of that tree: the archive is then that directory, under its own name (as git's
/// archive of `<tree-ish> <dir>`). More paths, or a file, are refused: gix's worktree stream
/// has no pathspec filter yet.
fn resolve(repo: &gix::Repository, refs: &RefSnapshot, req: &Request) -> Result<Source, Refusal> {
    let tree_ish = req.tree_ish.as_deref().ok_or(Refusal::NoTreeIsh)?;
    let (name, path) = match tree_ish.split_once(':') {
        Some((name, path)) => (name, Some(path)),
        None => (tree_ish, None),
    };
    let Some((_, id)) = refs.dwim(name).into_iter().next() else {
        return Err(Refusal::NoSuchRef(clip(name, 100)));
    };
    let object = repo.find_object(id).map_err(repository)?;
    let mtime = match object.clone().peel_to_commit() {
        Ok(commit) => commit.time().map(|t| t.seconds).unwrap_or(0),
        Err(_) => now(),
    };
    let mut tree = object.peel_to_tree().map_err(|_| Refusal::NotATree(clip(name, 100)))?;
    if let Some(path) = path.filter(|p| !p.is_empty()) {
        let entry = tree
            .peel_to_entry_by_path(path.trim_end_matches('/'))
            .map_err(repository)?
            .filter(|e| e.mode().is_tree())
            .ok_or_else(|| Refusal::NotATree(clip(tree_ish, 100)))?;
        tree = repo.find_tree(entry.object_id()).map_err(repository)?;
    }
    let mut dir = None;
    match req.paths.as_slice() {
        [] => {}
        [path] => {
            let trimmed = path.trim_end_matches('/');
            let entry = tree
                .peel_to_entry_by_path(trimmed)
                .map_err(repository)?
                .ok_or_else(|| Refusal::NoMatch(clip(path, 100)))?;
            if !entry.mode().is_tree() {
                return Err(Refusal::AFile(clip(path, 100)));
            }
            tree = repo.find_tree(entry.object_id()).map_err(repository)?;
            dir = Some(trimmed.to_owned());
        }
        _ => return Err(Refusal::ManyPaths),
    }
    Ok(Source { tree: tree.id, mtime, dir })
}

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

fn write_archive(
    repo: &gix::Repository,
    source: &Source,
    format: gix_archive::Format,
    prefix: Option<String>,
    out: &mut dyn Write,
) -> Result<(), ServeError> {
    let (mut stream, _index) = repo.worktree_stream(source.tree).map_err(ServeError::pack)?;
    let prefix = match (&prefix, &source.dir) {
        (_, None) => prefix,
        (p, Some(dir)) => Some(format!("{}{dir}/", p.as_deref().unwrap_or(""))),
    };
    let options = gix_archive::Options { format, tree_prefix: prefix.map(Into::into), modification_time: source.mtime };
    let next = gix_worktree_stream::Stream::next_entry;
    match format {
        gix_archive::Format::Zip { .. } => {
            // zip wants to seek back: built in an unlinked temporary file, then streamed out.
            let mut file = crate::unlinked_file(&std::env::temp_dir(), "archive")?;
            gix_archive::write_stream_seek(&mut stream, next, &mut file, options).map_err(ServeError::pack)?;
            file.rewind()?;
            std::io::copy(&mut file, out)?;
        }
        _ => gix_archive::write_stream(&mut stream, next, &mut *out, options).map_err(ServeError::pack)?,
    }
    Ok(())
}
