//! Git LFS, the service: who may read or write a repository's LFS objects and locks (the
//! pipeline's authorization: the same tokens, keys and grants as git's; a repository a caller
//! may not read is "not found", and knowing an oid grants nothing), the batch API's answers,
//! uploads admitted under their own permits ([`super::pipeline::lfs_upload`]) and checked before
//! they are visible, downloads as ranges of the stored file (no slot, no share: a file sent as it
//! lies), the verify callback and the locks API. Answers and refusals carry the LFS API's status
//! codes, which the HTTP transport sends as they are.

use std::collections::BTreeMap;
use std::io::Read;

use super::Service;
use super::pipeline::{self, Caller, Denied};
use crate::auth::Identity;
use crate::lfs::api::{
    Action, BatchRequest, BatchResponse, LockAnswer, LockList, ObjectAnswer, ObjectError, Operation, VerifyLocksAnswer,
};
use crate::lfs::locks::{Created, Lock, Locks};
use crate::lfs::{Located, Oid, Store, UploadError};
use crate::repo::Served;
use crate::session::State;

/// Why an LFS request is not answered as asked: the status the API gives it and a message
/// git-lfs shows its user.
#[derive(Debug)]
pub struct Refusal {
    pub status: u16,
    pub message: String,
    /// A lock that stands in the way (a conflict's answer names it).
    pub lock: Option<Box<Lock>>,
}

impl Refusal {
    fn new(status: u16, message: impl Into<String>) -> Refusal {
        Refusal { status, message: message.into(), lock: None }
    }
}

/// `text` as an oid, or the API's refusal of it.
fn parse_oid(text: &str) -> Result<Oid, Refusal> {
    Oid::parse(text).ok_or_else(|| Refusal::new(422, "an LFS oid is 64 lowercase hex digits"))
}

/// Why an upload that would take `store` past the repository's LFS bytes (`lfs.max_repository_bytes`)
/// is refused; `None` when it fits (or there is no limit).
pub(super) fn over_quota(state: &State, store: &Store, declared: u64) -> Option<Refusal> {
    let most = state.config.lfs.max_repository_bytes;
    (most > 0 && store.total_bytes() + declared > most)
        .then(|| Refusal::new(507, format!("the repository would hold more than the {most} LFS bytes allowed")))
}

/// What a client is told of an upload the store refused: the API's status for it.
pub(super) fn upload_refused(err: UploadError) -> Refusal {
    match err {
        UploadError::TooLarge { .. } => Refusal::new(413, err.to_string()),
        UploadError::Io(_) => Refusal::new(500, "the object could not be stored"),
        UploadError::S3(_) => Refusal::new(502, "the object could not be stored: the object storage failed"),
        _ => Refusal::new(422, err.to_string()),
    }
}

/// What a request does to the repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// May `identity` read (or write) the LFS objects of the repository at `path`? The repository if
/// so. git-lfs asks at `<remote>.git/info/lfs` whether or not the remote's URL ended in `.git`,
/// so a path that names no repository is tried once more without its `.git`. Reads the disk:
/// call it on the blocking pool.
pub fn authorize(state: &State, identity: &Identity, path: &str, access: Access) -> Result<Served, Refusal> {
    if !state.config.lfs.enabled {
        return Err(Refusal::new(404, "Git LFS is not enabled on this server"));
    }
    let service = match access {
        Access::Read => Service::UploadPack,
        Access::Write => Service::ReceivePack,
    };
    let caller = Caller::Identified(identity.clone());
    let name = path.trim_matches('/');
    let decided = match pipeline::authorize(state, &caller, service, name) {
        Err(Denied::NotFound) if name.ends_with(".git") => {
            pipeline::authorize(state, &caller, service, name.trim_end_matches(".git"))
        }
        decided => decided,
    };
    decided.map_err(|denied| match denied {
        Denied::Unauthorized => Refusal::new(401, "authentication required: a gixd token as the password"),
        Denied::Forbidden => Refusal::new(403, format!("your credentials may not write to '{name}'")),
        Denied::NotEnabled(service) => Refusal::new(403, format!("{} is not enabled on this server", service.name())),
        Denied::Unsupported(reason) => Refusal::new(501, format!("'{name}' cannot be served by gixd: {reason}")),
        Denied::NotFound | Denied::Unresolved(_) => Refusal::new(404, format!("repository '{name}' not found")),
    })
}

/// Where the objects of one batch answer are fetched and stored: the repository's LFS URL
/// (`…/<repository>/info/lfs`, as the client reached it), and the headers each action carries
/// (the caller's own credentials, so the object requests are the caller's too).
pub struct Links {
    pub base: String,
    pub header: BTreeMap<String, String>,
}

