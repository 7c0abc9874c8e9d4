//! receive-pack (push), protocol v0/v1 as git speaks it for pushes: the ref advertisement with
//! receive-pack's capabilities, the client's commands (`<old> <new> <ref>`, capabilities on the
//! first), push options, the pack that follows, and the report-status reply (in side-band when
//! asked). What is done with the objects and refs belongs to [`crate::push`], through the
//! [`Receiver`] the service gives.

use std::io::{BufRead, Write};

use gix_packetline::PacketLineRef;

use super::hash_name;
use super::pkt;
use super::sideband::{Bands, Framing};
use super::upload::parse_oid;
use super::{Bounds, Version};
use crate::error::ProtocolError;
use crate::push::{self, Outcome};
use crate::repo::RefSnapshot;
use crate::serve_error::ServeError;

/// What the receive-pack codec asks of the repository, answered by the service
/// (`service::receive`): what the push is advertised and in which object format it comes, and
/// the push applied ([`crate::push::apply`]).
pub trait Receiver {
    /// The refs a push is advertised ([`RefSnapshot::load_for_push`]).
    fn advertised(&self) -> Result<RefSnapshot, ServeError>;
    fn object_hash(&self) -> gix_hash::Kind;
    /// Apply the commands with the pack `input` carries; `messages` reach the client (band 2).
    fn apply(
        &mut self,
        req: &push::Request,
        input: &mut dyn BufRead,
        messages: &mut dyn push::Messages,
    ) -> Result<Outcome, ServeError>;
}

/// receive-pack's capabilities, in git's order.
const CAPABILITIES: &[&str] = &[
    "report-status",
    "report-status-v2",
    "delete-refs",
    "side-band-64k",
    "quiet",
    "atomic",
    "ofs-delta",
    "push-options",
];

/// Most commands one push may carry, and most push options.
const MAX_COMMANDS: usize = 100_000;
const MAX_OPTIONS: usize = 100;

/// The advertisement (without HTTP's `# service=` preamble): refs only (no HEAD), capabilities
/// on the first line, ending in a flush.
pub fn advertise(refs: &RefSnapshot, version: Version, out: &mut pkt::Writer) {
    if version == Version::V1 {
        out.text("version 1");
    }
    let mut caps: Vec<String> = CAPABILITIES.iter().map(|c| c.to_string()).collect();
    caps.push(format!("object-format={}", hash_name(refs.object_hash)));
    caps.push(format!("agent={}", crate::agent()));
    let caps = caps.join(" ");
    if refs.refs.is_empty() {
        out.text(format!("{} capabilities^{{}}\0{caps}", refs.object_hash.null()));
    }
    for (i, r) in refs.refs.iter().enumerate() {
        if i == 0 {
            out.text(format!("{} {}\0{caps}", r.id, r.name));
        } else {
            out.text(format!("{} {}", r.id, r.name));
        }
    }
    out.flush();
}

/// What the client asked for on its first command line.
#[derive(Debug, Default, Clone)]
pub struct PushCaps {
    pub report_status: bool,
    pub report_status_v2: bool,
    pub side_band_64k: bool,
    pub quiet: bool,
    pub atomic: bool,
    pub push_options: bool,
}

/// A push request up to its pack: what to do (for [`crate::push`]) and how to answer.
#[derive(Debug, Default)]
pub struct Request {
    pub push: push::Request,
    pub caps: PushCaps,
}

