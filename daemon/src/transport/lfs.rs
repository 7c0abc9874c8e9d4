//! Git LFS over HTTP(S): the routes below `<repository>/info/lfs/` — `POST objects/batch`, the
//! object links it hands out (`GET`/`HEAD` with `Range`, `PUT` streamed), `POST verify`, and the
//! locks API (`GET`/`POST locks`, `POST locks/verify`, `POST locks/<id>/unlock`) — their JSON
//! bodies (`application/vnd.git-lfs+json`) and statuses. What each answers is the LFS service's
//! ([`crate::service::lfs`]); this module parses and frames.

#![allow(
    clippy::result_large_err,
    reason = "a refusal is the response to send: Err(Response) is returned once and sent as is"
)]

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use super::http_common::{Body, full, read_body, transport_of};
use crate::auth::Identity;
use crate::lfs::api::{self, BatchRequest, ErrorBody, LockRequest, ObjectSpec, Operation, UnlockRequest};
use crate::lfs::token::is_token;
use crate::repo::Served;
use crate::service::lfs::{self as service, Access, Links, Refusal};
use crate::service::pipeline;
use crate::session::State;

/// The request below `<repository>/info/lfs/`, by its method and the rest of its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route<'a> {
    Batch,
    Object(&'a str),
    Verify,
    Locks,
    VerifyLocks,
    Unlock(&'a str),
}

fn route<'a>(method: &Method, rest: &'a str) -> Option<Route<'a>> {
    let route = match rest {
        "objects/batch" => Route::Batch,
        "verify" => Route::Verify,
        "locks" => Route::Locks,
        "locks/verify" => Route::VerifyLocks,
        _ => match (rest.strip_prefix("objects/"), rest.strip_prefix("locks/").and_then(|r| r.strip_suffix("/unlock")))
        {
            (Some(oid), _) => Route::Object(oid),
            (_, Some(id)) => Route::Unlock(id),
            _ => return None,
        },
    };
    let allowed = match route {
        Route::Object(_) => matches!(*method, Method::GET | Method::HEAD | Method::PUT),
        Route::Locks => matches!(*method, Method::GET | Method::POST),
        _ => *method == Method::POST,
    };
    allowed.then_some(route)
}

fn json(status: StatusCode, value: &impl serde::Serialize) -> Response<Body> {
    let mut response = Response::new(full(serde_json::to_vec(value).expect("API bodies serialize")));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(api::MEDIA_TYPE));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// A refusal as the API says it: its status and `{"message": …}` (with the lock in the way, for
/// a lock conflict or someone else's lock). A 401 asks for Basic credentials, as git-lfs expects.
fn refused(refusal: Refusal) -> Response<Body> {
    let status = StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = match refusal.lock {
        Some(lock) => json(status, &api::LockAnswer { lock: *lock, message: Some(refusal.message) }),
        None => json(status, &ErrorBody { message: &crate::error::for_client(&refusal.message, 1024) }),
    };
    if status == StatusCode::UNAUTHORIZED {
        let realm = HeaderValue::from_static("Basic realm=\"gixd\"");
        response.headers_mut().insert("lfs-authenticate", realm.clone());
        response.headers_mut().insert(header::WWW_AUTHENTICATE, realm);
    }
    if status == StatusCode::SERVICE_UNAVAILABLE {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    }
    response
}