/// The answer to a batch request for `served`.
pub fn batch(state: &State, served: &Served, request: &BatchRequest, links: &Links) -> Result<BatchResponse, Refusal> {
    if request.hash_algo.as_deref().is_some_and(|h| h != "sha256") {
        return Err(Refusal::new(409, "gixd stores LFS objects by sha256 only"));
    }
    if !request.transfers.is_empty() && !request.transfers.iter().any(|t| t == "basic") {
        return Err(Refusal::new(422, "gixd offers the basic transfer only"));
    }
    let store = state.lfs.store(&served.git_dir);
    let limits = &state.config.lfs;
    // The repository's LFS bytes, walked once per upload batch when a limit asks for them.
    let mut held =
        (request.operation == Operation::Upload && limits.max_repository_bytes > 0).then(|| store.total_bytes());
    let action = |href: String| Action { href, header: links.header.clone(), expires_in: None };
    let objects = request
        .objects
        .iter()
        .map(|spec| {
            let mut answer = ObjectAnswer {
                oid: spec.oid.clone(),
                size: spec.size,
                authenticated: Some(true),
                actions: BTreeMap::new(),
                error: None,
            };
            let refuse = |answer: &mut ObjectAnswer, code, message: String| {
                answer.error = Some(ObjectError { code, message });
            };
            let Some(oid) = Oid::parse(&spec.oid) else {
                refuse(&mut answer, 422, "an LFS oid is 64 lowercase hex digits".into());
                return answer;
            };
            let href = format!("{}/objects/{oid}", links.base);
            match (request.operation, store.size(&oid)) {
                (Operation::Download, Some(size)) if size == spec.size => {
                    answer.actions.insert("download", action(href));
                }
                (Operation::Download, Some(size)) => {
                    refuse(&mut answer, 422, format!("the object is {size} bytes, not {}", spec.size));
                }
                (Operation::Download, None) => refuse(&mut answer, 404, "object does not exist".into()),
                // Stored already: nothing to do (no action), as the API says.
                (Operation::Upload, Some(_)) => {}
                (Operation::Upload, None) if spec.size > limits.max_object_bytes => refuse(
                    &mut answer,
                    422,
                    format!(
                        "the object is {} bytes, larger than the {} bytes allowed",
                        spec.size, limits.max_object_bytes
                    ),
                ),
                (Operation::Upload, None) => match &mut held {
                    Some(bytes) if *bytes + spec.size > limits.max_repository_bytes => refuse(
                        &mut answer,
                        507,
                        format!(
                            "the repository would hold more than the {} LFS bytes allowed",
                            limits.max_repository_bytes
                        ),
                    ),
                    held => {
                        if let Some(bytes) = held {
                            *bytes += spec.size;
                        }
                        answer.actions.insert("upload", action(href));
                        answer.actions.insert("verify", action(format!("{}/verify", links.base)));
                    }
                },
            }
            answer
        })
        .collect();
    Ok(BatchResponse { transfer: "basic", objects, hash_algo: "sha256" })
}

/// A stored object as it is sent: the file's pages (a file written once and never again), or
/// the bucket's object, streamed as it is read.
pub enum Download {
    /// The mapped file (`None`: an empty object, nothing to map) and its length.
    File(Option<crate::pack_ranges::Range>, u64),
    Remote {
        bucket: std::sync::Arc<crate::lfs::s3::Bucket>,
        key: String,
        len: u64,
    },
}

impl Download {
    /// The object's length in bytes.
    pub fn bytes(&self) -> u64 {
        match self {
            Download::File(_, len) | Download::Remote { len, .. } => *len,
        }
    }
}

/// The stored object `oid` of `served`, ready to be sent. Runs on a blocking thread.
pub fn object(state: &State, served: &Served, oid: &str) -> Result<Download, Refusal> {
    let oid = parse_oid(oid)?;
    let path = match state.lfs.store(&served.git_dir).locate(&oid) {
        Located::File(path) => path,
        Located::Remote { bucket, key } => {
            return match crate::lfs::s3::block_on(bucket.head(&key)) {
                Ok(Some(len)) => Ok(Download::Remote { bucket, key, len }),
                Ok(None) => Err(Refusal::new(404, "object does not exist")),
                Err(err) => {
                    tracing::warn!(repo = %served.name, %oid, %err, "LFS object unreadable");
                    Err(Refusal::new(502, "the object storage could not be reached"))
                }
            };
        }
    };
    let map = match crate::pack_ranges::Map::open(&path) {
        Ok(map) => map,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Err(Refusal::new(404, "object does not exist"));
        }
        Err(err) => {
            tracing::warn!(repo = %served.name, %oid, %err, "LFS object unreadable");
            return Err(Refusal::new(500, "the object could not be read"));
        }
    };
    let len = map.len() as u64;
    Ok(Download::File(crate::pack_ranges::Range::of(&map), len))
}

