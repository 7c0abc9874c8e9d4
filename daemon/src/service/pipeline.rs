//! The one way a transfer goes, whatever carried it: **authorized** (who asks, for which
//! repository: [`authorize`]), **admitted** (a share of its repository's and its client's
//! transfers, then a transfer slot: [`enter`], [`slot`], [`admit`]), **served** on a blocking
//! thread into the transfer buffers, **sent** through the transport's outlet, **settled** (a
//! transfer whose last byte did not go is `disconnected`) and **recorded** once. A transport
//! parses its framing and provides an input and an outlet; a connection (git://, SSH in-process
//! and `gixd shell`) goes through [`connection`] whole, a stateless request (smart HTTP) through
//! [`authorize`] and the services' own stateless entries, which admit here. Shares and slots are
//! taken in this module only (the layer test holds it).
//!
//! The order is the same everywhere: the share, then the slot — which a push over a connection
//! takes when its pack comes, not while its client decides (`service::receive::Push`). A client over its own or its
//! repository's limit is refused at once, instead of waiting in the queue for a slot only to be
//! refused when its turn came; a connection waiting for a slot counts against its client's
//! limit, so one client cannot fill the queue.

use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::buffer::{Outbox, Outlet};
use super::{Asked, Outcome, Refusal, Request, Service};
use crate::auth::{Decision, Identity};
use crate::error::RepoError;
use crate::protocol::Version;
use crate::repo::Served;
use crate::session::{NoSlot, Share, Slot, State};
use crate::transport::pace::Paced;

/// Where a transfer comes from.
pub struct Origin {
    /// The access log's transport (`git`, `ssh`, `http`).
    pub transport: &'static str,
    pub peer: Option<SocketAddr>,
    /// Who asks, and by which rule.
    pub caller: Caller,
}

/// Who asks, as the transport knows it.
#[derive(Clone)]
pub enum Caller {
    /// git daemon's rule (git://): nobody in particular; the export rules decide what is served
    /// and the server's enabled services what may be done (a push only with receive-pack on).
    Daemon,
    /// A token's or a key's owner, or anonymous: their grant decides ([`crate::auth::decide`]).
    Identified(Identity),
}

impl Caller {
    fn user(&self) -> Option<&str> {
        match self {
            Caller::Daemon => None,
            Caller::Identified(identity) => identity.user(),
        }
    }
}

/// What a transfer asks for.
#[derive(Debug, Clone)]
pub struct Target {
    pub service: Service,
    /// The repository's path as the client wrote it.
    pub path: String,
    pub version: Version,
}

/// Why a transfer does not reach its repository; each transport says it in its own words.
#[derive(Debug)]
pub enum Denied {
    /// The service is off on this server.
    NotEnabled(Service),
    /// Credentials are missing or wrong (asked before anything about the repository is told).
    Unauthorized,
    /// It may read the repository, not write it.
    Forbidden,
    /// No such repository, or not one this caller may know of.
    NotFound,
    /// It may read it, but gixd cannot serve it: why ([`crate::repo::format`]).
    Unsupported(String),
    /// git daemon's rule: the repository could not be resolved (told as git daemon tells it).
    Unresolved(RepoError),
}

/// Whether the server runs `service` for `caller`: upload-archive only when enabled, and git
/// daemon's push only with receive-pack enabled (git:// has no authentication).
fn enabled(state: &State, caller: &Caller, service: Service) -> bool {
    let services = &state.config.services;
    match service {
        Service::UploadPack => services.upload_pack,
        Service::UploadArchive => services.upload_archive,
        Service::ReceivePack => matches!(caller, Caller::Identified(_)) || services.receive_pack,
    }
}

/// Who may do `service` to the repository at `path`: the repository if `caller` may; why not
/// otherwise. Resolution reads the disk: call it on the blocking pool.
pub fn authorize(state: &State, caller: &Caller, service: Service, path: &str) -> Result<Served, Denied> {
    use crate::auth::{decide, repo_key};
    if !enabled(state, caller, service) {
        return Err(Denied::NotEnabled(service));
    }
    let identity = match caller {
        Caller::Daemon => return state.repos.resolve(path).map_err(Denied::Unresolved),
        Caller::Identified(identity) => identity,
    };
    let write = service == Service::ReceivePack;
    // Credentials first: whether a repository exists is nobody's business before that.
    if matches!(identity, Identity::Invalid) || (write && matches!(identity, Identity::Anonymous)) {
        return Err(Denied::Unauthorized);
    }
    let anonymous_read = state.access.anonymous_read;
    let (served, exported) = match state.repos.locate(path) {
        Ok(located) => located,
        // Whoever may read it is told why it is not served; to everyone else it is not there.
        Err(RepoError::Unsupported { path, exported, reason }) => {
            return Err(match decide(identity, &repo_key(&path), exported, anonymous_read, false) {
                Decision::Allow => Denied::Unsupported(reason.to_string()),
                other => denied(other),
            });
        }
        Err(err @ RepoError::Open { .. }) => {
            tracing::error!(%err, "repository could not be opened");
            return Err(Denied::NotFound);
        }
        Err(_) => return Err(Denied::NotFound),
    };
    match decide(identity, &repo_key(&served.name), exported, anonymous_read, write) {
        Decision::Allow => Ok(served),
        other => Err(denied(other)),
    }
}

