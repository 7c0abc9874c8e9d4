//! The services, one entry each for every transport: upload-pack ([`upload`]), receive-pack
//! ([`receive`]) and upload-archive (through [`connection`]), reached through one pipeline
//! ([`pipeline`]): who asks and for which repository is decided there, a transfer takes its
//! place among its repository's and its client's transfers and then a transfer slot there (a
//! slot is held for CPU work, and answers are sent from the transfer buffers without one:
//! [`buffer`]), and a connection is sent, settled and recorded there. Around the entries: the
//! single-flight pack cache, and the request's record — its access-log line and metrics,
//! written once when it ends ([`Request::finish`]), in the same words on every transport
//! ([`Outcome`]). [`maintenance`] runs what pushes and the clock ask for, under a transfer slot
//! like any transfer.

pub mod archive;
pub mod buffer;
pub mod lfs;
pub mod lfs_transfer;
pub mod maintenance;
pub mod negotiate;
pub mod negotiation;
pub mod pack;
pub mod pipeline;
pub mod receive;
pub mod upload;

use std::io::{Read, Write};
use std::sync::Arc;

use crate::access_log::Record;
use crate::protocol::{self, Version};
use crate::repo::Served;
use crate::serve_error::ServeError;
use crate::session::{State, Tally};

/// How a request ended, in the access log's `status` and the metrics' `status` label alike for
/// every transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Served to its end (a push: every ref it asked for moved).
    Ok,
    /// The client went away (or stalled past the I/O timeout) before the end.
    Disconnected,
    /// The server failed it; the client was told why where it still could be.
    Failed,
    /// Refused before it was served (not found, not allowed, not enabled, malformed), or a push
    /// some of whose refs were refused.
    Refused,
    /// Refused for load: a transfer limit was reached.
    Busy,
}

impl Outcome {
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Disconnected => "disconnected",
            Outcome::Failed => "failed",
            Outcome::Refused => "refused",
            Outcome::Busy => "busy",
        }
    }

    /// The outcome of serving that ended with `result`, the client's side considered.
    pub fn of<T>(result: &Result<T, ServeError>) -> Outcome {
        match result {
            Ok(_) => Outcome::Ok,
            Err(ServeError::Disconnected) => Outcome::Disconnected,
            Err(_) => Outcome::Failed,
        }
    }
}

/// One request being served: its record, filled in as it goes and written once, when it ends.
pub struct Request {
    pub record: Record,
    started: std::time::Instant,
}

impl Request {
    /// A request that arrived on `transport` from `peer` for `service`.
    pub fn new(
        transport: &'static str,
        peer: Option<std::net::SocketAddr>,
        service: &str,
        version: Option<Version>,
    ) -> Request {
        Request {
            record: Record {
                transport,
                peer: peer.map_or_else(String::new, |p| p.to_string()),
                service: service.to_owned(),
                version: version.map(Version::number),
                ..Record::default()
            },
            started: std::time::Instant::now(),
        }
    }

    /// For `served`, by `user` (or anonymous).
    pub fn serving(mut self, served: &Served, user: Option<&str>) -> Request {
        self.record.repository = Some(served.name.clone());
        self.record.user = user.map(str::to_owned);
        self
    }

    /// What a request's parsing counted.
    pub fn counted(&mut self, tally: &Tally) {
        (self.record.wants, self.record.haves) = tally.counts();
    }

    /// The request is over: written to the access log and counted in the metrics.
    pub fn finish(mut self, state: &State, outcome: Outcome) {
        self.record.status = outcome.word().to_owned();
        self.record.duration_ms = self.started.elapsed().as_secs_f64() * 1e3;
        state.finished(self.record);
    }
}

/// CPU time of the calling thread from now on: a request's blocking work runs on one thread.
pub struct Work(f64);

impl Work {
    pub fn start() -> Work {
        Work(crate::metrics::thread_cpu_seconds())
    }

    pub fn seconds(&self) -> f64 {
        crate::metrics::thread_cpu_seconds() - self.0
    }
}