/// Store the object `oid` of `declared` bytes read from `body`, checked before it is visible.
/// Runs on a blocking thread, under an upload permit the caller took.
pub fn upload(state: &State, served: &Served, oid: &str, declared: u64, mut body: impl Read) -> Result<(), Refusal> {
    let oid = parse_oid(oid)?;
    let limits = &state.config.lfs;
    let store = state.lfs.store(&served.git_dir);
    if store.size(&oid).is_some() {
        // Stored already (by a racing upload, or a client that did not ask first): its bytes
        // were checked then; these are read and dropped so the connection stays usable.
        let _ = std::io::copy(&mut body.take(declared), &mut std::io::sink());
        return Ok(());
    }
    if let Some(refusal) = over_quota(state, &store, declared) {
        return Err(refusal);
    }
    let refused = |err: UploadError| {
        tracing::info!(repo = %served.name, %oid, %err, "LFS upload refused");
        upload_refused(err)
    };
    let mut upload = store.begin(oid, declared, limits.max_object_bytes).map_err(refused)?;
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let n = match body.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => {
                tracing::info!(repo = %served.name, %oid, %err, written = upload.written(), "LFS upload cut");
                return Err(Refusal::new(400, format!("the upload was cut: {err}")));
            }
        };
        upload.write(&buf[..n]).map_err(refused)?;
    }
    upload.finish().map_err(refused)
}

/// The verify callback: is `oid` stored, at `size` bytes?
pub fn verify(state: &State, served: &Served, oid: &str, size: u64) -> Result<(), Refusal> {
    let oid = parse_oid(oid)?;
    match state.lfs.store(&served.git_dir).size(&oid) {
        Some(stored) if stored == size => Ok(()),
        Some(stored) => Err(Refusal::new(422, format!("the object is {stored} bytes, not {size}"))),
        None => Err(Refusal::new(404, "object does not exist")),
    }
}

fn io_failed(served: &Served, err: std::io::Error) -> Refusal {
    tracing::warn!(repo = %served.name, %err, "LFS locks unreadable");
    Refusal::new(500, "the locks could not be read")
}

fn now_secs() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

/// Lock `path` for `user` (a writer).
pub fn create_lock(served: &Served, user: &str, path: &str) -> Result<LockAnswer, Refusal> {
    if path.is_empty() || path.len() > 4096 || path.contains('\0') {
        return Err(Refusal::new(422, "a lock's path is a file's path in the repository"));
    }
    match Locks::of(&served.git_dir).create(path, user, now_secs()).map_err(|e| io_failed(served, e))? {
        Created::Made(lock) => Ok(LockAnswer { lock, message: None }),
        Created::Exists(lock) => {
            Err(Refusal { status: 409, message: "already created lock".into(), lock: Some(Box::new(lock)) })
        }
    }
}

/// At most this many locks in one answer; the rest follow by cursor.
const MOST_LOCKS: usize = 1000;

/// The locks of `served` from `cursor` (a path: the first one not yet listed), at most `limit`,
/// those of one path or one id when asked.
fn page(
    served: &Served,
    path: Option<&str>,
    id: Option<&str>,
    cursor: Option<&str>,
    limit: Option<usize>,
) -> Result<(Vec<Lock>, Option<String>), Refusal> {
    let locks = Locks::of(&served.git_dir);
    let mut all = locks.list().map_err(|e| io_failed(served, e))?;
    all.retain(|l| path.is_none_or(|p| l.path == p) && id.is_none_or(|i| l.id == i));
    let limit = limit.unwrap_or(100).clamp(1, MOST_LOCKS);
    let start = cursor.map_or(0, |c| all.partition_point(|l| l.path.as_str() < c));
    let mut page: Vec<Lock> = all.drain(start..).collect();
    let next = (page.len() > limit).then(|| page[limit].path.clone());
    page.truncate(limit);
    Ok((page, next))
}

/// The locks API's list.
pub fn list_locks(
    served: &Served,
    path: Option<&str>,
    id: Option<&str>,
    cursor: Option<&str>,
    limit: Option<usize>,
) -> Result<LockList, Refusal> {
    let (locks, next_cursor) = page(served, path, id, cursor, limit)?;
    Ok(LockList { locks, next_cursor })
}

/// The locks of `served` split by owner: `user`'s and everyone else's (git-lfs asks before a
/// push; a writer only).
pub fn verify_locks(
    served: &Served,
    user: &str,
    cursor: Option<&str>,
    limit: Option<usize>,
) -> Result<VerifyLocksAnswer, Refusal> {
    let (locks, next_cursor) = page(served, None, None, cursor, limit)?;
    let (ours, theirs) = locks.into_iter().partition(|l| l.owner.name == user);
    Ok(VerifyLocksAnswer { ours, theirs, next_cursor })
}