/// Read the commands (and push options) from `input`, leaving it at the pack. `None` when the
/// client sent no command (nothing to push: it hangs up after the advertisement).
///
/// At most `max_bytes` of commands and options are read (bounded before they are held); a body
/// that ends inside a line, or that cannot be read (not gzip, a broken chunk), is an error the
/// client is told, not an empty push.
pub fn read_request<R: std::io::Read>(
    input: R,
    hash: gix_hash::Kind,
    max_bytes: usize,
) -> Result<(Option<Request>, R), ProtocolError> {
    let counted = std::rc::Rc::new(std::cell::Cell::new(0u64));
    let mut lines = gix_packetline::blocking_io::StreamingPeekableIter::new(
        Counted { inner: input, bytes: counted.clone() },
        &[PacketLineRef::Flush],
        false,
    );
    let mut held = 0usize;
    let mut req = Request::default();
    let mut first = true;
    let mut caps_seen = false;
    while let Some(line) = lines.read_line() {
        let data = match line {
            Ok(Ok(PacketLineRef::Data(d))) => d,
            Ok(Ok(other)) => return Err(ProtocolError::Unexpected(format!("{other:?}"))),
            Ok(Err(err)) => return Err(ProtocolError::PktLine(err)),
            // Hung up before sending a byte: nothing to push.
            Err(err) if first && err.kind() == std::io::ErrorKind::UnexpectedEof && counted.get() == 0 => {
                return Ok((None, lines.into_inner().inner));
            }
            Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => return Err(ProtocolError::Truncated),
            Err(err) => return Err(ProtocolError::Read(err)),
        };
        held += data.len();
        if held > max_bytes {
            return Err(ProtocolError::TooLarge { limit: max_bytes });
        }
        let data = data.strip_suffix(b"\n").unwrap_or(data);
        // The capabilities ride on the first command — after a shallow client's `shallow`
        // lines, which come first (git reads them off whichever line has a NUL).
        let (command, caps) = match data.iter().position(|b| *b == 0) {
            Some(nul) if !caps_seen => (&data[..nul], Some(&data[nul + 1..])),
            _ => (data, None),
        };
        first = false;
        caps_seen |= caps.is_some();
        let text = std::str::from_utf8(command).map_err(|_| ProtocolError::Unexpected("non-UTF-8 command".into()))?;
        if let Some(caps) = caps {
            let caps =
                std::str::from_utf8(caps).map_err(|_| ProtocolError::Unexpected("non-UTF-8 capabilities".into()))?;
            req.caps = parse_caps(caps, hash)?;
        }
        if let Some(id) = text.strip_prefix("shallow ") {
            // A shallow client's boundary: connectivity is checked against what we have, but
            // the line must be one (git: "expected shallow sha").
            parse_oid(id, hash)?;
            continue;
        }
        let mut words = text.splitn(3, ' ');
        let (Some(old), Some(new), Some(name)) = (words.next(), words.next(), words.next()) else {
            return Err(ProtocolError::Unexpected(crate::error::quoted(text, 200)));
        };
        if req.push.updates.len() == MAX_COMMANDS {
            return Err(ProtocolError::TooMany { what: "command", limit: MAX_COMMANDS });
        }
        req.push.updates.push(push::RefUpdate {
            old: parse_oid(old, hash)?,
            new: parse_oid(new, hash)?,
            name: name.to_owned(),
        });
    }
    if lines.stopped_at().is_none() {
        return Err(ProtocolError::Truncated);
    }
    req.push.atomic = req.caps.atomic;
    if req.push.updates.is_empty() {
        return Ok((None, lines.into_inner().inner));
    }
    if req.caps.push_options {
        lines.reset();
        while let Some(line) = lines.read_line() {
            match line {
                Ok(Ok(PacketLineRef::Data(d))) => {
                    held += d.len();
                    if held > max_bytes {
                        return Err(ProtocolError::TooLarge { limit: max_bytes });
                    }
                    if req.push.options.len() == MAX_OPTIONS {
                        return Err(ProtocolError::TooMany { what: "push option", limit: MAX_OPTIONS });
                    }
                    let d = d.strip_suffix(b"\n").unwrap_or(d);
                    req.push.options.push(String::from_utf8_lossy(d).into_owned());
                }
                Ok(Ok(other)) => return Err(ProtocolError::Unexpected(format!("{other:?}"))),
                Ok(Err(err)) => return Err(ProtocolError::PktLine(err)),
                Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => return Err(ProtocolError::Truncated),
                Err(err) => return Err(ProtocolError::Read(err)),
            }
        }
        if lines.stopped_at().is_none() {
            return Err(ProtocolError::Truncated);
        }
    }
    Ok((Some(req), lines.into_inner().inner))
}