/// Why a request was not served; said to the client by its transport (HTTP: a status and a
/// text, git://: an `ERR` line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A transfer limit: retry shortly (HTTP 503 with `Retry-After`).
    Busy(&'static str),
    /// The server could not start it (HTTP 500).
    Failed(String),
}

impl Refusal {
    pub fn message(&self) -> &str {
        match self {
            Refusal::Busy(message) => message,
            Refusal::Failed(message) => message,
        }
    }
}

/// The services a connection can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    UploadPack,
    ReceivePack,
    UploadArchive,
}

impl Service {
    /// The service a program name names (`git-upload-pack`), if any.
    pub fn from_name(name: &str) -> Option<Service> {
        [Service::UploadPack, Service::ReceivePack, Service::UploadArchive].into_iter().find(|s| s.name() == name)
    }

    /// The program's name, as git spells it (`git-upload-pack`).
    pub fn name(self) -> &'static str {
        match self {
            Service::UploadPack => "git-upload-pack",
            Service::ReceivePack => "git-receive-pack",
            Service::UploadArchive => "git-upload-archive",
        }
    }
}

/// What a connection asked for in its request line (and, on an authenticated transport, who).
#[derive(Debug, Clone, Copy)]
pub struct Asked<'a> {
    pub service: Service,
    pub version: Version,
    /// Who pushes, for the reflog; `None`: anonymous.
    pub pusher: Option<&'a str>,
}

/// Serve one connection (git://, and any stateful transport) on the calling blocking thread,
/// reading `input` and writing into `out` (the transfer buffers the transport sends from): to its
/// end, or, for upload-pack, to its pack. The request's record, filled in, and how it ended; the
/// transport finishes it once what was written has been sent.
pub fn connection<R: Read>(
    state: &Arc<State>,
    served: &Served,
    asked: Asked<'_>,
    input: R,
    out: &mut buffer::Outbox,
    mut log: Request,
) -> (Request, Outcome) {
    let Asked { service, version, pusher } = asked;
    let work = Work::start();
    let tally = Tally::default();
    let ctx = state.context(served, pusher, &tally);
    let outcome = match service {
        Service::UploadArchive => ended(
            served,
            archive::Archive::open(&ctx).and_then(|mut archive| {
                protocol::archive::serve_stateful(&ctx.bounds(), &mut archive, input, &mut *out)
            }),
        ),
        Service::ReceivePack => {
            let input = std::io::BufReader::with_capacity(64 * 1024, input);
            receive::counted(
                state,
                served,
                protocol::receive_pack(
                    &ctx.bounds(),
                    &mut receive::Push::open(&ctx).taking_its_slot_when_the_pack_comes(state),
                    version,
                    protocol::Mode::Stateful,
                    input,
                    &mut *out,
                ),
            )
        }
        Service::UploadPack => {
            let result = upload::connection(state, &ctx, version, input, out);
            if let Ok(fetched) = &result {
                log.record.objects = fetched.objects;
                log.record.cache = fetched.cache;
            }
            ended(served, result)
        }
    };
    let outcome = match out.flush() {
        Err(_) if outcome == Outcome::Ok => Outcome::Disconnected,
        _ => outcome,
    };
    log.counted(&tally);
    let cpu = work.seconds();
    // A pack generated outside the cache (a cached one was counted where it was generated).
    if log.record.objects.is_some() && log.record.cache.is_none() {
        state.metrics.generated(cpu);
    }
    log.record.cpu_ms = cpu * 1e3;
    (log, outcome)
}

/// The outcome of serving `served` that ended with `result`, logged once: a client gone at INFO,
/// a failure at WARN (an operator filtering on WARN sees every transport's).
pub fn ended<T>(served: &Served, result: Result<T, ServeError>) -> Outcome {
    let outcome = Outcome::of(&result);
    match result {
        Ok(_) => {}
        Err(ServeError::Disconnected) => tracing::info!(repo = %served.name, "client went away"),
        Err(err) => tracing::warn!(repo = %served.name, %err, "request failed"),
    }
    outcome
}
