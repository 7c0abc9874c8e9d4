//! HTTP bodies that stream: [`ChannelBody`] yields the frames an async task sends (a response
//! read out of the transfer buffers, `crate::service::buffer`) as HTTP body frames; and
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
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn a_body_hands_out_the_frames_sent_in_order_and_ends_when_the_sender_goes() {
        let (tx, mut body) = channel();
        let sender = tokio::spawn(async move {
            for n in [3usize, 1, 4] {
                tx.send(Bytes::from(vec![n as u8; n])).await.unwrap();
            }
        });
        let mut frames = Vec::new();
        while let Some(frame) = body.frame().await {
            frames.push(frame.unwrap().into_data().unwrap().to_vec());
        }
        sender.await.unwrap();
        assert_eq!(frames, vec![vec![3u8; 3], vec![1u8; 1], vec![4u8; 4]]);
    }
}
