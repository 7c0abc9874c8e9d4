//! Repository access, LFS objects in an S3-compatible bucket: the few requests the LFS store
//! makes of one (head, get with a range, put, multipart create/part/complete/abort, list), each
//! signed by `rusty-s3` (a presigned URL, valid for minutes) and sent by hyper's client over
//! rustls on the ring provider — no signing of our own and no second TLS stack. An answer S3
//! gives as an error is one [`S3Error`] naming the request and what the server said.
//!
//! The store's callers run on blocking threads and call these through [`block_on`]; the HTTP
//! download streams [`Bucket::get`]'s body as it comes.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use rusty_s3::{Credentials, S3Action, UrlStyle};

use crate::config::LfsS3;

/// Why a request to the bucket did not do what it was for.
#[derive(Debug, thiserror::Error)]
pub enum S3Error {
    #[error("the LFS object storage settings: {0}")]
    Settings(String),
    #[error("the LFS object storage could not be reached ({action}): {reason}")]
    Unreachable { action: &'static str, reason: String },
    #[error("the LFS object storage answered {status} to {action}: {body}")]
    Status { action: &'static str, status: u16, body: String },
    #[error("the LFS object storage's answer to {0} was not understood")]
    Answer(&'static str),
}

/// How long a signed request stays valid (it is sent at once; this only covers clock skew and
/// a slow part upload's start).
const SIGNED_FOR: Duration = Duration::from_secs(600);

/// How long a request may wait for its answer's head (a body then streams as it comes).
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

/// One bucket of an S3-compatible server, and the client that reaches it.
pub struct Bucket {
    named: rusty_s3::Bucket,
    credentials: Credentials,
    /// Every key starts with it (`""`, or a folder of the bucket ending in `/`).
    pub prefix: String,
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bucket").field("url", &self.named.base_url().as_str()).field("prefix", &self.prefix).finish()
    }
}

impl Bucket {
    /// The bucket `settings` name, its credentials read (the secret from its file, else from
    /// `AWS_SECRET_ACCESS_KEY`; the key id likewise from `AWS_ACCESS_KEY_ID`).
    pub fn new(settings: &LfsS3) -> Result<Bucket, S3Error> {
        let bad = |m: String| S3Error::Settings(m);
        let endpoint = settings.endpoint.as_deref().ok_or_else(|| bad("lfs.s3_bucket needs lfs.s3_endpoint".into()))?;
        let url: url::Url = endpoint.parse().map_err(|e| bad(format!("lfs.s3_endpoint '{endpoint}': {e}")))?;
        let style = if settings.path_style { UrlStyle::Path } else { UrlStyle::VirtualHost };
        let bucket = settings.bucket.clone().unwrap_or_default();
        let named = rusty_s3::Bucket::new(url, style, bucket, settings.region.clone())
            .map_err(|e| bad(format!("lfs.s3_endpoint '{endpoint}' with lfs.s3_bucket: {e}")))?;
        let key = match &settings.access_key_id {
            Some(key) => key.clone(),
            None => std::env::var("AWS_ACCESS_KEY_ID")
                .map_err(|_| bad("no access key id: lfs.s3_access_key_id or AWS_ACCESS_KEY_ID".into()))?,
        };
        let secret = match &settings.secret_access_key_file {
            Some(path) => std::fs::read_to_string(path)
                .map_err(|e| bad(format!("lfs.s3_secret_access_key_file {}: {e}", path.display())))?
                .trim()
                .to_owned(),
            None => std::env::var("AWS_SECRET_ACCESS_KEY").map_err(|_| {
                bad("no secret access key: lfs.s3_secret_access_key_file or AWS_SECRET_ACCESS_KEY".into())
            })?,
        };
        // The system's roots (none found: plain HTTP endpoints still work, HTTPS ones fail to
        // verify, and say so).
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        let tls = rustls::ClientConfig::builder_with_provider(ring_provider().into())
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(format!("TLS: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector =
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http().enable_http1().build();
        let client = Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector);
        let prefix = match settings.prefix.trim_matches('/') {
            "" => String::new(),
            p => format!("{p}/"),
        };
        Ok(Bucket { named, credentials: Credentials::new(key, secret), prefix, client })
    }

    /// Send a signed request: its answer's head, or why there is none.
    async fn send(
        &self,
        action: &'static str,
        method: Method,
        url: url::Url,
        headers: &[(&str, String)],
        body: Bytes,
    ) -> Result<Response<Incoming>, S3Error> {
        let mut request = Request::builder().method(method).uri(url.as_str());
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let request = request.body(Full::new(body)).map_err(|e| S3Error::Settings(e.to_string()))?;
        match tokio::time::timeout(ANSWER_WITHIN, self.client.request(request)).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(err)) => Err(S3Error::Unreachable { action, reason: crate::error::chain(&err) }),
            Err(_) => Err(S3Error::Unreachable { action, reason: "no answer in time".into() }),
        }
    }

    /// Send, and take a 2xx answer's whole body (small: XML), else the error it is.
    async fn call(
        &self,
        action: &'static str,
        method: Method,
        url: url::Url,
        body: Bytes,
    ) -> Result<(hyper::HeaderMap, Bytes), S3Error> {
        let response = self.send(action, method, url, &[("content-length", body.len().to_string())], body).await?;
        let (head, body) = response.into_parts();
        let body = read(action, body).await?;
        if !head.status.is_success() {
            return Err(status_error(action, head.status, &body));
        }
        Ok((head.headers, body))
    }

    /// The size of the object at `key`, `None` if there is none.
    pub async fn head(&self, key: &str) -> Result<Option<u64>, S3Error> {
        let url = self.named.head_object(Some(&self.credentials), key).sign(SIGNED_FOR);
        let response = self.send("HeadObject", Method::HEAD, url, &[], Bytes::new()).await?;
        match response.status() {
            StatusCode::NOT_FOUND => Ok(None),
            status if status.is_success() => response
                .headers()
                .get(hyper::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .map(Some)
                .ok_or(S3Error::Answer("HeadObject")),
            status => Err(status_error("HeadObject", status, b"")),
        }
    }

    /// The object at `key` (its `first..=last` bytes, when given), as its body streams.
    pub async fn get(&self, key: &str, range: Option<(u64, u64)>) -> Result<Incoming, S3Error> {
        let url = self.named.get_object(Some(&self.credentials), key).sign(SIGNED_FOR);
        let headers: Vec<(&str, String)> =
            range.map(|(a, b)| ("range", format!("bytes={a}-{b}"))).into_iter().collect();
        let response = self.send("GetObject", Method::GET, url, &headers, Bytes::new()).await?;
        let status = response.status();
        // A range answered whole would send the wrong bytes: only the part asked is taken.
        if status == StatusCode::PARTIAL_CONTENT || (status == StatusCode::OK && range.is_none()) {
            return Ok(response.into_body());
        }
        let body = read("GetObject", response.into_body()).await.unwrap_or_default();
        Err(status_error("GetObject", status, &body))
    }

    /// Store `body` at `key` in one request.
    pub async fn put(&self, key: &str, body: Bytes) -> Result<(), S3Error> {
        let url = self.named.put_object(Some(&self.credentials), key).sign(SIGNED_FOR);
        self.call("PutObject", Method::PUT, url, body).await.map(drop)
    }

    /// Start a multipart upload to `key`: its id. Nothing is visible until it is completed.
    pub async fn create_multipart(&self, key: &str) -> Result<String, S3Error> {
        let url = self.named.create_multipart_upload(Some(&self.credentials), key).sign(SIGNED_FOR);
        let (_, body) = self.call("CreateMultipartUpload", Method::POST, url, Bytes::new()).await?;
        let text = std::str::from_utf8(&body).map_err(|_| S3Error::Answer("CreateMultipartUpload"))?;
        let parsed = rusty_s3::actions::CreateMultipartUpload::parse_response(text)
            .map_err(|_| S3Error::Answer("CreateMultipartUpload"))?;
        Ok(parsed.upload_id().to_owned())
    }

    /// Upload part `number` (from 1) of the upload `id`: its ETag.
    pub async fn upload_part(&self, key: &str, id: &str, number: u16, body: Bytes) -> Result<String, S3Error> {
        let url = self.named.upload_part(Some(&self.credentials), key, number, id).sign(SIGNED_FOR);
        let (headers, _) = self.call("UploadPart", Method::PUT, url, body).await?;
        let etag =
            headers.get(hyper::header::ETAG).and_then(|v| v.to_str().ok()).ok_or(S3Error::Answer("UploadPart"))?;
        Ok(etag.to_owned())
    }

    /// Make the upload `id` the object at `key`, of its parts (their ETags, in order).
    pub async fn complete(&self, key: &str, id: &str, etags: &[String]) -> Result<(), S3Error> {
        let action =
            self.named.complete_multipart_upload(Some(&self.credentials), key, id, etags.iter().map(String::as_str));
        let url = action.sign(SIGNED_FOR);
        let (_, body) = self.call("CompleteMultipartUpload", Method::POST, url, Bytes::from(action.body())).await?;
        // S3 may answer 200 and still have failed: the body says which.
        let text = std::str::from_utf8(&body).map_err(|_| S3Error::Answer("CompleteMultipartUpload"))?;
        rusty_s3::actions::CompleteMultipartUploadResponse::parse(text)
            .map(drop)
            .map_err(|_| status_error("CompleteMultipartUpload", StatusCode::OK, &body))
    }

    /// Give up the upload `id`: its parts are dropped.
    pub async fn abort(&self, key: &str, id: &str) -> Result<(), S3Error> {
        let url = self.named.abort_multipart_upload(Some(&self.credentials), key, id).sign(SIGNED_FOR);
        self.call("AbortMultipartUpload", Method::DELETE, url, Bytes::new()).await.map(drop)
    }

    /// Every object whose key starts with `prefix`: its key and size.
    pub async fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>, S3Error> {
        let mut objects = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut action = self.named.list_objects_v2(Some(&self.credentials));
            action.with_prefix(prefix);
            if let Some(token) = &token {
                action.with_continuation_token(token.as_str());
            }
            let url = action.sign(SIGNED_FOR);
            let (_, body) = self.call("ListObjectsV2", Method::GET, url, Bytes::new()).await?;
            let text = std::str::from_utf8(&body).map_err(|_| S3Error::Answer("ListObjectsV2"))?;
            let page =
                rusty_s3::actions::ListObjectsV2::parse_response(text).map_err(|_| S3Error::Answer("ListObjectsV2"))?;
            objects.extend(page.contents.into_iter().map(|c| (c.key, c.size.unwrap_or(0))));
            match page.next_continuation_token {
                Some(next) => token = Some(next),
                None => return Ok(objects),
            }
        }
    }
}

/// rustls on ring, as the listeners are (`transport::tls` says why ring).
#[allow(deprecated, reason = "the ring provider is chosen for reproducible builds, as for the listeners")]
fn ring_provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// A whole (small) body, or the request's failure.
async fn read(action: &'static str, body: Incoming) -> Result<Bytes, S3Error> {
    match tokio::time::timeout(ANSWER_WITHIN, body.collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(err)) => Err(S3Error::Unreachable { action, reason: err.to_string() }),
        Err(_) => Err(S3Error::Unreachable { action, reason: "the answer stopped".into() }),
    }
}

/// An error answer: S3's `<Code>` and `<Message>` when its body has them.
fn status_error(action: &'static str, status: StatusCode, body: &[u8]) -> S3Error {
    let text = String::from_utf8_lossy(body);
    let tag = |name: &str| {
        let open = format!("<{name}>");
        let start = text.find(&open)? + open.len();
        let end = text[start..].find('<')?;
        Some(text[start..start + end].to_owned())
    };
    let body = match (tag("Code"), tag("Message")) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code,
        _ => String::new(),
    };
    S3Error::Status { action, status: status.as_u16(), body }
}

/// Run `future` to its end from synchronous code: on a blocking thread of the server's runtime
/// (where the store's callers are) through that runtime; on a worker of it (the server's is
/// multi-threaded), handing the worker's other tasks on meanwhile; with no runtime (a command
/// line), on one made for the call.
pub fn block_on<F: Future>(future: F) -> F::Output {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => tokio::task::block_in_place(|| handle.block_on(future)),
        Err(_) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for one call")
            .block_on(future),
    }
}
