//! A loopback TCP relay that counts the bytes going from the server to the client: the one
//! instrument put in front of every server a benchmark compares, so every arm is counted alike.
//! Used by `xtask` (bench narrow, bench real) and the bake-off (`bench/harness`); and a slow link
//! ([`slow_link`]) the tests put between a client and the server.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result};

/// Where a relay sends what it accepts.
pub enum Upstream {
    /// A listening server.
    Tcp(SocketAddr),
    /// A fresh process per connection, talking on stdin/stdout (inetd style).
    Spawn(Vec<String>),
}

/// A loopback TCP relay counting the bytes that go from the server to the client: one
/// instrument in front of every arm, so every arm is counted the same way.
pub struct Relay {
    pub port: u16,
    down: Arc<AtomicU64>,
}

impl Relay {
    pub fn start(upstream: Upstream) -> Result<Relay> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let down = Arc::new(AtomicU64::new(0));
        let counted = down.clone();
        let upstream = Arc::new(upstream);
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let (counted, upstream) = (counted.clone(), upstream.clone());
                std::thread::spawn(move || {
                    if let Err(err) = relay(client, &upstream, &counted) {
                        eprintln!("relay: {err}");
                    }
                });
            }
        });
        Ok(Relay { port, down })
    }

    /// Bytes sent to clients since the last call.
    pub fn take(&self) -> u64 {
        self.down.swap(0, Ordering::SeqCst)
    }
}

/// Copy `from` to `to`, adding what passed to `counter`.
fn copy_counting(mut from: impl Read, mut to: impl Write, counter: Option<&AtomicU64>) -> std::io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = from.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        to.write_all(&buf[..n])?;
        if let Some(c) = counter {
            c.fetch_add(n as u64, Ordering::SeqCst);
        }
    }
}

fn relay(client: TcpStream, upstream: &Upstream, down: &AtomicU64) -> Result<()> {
    // The instrument must not add latency: no Nagle delay on either side.
    client.set_nodelay(true)?;
    let from_client = client.try_clone()?;
    match upstream {
        Upstream::Tcp(addr) => {
            let server = TcpStream::connect(addr)?;
            server.set_nodelay(true)?;
            let to_server = server.try_clone()?;
            let up = std::thread::spawn(move || {
                let _ = copy_counting(from_client, &to_server, None);
                let _ = to_server.shutdown(std::net::Shutdown::Write);
            });
            let _ = copy_counting(&server, &client, Some(down));
            let _ = client.shutdown(std::net::Shutdown::Write);
            let _ = up.join();
        }
        Upstream::Spawn(cmd) => {
            let mut child =
                Command::new(&cmd[0]).args(&cmd[1..]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn()?;
            let stdin = child.stdin.take().context("stdin")?;
            let stdout = child.stdout.take().context("stdout")?;
            let up = std::thread::spawn(move || {
                let _ = copy_counting(from_client, stdin, None);
            });
            let _ = copy_counting(stdout, &client, Some(down));
            let _ = client.shutdown(std::net::Shutdown::Write);
            child.wait()?;
            let _ = up.join();
        }
    }
    Ok(())
}

/// A slow link in front of `upstream`: a local address whose connections are relayed to it, the
/// server's bytes passed on at `rate` bytes per second per connection (the client's at once).
pub fn slow_link(upstream: SocketAddr, rate: usize) -> SocketAddr {
    link(upstream, rate, None)
}

/// [`slow_link`], slow both ways: the client's bytes too pass at `rate` bytes per second.
pub fn slow_both_ways(upstream: SocketAddr, rate: usize) -> SocketAddr {
    link(upstream, rate, Some(rate))
}

fn link(upstream: SocketAddr, down: usize, up: Option<usize>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let Ok(server) = TcpStream::connect(upstream) else { continue };
            let (up_from, up_to) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || pace(up_from, up_to, up));
            std::thread::spawn(move || pace(server, client, Some(down)));
        }
    });
    addr
}

/// Copy `from` to `to`, at most `rate` bytes per second (`None`: as fast as it comes), then
/// pass the end on.
fn pace(mut from: TcpStream, mut to: TcpStream, rate: Option<usize>) {
    let mut piece = vec![0u8; rate.map_or(64 << 10, |r| (r / 20).max(1))];
    loop {
        match from.read(&mut piece) {
            Ok(0) | Err(_) => break,
            Ok(n) if to.write_all(&piece[..n]).is_err() => break,
            Ok(_) if rate.is_some() => std::thread::sleep(std::time::Duration::from_millis(50)),
            Ok(_) => {}
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

#[cfg(test)]
mod tests {
    use super::{Relay, Upstream};
    use std::io::{Read, Write};

    #[test]
    fn the_relay_passes_bytes_both_ways_and_counts_only_the_servers() {
        let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = server.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = server.accept().unwrap();
            let mut got = [0u8; 5];
            s.read_exact(&mut got).unwrap();
            s.write_all(&[7u8; 1000]).unwrap();
        });
        let relay = Relay::start(Upstream::Tcp(addr)).unwrap();
        let mut c = std::net::TcpStream::connect(("127.0.0.1", relay.port)).unwrap();
        c.write_all(b"hello").unwrap();
        let mut back = Vec::new();
        c.read_to_end(&mut back).unwrap();
        assert_eq!(back.len(), 1000);
        assert_eq!(relay.take(), 1000);
        assert_eq!(relay.take(), 0);
    }
}
