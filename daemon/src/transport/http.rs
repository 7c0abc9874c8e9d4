//! Smart HTTP, with git http-backend's conventions: `GET <repo>/info/refs?service=git-upload-pack`
//! (or `git-receive-pack`), `POST <repo>/git-upload-pack` and `POST <repo>/git-receive-pack`,
//! their content types and no-cache headers, `Git-Protocol: version=2` selecting v2, gzip request
//! bodies (bounded before and after inflation; a push's pack streams through instead of being
//! held), streamed responses, and access control ([`crate::auth`]: 401 asks git for credentials).
//! Errors that happen before a response starts become an HTTP status with a text body git shows
//! to its user; later ones travel in-band (the protocol layer writes them).

#![allow(
    clippy::result_large_err,
    reason = "a refusal is the response to send: Err(Response) is returned once and sent as is"
)]

use std::convert::Infallible;
use std::io::Read;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use crate::access_log::Record;
use crate::config::Config;
use crate::error::RepoError;
use crate::pack_cache::{Found, Key};
use crate::protocol::{self, Version, pkt};
use crate::repo::{RefSnapshot, Served};
use crate::session::{Share, Slot, State, Tally};
use crate::tap::Exchange;
use crate::transport::stream;

pub type Body = BoxBody<Bytes, std::io::Error>;

/// The smart-HTTP routes, by the suffix after the repository path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route<'a> {
    InfoRefs(&'a str),
    UploadPack(&'a str),
    ReceivePack(&'a str),
    /// A path only a dumb-HTTP client asks for.
    Dumb,
    NotFound,
}

fn route(path: &str) -> Route<'_> {
    if let Some(repo) = path.strip_suffix("/info/refs") {
        Route::InfoRefs(repo)
    } else if let Some(repo) = path.strip_suffix("/git-upload-pack") {
        Route::UploadPack(repo)
    } else if let Some(repo) = path.strip_suffix("/git-receive-pack") {
        Route::ReceivePack(repo)
    } else if path.ends_with("/HEAD") || path.contains("/objects/") || path.ends_with("/info/alternates") {
        Route::Dumb
    } else {
        Route::NotFound
    }
}

fn text(status: StatusCode, message: impl Into<String>) -> Response<Body> {
    let mut message = crate::error::for_client(&message.into(), 4096);
    if !message.ends_with('\n') {
        message.push('\n');
    }
    let mut response = Response::new(full(message.into_bytes()));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    no_cache(response.headers_mut());
    response
}

fn full(bytes: Vec<u8>) -> Body {
    Full::new(Bytes::from(bytes)).map_err(|never: Infallible| match never {}).boxed()
}

/// http-backend's headers for dynamic responses.
fn no_cache(headers: &mut HeaderMap) {
    headers.insert(header::EXPIRES, HeaderValue::from_static("Fri, 01 Jan 1980 00:00:00 GMT"));
    headers.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, max-age=0, must-revalidate"));
}

fn git_response(content_type: &'static str, body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    no_cache(response.headers_mut());
    response
}

fn protocol_version(headers: &HeaderMap) -> Version {
    headers
        .get_all("git-protocol")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(Version::from_params)
        .max_by_key(|v| match v {
            Version::V0 => 0,
            Version::V1 => 1,
            Version::V2 => 2,
        })
        .unwrap_or(Version::V0)
}

fn query_param<'a>(query: Option<&'a str>, key: &str) -> Option<&'a str> {
    query?.split('&').find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// Serve one HTTP request. Never fails: every error is a response.
