//! pkt-lines over gix-packetline: reading a whole request body into lines (with the rule each
//! malformed input broke), and writing lines, ERR lines and side-band packets into a buffer so
//! that a header and its payload always leave together.

use gix_packetline::{PacketLineRef, decode};

use crate::error::ProtocolError;

/// One packet of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line<'a> {
    /// A data line with its trailing newline removed.
    Data(&'a [u8]),
    Flush,
    Delim,
    ResponseEnd,
}

impl<'a> Line<'a> {
    pub fn as_text(&self) -> Option<&'a str> {
        match self {
            Line::Data(d) => std::str::from_utf8(d).ok(),
            _ => None,
        }
    }
}

/// Split `body` into packets. Fails on bad hex, a length over 65520, a too-short length, or a
/// packet cut off by the end of the body.
pub fn read_all(body: &[u8]) -> Result<Vec<Line<'_>>, ProtocolError> {
    let mut lines = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        match decode::streaming(rest)? {
            decode::Stream::Complete { line, bytes_consumed } => {
                lines.push(match line {
                    PacketLineRef::Data(d) => Line::Data(d.strip_suffix(b"\n").unwrap_or(d)),
                    PacketLineRef::Flush => Line::Flush,
                    PacketLineRef::Delimiter => Line::Delim,
                    PacketLineRef::ResponseEnd => Line::ResponseEnd,
                });
                rest = &rest[bytes_consumed..];
            }
            decode::Stream::Incomplete { .. } => return Err(ProtocolError::Truncated),
        }
    }
    Ok(lines)
}

/// The pkt-line reader of a connection (git://), stopping at each flush.
pub type Stream<R> = gix_packetline::blocking_io::StreamingPeekableIter<R>;

/// A connection's pkt-line reader, stopping at each flush.
pub fn stream<R: std::io::Read>(input: R) -> Stream<R> {
    Stream::new(input, &[PacketLineRef::Flush], false)
}

/// One packet of a section read off a connection, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owned {
    /// A data line with its trailing newline removed.
    Data(Vec<u8>),
    Delim,
}

impl Owned {
    pub fn as_line(&self) -> Line<'_> {
        match self {
            Owned::Data(d) => Line::Data(d),
            Owned::Delim => Line::Delim,
        }
    }
}

/// How a section read off a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Flush,
    /// A `done` line (v0 haves end there, with no flush after it); it is the section's last line.
    Done,
    /// The client hung up (or the read failed) before a flush.
    HungUp,
}

/// What a section may hold besides data lines, and where it may end.
#[derive(Debug, Clone, Copy, Default)]
pub struct SectionRules {
    /// v2 commands separate capabilities from arguments with a delimiter.
    pub delim: bool,
    /// v0 ends its last round of haves with `done` instead of a flush.
    pub done_ends: bool,
}

/// Read one section off a connection: its packets up to a flush (not included), bounded before
/// they are held like an HTTP body (`max_bytes`, length headers included). A malformed packet,
/// a packet the rules do not allow, or too many bytes are errors; a client hanging up is an
/// [`End::HungUp`] with what arrived before.
pub fn read_section<R: std::io::Read>(
    lines: &mut Stream<R>,
    max_bytes: usize,
    rules: SectionRules,
) -> Result<(Vec<Owned>, End), ProtocolError> {
    let mut out = Vec::new();
    let mut bytes = 0usize;
    lines.reset();
    while let Some(line) = lines.read_line() {
        match line {
            Ok(Ok(PacketLineRef::Data(d))) => {
                let d = d.strip_suffix(b"\n").unwrap_or(d);
                bytes += d.len() + 4;
                if bytes > max_bytes {
                    return Err(ProtocolError::TooLarge { limit: max_bytes });
                }
                let done = rules.done_ends && d == b"done";
                out.push(Owned::Data(d.to_vec()));
                if done {
                    return Ok((out, End::Done));
                }
            }
            Ok(Ok(PacketLineRef::Delimiter)) if rules.delim => out.push(Owned::Delim),
            Ok(Ok(other)) => return Err(ProtocolError::Unexpected(format!("{other:?}"))),
            Ok(Err(err)) => return Err(ProtocolError::PktLine(err)),
            Err(_) => return Ok((out, End::HungUp)),
        }
    }
    match lines.stopped_at() {
        Some(_) => Ok((out, End::Flush)),
        None => Ok((out, End::HungUp)),
    }
}

/// The largest payload of one pkt-line (65520 minus the 4 length bytes).
pub const MAX_DATA: usize = 65516;
/// The largest side-band payload: a pkt-line minus its band byte.
pub const MAX_SIDEBAND_64K: usize = MAX_DATA - 1;
/// `side-band` (without 64k) packets are at most 1000 bytes.
pub const MAX_SIDEBAND: usize = 1000 - 4 - 1;

/// The longest `ERR` message sent: it often quotes the client's line, which may be 64 KiB.
pub const MAX_ERR: usize = 1000;