fn authorization(headers: &HeaderMap) -> Option<String> {
    headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// Who asks, and may they have `access` to the repository at `repo_path` (on the blocking pool).
/// Who it is goes into `who` (the access log's user) whether or not they may.
async fn authorize(
    state: &Arc<State>,
    who: &Who,
    headers: &HeaderMap,
    repo_path: &str,
    access: Access,
) -> Result<(Served, Identity), Response<Body>> {
    let (state, repo_path, authorization) = (state.clone(), repo_path.to_owned(), authorization(headers));
    let (decided, user) = tokio::task::spawn_blocking(move || {
        // A token `git-lfs-authenticate` issued (SSH users), else a token of the token file.
        let issued = authorization.as_deref().and_then(|a| a.strip_prefix("Bearer ")).filter(|t| is_token(t));
        let identity = match issued {
            Some(token) => match service::issued_identity(&state, token, &repo_path, access) {
                Ok(identity) => identity,
                Err(refusal) => return (Err(refusal), None),
            },
            None => state.access.identify(authorization.as_deref()),
        };
        let user = identity.user().map(str::to_owned);
        (service::authorize(&state, &identity, &repo_path, access).map(|served| (served, identity)), user)
    })
    .await
    .unwrap_or_else(|_| (Err(Refusal { status: 500, message: "internal error".into(), lock: None }), None));
    if let Some(user) = user {
        let _ = who.0.set(user);
    }
    decided.map_err(refused)
}

/// Who a request turned out to be, once its credentials were read: the access log's user
/// ([`User`] on the response).
#[derive(Default)]
struct Who(std::sync::OnceLock<String>);

/// The user an LFS response was for, for the HTTP transport's access-log line.
#[derive(Clone)]
pub struct User(pub String);

/// The JSON body of `req`, within the request-body limits.
async fn body_of<T: serde::de::DeserializeOwned>(state: &State, req: Request<Incoming>) -> Result<T, Response<Body>> {
    let bytes = read_body(&state.config, req).await?;
    serde_json::from_slice(&bytes)
        .map_err(|err| refused(Refusal { status: 422, message: format!("not a valid LFS request: {err}"), lock: None }))
}

/// The repository's LFS URL as this client reaches it, and the headers its actions carry.
fn links(state: &State, req: &Request<Incoming>, repo_path: &str) -> Links {
    let origin = match &state.config.lfs.url {
        Some(url) => url.clone(),
        None => {
            let host = req
                .headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_owned)
                .or_else(|| req.uri().authority().map(|a| a.to_string()))
                .unwrap_or_else(|| "localhost".into());
            let scheme = if transport_of(req) == "https" { "https" } else { "http" };
            format!("{scheme}://{host}")
        }
    };
    let mut header = BTreeMap::new();
    if let Some(authorization) = authorization(req.headers()) {
        header.insert("Authorization".to_owned(), authorization);
    }
    Links { base: format!("{origin}/{}/info/lfs", repo_path.trim_matches('/')), header }
}

/// Serve one request below `<repo_path>/info/lfs/` (`rest`); the response carries the [`User`]
/// it was for, when the credentials named one.
pub async fn handle(state: &Arc<State>, repo_path: &str, rest: &str, req: Request<Incoming>) -> Response<Body> {
    let who = Who::default();
    let mut response = serve(state, &who, repo_path, rest, req).await;
    if let Some(user) = who.0.into_inner() {
        response.extensions_mut().insert(User(user));
    }
    response
}

