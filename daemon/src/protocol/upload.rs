//! What v0 and v2 upload-pack share: checking wants, the shallow and filter arguments and the
//! boundary they make, then framing the pack the service writes ([`crate::session::Packer`]),
//! reporting a failure in-band.

use std::io::Write;

use gix_hash::ObjectId;

use super::Context;
use super::sideband::{Bands, Framing};
use crate::error::{ProtocolError, ServeError};
use crate::filter::Filter;
use crate::pack;
use crate::repo::RefSnapshot;
pub use crate::session::PackRequest;
use crate::shallow::{self, Boundary, Deepen};

/// An object id as the client wrote it, in the repository's hash.
pub fn parse_oid(hex: &str, kind: gix_hash::Kind) -> Result<ObjectId, ProtocolError> {
    match ObjectId::from_hex(hex.as_bytes()) {
        Ok(id) if id.kind() == kind => Ok(id),
        _ => Err(ProtocolError::BadObjectId(crate::error::quoted(hex, 80))),
    }
}

/// The object format a client named must be the repository's.
pub fn check_object_format(asked: &str, ours: gix_hash::Kind) -> Result<(), ProtocolError> {
    let ours = super::hash_name(ours);
    if asked == ours {
        Ok(())
    } else {
        Err(ProtocolError::ObjectFormat { asked: crate::error::quoted(asked, 32), ours: ours.into() })
    }
}

/// Record one more `have`, refusing the one past `max_haves`.
pub fn push_have(
    haves: &mut Vec<ObjectId>,
    hex: &str,
    hash: gix_hash::Kind,
    max_haves: usize,
) -> Result<(), ProtocolError> {
    if haves.len() >= max_haves {
        return Err(ProtocolError::TooMany { what: "have", limit: max_haves });
    }
    haves.push(parse_oid(hex, hash)?);
    Ok(())
}

/// Answer `err` with an `ERR` line (nothing else was written yet) and return it.
pub fn reply_err<T>(out: &mut dyn Write, err: ServeError) -> Result<T, ServeError> {
    let mut w = crate::protocol::pkt::Writer::new();
    w.err(&err.to_string());
    out.write_all(&w.buf)?;
    Err(err)
}

/// Which wants a request may make beyond the visible ref tips.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WantRule {
    /// Stateless v0 (HTTP) and v2: any object reachable from a visible ref, as git's
    /// `check_non_tip` accepts for stateless service and as gitprotocol-v2 says ("wants can be
    /// anything"). Stricter than git's v2 on purpose: never an object no visible ref reaches.
    Reachable,
    /// Stateful v0 (git://): git daemon's rule — the advertised tips, and by id only where the
    /// repository allows it (`uploadpack.allowReachableSHA1InWant`, or `uploadpack.allowFilter`:
    /// a partial clone fetches what it left out by id later).
    Advertised,
}

/// Every want must be allowed by `rule`; an object no visible ref reaches never is.
pub fn check_wants(
    ctx: &Context<'_>,
    repo: &gix::Repository,
    refs: &RefSnapshot,
    wants: &[ObjectId],
    rule: WantRule,
) -> Result<(), ServeError> {
    let max_wants = ctx.config.max_wants;
    if wants.len() > max_wants {
        return Err(ProtocolError::TooMany { what: "want", limit: max_wants }.into());
    }
    let by_id = match rule {
        WantRule::Reachable => true,
        WantRule::Advertised => refs.wants.reachable || refs.wants.filter,
    };
    // Tips, and the peeled targets of advertised tags (a client that wants every `^{}` line
    // asks for these), need no look-up; commits are decided at commit level; only a tree or a
    // blob wanted by id needs the readable set of objects.
    let mut commits = Vec::new();
    let mut others = Vec::new();
    for want in wants {
        if refs.is_tip(want) || (by_id && refs.is_peeled_tip(want)) {
            continue;
        }
        if !by_id {
            return Err(ProtocolError::WantNotAdvertised(*want).into());
        }
        match repo.find_header(*want) {
            Ok(h) if h.kind() == gix_object::Kind::Commit => commits.push(*want),
            Ok(_) => others.push(*want),
            Err(_) => return Err(ProtocolError::WantNotAdvertised(*want).into()),
        }
    }
    let readable = crate::select::readable_commits(ctx.caches, ctx.repos, ctx.served, repo, refs, &commits)?;
    if let Some(want) = commits.iter().find(|c| !readable.contains(*c)) {
        return Err(ProtocolError::WantNotAdvertised(*want).into());
    }
    if !others.is_empty() {
        let set = crate::select::readable_objects(ctx.caches, ctx.repos, ctx.served, repo, refs)?;
        if let Some(want) = others.iter().find(|o| !set.contains(o)) {
            return Err(ProtocolError::WantNotAdvertised(*want).into());
        }
    }
    Ok(())
}

/// What a request may say in a repository, all the parsers know of it (no refs, no objects):
/// the object format its ids are in, and the arguments its settings allow.
#[derive(Debug, Clone, Copy)]
pub struct Grammar {
    pub hash: gix_hash::Kind,
    /// `uploadpack.allowFilter`.
    pub filter: bool,
    /// `uploadpack.allowRefInWant` (v2's `want-ref`).
    pub ref_in_want: bool,
}

impl Grammar {
    pub fn of(refs: &RefSnapshot) -> Self {
        Grammar { hash: refs.object_hash, filter: refs.wants.filter, ref_in_want: refs.wants.ref_in_want }
    }
}