/// A reader that counts what it has read (to tell a hang-up from a body cut short).
struct Counted<R> {
    inner: R,
    bytes: std::rc::Rc<std::cell::Cell<u64>>,
}

impl<R: std::io::Read> std::io::Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes.set(self.bytes.get() + n as u64);
        Ok(n)
    }
}

fn parse_caps(caps: &str, hash: gix_hash::Kind) -> Result<PushCaps, ProtocolError> {
    let mut out = PushCaps::default();
    for cap in caps.split(' ').filter(|c| !c.is_empty()) {
        match cap {
            "report-status" => out.report_status = true,
            "report-status-v2" => out.report_status_v2 = true,
            "side-band-64k" => out.side_band_64k = true,
            "quiet" => out.quiet = true,
            "atomic" => out.atomic = true,
            "push-options" => out.push_options = true,
            "ofs-delta" | "delete-refs" => {}
            c if c.starts_with("agent=") || c.starts_with("session-id=") => {}
            c if c.starts_with("object-format=") => {
                super::upload::check_object_format(&c["object-format=".len()..], hash)?
            }
            other => return Err(ProtocolError::UnknownCapability(crate::error::quoted(other, 64))),
        }
    }
    Ok(out)
}

/// Serve one push: read the request from `input` (commands, options, pack), apply it, write the
/// report to `out`. `None` when the client pushed nothing.
pub fn receive_pack<R: BufRead, W: Write>(
    bounds: &Bounds<'_>,
    receiver: &mut dyn Receiver,
    input: R,
    mut out: W,
) -> Result<Option<Outcome>, ServeError> {
    let hash = receiver.object_hash();
    let (req, mut rest) = read_or_say_why(input, hash, bounds.max_request_body, &mut out)?;
    let Some(req) = req else { return Ok(None) };
    let framing = if req.caps.side_band_64k { Framing::SideBand64k } else { Framing::Raw };
    let mut bands = Bands::new(&mut out, framing, !req.caps.quiet);
    let outcome = receiver.apply(&req.push, &mut rest, &mut bands)?;
    let unpack = outcome.unpack_error.as_ref().map(ToString::to_string);
    let results = outcome.results.iter().map(|r| r.as_ref().err().map(ToString::to_string));
    report(&req, unpack.as_deref(), results, bands)?;
    Ok(Some(outcome))
}

/// Answer a push that cannot be served at all with every command refused for `reason` (git shows
/// `! [remote rejected] <ref> (<reason>)`): the request is read and its pack drained (a client
/// sends its whole body before it reads), nothing is stored.
pub fn refuse<R: BufRead, W: Write>(
    input: R,
    hash: gix_hash::Kind,
    max_request_body: usize,
    reason: &str,
    mut out: W,
) -> Result<(), ServeError> {
    let (req, mut rest) = read_or_say_why(input, hash, max_request_body, &mut out)?;
    let Some(req) = req else { return Ok(()) };
    std::io::copy(&mut rest, &mut std::io::sink())?;
    let framing = if req.caps.side_band_64k { Framing::SideBand64k } else { Framing::Raw };
    let bands = Bands::new(&mut out, framing, !req.caps.quiet);
    report(&req, Some(reason), req.push.updates.iter().map(|_| Some(reason.to_owned())), bands)
}

/// [`read_request`], or, when the request cannot be read, an `ERR` line saying why (no report is
/// possible before the commands are known) and the error.
fn read_or_say_why<R: BufRead, W: Write>(
    input: R,
    hash: gix_hash::Kind,
    max_request_body: usize,
    out: &mut W,
) -> Result<(Option<Request>, R), ServeError> {
    match read_request(input, hash, max_request_body) {
        Ok(read) => Ok(read),
        Err(err) => {
            let mut w = pkt::Writer::new();
            w.err(&err.to_string());
            out.write_all(&w.buf)?;
            Err(err.into())
        }
    }
}