async fn serve(state: &Arc<State>, who: &Who, repo_path: &str, rest: &str, req: Request<Incoming>) -> Response<Body> {
    let Some(route) = route(req.method(), rest) else {
        return refused(Refusal {
            status: 404,
            message: format!("no LFS endpoint '{rest}' for this method"),
            lock: None,
        });
    };
    match route {
        Route::Batch => {
            let links = links(state, &req, repo_path);
            let headers = req.headers().clone();
            // Who asks is settled before the body is read (whether they may write once it says
            // it uploads): wrong credentials and unknown repositories cost no parsing.
            let (mut served, _) = match authorize(state, who, &headers, repo_path, Access::Read).await {
                Ok(allowed) => allowed,
                Err(response) => return response,
            };
            let request: BatchRequest = match body_of(state, req).await {
                Ok(request) => request,
                Err(response) => return response,
            };
            if request.operation == Operation::Upload {
                served = match authorize(state, who, &headers, repo_path, Access::Write).await {
                    Ok((served, _)) => served,
                    Err(response) => return response,
                };
            }
            let state = state.clone();
            let answer = tokio::task::spawn_blocking(move || service::batch(&state, &served, &request, &links)).await;
            match answer {
                Ok(Ok(answer)) => json(StatusCode::OK, &answer),
                Ok(Err(refusal)) => refused(refusal),
                Err(_) => refused(Refusal { status: 500, message: "internal error".into(), lock: None }),
            }
        }
        Route::Object(oid) if req.method() == Method::PUT => upload(state, who, repo_path, oid, req).await,
        Route::Object(oid) => download(state, who, repo_path, oid, req).await,
        Route::Verify => {
            let headers = req.headers().clone();
            let (served, _) = match authorize(state, who, &headers, repo_path, Access::Write).await {
                Ok(allowed) => allowed,
                Err(response) => return response,
            };
            let spec: ObjectSpec = match body_of(state, req).await {
                Ok(spec) => spec,
                Err(response) => return response,
            };
            let (state, oid) = (state.clone(), spec.oid.clone());
            let verified = tokio::task::spawn_blocking(move || service::verify(&state, &served, &oid, spec.size)).await;
            match verified
                .unwrap_or_else(|_| Err(Refusal { status: 500, message: "internal error".into(), lock: None }))
            {
                Ok(()) => json(StatusCode::OK, &serde_json::json!({})),
                Err(refusal) => refused(refusal),
            }
        }
        Route::Locks if req.method() == Method::GET => {
            let (served, _) = match authorize(state, who, req.headers(), repo_path, Access::Read).await {
                Ok(allowed) => allowed,
                Err(response) => return response,
            };
            let query = req.uri().query().unwrap_or("");
            let param = |key: &str| {
                query
                    .split('&')
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                    .and_then(crate::repo::percent_decode)
            };
            let limit = param("limit").and_then(|l| l.parse().ok());
            let (path, id, cursor) = (param("path"), param("id"), param("cursor"));
            answer(
                service::list_locks(&served, path.as_deref(), id.as_deref(), cursor.as_deref(), limit),
                StatusCode::OK,
            )
        }
        Route::Locks => {
            let (served, user) = match writer(state, who, &req, repo_path).await {
                Ok(writer) => writer,
                Err(response) => return response,
            };
            let request: LockRequest = match body_of(state, req).await {
                Ok(request) => request,
                Err(response) => return response,
            };
            answer(service::create_lock(&served, &user, &request.path), StatusCode::CREATED)
        }
        Route::VerifyLocks => {
            let (served, user) = match writer(state, who, &req, repo_path).await {
                Ok(writer) => writer,
                Err(response) => return response,
            };
            let request: api::VerifyLocksRequest = match body_of(state, req).await {
                Ok(request) => request,
                Err(response) => return response,
            };
            answer(service::verify_locks(&served, &user, request.cursor.as_deref(), request.limit), StatusCode::OK)
        }
        Route::Unlock(id) => {
            let (served, user) = match writer(state, who, &req, repo_path).await {
                Ok(writer) => writer,
                Err(response) => return response,
            };
            let request: UnlockRequest = match body_of(state, req).await {
                Ok(request) => request,
                Err(response) => return response,
            };
            answer(service::unlock(&served, &user, id, request.force), StatusCode::OK)
        }
    }
}

fn answer<T: serde::Serialize>(result: Result<T, Refusal>, status: StatusCode) -> Response<Body> {
    match result {
        Ok(value) => json(status, &value),
        Err(refusal) => refused(refusal),
    }
}