/// The shallow and filter arguments of a request, as v0 and v2 both spell them.
#[derive(Debug, Default)]
pub struct Extras {
    pub deepen: Deepen,
    /// `deepen-not <name>` as sent; [`Extras::resolve`] turns each into the ref it means.
    pub deepen_not: Vec<String>,
    /// `shallow <id>` lines as sent (narrowed to readable commits in [`boundary`]).
    pub shallow_lines: Vec<ObjectId>,
    pub filter: Option<Filter>,
}

impl Extras {
    /// Take `word value` if it is a shallow or filter argument; false if it is neither.
    /// `deepen-relative` is a v2 argument here (v0 sends it as a capability).
    pub fn line(&mut self, grammar: &Grammar, word: &str, value: &str) -> Result<bool, ProtocolError> {
        match word {
            "shallow" => {
                if self.shallow_lines.len() >= 1_000_000 {
                    return Err(ProtocolError::TooMany { what: "shallow", limit: 1_000_000 });
                }
                self.shallow_lines.push(parse_oid(value, grammar.hash)?);
            }
            "deepen" => self.deepen.depth = Some(shallow::parse_depth(value)?),
            "deepen-since" => self.deepen.since = Some(shallow::parse_since(value)?),
            "deepen-not" => self.deepen_not.push(value.to_owned()),
            "deepen-relative" if value.is_empty() => self.deepen.relative = true,
            "filter" => {
                if !grammar.filter {
                    return Err(ProtocolError::FilterNotAllowed);
                }
                if self.filter.is_some() {
                    return Err(ProtocolError::Filter(crate::filter::FilterError::Invalid(
                        "multiple filter-specs cannot be combined".into(),
                    )));
                }
                self.filter = Some(Filter::parse(value)?);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    pub fn filter(&self) -> Filter {
        self.filter.unwrap_or_default()
    }

    /// Each `deepen-not` name as the one visible ref it means (git's rev-parse rules), or the
    /// error that it means none or several.
    pub fn resolve(&mut self, refs: &RefSnapshot) -> Result<(), ProtocolError> {
        for name in std::mem::take(&mut self.deepen_not) {
            self.deepen.not.push(shallow::resolve_deepen_not(refs, &name)?);
        }
        Ok(())
    }
}

/// The shallow boundary of a request with shallow arguments (`None` without): the client's
/// shallow lines narrowed to commits it may read (a commit we lack is ignored, as git does; one
/// that is not a commit is refused), then [`shallow::compute`].
pub fn boundary(
    ctx: &Context<'_>,
    repo: &gix::Repository,
    refs: &RefSnapshot,
    wants: &[ObjectId],
    extras: &mut Extras,
) -> Result<Option<Boundary>, ServeError> {
    extras.deepen.check()?;
    if !extras.shallow_lines.is_empty() {
        // Each line's object is looked up once: missing ones are ignored, non-commits refused.
        let mut commits = Vec::new();
        for id in std::mem::take(&mut extras.shallow_lines) {
            match repo.find_header(id) {
                Err(_) => continue,
                Ok(h) if h.kind() != gix_object::Kind::Commit => {
                    return Err(ProtocolError::Shallow(format!("invalid shallow object {id}")).into());
                }
                Ok(_) => commits.push(id),
            }
        }
        let readable = crate::select::readable_commits(ctx.caches, ctx.repos, ctx.served, repo, refs, &commits)?;
        for id in commits {
            if readable.contains(&id) && !extras.deepen.client_shallows.contains(&id) {
                extras.deepen.client_shallows.push(id);
            }
        }
    }
    if !extras.deepen.is_active() {
        return Ok(None);
    }
    shallow::compute(repo, wants, &extras.deepen).map(Some)
}

/// The `shallow`/`unshallow` lines of a boundary.
pub fn write_boundary(boundary: &Boundary, w: &mut crate::protocol::pkt::Writer) {
    // git writes these without a trailing newline (libgit2 refuses one).
    for id in &boundary.shallow {
        w.data(format!("shallow {id}").as_bytes());
    }
    for id in &boundary.unshallow {
        w.data(format!("unshallow {id}").as_bytes());
    }
}

/// Send `request`'s pack on `out` in `framing` (progress on band 2 unless the client asked for
/// none), ending with a flush when it is multiplexed (v0 side-band and v2's packfile section); a
/// failure after this point is reported on band 3. What goes in it is the service's to decide
/// ([`crate::session::Packer`]).
pub fn send_pack<W: Write>(
    ctx: &Context<'_>,
    repo: &gix::Repository,
    refs: &RefSnapshot,
    request: &PackRequest<'_>,
    (framing, progress): (Framing, bool),
    out: W,
) -> Result<pack::Stats, ServeError> {
    let mut bands = Bands::new(out, framing, progress);
    let result = ctx.packer.write_pack(ctx, repo, refs, request, &mut bands);
    match result {
        Ok(stats) => {
            let mut out = bands.finish()?;
            if framing != Framing::Raw {
                let mut w = crate::protocol::pkt::Writer::new();
                w.flush();
                out.write_all(&w.buf)?;
            }
            Ok(stats)
        }
        Err(ServeError::Disconnected) => Err(ServeError::Disconnected),
        Err(err) => {
            // The client gets the reason; if it is gone, there is no one to tell.
            let _ = bands.error(&err.to_string()).and_then(|()| bands.finish().map(drop));
            Err(err)
        }
    }
}
