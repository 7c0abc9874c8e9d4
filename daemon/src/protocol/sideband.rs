//! Side-band framing (`side-band`, `side-band-64k`, v2's packfile section): pack bytes,
//! progress and errors multiplexed onto one stream, each packet leaving in one write with its
//! header. Beside the pkt-line codec, as gix-packetline keeps it; the pack writer and push know
//! nothing of it (the pack writer writes to a [`crate::pack::Sink`], bytes and progress lines,
//! and push says its messages through [`crate::push::Messages`]).

use std::io::{self, IoSlice, Write};

use gix_packetline::Channel;

use super::pkt;
use crate::pack_ranges::Range;

/// How the pack travels inside the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `side-band-64k` (and every v2 packfile section): packets of up to 65515 payload bytes.
    SideBand64k,
    /// `side-band`: packets of up to 995 payload bytes.
    SideBand,
    /// Neither: the raw pack, and no progress.
    Raw,
}

/// Pack bytes, progress and errors multiplexed onto `out`. Pack data is gathered into full
/// packets: one write per packet, header and payload together. A run of a pack file's bytes
/// ([`Range::kept`]) is not copied into the packet: it goes out as the same slice, after the
/// header and whatever was gathered before it, in one vectored write (so the transfer buffers
/// keep it as a range of the file).
pub struct Bands<W: Write> {
    out: W,
    framing: Framing,
    progress: bool,
    max_payload: usize,
    /// The packet being gathered: its copied bytes, and the ranges between them (each with
    /// where in `pending` it goes).
    pending: Vec<u8>,
    ranges: Vec<(usize, Range)>,
    /// Payload bytes of the packet being gathered, copied and ranges.
    filled: usize,
}

impl<W: Write> Bands<W> {
    /// How the bands are framed.
    pub fn framing(&self) -> Framing {
        self.framing
    }

    pub fn new(out: W, framing: Framing, progress: bool) -> Self {
        let max_payload = match framing {
            Framing::SideBand64k => pkt::MAX_SIDEBAND_64K,
            Framing::SideBand => pkt::MAX_SIDEBAND,
            Framing::Raw => 64 * 1024,
        };
        Bands {
            out,
            framing,
            progress: progress && framing != Framing::Raw,
            max_payload,
            pending: Vec::with_capacity(max_payload),
            ranges: Vec::new(),
            filled: 0,
        }
    }

    fn emit(&mut self, band: Channel, data: &[u8]) -> io::Result<()> {
        match self.framing {
            Framing::Raw => self.out.write_all(data),
            _ => {
                let mut w = pkt::Writer { buf: Vec::with_capacity(data.len() + 5) };
                w.band(band, data);
                self.out.write_all(&w.buf)
            }
        }
    }

    fn emit_pending(&mut self) -> io::Result<()> {
        if self.filled == 0 {
            return Ok(());
        }
        if self.ranges.is_empty() {
            let data = std::mem::replace(&mut self.pending, Vec::with_capacity(self.max_payload));
            self.filled = 0;
            return self.emit(Channel::Data, &data);
        }
        let mut head = Vec::with_capacity(5);
        if self.framing != Framing::Raw {
            head.extend_from_slice(format!("{:04x}", self.filled + 5).as_bytes());
            head.push(Channel::Data as u8);
        }
        let mut bufs = vec![IoSlice::new(&head)];
        let mut copied = 0;
        for (at, range) in &self.ranges {
            bufs.push(IoSlice::new(&self.pending[copied..*at]));
            bufs.push(IoSlice::new(range.as_ref()));
            copied = *at;
        }
        bufs.push(IoSlice::new(&self.pending[copied..]));
        crate::pack_ranges::write_all_vectored(&mut self.out, &mut bufs)?;
        self.pending.clear();
        self.ranges.clear();
        self.filled = 0;
        Ok(())
    }

    /// A progress message (band 2), unless the client asked for none.
    pub fn progress(&mut self, message: &str) -> io::Result<()> {
        if self.progress {
            self.emit_pending()?;
            self.emit(Channel::Progress, message.as_bytes())?;
        }
        Ok(())
    }