/// A writer of the repository, with their name (locks are a user's); the response to send when
/// the caller is none.
async fn writer(
    state: &Arc<State>,
    who: &Who,
    req: &Request<Incoming>,
    repo_path: &str,
) -> Result<(Served, String), Response<Body>> {
    let (served, identity) = authorize(state, who, req.headers(), repo_path, Access::Write).await?;
    match identity.user() {
        Some(user) => Ok((served, user.to_owned())),
        None => Err(refused(Refusal { status: 403, message: "locks are a named user's".into(), lock: None })),
    }
}

/// A `Range: bytes=a-b` (or `a-`, or `-n`) of an object of `len` bytes, as start and length;
/// `Err` when it cannot be met. Several ranges are answered whole (200), as the header allows.
fn range_of(header: Option<&str>, len: u64) -> Result<Option<(u64, u64)>, ()> {
    let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else { return Ok(None) };
    if spec.contains(',') {
        return Ok(None);
    }
    let (from, to) = spec.split_once('-').ok_or(())?;
    let (from, to) = (from.trim(), to.trim());
    let (start, end) = match (from.parse::<u64>().ok(), to.parse::<u64>().ok()) {
        (Some(start), Some(end)) if start <= end => (start, end.min(len.saturating_sub(1))),
        (Some(start), None) if to.is_empty() => (start, len.saturating_sub(1)),
        (None, Some(suffix)) if from.is_empty() && suffix > 0 => (len.saturating_sub(suffix), len.saturating_sub(1)),
        _ => return Err(()),
    };
    if start >= len {
        return Err(());
    }
    Ok(Some((start, end - start + 1)))
}