pub async fn handle(state: Arc<State>, peer: SocketAddr, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let started = std::time::Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let version = protocol_version(req.headers());
    let routed = route(&path);
    let (service, repository) = match routed {
        Route::InfoRefs(repo) => ("info/refs", Some(repo)),
        Route::UploadPack(repo) => ("git-upload-pack", Some(repo)),
        Route::ReceivePack(repo) => ("git-receive-pack", Some(repo)),
        Route::Dumb | Route::NotFound => ("other", None),
    };
    let repository = repository.map(|r| r.trim_matches('/').to_owned());
    let upload_pack_off = !state.config.services.upload_pack;
    let response = match (routed, &method) {
        (Route::UploadPack(_), _) if upload_pack_off => {
            text(StatusCode::FORBIDDEN, "fetch (git-upload-pack) is not enabled on this server")
        }
        (Route::InfoRefs(_), _)
            if upload_pack_off && query_param(req.uri().query(), "service") != Some("git-receive-pack") =>
        {
            text(StatusCode::FORBIDDEN, "fetch (git-upload-pack) is not enabled on this server")
        }
        (Route::InfoRefs(repo), &Method::GET | &Method::HEAD) => info_refs(&state, repo, &req).await,
        (Route::UploadPack(repo), &Method::POST) => upload_pack(state.clone(), peer, repo.to_owned(), req).await,
        (Route::ReceivePack(repo), &Method::POST) => receive_pack(state.clone(), peer, repo.to_owned(), req).await,
        (Route::ReceivePack(_), _) => text(StatusCode::METHOD_NOT_ALLOWED, format!("{method} is not allowed here")),
        (Route::Dumb, _) => {
            text(StatusCode::FORBIDDEN, "gixd serves the smart HTTP protocol only; dumb HTTP is not supported")
        }
        (Route::InfoRefs(_) | Route::UploadPack(_), _) => {
            text(StatusCode::METHOD_NOT_ALLOWED, format!("{method} is not allowed here"))
        }
        (Route::NotFound, _) => text(
            StatusCode::NOT_FOUND,
            "not found: gixd serves <repository>/info/refs and <repository>/git-upload-pack",
        ),
    };
    let mut response = response;
    if method == Method::POST && !response.status().is_success() {
        // Refused before its body was read: the connection cannot carry another request until
        // that body is consumed, so it closes (else the client's next request waits for the
        // I/O timeout).
        response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    tracing::info!(%method, %path, status = response.status().as_u16(), "http");
    // A transfer writes its own line when its last byte is gone; every other response here.
    if response.extensions().get::<Logged>().is_none() {
        use hyper::body::Body as _;
        state.finished(Record {
            peer: peer.to_string(),
            transport: "http",
            repository: if response.status().is_success() { repository } else { None },
            service: service.to_owned(),
            version: Some(version.number()),
            bytes: response.body().size_hint().exact().unwrap_or(0),
            duration_ms: started.elapsed().as_secs_f64() * 1e3,
            status: response.status().as_u16().to_string(),
            ..Record::default()
        });
    }
    Ok(response)
}

/// Why a request does not reach its repository.
enum Refused {
    By(crate::auth::Decision),
    /// It may read it, but gixd cannot: the reason ([`crate::repo::format`]).
    Unsupported(String),
}

/// Who is asking, and may they read (or write) the repository at `repo_path`? The repository,
/// and who it is, if so; the response to send otherwise. Resolution runs on the blocking pool.
async fn authorize(
    state: &Arc<State>,
    headers: &HeaderMap,
    repo_path: &str,
    write: bool,
) -> Result<(Served, crate::auth::Identity), Response<Body>> {
    use crate::auth::{Decision, Identity, decide, repo_key};
    let authorization = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let name = repo_path.trim_matches('/').to_owned();
    let (state, repo_path) = (state.clone(), repo_path.to_owned());
    let decided = tokio::task::spawn_blocking(move || {
        let identity = state.access.identify(authorization.as_deref());
        // Credentials first: whether a repository exists is nobody's business before that.
        if matches!(identity, Identity::Invalid) || (write && matches!(identity, Identity::Anonymous)) {
            return Err(Refused::By(Decision::Unauthorized));
        }
        let (served, exported) = match state.repos.locate(&repo_path) {
            Ok(located) => located,
            // Whoever may read it is told why it is not served; to everyone else it is not there.
            Err(RepoError::Unsupported { path, exported, reason }) => {
                return match decide(&identity, &repo_key(&path), exported, state.access.anonymous_read, false) {
                    Decision::Allow => Err(Refused::Unsupported(reason.to_string())),
                    other => Err(Refused::By(other)),
                };
            }
            Err(err @ RepoError::Open { .. }) => {
                tracing::error!(%err, "repository could not be opened");
                return Err(Refused::By(Decision::NotFound));
            }
            Err(_) => return Err(Refused::By(Decision::NotFound)),
        };
        match decide(&identity, &repo_key(&served.name), exported, state.access.anonymous_read, write) {
            Decision::Allow => Ok((served, identity)),
            other => Err(Refused::By(other)),
        }
    })
    .await;
    match decided {
        Ok(Ok(allowed)) => Ok(allowed),
        // git shows a text/plain body of a failed request to its user ("remote: …").
        Ok(Err(Refused::Unsupported(reason))) => {
            Err(text(StatusCode::NOT_IMPLEMENTED, format!("repository '{name}' cannot be served by gixd: {reason}")))
        }
        Ok(Err(Refused::By(Decision::Unauthorized))) => {
            let mut response = text(
                StatusCode::UNAUTHORIZED,
                "authentication required: a gixd token as the password (or a Bearer token)",
            );
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"gixd\""));
            Err(response)
        }
        Ok(Err(Refused::By(Decision::Forbidden))) => {
            Err(text(StatusCode::FORBIDDEN, format!("your token may not push to '{name}'")))
        }
        Ok(Err(_)) => Err(text(StatusCode::NOT_FOUND, format!("repository '{name}' not found"))),
        Err(_) => Err(text(StatusCode::INTERNAL_SERVER_ERROR, "internal error")),
    }
}

