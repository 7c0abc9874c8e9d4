//! HTTPS: TLS 1.2 and 1.3 (rustls on its ring provider) in front of the smart-HTTP service, HTTP/1.1
//! or HTTP/2 as ALPN settles it. The certificate chain and key are read from PEM files and swapped
//! on reload ([`Tls::reload`]) without touching connections that are open. A handshake must end
//! within the init timeout; HTTP/2 connections are held to a few concurrent streams, a bounded
//! header list, and a cut-off for streams the client resets before they are served (the rapid-reset
//! pattern), past which the connection is closed (GOAWAY).

use std::path::Path;
use std::sync::{Arc, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::config::TlsFiles;

/// Concurrent streams one HTTP/2 connection may have open: git asks one thing at a time.
pub const H2_MAX_STREAMS: u32 = 16;
/// Largest request header list over HTTP/2 (decoded), as HTTP/1.1's head is bounded by hyper.
pub const H2_MAX_HEADER_LIST: u32 = 16 << 10;
/// Streams a client may reset before the server took them up, at once; past it the connection
/// is closed (the rapid-reset pattern: streams opened and reset in a loop).
pub const H2_MAX_PENDING_RESETS: usize = 8;
/// Streams the server itself had to reset on one connection for the client's errors.
pub const H2_MAX_ERROR_RESETS: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading the TLS certificate {path}: {message}")]
    Cert { path: String, message: String },
    #[error("reading the TLS key {path}: {message}")]
    Key { path: String, message: String },
    #[error("the TLS certificate {cert} and key {key} do not go together: {message}")]
    Pair { cert: String, key: String, message: String },
    #[error("TLS settings: {0}")]
    Config(String),
}

/// rustls on ring: the provider whose build needs no toolchain beyond `cc`, so the appliance's
/// builds stay reproducible. rustls marks it deprecated for lacking post-quantum key exchange
/// (X25519MLKEM768), which only its aws-lc-rs provider offers (built with cmake); a gap, named in
/// the README.
#[allow(deprecated, reason = "the ring provider is chosen for reproducible builds; see above")]
pub fn provider() -> CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// The chain and key in `files`, checked to belong together.
pub fn load(files: &TlsFiles, provider: &CryptoProvider) -> Result<Arc<CertifiedKey>, TlsError> {
    let shown = |p: &Path| p.display().to_string();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .map_err(|e| TlsError::Cert { path: shown(&files.cert), message: e.to_string() })?;
    if certs.is_empty() {
        return Err(TlsError::Cert { path: shown(&files.cert), message: "no CERTIFICATE in it".into() });
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| TlsError::Key { path: shown(&files.key), message: e.to_string() })?;
    CertifiedKey::from_der(certs, key, provider).map(Arc::new).map_err(|e| TlsError::Pair {
        cert: shown(&files.cert),
        key: shown(&files.key),
        message: e.to_string(),
    })
}

/// The certificate every handshake is given: the one loaded last.
#[derive(Debug)]
struct Current(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Current {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().unwrap_or_else(|e| e.into_inner()).clone())
    }
}

