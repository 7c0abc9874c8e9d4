//! A response that streams out of a blocking thread: the thread serving the request writes into
//! a [`ChannelSink`], which hands frames of exactly the stream window to the async side through a
//! bounded channel (the transport turns the receiver into its body). The pack is never held
//! whole, and a slow client stops the writer (back-pressure) instead of growing a buffer.

use std::io;

use bytes::{Bytes, BytesMut};
use tokio::sync::mpsc;

/// The writing half; lives on a blocking thread (inside a tokio runtime).
pub struct ChannelSink {
    tx: mpsc::Sender<Bytes>,
    buf: BytesMut,
    window: usize,
    /// How long the client may leave a frame unaccepted before the transfer is abandoned.
    stall_timeout: std::time::Duration,
    runtime: tokio::runtime::Handle,
    /// Set once the client is gone or stalled: every later write fails at once instead of
    /// waiting out the timeout again (an error message, the final frame…).
    dead: bool,
}

/// A sink and the receiver of its frames, each `window` bytes (at least 1: a zero window would
/// never move). Call it inside the runtime; the sink is used from a blocking thread.
pub fn pair(window: usize, stall_timeout: std::time::Duration) -> (ChannelSink, mpsc::Receiver<Bytes>) {
    let window = window.max(1);
    // One frame in the channel plus one being filled: two windows in flight per transfer.
    let (tx, rx) = mpsc::channel(1);
    (
        ChannelSink {
            tx,
            buf: BytesMut::with_capacity(window.min(1 << 20)),
            window,
            stall_timeout,
            runtime: tokio::runtime::Handle::current(),
            dead: false,
        },
        rx,
    )
}

impl ChannelSink {
    fn send(&mut self, frame: Bytes) -> io::Result<()> {
        if self.dead {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "client disconnected"));
        }
        let sent = self.runtime.block_on(tokio::time::timeout(self.stall_timeout, self.tx.send(frame)));
        let failure = match sent {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(_)) => "client disconnected",
            Err(_) => "client disconnected: stalled past the I/O timeout",
        };
        self.dead = true;
        Err(io::Error::new(io::ErrorKind::BrokenPipe, failure))
    }

    /// Send what is buffered (the last, short frame).
    pub fn finish(mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            let frame = self.buf.split().freeze();
            self.send(frame)?;
        }
        Ok(())
    }
}

impl io::Write for ChannelSink {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.dead {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "client disconnected"));
        }
        self.buf.extend_from_slice(data);
        while self.buf.len() >= self.window {
            let frame = self.buf.split_to(self.window).freeze();
            self.send(frame)?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        // Frames are the window; the short tail leaves in `finish`.
        Ok(())
    }
}