fn denied(decision: Decision) -> Denied {
    match decision {
        Decision::Unauthorized => Denied::Unauthorized,
        Decision::Forbidden => Denied::Forbidden,
        Decision::Allow | Decision::NotFound => Denied::NotFound,
    }
}

/// Refused for load: what the client is told (HTTP 503 with `Retry-After`, git:// `ERR`).
#[derive(Debug, Clone, Copy)]
pub struct Busy(pub &'static str);

impl From<Busy> for Refusal {
    fn from(busy: Busy) -> Refusal {
        Refusal::Busy(busy.0)
    }
}

/// A place for a transfer of `served` from `client` among its repository's and its client's.
pub fn enter(state: &State, served: &Served, client: Option<IpAddr>) -> Result<Share, Busy> {
    state.shares.enter(&served.git_dir, client).map_err(|refused| {
        tracing::info!(repo = %served.name, ?client, ?refused, "transfer refused: busy");
        Busy(refused.message())
    })
}

/// One of the server's transfer slots, after a place in its queue ([`State::slot`]).
pub async fn slot(state: &State) -> Result<Slot, Busy> {
    state.slot().await.map_err(|refused| {
        tracing::info!(?refused, queued = state.config.max_queued, "transfer refused: busy");
        Busy(busy_message(refused))
    })
}

/// Both, in the pipeline's order: what a transfer that does work holds while it runs.
pub async fn admit(state: &State, served: &Served, client: Option<IpAddr>) -> Result<(Share, Slot), Busy> {
    let share = enter(state, served, client)?;
    Ok((share, slot(state).await?))
}

/// One of the server's LFS upload permits (`lfs.max_uploads`), waiting for one as long as a
/// transfer may wait for a slot: an upload holds a blocking thread while it hashes and writes,
/// apart from the transfer slots (a download holds neither: it is a file sent as it lies).
pub async fn lfs_upload(state: &State) -> Result<tokio::sync::OwnedSemaphorePermit, Busy> {
    let permits = state.lfs_uploads.clone();
    let wait = match state.config.transfer_queue_wait {
        d if d.is_zero() => std::time::Duration::from_secs(60),
        d => d,
    };
    match tokio::time::timeout(wait, permits.acquire_owned()).await {
        Ok(Ok(permit)) => Ok(permit),
        _ => {
            tracing::info!(uploads = state.config.lfs.max_uploads, "LFS upload refused: busy");
            Err(Busy("server busy: as many LFS uploads as the server takes at once are running, retry shortly"))
        }
    }
}

/// What a client refused a slot is told (HTTP 503 with `Retry-After`, git:// `ERR`).
fn busy_message(refused: NoSlot) -> &'static str {
    match refused {
        NoSlot::QueueFull => "server busy: the queue of transfers waiting for a slot is full, retry shortly",
        NoSlot::Waited => "server busy: waited the longest the server lets a transfer wait, retry shortly",
    }
}

/// How a connection ended.
#[derive(Debug)]
pub enum Ended {
    /// Its service ran: how it went.
    Served(Outcome),
    /// Refused before its service ran: how (`refused`, `busy`), and why — the transport says it.
    Refused(Outcome, Why),
    /// Its client went while it waited for a slot.
    Gone,
}

impl Ended {
    /// The exit status of a command that ended so (SSH).
    pub fn status(&self) -> u32 {
        match self {
            Ended::Served(Outcome::Ok) => 0,
            _ => 128,
        }
    }
}

