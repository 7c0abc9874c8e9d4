//! Zero-copy sends: the HTTP connection's socket, as hyper writes to it, sends a slice of a pack
//! cache entry without copying its bytes into the socket ([`crate::pack_cache::mapped_at`] says
//! where a slice lies): a slice of an entry in memory by handing its pages to the kernel through
//! a pipe (`vmsplice(2)`, then `splice(2)`), a slice of an entry on disk, or of a pack file an
//! entry kept as a range, from its file by `sendfile(2)`; everything else goes out by
//! `sendmsg(2)`, with `MSG_MORE` when a slice from a file follows (a packet's header then leaves
//! with its payload, not as a segment of its own). N clients of one cached pack then
//! cost the kernel's socket work for each, not N copies of the pack.

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

use crate::pack_cache::Mapped;

#[cfg(any(test, feature = "test-hooks"))]
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes sent without a copy (spliced from memory or sent from files) since the start.
#[cfg(any(test, feature = "test-hooks"))]
static SENT_ZERO_COPY: AtomicU64 = AtomicU64::new(0);

/// Bytes sent without a copy so far (a test hook: feature `test-hooks`, and this module's tests).
#[cfg(any(test, feature = "test-hooks"))]
pub fn bytes_sent_zero_copy() -> u64 {
    SENT_ZERO_COPY.load(Ordering::Relaxed)
}

/// Count `n` bytes as sent without a copy (where the count is kept).
fn sent_zero_copy(n: usize) {
    #[cfg(any(test, feature = "test-hooks"))]
    SENT_ZERO_COPY.fetch_add(n as u64, Ordering::Relaxed);
    #[cfg(not(any(test, feature = "test-hooks")))]
    let _ = n;
}

/// A TCP connection whose writes send pack-cache slices without a copy.
pub struct Stream {
    tcp: TcpStream,
    /// Made at the first slice of an entry in memory, kept for the connection.
    pipe: Option<Pipe>,
}

impl Stream {
    pub fn new(tcp: TcpStream) -> Stream {
        Stream { tcp, pipe: None }
    }
}

/// The pipe a memory slice's pages pass through on their way to the socket.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// Bytes in the pipe, not yet in the socket: where they lie in memory, and how many. They
    /// were not reported written, so the next write starts with them (hyper writes what it was
    /// not told went, from where it stopped).
    pending: Option<(usize, usize)>,
}

impl Pipe {
    /// Pages per pipe: 1 MiB of small pages (the unprivileged limit), one call's worth.
    const SIZE: libc::c_int = 1 << 20;

    fn new() -> io::Result<Pipe> {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors, which the OwnedFds then own.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded: both descriptors are new and owned by nothing else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // A smaller pipe (the default 64 KiB where the limit is lower) only means more calls.
        // SAFETY: fcntl on a descriptor `write` owns; a failure leaves the pipe as it was.
        unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, Pipe::SIZE) };
        Ok(Pipe { read, write, pending: None })
    }
}

/// Most bytes one `sendfile(2)` call is asked for. Unbounded, one call on a socket whose reader
/// keeps up (loopback, a fast LAN) went on for tens of MiB while holding the socket, and a 1 GiB
/// LFS download ran at 0.55–0.74× of lighttpd's `sendfile` of the same file; a quarter MiB per
/// call (lighttpd's own habit) brought it to 0.85–1.4× at less CPU (`cargo xtask bench lfs`).
/// The side-band's packets are far smaller, so a pack's ranges are not cut by this.
const SENDFILE_CHUNK: usize = 256 << 10;

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

/// Send `buf`, a slice of a pack cache entry's memory, to the socket `fd` through `pipe`: its
/// pages are handed to the pipe (the memory is never written again and the kernel holds the
/// pages for as long as it needs them), then moved on to the socket. The bytes that reached the
/// socket; those that did not stay in the pipe for the next call.
fn send_memory(fd: i32, pipe: &mut Option<Pipe>, buf: &[u8]) -> io::Result<usize> {
    let at = buf.as_ptr() as usize;
    if pipe.as_ref().and_then(|p| p.pending).is_some_and(|(pending, n)| pending != at || n > buf.len()) {
        // Not the bytes left in the pipe: never expected (hyper writes on from where it was
        // told it stopped), but those bytes must not go out, so the pipe goes with them.
        *pipe = None;
    }
    if pipe.is_none() {
        match Pipe::new() {
            Ok(new) => *pipe = Some(new),
            // No descriptors left for a pipe: copy, as for any other bytes (and not counted
            // as sent without a copy).
            // SAFETY: `buf` is valid for `buf.len()` bytes for the call; `fd` is the caller's open socket.
            Err(_) => return syscall(|| unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) }),
        }
    }
    let pipe = pipe.as_mut().expect("made above");
    let n = match pipe.pending {
        Some((_, n)) => n,
        None => {
            let iov = libc::iovec { iov_base: buf.as_ptr() as *mut libc::c_void, iov_len: buf.len() };
            // SAFETY: `iov` describes `buf`, alive for the call; the pipe is empty, so this
            // takes as much as fits and does not block.
            let n = syscall(|| unsafe { libc::vmsplice(pipe.write.as_raw_fd(), &iov, 1, libc::SPLICE_F_NONBLOCK) })?;
            pipe.pending = Some((at, n));
            n
        }
    };
    // SAFETY: both descriptors are open; no offsets (a pipe and a socket).
    let sent = syscall(|| unsafe {
        libc::splice(
            pipe.read.as_raw_fd(),
            std::ptr::null_mut(),
            fd,
            std::ptr::null_mut(),
            n,
            libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MOVE,
        )
    })?;
    pipe.pending = (sent < n).then_some((at + sent, n - sent));
    sent_zero_copy(sent);
    Ok(sent)
}