async fn info_refs(state: &Arc<State>, repo_path: &str, req: &Request<Incoming>) -> Response<Body> {
    match query_param(req.uri().query(), "service") {
        Some("git-upload-pack") => {}
        Some("git-receive-pack") => return receive_pack_advertisement(state, repo_path, req).await,
        Some(other) => return text(StatusCode::FORBIDDEN, format!("unsupported service '{other}'")),
        None => {
            return text(StatusCode::FORBIDDEN, "gixd serves the smart HTTP protocol only; dumb HTTP is not supported");
        }
    }
    let version = protocol_version(req.headers());
    let (served, _) = match authorize(state, req.headers(), repo_path, false).await {
        Ok(allowed) => allowed,
        Err(response) => return response,
    };
    let tap_state = state.clone();
    let advertise = move || -> Result<(String, Vec<u8>), Response<Body>> {
        let repo = served.repo.to_thread_local();
        // v2 advertises capabilities only: no ref is read for it.
        let refs = match version {
            Version::V2 => RefSnapshot::settings_only(&repo),
            _ => RefSnapshot::load(&repo).map_err(|err| text(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()))?,
        };
        let mut w = pkt::Writer::new();
        protocol::advertise_http(protocol::Service::UploadPack, &refs, version, &mut w);
        Ok((served.name, w.into_bytes()))
    };
    // v2's advertisement reads settings already in memory: no file is touched, so it is made
    // here rather than handed to (and back from) a blocking thread.
    let advertised = match version {
        Version::V2 => Ok(advertise()),
        _ => tokio::task::spawn_blocking(advertise).await,
    };
    match advertised {
        Ok(Ok((repo, bytes))) => {
            if let Some(tap) = &tap_state.tap {
                tap.exchange(Exchange {
                    repo,
                    service: "info/refs",
                    version,
                    request: Vec::new(),
                    response: bytes.clone(),
                    pack: None,
                });
            }
            git_response("application/x-git-upload-pack-advertisement", full(bytes))
        }
        Ok(Err(response)) => response,
        Err(join) => {
            tracing::error!(%join, "advertisement task failed");
            text(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
        }
    }
}

/// A request's body must be of `expected` type.
fn expect_content_type(headers: &HeaderMap, expected: &str) -> Result<(), Response<Body>> {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if content_type == expected {
        Ok(())
    } else {
        Err(text(StatusCode::UNSUPPORTED_MEDIA_TYPE, format!("expected Content-Type {expected}, got '{content_type}'")))
    }
}

/// Whether the body is gzip (`Content-Encoding`); any other encoding is refused.
fn gzip_encoded(headers: &HeaderMap) -> Result<bool, Response<Body>> {
    match headers.get(header::CONTENT_ENCODING).map(|v| v.to_str().unwrap_or("?")) {
        None | Some("identity") => Ok(false),
        Some("gzip" | "x-gzip") => Ok(true),
        Some(other) => Err(text(StatusCode::UNSUPPORTED_MEDIA_TYPE, format!("unsupported Content-Encoding '{other}'"))),
    }
}

/// A bounded number of transfers at once; beyond it, a short wait, then a clear refusal (503
/// with `Retry-After`). Past the limit of its repository or of its client's address, a transfer
/// is refused the same way at once.
async fn transfer_slot(state: &State, served: &Served, peer: SocketAddr) -> Result<(Slot, Share), Response<Body>> {
    let share = enter_share(state, served, peer)?;
    Ok((global_slot(state).await?, share))
}

fn busy(message: &str) -> Response<Body> {
    let mut response = text(StatusCode::SERVICE_UNAVAILABLE, message);
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    response
}

/// The transfer's place among its repository's and its client's.
fn enter_share(state: &State, served: &Served, peer: SocketAddr) -> Result<Share, Response<Body>> {
    state.shares.enter(&served.git_dir, Some(peer.ip())).map_err(|refused| {
        tracing::info!(repo = %served.name, %peer, ?refused, "transfer refused: busy");
        busy(refused.message())
    })
}

/// One of the server's transfer slots.
async fn global_slot(state: &State) -> Result<Slot, Response<Body>> {
    state.slot().await.ok_or_else(|| busy("server busy: too many transfers in flight, retry shortly"))
}

/// Read a request body: at most `max_request_body` bytes as sent, at most `max_inflated_body`
/// after gzip.
async fn read_body(config: &Config, req: Request<Incoming>) -> Result<Vec<u8>, Response<Body>> {
    let gzip = gzip_encoded(req.headers())?;
    let limit = config.max_request_body;
    let collected = tokio::time::timeout(config.io_timeout, Limited::new(req.into_body(), limit).collect()).await;
    let Ok(collected) = collected else {
        return Err(text(StatusCode::REQUEST_TIMEOUT, "the request body did not arrive in time"));
    };
    let body = match collected {
        Ok(collected) => collected.to_bytes(),
        Err(err) if err.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
            return Err(text(StatusCode::PAYLOAD_TOO_LARGE, format!("request body larger than {limit} bytes")));
        }
        Err(err) => return Err(text(StatusCode::BAD_REQUEST, format!("could not read the request body: {err}"))),
    };
    if !gzip {
        return Ok(body.to_vec());
    }
    let max = config.max_inflated_body;
    tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        let mut decoder = flate2::read::GzDecoder::new(&body[..]).take(max as u64 + 1);
        match decoder.read_to_end(&mut out) {
            Ok(_) if out.len() > max => {
                Err(text(StatusCode::PAYLOAD_TOO_LARGE, format!("request body inflates to more than {max} bytes")))
            }
            Ok(_) => Ok(out),
            Err(err) => Err(text(StatusCode::BAD_REQUEST, format!("request body is not valid gzip: {err}"))),
        }
    })
    .await
    .unwrap_or_else(|_| Err(text(StatusCode::INTERNAL_SERVER_ERROR, "internal error")))
}

