//! What both HTTP handlers (smart HTTP, [`super::http`], and Git LFS, [`super::lfs`]) build
//! responses from and read requests with: the boxed body type, whole bodies, text answers with
//! http-backend's no-cache headers, a request body read within the body limits (gzip inflated
//! within its own), and which listener carried a request.

#![allow(
    clippy::result_large_err,
    reason = "a refusal is the response to send: Err(Response) is returned once and sent as is"
)]

use std::convert::Infallible;
use std::io::Read;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode};

use crate::config::Config;

pub type Body = BoxBody<Bytes, std::io::Error>;

pub fn text(status: StatusCode, message: impl Into<String>) -> Response<Body> {
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

pub fn full(bytes: Vec<u8>) -> Body {
    Full::new(Bytes::from(bytes)).map_err(|never: Infallible| match never {}).boxed()
}

/// http-backend's headers for dynamic responses.
pub fn no_cache(headers: &mut HeaderMap) {
    headers.insert(header::EXPIRES, HeaderValue::from_static("Fri, 01 Jan 1980 00:00:00 GMT"));
    headers.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, max-age=0, must-revalidate"));
}

/// Which transport carried a request, as the access log and the metrics name it: `https` when the
/// TLS listener put this in the request's extensions, else `http`.
#[derive(Debug, Clone, Copy)]
pub struct Transport(pub &'static str);

pub fn transport_of<B>(req: &Request<B>) -> &'static str {
    req.extensions().get::<Transport>().map_or("http", |t| t.0)
}

/// Whether the body is gzip (`Content-Encoding`); any other encoding is refused.
pub fn gzip_encoded(headers: &HeaderMap) -> Result<bool, Response<Body>> {
    match headers.get(header::CONTENT_ENCODING).map(|v| v.to_str().unwrap_or("?")) {
        None | Some("identity") => Ok(false),
        Some("gzip" | "x-gzip") => Ok(true),
        Some(other) => Err(text(StatusCode::UNSUPPORTED_MEDIA_TYPE, format!("unsupported Content-Encoding '{other}'"))),
    }
}

/// What a client refused by a service is told: 503 with `Retry-After` for load, else 500.
/// Read a request body: at most `max_request_body` bytes as sent, at most `max_inflated_body`
/// after gzip.
pub async fn read_body(config: &Config, req: Request<Incoming>) -> Result<Vec<u8>, Response<Body>> {
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