/// Why a connection was refused before its service ran.
#[derive(Debug)]
pub enum Why {
    Denied(Denied),
    Busy(&'static str),
    /// Its request could not be read (a malformed request line or command, a service gixd does
    /// not know): in the transport's words.
    Malformed(String),
    Failed(String),
}

/// A connection whose request could not be read (`asked`: the service it named, quoted, or
/// `malformed`), recorded as refused; the transport says why.
pub fn unreadable(state: &State, origin: &Origin, asked: &str, version: Option<Version>, why: String) -> Ended {
    tracing::info!(transport = origin.transport, peer = ?origin.peer, why, "request refused");
    let mut log = Request::new(origin.transport, origin.peer, asked, version);
    log.record.user = origin.caller.user().map(str::to_owned);
    log.finish(state, Outcome::Refused);
    Ended::Refused(Outcome::Refused, Why::Malformed(why))
}

/// Serve one connection (git://, SSH): authorized, admitted (its share, then a slot — waiting in
/// the queue until `gone` says the client left), served on a blocking thread reading the input
/// `input` makes there (given the read timeout its service's pace allows), what it writes sent
/// through `outlet`, settled and recorded once the last byte went. The outlet comes back with how
/// it ended.
pub async fn connection<R, O>(
    state: &Arc<State>,
    origin: Origin,
    target: Target,
    input: impl FnOnce(std::time::Duration) -> R + Send + 'static,
    mut outlet: O,
    gone: impl std::future::Future<Output = ()>,
) -> (Ended, O)
where
    R: Read,
    O: Outlet,
{
    let Origin { transport, peer, caller } = origin;
    let Target { service, path, version } = target;
    let mut log = Request::new(transport, peer, service.name(), Some(version));
    log.record.user = caller.user().map(str::to_owned);
    let refused = |log: Request, outcome: Outcome, why: Why| {
        tracing::info!(transport, ?peer, ?why, "request refused");
        log.finish(state, outcome);
        Ended::Refused(outcome, why)
    };
    let authorized = {
        let (state, caller) = (state.clone(), caller.clone());
        tokio::task::spawn_blocking(move || authorize(&state, &caller, service, &path)).await
    };
    let served = match authorized {
        Ok(Ok(served)) => served,
        Ok(Err(denied)) => return (refused(log, Outcome::Refused, Why::Denied(denied)), outlet),
        Err(_) => return (refused(log, Outcome::Failed, Why::Failed("internal error".into())), outlet),
    };
    log = log.serving(&served, caller.user());
    let share = match enter(state, &served, peer.map(|p| p.ip())) {
        Ok(share) => share,
        Err(Busy(message)) => return (refused(log, Outcome::Busy, Why::Busy(message)), outlet),
    };
    // A push takes its slot when its pack comes ([`super::receive::Push`]); every other
    // service now. A client whose connection failed while queued is gone: its place in the
    // queue goes too.
    let slot = match service {
        Service::ReceivePack => None,
        _ => {
            let slot = tokio::select! {
                biased;
                slot = slot(state) => slot,
                () = gone => {
                    log.finish(state, Outcome::Disconnected);
                    return (Ended::Gone, outlet);
                }
            };
            match slot {
                Ok(slot) => Some(slot),
                Err(Busy(message)) => return (refused(log, Outcome::Busy, Why::Busy(message)), outlet),
            }
        }
    };
    log.record.wait_ms = slot.as_ref().map(|slot| slot.waited.as_secs_f64() * 1e3);
    let (outbox, queue) = Outbox::new(state.clone());
    let serving = {
        let state = state.clone();
        let pusher = caller.user().map(str::to_owned);
        tokio::task::spawn_blocking(move || {
            let (_share, _slot) = (share, slot);
            let mut out = outbox;
            // Reads are held to a minimum rate (a trickling client is dropped within a window),
            // and a silent one is noticed at the end of a window too.
            let pace = if service == Service::ReceivePack { state.config.push_pace() } else { state.config.pace() };
            let input = Paced::new(input(pace.window.min(state.config.io_timeout)), pace);
            let asked = Asked { service, version, pusher: pusher.as_deref() };
            super::connection(&state, &served, asked, input, &mut out, log)
        })
    };
    // The sending side stops with the server's stop (cancelled), the serving side with its input.
    let sending = state.life.unless_cancelled(super::buffer::send(queue, &mut outlet));
    let (served, sent) = tokio::join!(serving, sending);
    let Ok((mut log, outcome)) = served else {
        return (Ended::Served(Outcome::Failed), outlet);
    };
    if let Some(sent) = &sent {
        sent.record(&mut log.record);
    }
    let outcome = match outcome {
        Outcome::Ok if !sent.is_some_and(|s| s.complete) => Outcome::Disconnected,
        outcome => outcome,
    };
    log.finish(state, outcome);
    (Ended::Served(outcome), outlet)
}