/// A marker on a response whose transfer writes its own access-log line (when it ends).
#[derive(Clone, Copy)]
struct Logged;

fn logged(mut response: Response<Body>) -> Response<Body> {
    response.extensions_mut().insert(Logged);
    response
}

async fn upload_pack(state: Arc<State>, peer: SocketAddr, repo_path: String, req: Request<Incoming>) -> Response<Body> {
    let started = std::time::Instant::now();
    if let Err(response) = expect_content_type(req.headers(), "application/x-git-upload-pack-request") {
        return response;
    }
    let version = protocol_version(req.headers());
    let (served, identity) = match authorize(&state, req.headers(), &repo_path, false).await {
        Ok(allowed) => allowed,
        Err(response) => return response,
    };
    let body = match read_body(&state.config, req).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let record = Record {
        peer: peer.to_string(),
        transport: "http",
        repository: Some(served.name.clone()),
        service: "git-upload-pack".into(),
        version: Some(version.number()),
        user: identity.user().map(str::to_owned),
        status: "200".into(),
        ..Record::default()
    };
    if state.pack_cache.is_some()
        && pkt::read_all(&body).is_ok_and(|lines| lines.iter().any(|l| matches!(l, pkt::Line::Data(b"done"))))
    {
        return cached_upload_pack(state, peer, served, version, body, record, started).await;
    }
    // The slot is taken once the request is in: a client trickling its body holds none.
    let permit = match transfer_slot(&state, &served, peer).await {
        Ok(permit) => permit,
        Err(response) => return response,
    };
    let (mut sink, response_body) = stream::pair(state.config.effective_stream_window(), state.config.io_timeout);
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let mut record = record;
        let cpu = crate::metrics::thread_cpu_seconds();
        let tally = Tally::default();
        let ctx = state.context(&served, None, &tally);
        let mut tee = Tee { sink: &mut sink, copy: state.tap.as_ref().map(|_| Vec::new()), sent: 0 };
        let result = protocol::upload_pack(&ctx, version, protocol::Input::<&[u8]>::Stateless(&body), &mut tee);
        let copy = tee.copy.take();
        record.bytes = tee.sent;
        // The tap hears of the exchange before its last frame leaves: once the client has the
        // whole response, the exchange is already recorded.
        if let (Some(tap), Some(response)) = (&state.tap, copy) {
            tap.exchange(Exchange {
                repo: served.name.clone(),
                service: "git-upload-pack",
                version,
                request: body.clone(),
                response,
                pack: result.as_ref().ok().copied().flatten(),
            });
        }
        let finished = sink.finish();
        let cpu = crate::metrics::thread_cpu_seconds() - cpu;
        if let Ok(Some(stats)) = &result {
            state.metrics.generated(cpu);
            record.objects = Some(stats.entries);
        }
        match result {
            Ok(_) if finished.is_ok() => {}
            Ok(_) | Err(crate::error::ServeError::Disconnected) => {
                record.status = "200 disconnected".into();
                tracing::info!(repo = %served.name, "client went away")
            }
            Err(err) => {
                record.status = "200 failed".into();
                tracing::warn!(repo = %served.name, %err, "upload-pack failed")
            }
        }
        (record.wants, record.haves) = tally.counts();
        record.cpu_ms = cpu * 1e3;
        record.duration_ms = started.elapsed().as_secs_f64() * 1e3;
        state.finished(record);
    });
    logged(git_response("application/x-git-upload-pack-result", response_body.boxed()))
}