    /// Output of the server's side (hooks) for the client to show (band 2, `remote: …`), quiet
    /// or not; raw framing cannot carry it.
    pub fn remote_message(&mut self, message: &[u8]) -> io::Result<()> {
        if self.framing == Framing::Raw || message.is_empty() {
            return Ok(());
        }
        self.emit_pending()?;
        for chunk in message.chunks(self.max_payload) {
            self.emit(Channel::Progress, chunk)?;
        }
        Ok(())
    }

    /// A fatal error for the client (band 3; raw framing cannot carry one).
    pub fn error(&mut self, message: &str) -> io::Result<()> {
        self.emit_pending()?;
        if self.framing != Framing::Raw {
            let message = crate::error::for_client(message, pkt::MAX_SIDEBAND - 8);
            self.emit(Channel::Error, format!("error: {message}\n").as_bytes())?;
        }
        Ok(())
    }

    /// Emit what is pending and return the inner writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.emit_pending()?;
        Ok(self.out)
    }
}

/// The pack writer's progress goes out on band 2 like every other (nothing if the client asked
/// for none).
impl<W: Write> crate::pack::Sink for Bands<W> {
    fn progress(&mut self, line: &str) -> io::Result<()> {
        Bands::progress(self, line)
    }
}

impl<W: Write> Write for Bands<W> {
    fn write(&mut self, mut data: &[u8]) -> io::Result<usize> {
        let written = data.len();
        let range = Range::kept(data);
        let mut at = 0;
        while !data.is_empty() {
            let take = (self.max_payload - self.filled).min(data.len());
            match &range {
                Some(range) if take >= crate::pack_ranges::KEPT => {
                    self.ranges.push((self.pending.len(), range.sub(at, take)))
                }
                _ => self.pending.extend_from_slice(&data[..take]),
            }
            self.filled += take;
            (data, at) = (&data[take..], at + take);
            if self.filled == self.max_payload {
                self.emit_pending()?;
            }
        }
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        // Packets stay full: pending data leaves with the next packet or at `finish`.
        Ok(())
    }
}

impl<W: Write> crate::push::Messages for Bands<W> {
    fn remote_message(&mut self, message: &[u8]) -> io::Result<()> {
        Bands::remote_message(self, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_data_leaves_in_full_side_band_packets() {
        let mut bands = Bands::new(Vec::new(), Framing::SideBand64k, true);
        for _ in 0..3 {
            bands.write_all(&vec![7u8; 50_000]).unwrap();
        }
        let out = bands.finish().unwrap();
        let lines = pkt::read_all(&out).unwrap();
        let sizes: Vec<usize> = lines
            .iter()
            .map(|l| match l {
                pkt::Line::Data(d) => d.len() - 1,
                _ => 0,
            })
            .collect();
        assert_eq!(sizes, vec![pkt::MAX_SIDEBAND_64K, pkt::MAX_SIDEBAND_64K, 150_000 - 2 * pkt::MAX_SIDEBAND_64K]);
    }

    /// Records every write call it receives.
    #[derive(Default)]
    struct Calls(Vec<Vec<u8>>);

    impl Write for Calls {
        fn write(&mut self, data: &[u8]) -> io::Result<usize> {
            self.0.push(data.to_vec());
            Ok(data.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_packet_leaves_in_one_write_with_its_header() {
        let mut bands = Bands::new(Calls::default(), Framing::SideBand64k, true);
        bands.progress("Enumerating objects: 3, done.\n").unwrap();
        for chunk in [&[1u8; 10][..], &[2u8; 70_000], &[3u8; 5]] {
            bands.write_all(chunk).unwrap();
        }
        bands.error("boom").unwrap();
        let calls = bands.finish().unwrap().0;
        assert!(!calls.is_empty());
        for call in &calls {
            let lines = pkt::read_all(call).expect("a whole pkt-line");
            assert_eq!(lines.len(), 1, "one write, one packet: {} bytes", call.len());
        }
        assert_eq!(calls.len(), 1 + 2 + 1, "progress, two data packets (65515 + rest), error");
    }

    #[test]
    fn progress_is_dropped_when_the_client_asked_for_none() {
        let mut bands = Bands::new(Vec::new(), Framing::SideBand64k, false);
        bands.progress("Counting\n").unwrap();
        assert!(bands.finish().unwrap().is_empty());
    }
}
