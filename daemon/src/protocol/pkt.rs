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
        match decode::streaming(rest).map_err(|e| ProtocolError::PktLine(e.to_string()))? {
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
        gix_packetline::blocking_io::encode::data_to_write(data, &mut self.buf).expect("writing to a Vec with a valid line");
        self
    }

    /// A text line: `text` and a newline.
    pub fn text(&mut self, text: impl AsRef<[u8]>) -> &mut Self {
        gix_packetline::blocking_io::encode::text_to_write(text.as_ref(), &mut self.buf).expect("writing to a Vec with a valid line");
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
        gix_packetline::blocking_io::encode::error_to_write(message.as_bytes(), &mut self.buf).expect("writing to a Vec");
        self
    }

    /// One side-band packet on `band` (1 data, 2 progress, 3 error).
    pub fn band(&mut self, band: gix_packetline::Channel, data: &[u8]) -> &mut Self {
        gix_packetline::blocking_io::encode::band_to_write(band, data, &mut self.buf).expect("writing to a Vec with a valid packet");
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
    fn writer_frames_lines_and_bands() {
        let mut w = Writer::new();
        w.text("NAK").band(gix_packetline::Channel::Progress, b"hi").err("bad").flush();
        assert_eq!(w.into_bytes(), b"0008NAK\n0007\x02hi000bERR bad0000".to_vec());
    }
}