/// Append pkt-lines to a buffer.
#[derive(Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Self {
        Writer::default()
    }

    /// A data line, exactly `data`.
    pub fn data(&mut self, data: &[u8]) -> &mut Self {
        gix_packetline::blocking_io::encode::data_to_write(data, &mut self.buf)
            .expect("writing to a Vec with a valid line");
        self
    }

    /// A text line: `text` and a newline.
    pub fn text(&mut self, text: impl AsRef<[u8]>) -> &mut Self {
        gix_packetline::blocking_io::encode::text_to_write(text.as_ref(), &mut self.buf)
            .expect("writing to a Vec with a valid line");
        self
    }

    pub fn flush(&mut self) -> &mut Self {
        gix_packetline::blocking_io::encode::flush_to_write(&mut self.buf).expect("writing to a Vec");
        self
    }

    pub fn delim(&mut self) -> &mut Self {
        gix_packetline::blocking_io::encode::delim_to_write(&mut self.buf).expect("writing to a Vec");
        self
    }

    /// `ERR <message>`: the client stops with "remote error: <message>".
    pub fn err(&mut self, message: &str) -> &mut Self {
        let message = crate::error::for_client(message, MAX_ERR);
        let message = clip(&message);
        gix_packetline::blocking_io::encode::error_to_write(message.as_bytes(), &mut self.buf)
            .expect("writing to a Vec");
        self
    }

    /// One side-band packet on `band` (1 data, 2 progress, 3 error).
    pub fn band(&mut self, band: gix_packetline::Channel, data: &[u8]) -> &mut Self {
        gix_packetline::blocking_io::encode::band_to_write(band, data, &mut self.buf)
            .expect("writing to a Vec with a valid packet");
        self
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }
}

/// A message clipped to what one packet carries.
fn clip(message: &str) -> &str {
    let mut end = message.len().min(MAX_DATA - 8);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_splits_into_its_packets() {
        let lines = read_all(b"0009done\n000000010002").unwrap();
        assert_eq!(lines, vec![Line::Data(b"done"), Line::Flush, Line::Delim, Line::ResponseEnd]);
    }

    #[test]
    fn malformed_packets_are_refused_with_the_rule_they_broke() {
        assert!(matches!(read_all(b"00zzdone"), Err(ProtocolError::PktLine(_))));
        assert!(matches!(read_all(b"fff1"), Err(ProtocolError::PktLine(_))), "over 65520");
        assert!(matches!(read_all(b"0003"), Err(ProtocolError::PktLine(_))), "length 3");
        assert!(matches!(read_all(b"0009do"), Err(ProtocolError::Truncated)));
        assert!(matches!(read_all(b"00"), Err(ProtocolError::Truncated)));
    }

    #[test]
    fn a_connection_is_read_section_by_section() {
        let input: &[u8] = b"0009want\n00000001000bhave 1\n00000009done\n0008more";
        let mut lines = stream(input);
        let v0 = SectionRules { delim: false, done_ends: true };
        let v2 = SectionRules { delim: true, done_ends: false };
        assert_eq!(read_section(&mut lines, 1000, v0).unwrap(), (vec![Owned::Data(b"want".to_vec())], End::Flush));
        assert_eq!(
            read_section(&mut lines, 1000, v2).unwrap(),
            (vec![Owned::Delim, Owned::Data(b"have 1".to_vec())], End::Flush)
        );
        assert_eq!(read_section(&mut lines, 1000, v0).unwrap(), (vec![Owned::Data(b"done".to_vec())], End::Done));
        assert_eq!(read_section(&mut lines, 1000, v0).unwrap(), (vec![Owned::Data(b"more".to_vec())], End::HungUp));
        let v2_done = read_section(&mut stream(&b"0009done\n0009more\n0000"[..]), 1000, v2).unwrap();
        assert_eq!(
            v2_done,
            (vec![Owned::Data(b"done".to_vec()), Owned::Data(b"more".to_vec())], End::Flush),
            "done ends only v0's haves"
        );
    }

    #[test]
    fn a_section_is_bounded_and_keeps_to_its_rules() {
        assert!(matches!(
            read_section(&mut stream(&b"0009want\n0009want\n0000"[..]), 12, SectionRules::default()),
            Err(ProtocolError::TooLarge { limit: 12 })
        ));
        assert!(matches!(
            read_section(&mut stream(&b"0001"[..]), 100, SectionRules::default()),
            Err(ProtocolError::Unexpected(_))
        ));
        assert!(matches!(
            read_section(&mut stream(&b"0002"[..]), 100, SectionRules { delim: true, done_ends: false }),
            Err(ProtocolError::Unexpected(_))
        ));
        assert!(matches!(
            read_section(&mut stream(&b"00zz"[..]), 100, SectionRules::default()),
            Err(ProtocolError::PktLine(_))
        ));
    }

    #[test]
    fn writer_frames_lines_and_bands() {
        let mut w = Writer::new();
        w.text("NAK").band(gix_packetline::Channel::Progress, b"hi").err("bad").flush();
        assert_eq!(w.into_bytes(), b"0008NAK\n0007\x02hi000bERR bad0000".to_vec());
    }
}