/// HTTPS's TLS side: the acceptor, and the files it re-reads on reload.
pub struct Tls {
    files: RwLock<TlsFiles>,
    current: Arc<Current>,
    provider: Arc<CryptoProvider>,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl Tls {
    pub fn new(files: &TlsFiles) -> Result<Tls, TlsError> {
        let mut provider = provider();
        // What a pack costs to send is mostly its encryption: AES-128-GCM (hardware AES) costs
        // the server least, then AES-256-GCM, then ChaCha20; the server's order wins.
        provider.cipher_suites.sort_by_key(|s| {
            let name = format!("{:?}", s.suite());
            [name.contains("AES_128_GCM"), name.contains("AES_256_GCM"), true].iter().position(|&hit| hit)
        });
        let provider = Arc::new(provider);
        let current = Arc::new(Current(RwLock::new(load(files, &provider)?)));
        let mut config = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(current.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        config.ignore_client_order = true;
        Ok(Tls {
            files: RwLock::new(files.clone()),
            current,
            provider,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        })
    }

    pub fn acceptor(&self) -> &tokio_rustls::TlsAcceptor {
        &self.acceptor
    }

    /// Read `files` (the same paths again, or new ones) and present them from the next handshake
    /// on; on an error the certificate in use stays.
    pub fn reload(&self, files: &TlsFiles) -> Result<(), TlsError> {
        let loaded = load(files, &self.provider)?;
        *self.current.0.write().unwrap_or_else(|e| e.into_inner()) = loaded;
        *self.files.write().unwrap_or_else(|e| e.into_inner()) = files.clone();
        Ok(())
    }

    /// The files the certificate in use came from.
    pub fn files(&self) -> TlsFiles {
        self.files.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Serve HTTPS on `listener`, a task per connection: the TLS handshake within the init timeout,
/// then HTTP/1.1 or HTTP/2 as ALPN chose, into the same handler as plain HTTP.
pub async fn accept(
    listener: tokio::net::TcpListener,
    state: std::sync::Arc<crate::session::State>,
    tls: std::sync::Arc<Tls>,
) {
    while let Some((stream, peer)) = super::accept(&listener, "https", &state.life).await {
        let _ = stream.set_nodelay(true);
        let (state, tls) = (state.clone(), tls.clone());
        tokio::spawn(async move {
            let (_busy, life) = (state.life.busy(), state.life.clone());
            let handshake = tokio::time::timeout(state.config.init_timeout, tls.acceptor().accept(stream));
            let stream = match life.unless_cancelled(handshake).await {
                Some(Ok(Ok(stream))) => stream,
                Some(Ok(Err(err))) => return tracing::debug!(%peer, %err, "TLS handshake failed"),
                Some(Err(_)) => return tracing::info!(%peer, "TLS handshake did not end within the init timeout"),
                None => return,
            };
            let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
            let io_timeout = state.config.io_timeout;
            // HTTP/2 has no header-read timeout to close an idle connection: one with no request
            // in flight (its response body sent) for the I/O timeout is closed.
            let activity = Arc::new(Activity::new());
            let requests = activity.clone();
            let service = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                let (state, in_flight) = (state.clone(), requests.enter());
                req.extensions_mut().insert(super::http::Transport("https"));
                async move {
                    let response = super::http::handle(state, peer, req).await?;
                    // In flight until its body is sent (or dropped).
                    Ok::<_, std::convert::Infallible>(response.map(|body| {
                        use http_body_util::BodyExt;
                        body.map_frame(move |frame| {
                            let _ = &in_flight;
                            frame
                        })
                        .boxed()
                    }))
                }
            });
            let mut builder = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            builder = if h2 { builder.http2_only() } else { builder.http1_only() };
            builder.http1().keep_alive(true).timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(io_timeout);
            builder
                .http2()
                .timer(hyper_util::rt::TokioTimer::new())
                .max_concurrent_streams(H2_MAX_STREAMS)
                .max_header_list_size(H2_MAX_HEADER_LIST)
                .max_pending_accept_reset_streams(H2_MAX_PENDING_RESETS)
                .max_local_error_reset_streams(H2_MAX_ERROR_RESETS)
                .keep_alive_interval(None);
            let until = async {
                tokio::select! {
                    () = life.reached(crate::lifecycle::Phase::Draining) => {}
                    () = activity.idle_for(io_timeout), if h2 => {}
                }
            };
            let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            drive!(life, conn, peer, until, tokio::time::sleep(io_timeout));
        });
    }
}

/// The requests of one connection: how many are in flight, and when the last one ended.
struct Activity {
    in_flight: std::sync::atomic::AtomicUsize,
    last: std::sync::Mutex<std::time::Instant>,
}

/// One request in flight on a connection, until dropped.
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        *self.0.last.lock().unwrap_or_else(|e| e.into_inner()) = std::time::Instant::now();
        self.0.in_flight.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Activity {
    fn new() -> Self {
        Activity { in_flight: Default::default(), last: std::sync::Mutex::new(std::time::Instant::now()) }
    }

    fn enter(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        InFlight(self.clone())
    }

    /// Resolves once no request was in flight for `limit`.
    async fn idle_for(&self, limit: std::time::Duration) {
        loop {
            let since = self.last.lock().unwrap_or_else(|e| e.into_inner()).elapsed();
            let busy = self.in_flight.load(std::sync::atomic::Ordering::SeqCst) > 0;
            if !busy && since >= limit {
                return;
            }
            // A request in flight ends at some point and stamps `last`: look again a limit later.
            tokio::time::sleep(if busy { limit } else { limit - since }).await;
        }
    }
}
