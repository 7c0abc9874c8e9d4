//! What v0 and v2 upload-pack share: the grammar their parsers follow, the shallow and filter
//! arguments, the questions the codecs ask of the repository ([`Upload`], answered by the upload
//! service's session) and the framing of the pack it writes, a failure reported in-band.

use std::io::Write;

use gix_hash::ObjectId;

use super::sideband::{Bands, Framing};
use crate::error::ProtocolError;
use crate::filter::Filter;
use crate::pack;
use crate::repo::RefSnapshot;
use crate::serve_error::ServeError;
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

/// What we know of one `have`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Have {
    /// We have this object too (git's `do_got_oid`: any object, not only a commit).
    Common,
    /// We do not have it (the client is ahead there).
    Unknown,
}

/// The pack a negotiated request gets.
pub struct PackRequest<'a> {
    pub wants: &'a [ObjectId],
    pub common: &'a [ObjectId],
    pub filter: Filter,
    pub boundary: Option<&'a Boundary>,
    pub include_tag: bool,
    pub thin_pack: bool,
    pub ofs_delta: bool,
}

/// Everything the upload-pack codecs (v0/v1 and v2) ask of the repository, in the order a
/// request asks it: the refs it is served from, whether its wants are allowed, the shallow
/// boundary, which haves are common and when the server is ready, and at last the pack. The
/// upload service's session answers (`service::negotiation`); the codecs keep the protocol's
/// own state (which ACK to send, rounds, flushes) and never touch objects themselves.
pub trait Upload {
    /// The refs this request is served from (the advertisement, want-ref and deepen-not names,
    /// what the request may say: [`Grammar::of`]).
    fn refs(&self) -> &RefSnapshot;
    /// Every want must be allowed by `rule`; an object no visible ref reaches never is.
    fn check_wants(&mut self, wants: &[ObjectId], rule: WantRule) -> Result<(), ServeError>;
    /// The shallow boundary of a request with shallow arguments (`None` without).
    fn boundary(&mut self, wants: &[ObjectId], extras: &mut Extras) -> Result<Option<Boundary>, ServeError>;
    /// Record a have; what it is.
    fn have(&mut self, id: ObjectId) -> Result<Have, ServeError>;
    /// The haves acknowledged so far (held here), in the order named, without repeats.
    fn acked(&self) -> &[ObjectId];
    /// git's `ok_to_give_up` for `wants` and the haves so far.
    fn ready(&mut self, wants: &[ObjectId]) -> Result<bool, ServeError>;
    /// The commits the pack leaves out (common commits, and the commits of tag haves).
    fn common(&mut self) -> Vec<ObjectId>;
    /// Select and write the pack into `out` (the codec's framing).
    fn pack(&mut self, request: &PackRequest<'_>, out: &mut dyn pack::Sink) -> Result<pack::Stats, ServeError>;
    /// Each object's size, `None` for one the repository lacks or this client may not read.
    fn object_sizes(&mut self, ids: &[ObjectId]) -> Result<Vec<Option<u64>>, ServeError>;
    /// The repository's bundle list (bundle-uri) as `bundle.*` keys and values, in order.
    fn bundle_list(&mut self) -> Result<Vec<(String, String)>, ServeError>;
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
/// failure after this point is reported on band 3. What goes in it is the session's to decide.
pub fn send_pack<W: Write>(
    upload: &mut dyn Upload,
    request: &PackRequest<'_>,
    (framing, progress): (Framing, bool),
    out: W,
) -> Result<pack::Stats, ServeError> {
    let mut bands = Bands::new(out, framing, progress);
    let result = upload.pack(request, &mut bands);
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