/// A fetch through the pack cache: a finished response is read back, one being generated is
/// read along, else this request generates it (in a transfer slot) for itself and for every
/// identical request that comes while it runs. Readers hold no transfer slot: they cost no
/// generation; their repository's and client's limits still count them.
async fn cached_upload_pack(
    state: Arc<State>,
    peer: SocketAddr,
    served: Served,
    version: Version,
    body: Vec<u8>,
    mut record: Record,
    started: std::time::Instant,
) -> Response<Body> {
    let share = match enter_share(&state, &served, peer) {
        Ok(share) => share,
        Err(response) => return response,
    };
    let repo = served.repo.clone();
    let fingerprint = tokio::task::spawn_blocking(move || {
        let repo = repo.to_thread_local();
        crate::repo::upload_ref_state(&repo).map(|refs| {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (refs, crate::packs::directory_state(&repo)).hash(&mut h);
            h.finish()
        })
    })
    .await;
    let fingerprint = match fingerprint {
        Ok(Ok(fingerprint)) => fingerprint,
        Ok(Err(err)) => return text(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()),
        Err(_) => return text(StatusCode::INTERNAL_SERVER_ERROR, "internal error"),
    };
    let key =
        Key { git_dir: served.git_dir.clone(), state: fingerprint, version: version.number(), request: body.clone() };
    let cache = state.pack_cache.as_ref().expect("only with a cache");
    let found = |found: Found| match found {
        Found::Hit(entry) => (entry, "hit"),
        Found::Join(entry) => (entry, "join"),
    };
    let (entry, outcome) = match cache.find(&key) {
        Some(f) => found(f),
        None => {
            let slot = match global_slot(&state).await {
                Ok(slot) => slot,
                Err(response) => return response,
            };
            match cache.start(key) {
                // Another request started it while this one waited for its slot.
                Err(f) => found(f),
                Ok(entry) => {
                    let generator = (state.clone(), entry.clone());
                    tokio::task::spawn_blocking(move || {
                        let _slot = slot;
                        let (state, entry) = generator;
                        let cpu = crate::metrics::thread_cpu_seconds();
                        let tally = Tally::default();
                        let ctx = state.context(&served, None, &tally);
                        let cache = state.pack_cache.as_ref().expect("only with a cache");
                        let result = protocol::upload_pack(
                            &ctx,
                            version,
                            protocol::Input::<&[u8]>::Stateless(&body),
                            &mut cache.writer(&entry),
                        );
                        let cpu = crate::metrics::thread_cpu_seconds() - cpu;
                        let (wants, haves) = tally.counts();
                        let stats = result.as_ref().ok().copied().flatten();
                        *entry.generated.lock().expect("not poisoned") =
                            crate::pack_cache::Generated { stats, wants, haves, cpu_seconds: cpu };
                        if let Ok(Some(_)) = &result {
                            state.metrics.generated(cpu);
                        }
                        if let Err(err) = &result {
                            tracing::warn!(repo = %served.name, %err, "upload-pack failed");
                        }
                        cache.finish(&entry, result.is_ok());
                    });
                    (entry, "miss")
                }
            }
        }
    };
    state.metrics.cache(outcome);
    record.cache = Some(outcome);
    let (tx, response_body) = stream::channel();
    tokio::spawn(async move {
        let _share = share;
        let (sent, complete) = read_entry(&entry, &tx, state.config.io_timeout).await;
        drop(tx);
        record.bytes = sent;
        let progress = entry.progress();
        record.status = match (complete, progress.state) {
            (true, crate::pack_cache::Generation::Done) => "200".into(),
            (true, _) => "200 failed".into(),
            (false, _) => "200 disconnected".into(),
        };
        let generated = *entry.generated.lock().expect("not poisoned");
        record.objects = generated.stats.map(|s| s.entries);
        (record.wants, record.haves) = (generated.wants, generated.haves);
        if outcome == "miss" {
            record.cpu_ms = generated.cpu_seconds * 1e3;
        }
        record.duration_ms = started.elapsed().as_secs_f64() * 1e3;
        state.finished(record);
    });
    logged(git_response("application/x-git-upload-pack-result", response_body.boxed()))
}

