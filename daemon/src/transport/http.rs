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
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use crate::error::RepoError;
use crate::protocol::{self, Version, pkt};
use crate::repo::{RefSnapshot, Served};
use crate::service::{self, pipeline};
use crate::session::State;
use crate::tap::Exchange;
pub use crate::transport::http_common::{Body, Transport};
use crate::transport::http_common::{full, gzip_encoded, no_cache, read_body, text, transport_of};
use crate::transport::stream;

/// The smart-HTTP routes, by the suffix after the repository path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route<'a> {
    InfoRefs(&'a str),
    UploadPack(&'a str),
    ReceivePack(&'a str),
    /// `<repo>/gixd-bundles/<file>`: the bundle list or a bundle (bundle-uri), static files.
    Bundle(&'a str, &'a str),
    /// `<repo>/info/lfs/<rest>`: Git LFS ([`super::lfs`]).
    Lfs(&'a str, &'a str),
    /// A path only a dumb-HTTP client asks for.
    Dumb,
    NotFound,
}

fn route(path: &str) -> Route<'_> {
    if let Some((repo, rest)) = path.split_once("/info/lfs/") {
        Route::Lfs(repo, rest)
    } else if let Some(repo) = path.strip_suffix("/info/refs") {
        Route::InfoRefs(repo)
    } else if let Some(repo) = path.strip_suffix("/git-upload-pack") {
        Route::UploadPack(repo)
    } else if let Some(repo) = path.strip_suffix("/git-receive-pack") {
        Route::ReceivePack(repo)
    } else if let Some((repo, file)) = path.rsplit_once(&format!("/{}/", crate::maintenance::bundles::DIR))
        && (file == crate::maintenance::bundles::LIST || crate::maintenance::bundles::is_bundle_name(file))
    {
        Route::Bundle(repo, file)
    } else if path.ends_with("/HEAD") || path.contains("/objects/") || path.ends_with("/info/alternates") {
        Route::Dumb
    } else {
        Route::NotFound
    }
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
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let version = protocol_version(req.headers());
    let routed = route(&path);
    let (service, repository) = match routed {
        Route::InfoRefs(repo) => ("info/refs", Some(repo)),
        Route::UploadPack(repo) => ("git-upload-pack", Some(repo)),
        Route::ReceivePack(repo) => ("git-receive-pack", Some(repo)),
        Route::Bundle(repo, _) => ("bundle", Some(repo)),
        Route::Lfs(repo, _) => ("lfs", Some(repo)),
        Route::Dumb | Route::NotFound => ("other", None),
    };
    let repository = repository.map(|r| r.trim_matches('/').to_owned());
    let mut log = service::Request::new(transport_of(&req), Some(peer), service, Some(version));
    let http1 = req.version() < hyper::Version::HTTP_2;
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
        (Route::Bundle(_, _), _) if upload_pack_off => {
            text(StatusCode::FORBIDDEN, "fetch (git-upload-pack) is not enabled on this server")
        }
        (Route::Bundle(repo, file), &Method::GET | &Method::HEAD) => bundle_file(&state, repo, file, &req).await,
        (Route::Bundle(_, _), _) => text(StatusCode::METHOD_NOT_ALLOWED, format!("{method} is not allowed here")),
        (Route::Lfs(repo, rest), _) => super::lfs::handle(&state, repo, rest, req).await,
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
    if matches!(method, Method::POST | Method::PUT) && !response.status().is_success() && http1 {
        // Refused before its body was read: the connection cannot carry another request until
        // that body is consumed, so it closes (else the client's next request waits for the
        // I/O timeout).
        response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    tracing::info!(%method, %path, status = response.status().as_u16(), "http");
    // A transfer writes its own line when its last byte is gone; every other response here.
    if response.extensions().get::<Logged>().is_none() {
        use hyper::body::Body as _;
        let status = response.status();
        log.record.repository = if status.is_success() { repository } else { None };
        log.record.bytes = response.body().size_hint().exact().unwrap_or(0);
        log.record.http_status = Some(status.as_u16());
        if let Some(super::lfs::User(user)) = response.extensions().get::<super::lfs::User>() {
            log.record.user = Some(user.clone());
        }
        let outcome = match status {
            s if s.is_success() => service::Outcome::Ok,
            StatusCode::SERVICE_UNAVAILABLE => service::Outcome::Busy,
            s if s.is_server_error() => service::Outcome::Failed,
            _ => service::Outcome::Refused,
        };
        log.finish(&state, outcome);
    }
    Ok(response)
}

/// Who is asking, and may they read (or write) the repository at `repo_path`
/// ([`pipeline::authorize`])? The repository, and who it is, if so; the response to send
/// otherwise. Resolution runs on the blocking pool.
async fn authorize(
    state: &Arc<State>,
    headers: &HeaderMap,
    repo_path: &str,
    write: bool,
) -> Result<(Served, crate::auth::Identity), Response<Body>> {
    use pipeline::Denied;
    let authorization = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let name = repo_path.trim_matches('/').to_owned();
    let (state, repo_path) = (state.clone(), repo_path.to_owned());
    let service = if write { service::Service::ReceivePack } else { service::Service::UploadPack };
    let decided = tokio::task::spawn_blocking(move || {
        let identity = state.access.identify(authorization.as_deref());
        let caller = pipeline::Caller::Identified(identity.clone());
        pipeline::authorize(&state, &caller, service, &repo_path).map(|served| (served, identity))
    })
    .await;
    match decided {
        Ok(Ok(allowed)) => Ok(allowed),
        // git shows a text/plain body of a failed request to its user ("remote: …").
        Ok(Err(Denied::Unsupported(reason))) => {
            Err(text(StatusCode::NOT_IMPLEMENTED, format!("repository '{name}' cannot be served by gixd: {reason}")))
        }
        Ok(Err(Denied::Unauthorized)) => {
            let mut response = text(
                StatusCode::UNAUTHORIZED,
                "authentication required: a gixd token as the password (or a Bearer token)",
            );
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"gixd\""));
            Err(response)
        }
        Ok(Err(Denied::Forbidden)) => Err(text(StatusCode::FORBIDDEN, format!("your token may not push to '{name}'"))),
        Ok(Err(Denied::NotEnabled(service))) => {
            Err(text(StatusCode::FORBIDDEN, format!("{} is not enabled on this server", service.name())))
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

/// A bundle-uri file of a repository (its bundle list, or a bundle the list names), to whoever
/// may clone it: the mapped file as the body, no per-object work.
async fn bundle_file(state: &Arc<State>, repo_path: &str, file: &str, req: &Request<Incoming>) -> Response<Body> {
    let (served, _) = match authorize(state, req.headers(), repo_path, false).await {
        Ok(allowed) => allowed,
        Err(response) => return response,
    };
    let dir = served.git_dir.join(crate::maintenance::bundles::DIR);
    let listed = file == crate::maintenance::bundles::LIST
        || crate::maintenance::bundles::read_list(&served.git_dir).iter().any(|l| l.file == file);
    let opened = listed.then(|| std::fs::File::open(dir.join(file))).and_then(Result::ok);
    let Some(opened) = opened else {
        return text(StatusCode::NOT_FOUND, format!("no bundle '{file}' in '{}'", served.name));
    };
    // SAFETY: bundles and their list are never rewritten in place (written aside, renamed in).
    let body = match unsafe { memmap2::Mmap::map(&opened) } {
        Ok(map) => Bytes::from_owner(map),
        Err(_) => Bytes::new(), // an empty file cannot be mapped
    };
    let content_type = if file == crate::maintenance::bundles::LIST {
        "text/plain; charset=utf-8"
    } else {
        "application/x-git-bundle"
    };
    git_response(content_type, Full::new(body).map_err(|never: Infallible| match never {}).boxed())
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

fn refused(refusal: service::Refusal) -> Response<Body> {
    match refusal {
        service::Refusal::Busy(message) => {
            let mut response = text(StatusCode::SERVICE_UNAVAILABLE, message);
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            response
        }
        service::Refusal::Failed(message) => text(StatusCode::INTERNAL_SERVER_ERROR, message),
    }
}

/// A marker on a response whose transfer writes its own access-log line (when it ends).
#[derive(Clone, Copy)]
struct Logged;

fn logged(mut response: Response<Body>) -> Response<Body> {
    response.extensions_mut().insert(Logged);
    response
}

async fn upload_pack(state: Arc<State>, peer: SocketAddr, repo_path: String, req: Request<Incoming>) -> Response<Body> {
    if let Err(response) = expect_content_type(req.headers(), "application/x-git-upload-pack-request") {
        return response;
    }
    let version = protocol_version(req.headers());
    let transport = transport_of(&req);
    let (served, identity) = match authorize(&state, req.headers(), &repo_path, false).await {
        Ok(allowed) => allowed,
        Err(response) => return response,
    };
    let body = match read_body(&state.config, req).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let mut log = service::Request::new(transport, Some(peer), "git-upload-pack", Some(version))
        .serving(&served, identity.user());
    log.record.http_status = Some(200);
    match service::upload::stateless(&state, served, Some(peer.ip()), version, body, log).await {
        Ok(frames) => {
            logged(git_response("application/x-git-upload-pack-result", stream::ChannelBody::from(frames).boxed()))
        }
        Err(refusal) => refused(refusal),
    }
}

/// The metrics listener's one page.
pub fn metrics_response(state: &State, path: &str) -> Response<Body> {
    if path != "/metrics" {
        return text(StatusCode::NOT_FOUND, "not found: gixd serves /metrics here");
    }
    let buffers = &state.buffers;
    state.metrics.buffered(buffers.memory_used(), buffers.disk_used(), buffers.spilled_total(), buffers.ranged_total());
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
        Err(response) if response.status() == StatusCode::NOT_FOUND => {
            if creator(state, req.headers(), repo_path).await.is_none() {
                return response;
            }
            // Push-to-create: the repository it would make, empty.
            let mut w = pkt::Writer::new();
            let refs = RefSnapshot::empty(gix_hash::Kind::Sha1);
            protocol::advertise_http(protocol::Service::ReceivePack, &refs, version, &mut w);
            return git_response("application/x-git-receive-pack-advertisement", full(w.into_bytes()));
        }
        Err(response) => return response,
    };
    let advertised = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, crate::serve_error::ServeError> {
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

/// With push-to-create on, who may create the missing repository at `repo_path` by pushing to
/// it (a valid name, nothing there, a token that writes and creates under it); `None` otherwise,
/// and the request stays "not found".
async fn creator(state: &Arc<State>, headers: &HeaderMap, repo_path: &str) -> Option<crate::auth::Identity> {
    if !state.config.push_to_create {
        return None;
    }
    let authorization = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let (state, repo_path) = (state.clone(), repo_path.to_owned());
    tokio::task::spawn_blocking(move || {
        let identity = state.access.identify(authorization.as_deref());
        let name = crate::repo::create::checked_name(&repo_path).ok()?;
        if !matches!(state.repos.locate(&repo_path), Err(RepoError::NotFound(_))) {
            return None;
        }
        crate::auth::may_create(&identity, &crate::auth::repo_key(&name.to_string_lossy())).then_some(identity)
    })
    .await
    .ok()
    .flatten()
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
    let authorized = authorize(&state, req.headers(), &repo_path, true).await;
    let creating = match &authorized {
        Err(response) if response.status() == StatusCode::NOT_FOUND => creator(&state, req.headers(), &repo_path).await,
        _ => None,
    };
    let (served, identity) = match (authorized, creating) {
        (Ok(allowed), _) => (Some(allowed.0), allowed.1),
        (Err(_), Some(identity)) => (None, identity),
        (Err(response), None) => return response,
    };
    let transport = transport_of(&req);
    let body = stream::BodyReader::spawn(req.into_body(), state.config.io_timeout);
    // Held to a minimum rate: per-frame timeouts alone let a trickling push live for ever.
    let body = crate::transport::pace::Paced::new(body, state.config.push_pace());
    let input =
        move || -> Box<dyn Read> { if gzip { Box::new(flate2::read::GzDecoder::new(body)) } else { Box::new(body) } };
    let mut log = service::Request::new(transport, Some(peer), "git-receive-pack", Some(version));
    log.record.http_status = Some(200);
    log.record.user = identity.user().map(str::to_owned);
    let pusher = identity.user().map(str::to_owned);
    let pushed = match served {
        Some(served) => {
            log = log.serving(&served, identity.user());
            service::receive::stateless(&state, served, Some(peer.ip()), pusher, version, input, log).await
        }
        None => {
            let name = repo_path.trim_matches('/').to_owned();
            log.record.repository = Some(name.clone());
            service::receive::create_and_push(&state, name, pusher, version, input, log).await
        }
    };
    match pushed {
        Ok(report) => logged(git_response("application/x-git-receive-pack-result", full(report))),
        Err(refusal) => refused(refusal),
    }
}

/// Serve smart HTTP on `listener`, a task per connection.
pub async fn accept(listener: tokio::net::TcpListener, state: Arc<State>) {
    while let Some((stream, peer)) = super::accept(&listener, "http", &state.life).await {
        // Responses leave in few, large writes; small ones (an ACK round, a short reply) must
        // not wait for the client's delayed ACK.
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let header_timeout = state.config.io_timeout;
        tokio::spawn(async move {
            let (_busy, life) = (state.life.busy(), state.life.clone());
            let service = hyper::service::service_fn(move |req| handle(state.clone(), peer, req));
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.keep_alive(true).timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(header_timeout);
            drive!(
                life,
                builder.serve_connection(
                    hyper_util::rt::TokioIo::new(crate::transport::zero_copy::Stream::new(stream)),
                    service
                ),
                peer,
                life.reached(crate::lifecycle::Phase::Draining)
            );
        });
    }
}

/// `GET /metrics` (the Prometheus text) on a listener of its own; anything else is a 404.
pub async fn serve_metrics(listener: tokio::net::TcpListener, state: Arc<State>) {
    while let Some((stream, _)) = super::accept(&listener, "metrics", &state.life).await {
        let state = state.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let state = state.clone();
                async move { Ok::<_, std::convert::Infallible>(metrics_response(&state, req.uri().path())) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
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
