//! Protocol v0/v1 upload-pack: the ref advertisement, and stateless negotiation as smart HTTP
//! needs it (every request re-sends its wants and the haves found common; the server answers
//! `ACK <id> common|ready` and `NAK`, and sends the pack after `done`, or right after `ready`
//! with `no-done`), and stateful negotiation over a connection (git://). A deepen request's
//! reply starts with its shallow/unshallow lines and a flush, in every stateless round.

use std::io::Write;

use gix_hash::ObjectId;

use super::pkt::{self, Line};
use super::sideband::Framing;
use super::upload::{self, Extras, Have, PackRequest, Upload};
use super::{Bounds, Version, hash_name};
use crate::error::ProtocolError;
use crate::pack::Stats;
use crate::repo::{HeadState, RefSnapshot};
use crate::serve_error::ServeError;

/// The capabilities advertised, in git's order, before `symref=`, `object-format=` and `agent=`.
const CAPABILITIES: &[&str] = &[
    "multi_ack",
    "thin-pack",
    "side-band",
    "side-band-64k",
    "ofs-delta",
    "shallow",
    "deepen-since",
    "deepen-not",
    "deepen-relative",
    "no-progress",
    "include-tag",
    "multi_ack_detailed",
];

/// Capabilities only meaningful for stateless (HTTP) service.
const STATELESS_CAPABILITIES: &[&str] = &["no-done"];

/// Write the ref advertisement (without HTTP's `# service=` preamble), ending in a flush.
pub fn advertise(refs: &RefSnapshot, version: Version, stateless: bool, out: &mut pkt::Writer) {
    if version == Version::V1 {
        out.text("version 1");
    }
    let mut caps: Vec<String> = CAPABILITIES.iter().map(|c| c.to_string()).collect();
    if refs.wants.tip {
        caps.push("allow-tip-sha1-in-want".into());
    }
    if refs.wants.reachable {
        caps.push("allow-reachable-sha1-in-want".into());
    }
    if stateless {
        caps.extend(STATELESS_CAPABILITIES.iter().map(|c| c.to_string()));
    }
    if let HeadState::Symbolic { target, .. } = &refs.head {
        caps.push(format!("symref=HEAD:{target}"));
    }
    if refs.wants.filter {
        caps.push("filter".into());
    }
    caps.push(format!("object-format={}", hash_name(refs.object_hash)));
    caps.push(format!("agent={}", crate::agent()));
    let caps = caps.join(" ");

    let mut lines: Vec<(ObjectId, String)> = Vec::new();
    if let Some(id) = refs.head_id() {
        lines.push((id, "HEAD".into()));
    }
    for r in &refs.refs {
        lines.push((r.id, r.name.to_string()));
        if let Some(peeled) = r.peeled {
            lines.push((peeled, format!("{}^{{}}", r.name)));
        }
    }
    if lines.is_empty() {
        lines.push((refs.object_hash.null(), "capabilities^{}".into()));
    }
    for (i, (id, name)) in lines.iter().enumerate() {
        if i == 0 {
            out.text(format!("{id} {name}\0{caps}"));
        } else {
            out.text(format!("{id} {name}"));
        }
    }
    out.flush();
}

/// The capabilities a client asked for on its first want line.
#[derive(Debug, Default, Clone)]
pub struct ClientCaps {
    pub multi_ack: bool,
    pub multi_ack_detailed: bool,
    pub no_done: bool,
    pub thin_pack: bool,
    pub side_band: bool,
    pub side_band_64k: bool,
    pub ofs_delta: bool,
    pub no_progress: bool,
    pub include_tag: bool,
    pub deepen_relative: bool,
    pub filter: bool,
}

impl ClientCaps {
    fn parse(words: &[&str], hash: gix_hash::Kind) -> Result<ClientCaps, ProtocolError> {
        let mut caps = ClientCaps::default();
        for word in words {
            match *word {
                "multi_ack" => caps.multi_ack = true,
                "multi_ack_detailed" => caps.multi_ack_detailed = true,
                "no-done" => caps.no_done = true,
                "thin-pack" => caps.thin_pack = true,
                "side-band" => caps.side_band = true,
                "side-band-64k" => caps.side_band_64k = true,
                "ofs-delta" => caps.ofs_delta = true,
                "no-progress" => caps.no_progress = true,
                "include-tag" => caps.include_tag = true,
                "deepen-relative" => caps.deepen_relative = true,
                // Named so the client may send the matching lines; nothing to switch on.
                "shallow" | "deepen-since" | "deepen-not" => {}
                "filter" => caps.filter = true,
                w if w.starts_with("agent=") || w.starts_with("session-id=") => {}
                w if w.starts_with("object-format=") => {
                    upload::check_object_format(&w["object-format=".len()..], hash)?
                }
                other => return Err(ProtocolError::UnknownCapability(other.to_owned())),
            }
        }
        Ok(caps)
    }