/// Remove the lock `id`: its owner may, any writer may with `force`.
pub fn unlock(served: &Served, user: &str, id: &str, force: bool) -> Result<LockAnswer, Refusal> {
    let locks = Locks::of(&served.git_dir);
    let lock = locks.get(id).map_err(|e| io_failed(served, e))?.ok_or_else(|| Refusal::new(404, "no such lock"))?;
    if lock.owner.name != user && !force {
        return Err(Refusal {
            status: 403,
            message: format!("the lock is {}'s: unlock it with --force", lock.owner.name),
            lock: Some(Box::new(lock)),
        });
    }
    match locks.remove(id).map_err(|e| io_failed(served, e))? {
        Some(lock) => Ok(LockAnswer { lock, message: None }),
        None => Err(Refusal::new(404, "no such lock")),
    }
}

/// How long a token `git-lfs-authenticate` issues is good for.
const ISSUED_FOR: u64 = 600;

/// `git-lfs-authenticate <path> <operation>` for an SSH user: the repository's LFS URL on the
/// HTTP(S) listener and a short-lived header for it (a token naming the user's key, the
/// repository and the operation), as JSON on the command's output. The same grant decides as for
/// every other request; only a key's holder gets one.
pub fn authenticate(state: &State, identity: &Identity, path: &str, operation: &str) -> Result<String, Refusal> {
    let (operation, access) = match operation {
        "download" => (Operation::Download, Access::Read),
        "upload" => (Operation::Upload, Access::Write),
        other => return Err(Refusal::new(422, format!("unknown LFS operation '{}'", crate::error::quoted(other, 40)))),
    };
    let served = authorize(state, identity, path, access)?;
    let Identity::User(grant) = identity else {
        return Err(Refusal::new(401, "git-lfs-authenticate needs a user's key"));
    };
    let origin = match (&state.config.lfs.url, state.addresses.https, state.addresses.http) {
        (Some(url), _, _) => url.clone(),
        (None, Some(https), _) if !https.ip().is_unspecified() => format!("https://{https}"),
        (None, _, Some(http)) if !http.ip().is_unspecified() => format!("http://{http}"),
        _ => return Err(Refusal::new(501, "this server does not know its HTTP address: its operator sets lfs.url")),
    };
    let secret_file = state.config.token_file.as_deref().map(crate::lfs::token::secret_path);
    let secret = secret_file.as_deref().map(crate::lfs::token::secret).transpose().map_err(|err| {
        tracing::error!(%err, "the LFS signing secret is unreadable");
        Refusal::new(500, "LFS credentials cannot be issued")
    })?;
    let Some(secret) = secret else { return Err(Refusal::new(501, "LFS over SSH needs a token file")) };
    let expires = now_secs().max(0) as u64 + ISSUED_FOR;
    let claims = crate::lfs::token::Claims {
        key_id: grant.id.clone(),
        repo: crate::auth::repo_key(&served.name),
        operation,
        expires,
    };
    let token = crate::lfs::token::issue(&secret, &claims);
    let href = format!("{origin}/{}/info/lfs", path.trim_matches('/'));
    let answer = serde_json::json!({
        "href": href,
        "header": { "Authorization": format!("Bearer {token}") },
        "expires_in": ISSUED_FOR,
    });
    Ok(answer.to_string())
}

/// Who an `Authorization` header of a token `git-lfs-authenticate` issued speaks for, for the
/// repository at `path` and `access`: the key's holder (looked up again: a key removed since is
/// refused), only for the repository and the operation it was issued for.
pub fn issued_identity(state: &State, token: &str, path: &str, access: Access) -> Result<Identity, Refusal> {
    use crate::lfs::token;
    let unauthorized = |message: String| Refusal::new(401, message);
    let secret = state
        .config
        .token_file
        .as_deref()
        .map(|f| token::secret(&token::secret_path(f)))
        .transpose()
        .ok()
        .flatten()
        .ok_or_else(|| unauthorized("the LFS credentials are not valid".into()))?;
    let claims = token::verify(&secret, token, now_secs().max(0) as u64).map_err(|r| unauthorized(r.to_string()))?;
    let asked = crate::auth::repo_key(path);
    if claims.repo != asked && claims.repo != crate::auth::repo_key(asked.trim_end_matches(".git")) {
        return Err(unauthorized("these LFS credentials are for another repository".into()));
    }
    if access == Access::Write && claims.operation != Operation::Upload {
        return Err(Refusal::new(403, "these LFS credentials are for downloads"));
    }
    match state.access.identify_key_id(&claims.key_id) {
        Identity::User(grant) => Ok(Identity::User(grant)),
        _ => Err(unauthorized("the key these LFS credentials were issued to is gone".into())),
    }
}
