//! Zero-copy sends: the HTTP connection's socket, as hyper writes to it, sends a slice of a pack
//! cache entry's mapped file by `sendfile(2)` from that file instead of copying its bytes into
//! the socket ([`crate::pack_cache::mapped_at`] says where a slice lies); everything else goes
//! out by `writev(2)` as before. N clients of one cached pack then cost the kernel's socket work
//! for each, not N copies of the pack (measured on tokio: the copy was half of a reader's CPU).

use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// Bytes sent by `sendfile` since the start (the tests' and the metrics' count).
static SENT_FROM_FILES: AtomicU64 = AtomicU64::new(0);

pub fn bytes_sent_from_files() -> u64 {
    SENT_FROM_FILES.load(Ordering::Relaxed)
}

/// A TCP connection whose writes send mapped pack-cache slices from their files.
pub struct Stream(TcpStream);

impl Stream {
    pub fn new(stream: TcpStream) -> Stream {
        Stream(stream)
    }
}

/// One system call's result: bytes written, or the error (`EINTR` retried).
fn syscall(mut call: impl FnMut() -> isize) -> io::Result<usize> {
    loop {
        let n = call();
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Write `bufs` in order to the socket `fd`, mapped slices by `sendfile`, runs of others by one
/// `writev`; stops at the first short write. The bytes written (an error only if none were).
fn send(fd: i32, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    let mut total = 0;
    let mut i = 0;
    while i < bufs.len() {
        let (result, wanted) = match crate::pack_cache::mapped_at(&bufs[i]) {
            Some((file, offset)) => {
                let len = bufs[i].len();
                i += 1;
                let mut offset = offset as libc::off_t;
                // SAFETY: both descriptors are open for the call; `offset` is ours.
                let sent = syscall(|| unsafe { libc::sendfile(fd, file.as_raw_fd(), &mut offset, len) });
                if let Ok(n) = sent {
                    SENT_FROM_FILES.fetch_add(n as u64, Ordering::Relaxed);
                }
                (sent, len)
            }
            None => {
                // `bufs[i]` is not mapped (just asked); the run goes on to the next one that is.
                let run = (1 + bufs[i + 1..].iter().take_while(|b| crate::pack_cache::mapped_at(b).is_none()).count()).min(1024);
                let slices = &bufs[i..i + run];
                i += run;
                let len = slices.iter().map(|b| b.len()).sum();
                // SAFETY: `IoSlice` is ABI-compatible with `iovec` on unix; the slices outlive the call.
                (syscall(|| unsafe { libc::writev(fd, slices.as_ptr().cast(), run as libc::c_int) }), len)
            }
        };
        match result {
            Ok(n) => {
                total += n;
                if n < wanted {
                    return Ok(total);
                }
            }
            Err(_) if total > 0 => return Ok(total),
            Err(err) => return Err(err),
        }
    }
    Ok(total)
}

impl AsyncRead for Stream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let stream = &self.0;
        loop {
            ready!(stream.poll_write_ready(cx))?;
            match stream.try_io(Interest::WRITABLE, || send(stream.as_raw_fd(), bufs)) {
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
                done => return Poll::Ready(done),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A pack cache entry's slices and plain bytes, written together as hyper writes a chunked
    /// body, arrive whole and in order, the entry's from its file.
    #[tokio::test]
    async fn mapped_slices_go_out_from_their_file_and_the_rest_as_written() {
        let cache = crate::pack_cache::PackCache::new(crate::pack_cache::Settings {
            memory_bytes: 64 << 20,
            dir: None,
            disk_bytes: 0,
            max_age: std::time::Duration::from_secs(60),
        });
        let key = crate::pack_cache::Key { git_dir: "/r.git".into(), state: 1, version: 2, request: b"x".to_vec() };
        let entry = cache.start(key).ok().unwrap();
        let pack: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        cache.writer(&entry).write_all(&pack).unwrap();
        cache.finish(&entry, true);

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            socket.read_to_end(&mut got).await.unwrap();
            got
        });
        let mut stream = Stream::new(TcpStream::connect(addr).await.unwrap());
        let before = bytes_sent_from_files();
        let (mut expected, mut offset) = (Vec::new(), 0u64);
        while offset < pack.len() as u64 {
            let piece = entry.read_at(offset, 256 * 1024).unwrap();
            let header = format!("{:x}\r\n", piece.len());
            let mut parts: Vec<&[u8]> = vec![header.as_bytes(), &piece, b"\r\n"];
            expected.extend(parts.concat());
            // Like hyper: write what is left until all of it went.
            while !parts.is_empty() {
                let slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
                let mut n = stream.write_vectored(&slices).await.unwrap();
                while n > 0 {
                    let take = n.min(parts[0].len());
                    parts[0] = &parts[0][take..];
                    n -= take;
                    if parts[0].is_empty() {
                        parts.remove(0);
                    }
                }
                parts.retain(|p| !p.is_empty());
            }
            offset += piece.len() as u64;
        }
        stream.shutdown().await.unwrap();
        drop(stream);
        let got = reader.await.unwrap();
        assert!(got == expected, "{} bytes arrived, {} sent", got.len(), expected.len());
        assert!(bytes_sent_from_files() - before >= pack.len() as u64, "the entry's bytes went by sendfile");
    }
}
