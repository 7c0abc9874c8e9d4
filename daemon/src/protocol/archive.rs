//! upload-archive (`git archive --remote=git://…`; git:// only, as with git, and only when
//! enabled): the client's `argument` lines (`--format`, `--prefix`, `-0`…`-9`, `--list`, a
//! tree-ish and paths), `ACK` or `NACK <reason>`, then the archive on side-band 1 (an error after
//! `ACK` on band 3). The tree-ish must be a ref the client may read (`<ref>` or `<ref>:<path>`),
//! as git's default `uploadArchive.allowUnreachable=false` demands. The codec parses and answers;
//! the tree and the archive are the [`Archiver`]'s (`service::archive`: gix-archive from gix's
//! worktree stream, which honours `export-ignore` and filters).

use std::io::{Read, Write};

use gix_hash::ObjectId;

use super::Bounds;
use super::pkt;
use super::sideband::{Bands, Framing};
use crate::serve_error::ServeError;

/// git's limit on argument lines.
const MAX_ARGS: usize = 64;

/// The formats offered, as `git archive --list` names them.
const FORMATS: &[&str] = &["tar", "tgz", "tar.gz", "zip"];

/// Why a request is refused before the ACK: the text is the NACK the client shows. What came
/// from the client is clipped ([`clip`]), so a refusal never echoes a long line back.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("prefix '{0}' may not be absolute or contain '..'")]
    Prefix(String),
    #[error("unsupported option '{0}'")]
    Option(String),
    #[error("unknown archive format '{0}'")]
    Format(String),
    #[error("no tree-ish given")]
    NoTreeIsh,
    #[error("no such ref: {0}")]
    NoSuchRef(String),
    #[error("not a tree object: {0}")]
    NotATree(String),
    #[error("pathspec '{0}' did not match any files")]
    NoMatch(String),
    #[error("gixd archives whole directories only: '{0}' is a file")]
    AFile(String),
    #[error("gixd archives one directory at most: give one path, or <tree-ish>:<path>")]
    ManyPaths,
    /// The repository could not be read where the tree-ish pointed.
    #[error("{0}")]
    Repository(Box<dyn std::error::Error + Send + Sync>),
}

/// At most `n` characters of client input, for a refusal.
pub fn clip(s: &str, n: usize) -> String {
    crate::error::quoted(s, n)
}

pub fn repository(err: impl std::error::Error + Send + Sync + 'static) -> Refusal {
    Refusal::Repository(Box::new(err))
}

/// What a client asked for.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Request {
    pub format: Option<String>,
    pub prefix: Option<String>,
    pub level: Option<u8>,
    pub list: bool,
    pub tree_ish: Option<String>,
    pub paths: Vec<String>,
}

/// Parse the arguments as `git archive` does for a remote client; the message is the NACK.
pub fn parse(args: &[String]) -> Result<Request, Refusal> {
    let mut req = Request::default();
    let mut options_done = false;
    for arg in args {
        if !options_done && arg.starts_with('-') {
            match arg.as_str() {
                "--" => options_done = true,
                "-v" | "--verbose" | "--worktree-attributes" => {}
                "-l" | "--list" => req.list = true,
                a if a.starts_with("--format=") => req.format = Some(a["--format=".len()..].to_owned()),
                a if a.starts_with("--prefix=") => {
                    let prefix = &a["--prefix=".len()..];
                    // Refused before the ACK: an entry named `../x` escapes whoever unpacks it,
                    // and the archive writer would fail mid-stream on it.
                    if prefix.starts_with('/') || prefix.split('/').any(|part| part == "..") {
                        return Err(Refusal::Prefix(clip(prefix, 64)));
                    }
                    req.prefix = Some(prefix.to_owned());
                }
                a if a.len() == 2 && a.as_bytes()[1].is_ascii_digit() => req.level = Some(a.as_bytes()[1] - b'0'),
                other => return Err(Refusal::Option(clip(other, 64))),
            }
        } else if req.tree_ish.is_none() {
            options_done = true;
            req.tree_ish = Some(arg.clone());
        } else {
            req.paths.push(arg.clone());
        }
    }
    Ok(req)
}

fn format_of(req: &Request) -> Result<gix_archive::Format, Refusal> {
    match req.format.as_deref().unwrap_or("tar") {
        "tar" => Ok(gix_archive::Format::Tar),
        "tgz" | "tar.gz" => Ok(gix_archive::Format::TarGz { compression_level: req.level }),
        "zip" => Ok(gix_archive::Format::Zip { compression_level: req.level }),
        other => Err(Refusal::Format(clip(other, 32))),
    }
}