/// The report of a push (when the client asked for one): `unpack ok` or the reason it failed,
/// then `ok <ref>` or `ng <ref> <reason>` per command; then the end of the bands.
fn report<W: Write>(
    req: &Request,
    unpack: Option<&str>,
    results: impl Iterator<Item = Option<String>>,
    mut bands: Bands<W>,
) -> Result<(), ServeError> {
    if req.caps.report_status || req.caps.report_status_v2 {
        let mut w = pkt::Writer::new();
        match unpack {
            None => w.text("unpack ok"),
            Some(err) => w.text(format!("unpack {}", one_line(err))),
        };
        for (command, result) in req.push.updates.iter().zip(results) {
            match result {
                None => w.text(format!("ok {}", command.name)),
                Some(reason) => w.text(format!("ng {} {}", command.name, one_line(&reason))),
            };
        }
        w.flush();
        bands.write_all(&w.buf)?;
    }
    let framing = bands.framing();
    let mut out = bands.finish()?;
    if framing != Framing::Raw {
        let mut w = pkt::Writer::new();
        w.flush();
        out.write_all(&w.buf)?;
    }
    out.flush()?;
    Ok(())
}

fn one_line(s: &str) -> String {
    crate::error::quoted(&s.replace('\n', " "), 900)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(line: &str) -> Vec<u8> {
        format!("{:04x}{line}", line.len() + 4).into_bytes()
    }

    const OLD: &str = "1111111111111111111111111111111111111111";
    const NEW: &str = "4444444444444444444444444444444444444444";

    #[test]
    fn commands_capabilities_and_push_options_are_read_up_to_the_pack() {
        let mut body =
            pkt(&format!("{OLD} {NEW} refs/heads/main\0report-status side-band-64k atomic push-options agent=x\n"));
        body.extend(pkt(&format!("{} {NEW} refs/heads/new\n", "0".repeat(40))));
        body.extend(b"0000");
        body.extend(pkt("ci.skip\n"));
        body.extend(b"0000PACK");
        let (req, mut rest) = read_request(&body[..], gix_hash::Kind::Sha1, 1 << 20).unwrap();
        let req = req.unwrap();
        assert_eq!(req.push.updates.len(), 2);
        assert_eq!(req.push.updates[0].name, "refs/heads/main");
        assert!(req.push.updates[1].old.is_null());
        assert!(req.caps.report_status && req.caps.side_band_64k && req.push.atomic);
        assert_eq!(req.push.options, vec!["ci.skip".to_owned()]);
        let mut pack = Vec::new();
        std::io::Read::read_to_end(&mut rest, &mut pack).unwrap();
        assert_eq!(pack, b"PACK");
    }

    #[test]
    fn a_shallow_clients_capabilities_follow_its_shallow_lines() {
        let mut body = pkt(&format!("shallow {}\n", "5".repeat(40)));
        body.extend(pkt(&format!("{OLD} {NEW} refs/heads/main\0report-status\n")));
        body.extend(b"0000");
        let (req, _) = read_request(&body[..], gix_hash::Kind::Sha1, 1 << 20).unwrap();
        let req = req.unwrap();
        assert_eq!(req.push.updates[0].name, "refs/heads/main", "the capabilities are not part of the ref name");
        assert!(req.caps.report_status);
    }

    #[test]
    fn a_hang_up_is_no_push_but_a_cut_or_oversized_request_is_an_error() {
        let (req, _) = read_request(&b""[..], gix_hash::Kind::Sha1, 1 << 20).unwrap();
        assert!(req.is_none(), "nothing sent: nothing to push");
        let body = pkt(&format!("{OLD} {NEW} refs/heads/main\0report-status\n"));
        assert!(matches!(read_request(&body[..20], gix_hash::Kind::Sha1, 1 << 20), Err(ProtocolError::Truncated)));
        assert!(
            matches!(read_request(&body[..], gix_hash::Kind::Sha1, 1 << 20), Err(ProtocolError::Truncated)),
            "no flush"
        );
        assert!(matches!(
            read_request(&body[..], gix_hash::Kind::Sha1, 10),
            Err(ProtocolError::TooLarge { limit: 10 })
        ));
    }
}
