//! Side-band framing (`side-band`, `side-band-64k`, v2's packfile section): pack bytes,
//! progress and errors multiplexed onto one stream, each packet leaving in one write with its
//! header. Beside the pkt-line codec, as gix-packetline keeps it; the pack writer and push know
//! nothing of it (the pack writer writes to a [`crate::pack::Sink`], bytes and progress lines,
//! and push says its messages through [`crate::push::Messages`]).

use std::io::{self, Write};

use gix_packetline::Channel;

use super::pkt;

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
/// packets: one write per packet, header and payload together.
pub struct Bands<W: Write> {
    out: W,
    framing: Framing,
    progress: bool,
    pending: Vec<u8>,
}

impl<W: Write> Bands<W> {
    /// How the bands are framed.
    pub fn framing(&self) -> Framing {
        self.framing
    }

    pub fn new(out: W, framing: Framing, progress: bool) -> Self {
        let cap = match framing {
            Framing::SideBand64k => pkt::MAX_SIDEBAND_64K,
            Framing::SideBand => pkt::MAX_SIDEBAND,
            Framing::Raw => 64 * 1024,
        };
        Bands { out, framing, progress: progress && framing != Framing::Raw, pending: Vec::with_capacity(cap) }
    }

    fn max_payload(&self) -> usize {
        self.pending.capacity()
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
        if !self.pending.is_empty() {
            let cap = self.max_payload();
            let data = std::mem::replace(&mut self.pending, Vec::with_capacity(cap));
            self.emit(Channel::Data, &data)?;
        }
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
        let max = self.max_payload();
        for chunk in message.chunks(max) {
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
        while !data.is_empty() {
            let room = self.max_payload() - self.pending.len();
            let take = room.min(data.len());
            self.pending.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.pending.len() == self.max_payload() {
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