/// Send a cache entry to one client from its start, as fast as that client reads, waiting for
/// the generator where the client has caught up. The bytes sent, and whether the entry was
/// sent to its end (else the client went away or stalled past `stall_timeout`). The entry's
/// bytes are mapped already: each frame is what is there up to the end of its window of the
/// file, not a stream window's worth (fewer hand-overs, no memory per frame).
async fn read_entry(
    entry: &crate::pack_cache::Entry,
    tx: &tokio::sync::mpsc::Sender<Bytes>,
    stall_timeout: std::time::Duration,
) -> (u64, bool) {
    let mut progress = entry.subscribe();
    let mut offset = 0u64;
    loop {
        let chunk = match entry.read_at(offset, usize::MAX) {
            Ok(chunk) => chunk,
            Err(err) => {
                tracing::warn!(%err, "pack cache entry unreadable");
                return (offset, false);
            }
        };
        if !chunk.is_empty() {
            let len = chunk.len() as u64;
            match tokio::time::timeout(stall_timeout, tx.send(chunk)).await {
                Ok(Ok(())) => offset += len,
                _ => return (offset, false),
            }
            continue;
        }
        let now = *progress.borrow_and_update();
        if now.len > offset {
            continue;
        }
        if now.state != crate::pack_cache::Generation::Running {
            return (offset, true);
        }
        if progress.changed().await.is_err() {
            // The generator is gone and so is its entry's sender: whatever is there was read.
            return (offset, entry.progress().len == offset);
        }
    }
}

/// The metrics listener's one page.
pub fn metrics_response(state: &State, path: &str) -> Response<Body> {
    if path != "/metrics" {
        return text(StatusCode::NOT_FOUND, "not found: gixd serves /metrics here");
    }
    let mut response = Response::new(full(state.metrics.render().into_bytes()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    response
}

async fn receive_pack_advertisement(state: &Arc<State>, repo_path: &str, req: &Request<Incoming>) -> Response<Body> {
    let version = protocol_version(req.headers());
    let (served, _) = match authorize(state, req.headers(), repo_path, true).await {
        Ok(allowed) => allowed,
        Err(response) => return response,
    };
    let advertised = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, crate::error::ServeError> {
        let repo = served.repo.to_thread_local();
        let refs = RefSnapshot::load_for_push(&repo)?;
        let mut w = pkt::Writer::new();
        protocol::advertise_http(protocol::Service::ReceivePack, &refs, version, &mut w);
        Ok(w.into_bytes())
    })
    .await;
    match advertised {
        Ok(Ok(bytes)) => git_response("application/x-git-receive-pack-advertisement", full(bytes)),
        Ok(Err(err)) => text(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()),
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "internal error"),
    }
}

