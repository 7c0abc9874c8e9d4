//! A minimum receive rate: a client that trickles its request (a byte every few seconds) would
//! otherwise hold its connection, its thread and its transfer slot for as long as each single
//! read stays under the I/O timeout — for ever. [`Paced`] wraps a blocking reader and measures
//! only the time spent *waiting* in `read` (time the server spends computing or writing does not
//! count against the client): over every window of that much waiting, at least `min_rate` bytes
//! per second must arrive, or the read fails with `TimedOut` and the request is dropped.

pub use crate::config::Pace;

use std::io;
use std::time::{Duration, Instant};

/// A reader held to a [`Pace`].
pub struct Paced<R> {
    inner: R,
    pace: Pace,
    waited: Duration,
    got: u64,
}

impl<R> Paced<R> {
    pub fn new(inner: R, pace: Pace) -> Self {
        Paced { inner, pace, waited: Duration::ZERO, got: 0 }
    }
}

impl<R: io::Read> io::Read for Paced<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let start = Instant::now();
        let n = self.inner.read(buf)?;
        self.waited += start.elapsed();
        self.got += n as u64;
        if self.waited >= self.pace.window {
            let needed = (self.pace.min_rate as f64 * self.waited.as_secs_f64()) as u64;
            if self.got < needed {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the client sent {} bytes in {:.1} s, less than the {} bytes/s this server requires",
                        self.got,
                        self.waited.as_secs_f64(),
                        self.pace.min_rate
                    ),
                ));
            }
            self.waited = Duration::ZERO;
            self.got = 0;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// Yields one byte per read, after sleeping `delay`.
    struct Trickle {
        delay: Duration,
        left: usize,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.left == 0 || buf.is_empty() {
                return Ok(0);
            }
            std::thread::sleep(self.delay);
            self.left -= 1;
            buf[0] = b'x';
            Ok(1)
        }
    }

    #[test]
    fn a_trickling_sender_is_cut_off_once_a_window_of_waiting_is_too_slow() {
        let pace = Pace { min_rate: 100, window: Duration::from_millis(200) };
        let mut paced = Paced::new(Trickle { delay: Duration::from_millis(20), left: 1000 }, pace);
        let mut sink = Vec::new();
        let err = paced.read_to_end(&mut sink).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(sink.len() < 20, "cut off within about one window, after {} bytes", sink.len());
    }

    #[test]
    fn a_fast_sender_is_never_judged_slow() {
        let pace = Pace { min_rate: 1, window: Duration::from_millis(1) };
        let data = vec![7u8; 1 << 20];
        let mut paced = Paced::new(&data[..], pace);
        let mut sink = Vec::new();
        paced.read_to_end(&mut sink).unwrap();
        assert_eq!(sink.len(), 1 << 20);
    }
}