/// Write `bufs` in order to the socket `fd`, entry slices without a copy, runs of others by
/// one `writev`; stops at the first short write. The bytes written (an error only if none were).
fn send(fd: i32, pipe: &mut Option<Pipe>, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    let mut total = 0;
    let mut i = 0;
    while i < bufs.len() {
        let (result, wanted) = match crate::pack_cache::mapped_at(&bufs[i]) {
            Some(mapped) => {
                let len = bufs[i].len();
                let sent = match mapped {
                    Mapped::Memory => send_memory(fd, pipe, &bufs[i]),
                    Mapped::File(file, offset) => {
                        let mut offset = offset as libc::off_t;
                        // SAFETY: both descriptors are open for the call; `offset` is ours.
                        let sent = syscall(|| unsafe {
                            libc::sendfile(fd, file.as_raw_fd(), &mut offset, len.min(SENDFILE_CHUNK))
                        });
                        if let Ok(n) = sent {
                            sent_zero_copy(n);
                        }
                        sent
                    }
                };
                i += 1;
                (sent, len)
            }
            None => {
                // `bufs[i]` is not mapped (just asked); the run goes on to the next one that is.
                let run = (1 + bufs[i + 1..].iter().take_while(|b| crate::pack_cache::mapped_at(b).is_none()).count())
                    .min(1024);
                let slices = &bufs[i..i + run];
                i += run;
                let len = slices.iter().map(|b| b.len()).sum();
                // A slice sent from a file or the pipe follows: these bytes (a packet's header)
                // wait for it to fill the segment rather than leave as a segment of their own.
                let more = if i < bufs.len() { libc::MSG_MORE } else { 0 };
                // SAFETY: `IoSlice` is ABI-compatible with `iovec` on unix; the slices outlive the
                // call, and the header describes them and nothing else.
                let sent = syscall(|| unsafe {
                    let mut header: libc::msghdr = std::mem::zeroed();
                    header.msg_iov = slices.as_ptr() as *mut libc::iovec;
                    header.msg_iovlen = run as _;
                    libc::sendmsg(fd, &header, libc::MSG_NOSIGNAL | more)
                });
                (sent, len)
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

/// Sends to a socket another task reads from (a git:// connection: its blocking part reads the
/// client's requests while this sends the answers from the transfer buffers), entry slices
/// without a copy as [`Stream`] does.
pub struct Sender {
    tcp: std::sync::Arc<TcpStream>,
    pipe: Option<Pipe>,
}

impl Sender {
    pub fn new(tcp: std::sync::Arc<TcpStream>) -> Sender {
        Sender { tcp, pipe: None }
    }

    /// Send all of `data` (a slice of an entry's window, or any bytes).
    pub async fn send_all(&mut self, data: &[u8]) -> io::Result<()> {
        self.send_all_vectored(&mut [IoSlice::new(data)]).await
    }

    /// Send all of `bufs` in order, in as few calls as they take (a packet's header and its
    /// payload from a file leave together).
    pub async fn send_all_vectored(&mut self, mut bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
        IoSlice::advance_slices(&mut bufs, 0);
        while !bufs.is_empty() {
            self.tcp.writable().await?;
            let Sender { tcp, pipe } = self;
            match tcp.try_io(Interest::WRITABLE, || send(tcp.as_raw_fd(), pipe, bufs)) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => IoSlice::advance_slices(&mut bufs, n),
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
                Err(err) => return Err(err),
            }
        }
        Ok(())
    }
}

impl AsyncRead for Stream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let Stream { tcp, pipe } = self.get_mut();
        loop {
            ready!(tcp.poll_write_ready(cx))?;
            match tcp.try_io(Interest::WRITABLE, || send(tcp.as_raw_fd(), pipe, bufs)) {
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
                done => return Poll::Ready(done),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A pack cache entry's slices and plain bytes, written together as hyper writes a chunked
    /// body, arrive whole and in order, the entry's without a copy: from memory and, once the
    /// entry moved to disk, from its file. The reader starts late and reads in small pieces, so
    /// the socket fills and writes stop short with bytes left in the pipe.
    #[tokio::test]
    async fn entry_slices_go_out_without_a_copy_from_memory_and_from_disk_and_the_rest_as_written() {
        let dir = tempfile::tempdir().unwrap();
        for memory_bytes in [64 << 20, 0] {
            let cache = crate::pack_cache::PackCache::new(crate::pack_cache::Settings {
                memory_bytes,
                dir: Some(dir.path().into()),
                disk_bytes: 64 << 20,
                max_age: std::time::Duration::from_secs(60),
            });
            let key = crate::pack_cache::Key { git_dir: "/r.git".into(), state: 1, version: 2, request: b"x".to_vec() };
            let entry = cache.start(key).ok().unwrap();
            let pack: Vec<u8> = (0..9_000_000u32).map(|i| (i % 251) as u8).collect();
            cache.writer(&entry).write_all(&pack).unwrap();
            cache.finish(&entry, true);
            let first = entry.read_at(0, 1).unwrap();
            assert_eq!(
                matches!(crate::pack_cache::mapped_at(&first), Some(Mapped::File(..))),
                memory_bytes == 0,
                "the entry is where this round wants it"
            );

            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let reader = tokio::spawn(async move {
                let (mut socket, _) = listener.accept().await.unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                let (mut got, mut piece) = (Vec::new(), vec![0u8; 7000]);
                loop {
                    let n = socket.read(&mut piece).await.unwrap();
                    if n == 0 {
                        return got;
                    }
                    got.extend_from_slice(&piece[..n]);
                }
            });
            let mut stream = Stream::new(TcpStream::connect(addr).await.unwrap());
            let before = bytes_sent_zero_copy();
            let (mut expected, mut offset, mut short) = (Vec::new(), 0u64, 0);
            while offset < pack.len() as u64 {
                let piece = entry.read_at(offset, usize::MAX).unwrap();
                let header = format!("{:x}\r\n", piece.len());
                let mut parts: Vec<&[u8]> = vec![header.as_bytes(), &piece, b"\r\n"];
                expected.extend(parts.concat());
                // Like hyper: write what is left until all of it went.
                while !parts.is_empty() {
                    let slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
                    let mut n = stream.write_vectored(&slices).await.unwrap();
                    short += usize::from(n < parts.iter().map(|p| p.len()).sum());
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
            assert!(bytes_sent_zero_copy() - before >= pack.len() as u64, "the entry's bytes went without a copy");
            assert!(short > 0, "some writes stopped short (the socket was full)");
        }
    }

    /// A long slice of a file goes out in calls of at most [`SENDFILE_CHUNK`] bytes however fast
    /// the reader drains the socket (one unbounded call held the socket for tens of MiB), and
    /// every byte still arrives.
    #[tokio::test]
    async fn a_long_file_slice_is_sent_a_bounded_piece_per_call() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("object");
        let content: Vec<u8> = (0..(32u32 << 20)).map(|i| (i % 253) as u8).collect();
        std::fs::write(&path, &content).unwrap();
        let map = crate::pack_ranges::Map::open(&path).unwrap();
        assert!(matches!(crate::pack_cache::mapped_at(&map[..]), Some(Mapped::File(..))));

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            use std::io::Read;
            let (mut socket, _) = listener.accept().unwrap();
            let mut got = Vec::new();
            socket.read_to_end(&mut got).unwrap();
            got
        });
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (mut pipe, mut offset, mut calls, mut most) = (None, 0, 0, 0);
        while offset < content.len() {
            tcp.writable().await.unwrap();
            match tcp.try_io(Interest::WRITABLE, || send(tcp.as_raw_fd(), &mut pipe, &[IoSlice::new(&map[offset..])])) {
                Ok(n) => {
                    (offset, calls, most) = (offset + n, calls + 1, most.max(n));
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
                Err(err) => panic!("{err}"),
            }
        }
        drop(tcp);
        let got = reader.join().unwrap();
        assert!(got == content, "{} bytes arrived of {}", got.len(), content.len());
        assert!(most <= SENDFILE_CHUNK, "one call sent {most} bytes");
        assert!(calls >= content.len() / SENDFILE_CHUNK, "{calls} calls");
    }
}