/// A push: authorized for write, its body streamed (never held whole) into the protocol layer
/// on a blocking thread, the report returned when the push is done.
async fn receive_pack(
    state: Arc<State>,
    peer: SocketAddr,
    repo_path: String,
    req: Request<Incoming>,
) -> Response<Body> {
    if let Err(response) = expect_content_type(req.headers(), "application/x-git-receive-pack-request") {
        return response;
    }
    let version = protocol_version(req.headers());
    let gzip = match gzip_encoded(req.headers()) {
        Ok(gzip) => gzip,
        Err(response) => return response,
    };
    let (served, identity) = match authorize(&state, req.headers(), &repo_path, true).await {
        Ok(allowed) => allowed,
        Err(response) => return response,
    };
    let permit = match transfer_slot(&state, &served, peer).await {
        Ok(permit) => permit,
        Err(response) => return response,
    };
    let started = std::time::Instant::now();
    let body = stream::BodyReader::spawn(req.into_body(), state.config.io_timeout);
    let task_state = state.clone();
    let pushed = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let state = task_state;
        let cpu = crate::metrics::thread_cpu_seconds();
        let tally = Tally::default();
        let ctx = state.context(&served, identity.user(), &tally);
        let mut out = Vec::new();
        // Held to a minimum rate: per-frame timeouts alone let a trickling push live for ever.
        let body = crate::transport::pace::Paced::new(body, state.config.push_pace());
        let input: Box<dyn Read> = if gzip { Box::new(flate2::read::GzDecoder::new(body)) } else { Box::new(body) };
        let input = std::io::BufReader::with_capacity(64 * 1024, input);
        let result = protocol::receive_pack(&ctx, version, protocol::Mode::Stateless, input, &mut out);
        let outcome = match &result {
            Ok(Some(pushed)) => Some(pushed.label()),
            Ok(None) => None,
            Err(err) => {
                tracing::warn!(repo = %served.name, %err, "push failed");
                Some("failed")
            }
        };
        if let Some(outcome) = outcome {
            state.metrics.push(outcome);
        }
        state.finished(Record {
            peer: peer.to_string(),
            transport: "http",
            repository: Some(served.name.clone()),
            service: "git-receive-pack".into(),
            version: Some(version.number()),
            user: identity.user().map(str::to_owned),
            bytes: out.len() as u64,
            cpu_ms: (crate::metrics::thread_cpu_seconds() - cpu) * 1e3,
            duration_ms: started.elapsed().as_secs_f64() * 1e3,
            status: format!("200 {}", outcome.unwrap_or("empty")),
            ..Record::default()
        });
        out
    })
    .await;
    match pushed {
        Ok(out) => logged(git_response("application/x-git-receive-pack-result", full(out))),
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "internal error"),
    }
}

/// Writes through to the sink, keeping a copy for the tap when there is one.
struct Tee<'a> {
    sink: &'a mut stream::ChannelSink,
    copy: Option<Vec<u8>>,
    sent: u64,
}

impl std::io::Write for Tee<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let n = self.sink.write(data)?;
        self.sent += n as u64;
        if let Some(copy) = &mut self.copy {
            copy.extend_from_slice(&data[..n]);
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.sink.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_found_by_their_suffix() {
        assert_eq!(route("/a/b.git/info/refs"), Route::InfoRefs("/a/b.git"));
        assert_eq!(route("/r/git-upload-pack"), Route::UploadPack("/r"));
        assert_eq!(route("/r/git-receive-pack"), Route::ReceivePack("/r"));
        assert_eq!(route("/r/HEAD"), Route::Dumb);
        assert_eq!(route("/r/objects/ab/cdef"), Route::Dumb);
        assert_eq!(route("/r"), Route::NotFound);
    }

    #[test]
    fn the_service_parameter_is_read_from_the_query() {
        assert_eq!(query_param(Some("service=git-upload-pack"), "service"), Some("git-upload-pack"));
        assert_eq!(query_param(Some("a=b&service=x"), "service"), Some("x"));
        assert_eq!(query_param(Some("xservice=y"), "service"), None);
        assert_eq!(query_param(None, "service"), None);
    }
}
