//! Transports: bytes in and out. They resolve the repository, read bounded request bodies and
//! stream responses; the protocol layer never sees them. Smart HTTP ([`http`]) and git://
//! ([`git`]), HTTPS's TLS ([`tls`]), SSH in-process ([`ssh`]) or under OpenSSH ([`shell`]), both
//! through the same command runner ([`exec`]); an HTTP connection sends cached packs from their
//! files ([`zero_copy`]).

pub mod exec;
pub mod git;
pub mod http;
pub mod pace;
pub mod shell;
pub mod ssh;
pub mod stream;
pub mod tls;
pub mod zero_copy;

/// One read of a stateful transport's client, for the blocking thread that serves it: `read`
/// driven on `runtime`, within `timeout`, and failing once the server's stop cancelled what was in
/// flight.
pub fn read_within(
    runtime: &tokio::runtime::Handle,
    life: &crate::lifecycle::Life,
    timeout: std::time::Duration,
    read: impl std::future::Future<Output = std::io::Result<usize>>,
) -> std::io::Result<usize> {
    use std::io::{Error, ErrorKind};
    runtime.block_on(async {
        match life.unless_cancelled(tokio::time::timeout(timeout, read)).await {
            Some(Ok(read)) => read,
            Some(Err(_)) => Err(Error::new(ErrorKind::TimedOut, "the client sent nothing within the I/O timeout")),
            None => Err(Error::new(ErrorKind::ConnectionAborted, "the server is shutting down")),
        }
    })
}

/// An async reader for the blocking thread that serves a stateful transport's client: each read
/// through [`read_within`].
pub struct TimedRead<T> {
    pub read: T,
    pub runtime: tokio::runtime::Handle,
    pub life: std::sync::Arc<crate::lifecycle::Life>,
    pub timeout: std::time::Duration,
}

impl<T: tokio::io::AsyncRead + Unpin> std::io::Read for TimedRead<T> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        read_within(&self.runtime, &self.life, self.timeout, tokio::io::AsyncReadExt::read(&mut self.read, buf))
    }
}