/// `GET`/`HEAD` of an object: the stored file's pages as the body (sent by `sendfile` on plain
/// HTTP) or the bucket's object streamed through, or the part a `Range` asks for (206), so an
/// interrupted download resumes.
async fn download(state: &Arc<State>, who: &Who, repo_path: &str, oid: &str, req: Request<Incoming>) -> Response<Body> {
    let (served, _) = match authorize(state, who, req.headers(), repo_path, Access::Read).await {
        Ok(allowed) => allowed,
        Err(response) => return response,
    };
    let (oid, blocking_state) = (oid.to_owned(), state.clone());
    let opened = tokio::task::spawn_blocking(move || service::object(&blocking_state, &served, &oid)).await;
    let download = match opened {
        Ok(Ok(opened)) => opened,
        Ok(Err(refusal)) => return refused(refusal),
        Err(_) => return refused(Refusal { status: 500, message: "internal error".into(), lock: None }),
    };
    let len = download.bytes();
    let asked = req.headers().get(header::RANGE).and_then(|h| h.to_str().ok());
    let (status, start, n) = match range_of(asked, len) {
        Ok(None) => (StatusCode::OK, 0, len),
        Ok(Some((start, n))) => (StatusCode::PARTIAL_CONTENT, start, n),
        Err(()) => {
            let mut response = refused(Refusal { status: 416, message: "range not satisfiable".into(), lock: None });
            response
                .headers_mut()
                .insert(header::CONTENT_RANGE, HeaderValue::from_str(&format!("bytes */{len}")).expect("ascii"));
            return response;
        }
    };
    let empty = || Full::new(Bytes::new()).map_err(|never| match never {}).boxed();
    let body = match download {
        _ if n == 0 || req.method() == Method::HEAD => empty(),
        service::Download::File(Some(range), _) => {
            Full::new(range.sub(start as usize, n as usize).bytes()).map_err(|never| match never {}).boxed()
        }
        service::Download::File(None, _) => empty(),
        // The bucket's bytes as they come (the part asked for, or all of them).
        service::Download::Remote { bucket, key, .. } => {
            let part = (status == StatusCode::PARTIAL_CONTENT).then_some((start, start + n - 1));
            match bucket.get(&key, part).await {
                Ok(streamed) => streamed.map_err(std::io::Error::other).boxed(),
                Err(err) => {
                    tracing::warn!(repo = repo_path, %err, "LFS object unreadable");
                    let message = "the object storage could not be reached".into();
                    return refused(Refusal { status: 502, message, lock: None });
                }
            }
        }
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
    if status == StatusCode::PARTIAL_CONTENT {
        let value = format!("bytes {start}-{}/{len}", start + n - 1);
        headers.insert(header::CONTENT_RANGE, HeaderValue::from_str(&value).expect("ascii"));
    }
    response
}

/// `PUT` of an object: its `Content-Length` is its declared size; the body streams through a
/// bounded channel into the store on a blocking thread, under an upload permit.
async fn upload(state: &Arc<State>, who: &Who, repo_path: &str, oid: &str, req: Request<Incoming>) -> Response<Body> {
    let (served, _) = match authorize(state, who, req.headers(), repo_path, Access::Write).await {
        Ok(allowed) => allowed,
        Err(response) => return response,
    };
    let declared = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    let Some(declared) = declared else {
        return refused(Refusal { status: 411, message: "an upload needs its Content-Length".into(), lock: None });
    };
    let limit = state.config.lfs.max_object_bytes;
    if declared > limit {
        let message = format!("the object is {declared} bytes, larger than the {limit} bytes allowed");
        return refused(Refusal { status: 413, message, lock: None });
    }
    let permit = match pipeline::lfs_upload(state).await {
        Ok(permit) => permit,
        Err(pipeline::Busy(message)) => return refused(Refusal { status: 503, message: message.into(), lock: None }),
    };
    let body = super::stream::BodyReader::spawn(req.into_body(), state.config.io_timeout);
    // Held to a minimum rate, as a push is: a trickling upload would hold its permit for ever.
    let body = super::pace::Paced::new(body, state.config.push_pace());
    let (state, oid) = (state.clone(), oid.to_owned());
    let stored = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        service::upload(&state, &served, &oid, declared, body)
    })
    .await;
    match stored {
        Ok(Ok(())) => json(StatusCode::OK, &serde_json::json!({})),
        Ok(Err(refusal)) => refused(refusal),
        Err(_) => refused(Refusal { status: 500, message: "internal error".into(), lock: None }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_below_info_lfs_are_found_by_method_and_path() {
        let oid = "a".repeat(64);
        let object = format!("objects/{oid}");
        assert_eq!(route(&Method::POST, "objects/batch"), Some(Route::Batch));
        assert_eq!(route(&Method::GET, &object), Some(Route::Object(&oid)));
        assert_eq!(route(&Method::PUT, &object), Some(Route::Object(&oid)));
        assert_eq!(route(&Method::DELETE, &object), None);
        assert_eq!(route(&Method::GET, "locks"), Some(Route::Locks));
        assert_eq!(route(&Method::POST, "locks/verify"), Some(Route::VerifyLocks));
        assert_eq!(route(&Method::POST, "locks/abc/unlock"), Some(Route::Unlock("abc")));
        assert_eq!(route(&Method::GET, "objects/batch"), None);
    }

    #[test]
    fn ranges_are_read_as_start_and_length_and_the_impossible_refused() {
        assert_eq!(range_of(None, 10), Ok(None));
        assert_eq!(range_of(Some("bytes=0-"), 10), Ok(Some((0, 10))));
        assert_eq!(range_of(Some("bytes=4-"), 10), Ok(Some((4, 6))));
        assert_eq!(range_of(Some("bytes=2-5"), 10), Ok(Some((2, 4))));
        assert_eq!(range_of(Some("bytes=2-500"), 10), Ok(Some((2, 8))));
        assert_eq!(range_of(Some("bytes=-3"), 10), Ok(Some((7, 3))));
        assert_eq!(range_of(Some("bytes=0-1,4-5"), 10), Ok(None));
        assert_eq!(range_of(Some("bytes=10-"), 10), Err(()));
        assert_eq!(range_of(Some("bytes=5-2"), 10), Err(()));
        assert_eq!(range_of(Some("bytes=x-"), 10), Err(()));
    }
}