    fn framing(&self) -> Framing {
        if self.side_band_64k {
            Framing::SideBand64k
        } else if self.side_band {
            Framing::SideBand
        } else {
            Framing::Raw
        }
    }
}

/// One parsed v0 request.
#[derive(Debug, Default)]
pub struct Request {
    pub wants: Vec<ObjectId>,
    pub caps: ClientCaps,
    pub haves: Vec<ObjectId>,
    /// The client sent `done`.
    pub done: bool,
    /// Shallow lines, deepen and filter arguments.
    pub extras: Extras,
    /// Anything came after the wants' flush (a deepen request's first round has nothing).
    pub has_haves_section: bool,
}

impl Request {
    /// The pack this request gets, given the negotiated common commits.
    fn pack_request<'a>(
        &'a self,
        common: &'a [ObjectId],
        boundary: Option<&'a crate::shallow::Boundary>,
    ) -> PackRequest<'a> {
        let caps = &self.caps;
        PackRequest {
            wants: &self.wants,
            common,
            filter: self.extras.filter(),
            boundary,
            include_tag: caps.include_tag,
            thin_pack: caps.thin_pack,
            ofs_delta: caps.ofs_delta,
        }
    }

    /// How its pack is framed: side-band as negotiated, progress unless it asked for none.
    fn framing(&self) -> (super::sideband::Framing, bool) {
        (self.caps.framing(), !self.caps.no_progress)
    }
}

