//! HTTP bodies that stream: [`ChannelBody`] yields the frames a blocking thread wrote into a
//! [`crate::service::sink::ChannelSink`] (or an async task sent) as HTTP body frames; and
//! [`BodyReader`], a blocking `Read` over an HTTP request body, fed frame by frame through a
//! bounded channel (a push's pack is never held whole either).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame};
use tokio::sync::mpsc;

/// The reading half, as an HTTP body.
pub struct ChannelBody {
    rx: mpsc::Receiver<Bytes>,
}

impl From<mpsc::Receiver<Bytes>> for ChannelBody {
    fn from(rx: mpsc::Receiver<Bytes>) -> Self {
        ChannelBody { rx }
    }
}

/// A body fed by async code: frames sent on the sender are the body's frames; a full channel
/// (one frame) makes the sender wait.
pub fn channel() -> (mpsc::Sender<Bytes>, ChannelBody) {
    let (tx, rx) = mpsc::channel(1);
    (tx, ChannelBody { rx })
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        self.rx.poll_recv(cx).map(|frame| frame.map(|data| Ok(Frame::data(data))))
    }
}

/// A blocking reader over a request body: an async task forwards the body's frames through a
/// channel of two; a frame that does not arrive within the timeout ends the read with an error.
pub struct BodyReader {
    rx: mpsc::Receiver<io::Result<Bytes>>,
    current: Bytes,
    done: bool,
}

impl BodyReader {
    /// Start forwarding `body` (call inside the runtime); read from a blocking thread.
    pub fn spawn(mut body: hyper::body::Incoming, timeout: std::time::Duration) -> BodyReader {
        use http_body_util::BodyExt;
        let (tx, rx) = mpsc::channel(2);
        tokio::spawn(async move {
            loop {
                let frame = match tokio::time::timeout(timeout, body.frame()).await {
                    Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "the request body stalled")),
                    Ok(None) => return,
                    Ok(Some(Err(err))) => Err(io::Error::other(err)),
                    Ok(Some(Ok(frame))) => match frame.into_data() {
                        Ok(data) => Ok(data),
                        Err(_) => continue, // trailers
                    },
                };
                let failed = frame.is_err();
                if tx.send(frame).await.is_err() || failed {
                    return; // the reader is gone, or was told of the failure
                }
            }
        });
        BodyReader { rx, current: Bytes::new(), done: false }
    }
}

impl io::Read for BodyReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            if self.done {
                return Ok(0);
            }
            match self.rx.blocking_recv() {
                Some(Ok(data)) => self.current = data,
                Some(Err(err)) => return Err(err),
                None => self.done = true,
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::sink::pair;
    use http_body_util::BodyExt;
    use std::io::Write;

    async fn frames(window: usize, total: usize) -> Vec<usize> {
        let (mut sink, rx) = pair(window, std::time::Duration::from_secs(30));
        let mut body = ChannelBody::from(rx);
        let writer = tokio::task::spawn_blocking(move || {
            for chunk in vec![9u8; total].chunks(1000) {
                sink.write_all(chunk).unwrap();
            }
            sink.finish().unwrap();
        });
        let mut sizes = Vec::new();
        while let Some(frame) = body.frame().await {
            sizes.push(frame.unwrap().into_data().unwrap().len());
        }
        writer.await.unwrap();
        sizes
    }

    #[tokio::test]
    async fn a_body_hands_out_frames_the_size_of_its_window_not_of_a_constant() {
        let window = 256 * 1024;
        let sizes = frames(window, 3 * window + 5).await;
        assert_eq!(sizes, vec![window, window, window, 5]);
        let sizes = frames(10_000, 25_000).await;
        assert_eq!(sizes, vec![10_000, 10_000, 5_000]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_stalled_reader_releases_the_writer_after_the_timeout() {
        let (mut sink, body) = pair(4, std::time::Duration::from_millis(200));
        let writer = tokio::task::spawn_blocking(move || sink.write_all(&[0u8; 64]));
        let result = tokio::time::timeout(std::time::Duration::from_secs(30), writer).await.expect("released").unwrap();
        assert_eq!(result.unwrap_err().kind(), std::io::ErrorKind::BrokenPipe);
        drop(body);
    }

    #[tokio::test]
    async fn a_zero_window_is_floored_to_one_byte_and_finishes() {
        let sizes = tokio::time::timeout(std::time::Duration::from_secs(30), frames(0, 3000)).await.expect("no hang");
        assert_eq!(sizes.len(), 3000);
        assert!(sizes.iter().all(|s| *s == 1));
    }
}
