//! Transports: bytes in and out. They resolve the repository, read bounded request bodies and
//! stream responses; the protocol layer never sees them. Smart HTTP ([`http`]) and git://
//! ([`git`]), HTTPS's TLS ([`tls`]), SSH in-process ([`ssh`]) or under OpenSSH ([`shell`]), both
//! through the same command runner ([`exec`]); an HTTP connection sends cached packs from their
//! files ([`zero_copy`]). Each runs its own accept loop on the listener the server binds
//! ([`accept`]: until the server drains).

/// Drive one HTTP connection (`$conn`, a hyper connection future) to its end. When `$until`
/// completes (the server drains; an HTTP/2 connection idles), the requests in flight finish and
/// the connection closes (an idle one at once), or is dropped when `$settled` completes first;
/// when the server is cancelled, it is dropped.
macro_rules! drive {
    ($life:expr, $conn:expr, $peer:expr, $until:expr) => {
        drive!($life, $conn, $peer, $until, std::future::pending::<()>())
    };
    ($life:expr, $conn:expr, $peer:expr, $until:expr, $settled:expr) => {{
        let conn = $conn;
        tokio::pin!(conn);
        let ended = tokio::select! {
            ended = conn.as_mut() => Some(ended),
            () = $until => None,
        };
        let ended = match ended {
            Some(ended) => Some(ended),
            None => {
                conn.as_mut().graceful_shutdown();
                // A peer that does not take part in the close (an HTTP/2 client that never
                // answers the closing PING) is dropped once `$settled` completes.
                let closed = async {
                    tokio::select! {
                        ended = conn.as_mut() => Some(ended),
                        () = $settled => None,
                    }
                };
                $life.unless_cancelled(closed).await.flatten()
            }
        };
        if let Some(Err(err)) = ended {
            tracing::debug!(peer = %$peer, %err, "connection ended with an error");
        }
    }};
}

pub mod exec;
pub mod git;
pub mod http;
pub mod http_common;
pub mod lfs;
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

/// The next connection on `listener`, until the server drains (`None`). A failure (out of file
/// descriptors and the like) is reported, and accepting goes on after a pause.
pub async fn accept(
    listener: &tokio::net::TcpListener,
    transport: &str,
    life: &crate::lifecycle::Life,
) -> Option<(tokio::net::TcpStream, std::net::SocketAddr)> {
    loop {
        tokio::select! {
            biased;
            () = life.reached(crate::lifecycle::Phase::Draining) => return None,
            accepted = listener.accept() => match accepted {
                Ok(conn) => return Some(conn),
                Err(err) => {
                    tracing::warn!(%err, transport, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
        }
    }
}