/// What an archive is made of: a tree, the time of its commit, and the directory it is the
/// tree of, within the archive (for `<tree-ish> <dir>`).
pub struct Source {
    pub tree: ObjectId,
    pub mtime: i64,
    pub dir: Option<String>,
}

/// What the upload-archive codec asks of the repository, answered by the service
/// (`service::archive`): the tree-ish resolved among the refs the client may read, and the
/// archive written.
pub trait Archiver {
    /// `<ref>[:<path>]` among the visible refs, peeled to a tree (and the one path, if given).
    fn resolve(&mut self, req: &Request) -> Result<Source, Refusal>;
    /// The archive of `source` in `format`, every entry under `prefix`.
    fn write(
        &mut self,
        source: &Source,
        format: gix_archive::Format,
        prefix: Option<String>,
        out: &mut dyn Write,
    ) -> Result<(), ServeError>;
}

/// Serve upload-archive on a connection: read the arguments, answer, send the archive.
pub fn serve_stateful<R: Read, W: Write>(
    bounds: &Bounds<'_>,
    archiver: &mut dyn Archiver,
    input: R,
    mut out: W,
) -> Result<(), ServeError> {
    let mut lines = pkt::stream(input);
    let nack = |out: &mut W, reason: &str| -> Result<(), ServeError> {
        let mut w = pkt::Writer::new();
        w.text(format!("NACK {reason}"));
        w.flush();
        out.write_all(&w.buf)?;
        out.flush()?;
        Ok(())
    };
    let section = match pkt::read_section(&mut lines, bounds.max_request_body, pkt::SectionRules::default()) {
        Ok((_, pkt::End::HungUp)) => return Ok(()), // the client went away
        Ok((section, _)) => section,
        Err(err) => return nack(&mut out, &format!("malformed request: {err}")),
    };
    let mut args = Vec::new();
    for line in &section {
        let pkt::Owned::Data(d) = line else { unreachable!("no delimiter in this section") };
        let Some(arg) = d.strip_prefix(b"argument ").and_then(|a| std::str::from_utf8(a).ok()) else {
            return nack(&mut out, "expected 'argument <arg>'");
        };
        if args.len() == MAX_ARGS {
            return nack(&mut out, &format!("too many options (>{MAX_ARGS})"));
        }
        args.push(arg.to_owned());
    }
    let req = match parse(&args) {
        Ok(req) => req,
        Err(reason) => return nack(&mut out, &reason.to_string()),
    };
    if req.list {
        let mut w = pkt::Writer::new();
        w.text("ACK").flush();
        out.write_all(&w.buf)?;
        let mut bands = Bands::new(&mut out, Framing::SideBand64k, true);
        for format in FORMATS {
            writeln!(bands, "{format}")?;
        }
        return finish(bands);
    }
    let format = match format_of(&req) {
        Ok(f) => f,
        Err(reason) => return nack(&mut out, &reason.to_string()),
    };
    let source = match archiver.resolve(&req) {
        Ok(source) => source,
        Err(reason) => return nack(&mut out, &reason.to_string()),
    };
    let mut w = pkt::Writer::new();
    w.text("ACK").flush();
    out.write_all(&w.buf)?;
    let mut bands = Bands::new(&mut out, Framing::SideBand64k, true);
    if let Err(err) = archiver.write(&source, format, req.prefix.clone(), &mut bands) {
        let _ = bands.error(&format!("archive failed: {err}"));
        let _ = finish(bands);
        return Err(err);
    }
    finish(bands)
}

fn finish<W: Write>(bands: Bands<W>) -> Result<(), ServeError> {
    let mut out = bands.finish()?;
    let mut w = pkt::Writer::new();
    w.flush();
    out.write_all(&w.buf)?;
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Request, parse};

    #[test]
    fn arguments_parse_as_git_archive_reads_them_and_unknown_options_are_refused() {
        let args: Vec<String> =
            ["--format=zip", "--prefix=p/", "-9", "-v", "main:src", "a", "b/"].iter().map(|s| s.to_string()).collect();
        assert_eq!(
            parse(&args).unwrap(),
            Request {
                format: Some("zip".into()),
                prefix: Some("p/".into()),
                level: Some(9),
                list: false,
                tree_ish: Some("main:src".into()),
                paths: vec!["a".into(), "b/".into()],
            }
        );
        assert!(
            parse(&["--output=/etc/passwd".to_string()])
                .unwrap_err()
                .to_string()
                .contains("unsupported option '--output=/etc/passwd'")
        );
        assert!(parse(&["--exec=sh".to_string()]).is_err());
        assert!(parse(&["--add-file=x".to_string()]).is_err());
    }
}