/// The want section of a request, without the flush that ends it: want (and shallow, deepen,
/// filter) lines; capabilities ride on the first want.
pub fn parse_wants(section: &[Line<'_>], grammar: &upload::Grammar) -> Result<Request, ProtocolError> {
    let hash = grammar.hash;
    let mut req = Request::default();
    for line in section {
        match line {
            Line::Data(_) => {
                let text = line.as_text().ok_or_else(|| ProtocolError::Unexpected("non-UTF-8 line".into()))?;
                let mut words = text.split(' ');
                match words.next() {
                    Some("want") => {
                        let hex = words.next().ok_or_else(|| ProtocolError::Unexpected(text.into()))?;
                        req.wants.push(upload::parse_oid(hex, hash)?);
                        let rest: Vec<&str> = words.filter(|w| !w.is_empty()).collect();
                        if req.wants.len() == 1 {
                            req.caps = ClientCaps::parse(&rest, hash)?;
                        } else if !rest.is_empty() {
                            return Err(ProtocolError::Unexpected(text.into()));
                        }
                    }
                    Some(word @ ("shallow" | "deepen" | "deepen-since" | "deepen-not" | "filter")) => {
                        if word == "filter" && !req.caps.filter {
                            return Err(ProtocolError::FilterNotAllowed);
                        }
                        let value = text.split_once(' ').map_or("", |(_, v)| v);
                        req.extras.line(grammar, word, value)?;
                    }
                    _ => return Err(ProtocolError::Unexpected(crate::error::quoted(text, 100))),
                }
            }
            other => return Err(ProtocolError::Unexpected(format!("{other:?}"))),
        }
    }
    req.extras.deepen.relative = req.caps.deepen_relative;
    Ok(req)
}

/// The [`super::FetchKey`] of a stateless request: `Some` when it ends with `done`. The
/// capabilities ride on the first want line; a flush is kept as an empty argument (it separates
/// the wants from the haves).
pub fn fetch_key(version: Version, lines: &[Line<'_>]) -> Option<super::FetchKey> {
    let mut capabilities = std::collections::BTreeSet::new();
    let mut arguments = Vec::with_capacity(lines.len());
    let mut first_want = true;
    for line in lines {
        match line {
            Line::Flush => arguments.push(String::new()),
            Line::Data(_) => {
                let text = line.as_text()?.trim_end_matches('\n');
                let mut words = text.split(' ');
                if first_want && text.starts_with("want ") {
                    first_want = false;
                    let want = format!("{} {}", words.next()?, words.next()?);
                    capabilities
                        .extend(words.filter(|w| !w.is_empty() && super::shapes_the_answer(w)).map(str::to_owned));
                    arguments.push(want);
                } else {
                    arguments.push(text.to_owned());
                }
            }
            Line::Delim | Line::ResponseEnd => return None,
        }
    }
    (arguments.last().map(String::as_str) == Some("done")).then_some(super::FetchKey {
        version: version.number(),
        capabilities,
        arguments,
    })
}

/// Parse a stateless v0 request: want (and shallow, deepen, filter) lines and a flush, then have
/// lines (with flushes between rounds) and, last, `done` or a flush.
pub fn parse(lines: &[Line<'_>], grammar: &upload::Grammar, max_haves: usize) -> Result<Request, ProtocolError> {
    let hash = grammar.hash;
    let flush = lines.iter().position(|l| *l == Line::Flush);
    let mut req = parse_wants(&lines[..flush.unwrap_or(lines.len())], grammar)?;
    if req.wants.is_empty() {
        return Ok(req); // nothing wanted: the client is done
    }
    let i = flush.ok_or(ProtocolError::Truncated)? + 1;
    req.has_haves_section = i < lines.len();
    let mut ended = false;
    for line in &lines[i..] {
        if ended {
            return Err(ProtocolError::Unexpected("data after done".into()));
        }
        match line {
            Line::Flush => {}
            Line::Data(_) => {
                let text = line.as_text().ok_or_else(|| ProtocolError::Unexpected("non-UTF-8 line".into()))?;
                if text == "done" {
                    req.done = true;
                    ended = true;
                } else if let Some(hex) = text.strip_prefix("have ") {
                    upload::push_have(&mut req.haves, hex, hash, max_haves)?;
                } else {
                    return Err(ProtocolError::Unexpected(crate::error::quoted(text, 100)));
                }
            }
            other => return Err(ProtocolError::Unexpected(format!("{other:?}"))),
        }
    }
    if !req.done && !matches!(lines.last(), Some(Line::Flush)) {
        return Err(ProtocolError::Truncated);
    }
    Ok(req)
}

/// Serve one stateless v0 upload-pack request: acknowledgements, then the pack if negotiation is
/// over (its statistics are returned).
pub fn upload_pack<W: Write>(
    bounds: &Bounds<'_>,
    upload: &mut dyn Upload,
    body: &[u8],
    mut out: W,
) -> Result<Option<Stats>, ServeError> {
    let mut w = pkt::Writer::new();
    let result = negotiate(bounds, upload, body, &mut w);
    match result {
        Err(err) => {
            out.write_all(&w.buf)?; // acknowledgements written before the failure
            upload::reply_err(&mut out, err)
        }
        Ok(None) => {
            out.write_all(&w.buf)?;
            Ok(None)
        }
        Ok(Some((req, common, boundary))) => {
            out.write_all(&w.buf)?;
            upload::send_pack(upload, &req.pack_request(&common, boundary.as_ref()), req.framing(), out).map(Some)
        }
    }
}

/// The wants' shallow boundary; for a deepen request, its lines and a flush go out first.
fn shallow_reply(
    upload: &mut dyn Upload,
    req: &mut Request,
    w: &mut pkt::Writer,
) -> Result<Option<crate::shallow::Boundary>, ServeError> {
    let boundary = upload.boundary(&req.wants, &mut req.extras)?;
    if req.extras.deepen.deepens()
        && let Some(boundary) = &boundary
    {
        upload::write_boundary(boundary, w);
        w.flush();
    }
    Ok(boundary)
}

type Negotiated = (Request, Vec<ObjectId>, Option<crate::shallow::Boundary>);

/// Process the request's haves as git's upload-pack does in stateless mode. Writes the shallow
/// list and ACK/NAK lines to `w`; returns the request, the common commits and the shallow
/// boundary when a pack is to follow.
fn negotiate(
    bounds: &Bounds<'_>,
    upload: &mut dyn Upload,
    body: &[u8],
    w: &mut pkt::Writer,
) -> Result<Option<Negotiated>, ServeError> {
    let lines = pkt::read_all(body)?;
    let mut req = parse(&lines, &upload::Grammar::of(upload.refs()), bounds.max_haves)?;
    req.extras.resolve(upload.refs())?;
    bounds.tally.asked(req.wants.len(), req.haves.len());
    if req.wants.is_empty() {
        return Ok(None);
    }
    upload.check_wants(&req.wants, upload::WantRule::Reachable)?;
    let boundary = shallow_reply(upload, &mut req, w)?;
    if !req.has_haves_section {
        return Ok(None); // a deepen request's first round: the shallow list was the answer
    }
    let hash = upload.refs().object_hash;
    let mut nego = Negotiation::new(hash, &req.wants, req.caps.clone());
    // Walk the haves segment by segment, as git reads them between flushes.
    let start = lines.iter().position(|l| *l == Line::Flush).map_or(lines.len(), |p| p + 1);
    for line in &lines[start..] {
        match line {
            Line::Data(b"done") => {
                nego.done(w);
                return Ok(Some((req, upload.common(), boundary)));
            }
            Line::Data(d) => nego.have_line(upload, d, w)?,
            Line::Flush => {
                return match nego.flush(upload, w)? {
                    Next::Pack => Ok(Some((req, upload.common(), boundary))),
                    // Stateless: this round is over; the client sends the next request.
                    Next::Continue => Ok(None),
                };
            }
            _ => return Err(ProtocolError::Unexpected("unexpected packet among haves".into()).into()),
        }
    }
    Err(ProtocolError::Truncated.into())
}

/// What follows a flush among the haves.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// The round is over: more haves come (in this connection, or the next HTTP request).
    Continue,
    /// `no-done` and ready: the pack follows right away.
    Pack,
}

/// git's `get_common_commits`, one line at a time, for stateless and stateful service alike.
/// The protocol's state only: which haves are common and whether the server is ready are the
/// session's answers ([`Upload`]).
pub struct Negotiation<'r> {
    hash: gix_hash::Kind,
    wants: &'r [ObjectId],
    caps: ClientCaps,
    last_common: Option<ObjectId>,
    sent_ready: bool,
    got_common: bool,
    got_other: bool,
}

impl<'r> Negotiation<'r> {
    pub fn new(hash: gix_hash::Kind, wants: &'r [ObjectId], caps: ClientCaps) -> Self {
        Negotiation { hash, wants, caps, last_common: None, sent_ready: false, got_common: false, got_other: false }
    }

    fn multi_ack(&self) -> bool {
        self.caps.multi_ack || self.caps.multi_ack_detailed
    }

    /// A `have <id>` line.
    pub fn have_line(&mut self, upload: &mut dyn Upload, line: &[u8], w: &mut pkt::Writer) -> Result<(), ServeError> {
        let hex = line
            .strip_prefix(b"have ")
            .and_then(|h| std::str::from_utf8(h).ok())
            .ok_or_else(|| ProtocolError::Unexpected("expected 'have <id>'".into()))?;
        let id = upload::parse_oid(hex, self.hash)?;
        let acked_before = upload.acked().len();
        match upload.have(id)? {
            Have::Common => {
                self.got_common = true;
                self.last_common = Some(id);
                if self.caps.multi_ack_detailed {
                    w.text(format!("ACK {id} common"));
                } else if self.caps.multi_ack {
                    w.text(format!("ACK {id} continue"));
                } else if upload.acked().len() == 1 && acked_before == 0 {
                    w.text(format!("ACK {id}"));
                }
            }
            Have::Unknown => {
                self.got_other = true;
                if self.multi_ack() && upload.ready(self.wants)? {
                    if self.caps.multi_ack_detailed {
                        self.sent_ready = true;
                        w.text(format!("ACK {id} ready"));
                    } else {
                        w.text(format!("ACK {id} continue"));
                    }
                }
            }
        }
        Ok(())
    }

    /// The flush that ends a round of haves.
    pub fn flush(&mut self, upload: &mut dyn Upload, w: &mut pkt::Writer) -> Result<Next, ServeError> {
        if self.caps.multi_ack_detailed && self.got_common && !self.got_other && upload.ready(self.wants)? {
            self.sent_ready = true;
            w.text(format!("ACK {} ready", self.last_common.expect("got common")));
        }
        if upload.acked().is_empty() || self.multi_ack() {
            w.text("NAK");
        }
        if self.caps.no_done && self.sent_ready {
            w.text(format!("ACK {}", self.last_common.expect("ready implies common")));
            return Ok(Next::Pack);
        }
        self.got_common = false;
        self.got_other = false;
        Ok(Next::Continue)
    }

    /// `done`: the last acknowledgement; the pack follows.
    pub fn done(&mut self, w: &mut pkt::Writer) {
        match self.last_common {
            Some(last) if self.multi_ack() => {
                w.text(format!("ACK {last}"));
            }
            Some(_) => {}
            None => {
                w.text("NAK");
            }
        }
    }
}

/// Serve v0 upload-pack over a connection (git://): advertisement, wants, rounds of haves each
/// answered at its flush, `done`, the pack. Everything written to `out` is flushed at the end of
/// each round; `out` should buffer (a pack leaves in large writes).
pub fn serve_stateful<R: std::io::Read, W: Write>(
    bounds: &Bounds<'_>,
    upload: &mut dyn Upload,
    version: Version,
    input: R,
    mut out: W,
) -> Result<Option<Stats>, ServeError> {
    let mut w = pkt::Writer::new();
    advertise(upload.refs(), version, false, &mut w);
    out.write_all(&w.buf)?;
    out.flush()?;
    let mut lines = pkt::stream(input);
    // One section (up to a flush, or the `done` that ends the haves) as owned lines; `None` if
    // the client hung up first. Bounded before it is held, like an HTTP body.
    let max_bytes = bounds.max_request_body;
    let section = |lines: &mut pkt::Stream<R>| -> Result<Option<Vec<Vec<u8>>>, ServeError> {
        let (section, end) = pkt::read_section(lines, max_bytes, pkt::SectionRules { delim: false, done_ends: true })?;
        match end {
            pkt::End::HungUp if section.is_empty() => Ok(None),
            pkt::End::HungUp => Err(ProtocolError::Truncated.into()),
            pkt::End::Flush | pkt::End::Done => Ok(Some(
                section
                    .into_iter()
                    .map(|line| match line {
                        pkt::Owned::Data(d) => d,
                        pkt::Owned::Delim => unreachable!("v0 sections hold no delimiter"),
                    })
                    .collect(),
            )),
        }
    };
    let outcome = (|| -> Result<Option<Negotiated>, ServeError> {
        let Some(want_lines) = section(&mut lines)? else {
            return Ok(None); // an `ls-remote`: the advertisement was all
        };
        if want_lines.is_empty() {
            return Ok(None);
        }
        let wants: Vec<Line<'_>> = want_lines.iter().map(|l| Line::Data(l)).collect();
        let mut req = parse_wants(&wants, &upload::Grammar::of(upload.refs()))?;
        req.extras.resolve(upload.refs())?;
        bounds.tally.asked(req.wants.len(), 0);
        upload.check_wants(&req.wants, upload::WantRule::Advertised)?;
        let mut w = pkt::Writer::new();
        let boundary = shallow_reply(upload, &mut req, &mut w)?;
        if !w.buf.is_empty() {
            out.write_all(&w.buf)?;
            out.flush()?;
        }
        let hash = upload.refs().object_hash;
        let mut nego = Negotiation::new(hash, &req.wants, req.caps.clone());
        let mut haves = 0usize;
        loop {
            let Some(round) = section(&mut lines)? else {
                return Err(ProtocolError::Truncated.into());
            };
            let mut w = pkt::Writer::new();
            let mut finished = false;
            for line in &round {
                if line == b"done" {
                    nego.done(&mut w);
                    finished = true;
                    break;
                }
                haves += 1;
                bounds.tally.asked(0, 1);
                if haves > bounds.max_haves {
                    return Err(ProtocolError::TooMany { what: "have", limit: bounds.max_haves }.into());
                }
                nego.have_line(upload, line, &mut w)?;
            }
            if !finished && nego.flush(upload, &mut w)? == Next::Pack {
                finished = true;
            }
            out.write_all(&w.buf)?;
            out.flush()?;
            if finished {
                return Ok(Some((req, upload.common(), boundary)));
            }
        }
    })();
    let (req, common, boundary) = match outcome {
        Ok(Some(done)) => done,
        Ok(None) => return Ok(None),
        Err(err) => return upload::reply_err(&mut out, err),
    };
    let stats = upload::send_pack(upload, &req.pack_request(&common, boundary.as_ref()), req.framing(), &mut out)?;
    out.flush()?;
    Ok(Some(stats))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::pkt::Line;

    fn lines<'a>(text: &[&'a str]) -> Vec<Line<'a>> {
        text.iter().map(|l| if l.is_empty() { Line::Flush } else { Line::Data(l.as_bytes()) }).collect()
    }

    const MAIN: &str = "1111111111111111111111111111111111111111";

    #[test]
    fn wants_capabilities_haves_and_done_are_read_from_a_stateless_request() {
        let refs = crate::repo::fixture_refs();
        let want = &format!("want {MAIN} multi_ack_detailed side-band-64k thin-pack ofs-delta agent=x");
        let have = &format!("have {}", "3".repeat(40));
        let req = parse(&lines(&[want, "", have, "done"]), &upload::Grammar::of(&refs), 10).unwrap();
        assert_eq!(req.wants.len(), 1);
        assert!(req.caps.multi_ack_detailed && req.caps.side_band_64k && req.caps.thin_pack && req.caps.ofs_delta);
        assert!(!req.caps.no_done && !req.caps.include_tag);
        assert_eq!(req.haves.len(), 1);
        assert!(req.done && req.has_haves_section);
        assert_eq!(req.caps.framing(), Framing::SideBand64k);
    }

    #[test]
    fn a_request_without_its_flush_or_with_capabilities_on_a_later_want_is_refused() {
        let refs = crate::repo::fixture_refs();
        let want = &format!("want {MAIN}");
        assert!(matches!(parse(&lines(&[want]), &upload::Grammar::of(&refs), 10), Err(ProtocolError::Truncated)));
        let second = &format!("want {MAIN} ofs-delta");
        assert!(matches!(
            parse(&lines(&[want, second, ""]), &upload::Grammar::of(&refs), 10),
            Err(ProtocolError::Unexpected(_))
        ));
        let unknown = &format!("want {MAIN} frobnicate");
        assert!(
            matches!(parse(&lines(&[unknown, ""]), &upload::Grammar::of(&refs), 10), Err(ProtocolError::UnknownCapability(c)) if c == "frobnicate")
        );
        // A have section that neither ends in done nor in a flush was cut off.
        let have = &format!("have {MAIN}");
        assert!(matches!(
            parse(&lines(&[want, "", have]), &upload::Grammar::of(&refs), 10),
            Err(ProtocolError::Truncated)
        ));
    }

    #[test]
    fn haves_past_the_limit_and_filters_without_the_capability_are_refused() {
        let refs = crate::repo::fixture_refs();
        let want = &format!("want {MAIN}");
        let have = &format!("have {MAIN}");
        assert!(matches!(
            parse(&lines(&[want, "", have, have, have, ""]), &upload::Grammar::of(&refs), 2),
            Err(ProtocolError::TooMany { what: "have", limit: 2 })
        ));
        assert!(matches!(
            parse(&lines(&[want, "filter blob:none", ""]), &upload::Grammar::of(&refs), 10),
            Err(ProtocolError::FilterNotAllowed)
        ));
        let deepen = parse(&lines(&[want, "deepen 3", ""]), &upload::Grammar::of(&refs), 10).unwrap();
        assert_eq!(deepen.extras.deepen.depth, Some(3));
        assert!(!deepen.has_haves_section, "a deepen request's first round has no haves");
    }

    #[test]
    fn the_advertisement_lists_head_refs_and_peeled_tags_with_capabilities_on_the_first_line() {
        let refs = crate::repo::fixture_refs();
        let mut w = pkt::Writer::new();
        advertise(&refs, Version::V0, true, &mut w);
        let lines = pkt::read_all(&w.buf).unwrap();
        let text: Vec<String> =
            lines.iter().filter_map(|l| l.as_text()).map(|t| t.split('\0').next().unwrap().to_owned()).collect();
        assert_eq!(
            text,
            vec![
                format!("{MAIN} HEAD"),
                format!("{MAIN} refs/heads/main"),
                format!("{} refs/tags/v1", "2".repeat(40)),
                format!("{} refs/tags/v1^{{}}", "3".repeat(40))
            ]
        );
        let first = lines[0].as_text().unwrap();
        assert!(first.contains("\0multi_ack thin-pack side-band side-band-64k ofs-delta shallow"), "{first}");
        assert!(first.contains(" no-done symref=HEAD:refs/heads/main object-format=sha1 agent="), "{first}");
        assert_eq!(lines.last(), Some(&Line::Flush));
    }
}
