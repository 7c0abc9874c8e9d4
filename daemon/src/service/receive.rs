//! receive-pack as a service: a push is admitted (a place and a slot), run by the protocol layer
//! on a blocking thread with its repository ([`Push`]: the advertisement, the push applied),
//! counted by its outcome, and recorded once.

use std::io::Read;
use std::net::IpAddr;
use std::sync::Arc;

use super::{Outcome, Refusal, Request, Work};
use crate::protocol::receive::Receiver;
use crate::protocol::{self, Version};
use crate::repo::{RefSnapshot, Served};
use crate::serve_error::ServeError;
use crate::session::Context;
use crate::session::{State, Tally};

/// A push's repository, as the receive-pack codec asks it ([`Receiver`]).
pub struct Push<'a> {
    ctx: &'a Context<'a>,
    repo: gix::Repository,
    /// Where a push over a connection takes its transfer slot, once its pack comes.
    slot_later: Option<(&'a State, tokio::runtime::Handle)>,
}

impl<'a> Push<'a> {
    /// A push admitted already (its share and its slot held).
    pub fn open(ctx: &'a Context<'a>) -> Self {
        Push { ctx, repo: ctx.served.repo.to_thread_local(), slot_later: None }
    }

    /// A push over a connection (git://, SSH), admitted with its share only: it takes its slot
    /// when its commands are read and its pack comes, not while the client reads the
    /// advertisement and decides. A client's pre-push hook runs in that time — git-lfs's
    /// asks the server for its refs over a second connection, which would otherwise wait for
    /// the slot its own push holds (on a server of one slot, for ever). Call on a blocking
    /// thread of the runtime.
    pub fn taking_its_slot_when_the_pack_comes(mut self, state: &'a State) -> Self {
        self.slot_later = Some((state, tokio::runtime::Handle::current()));
        self
    }
}

impl Receiver for Push<'_> {
    fn advertised(&self) -> Result<RefSnapshot, ServeError> {
        Ok(RefSnapshot::load_for_push(&self.repo)?)
    }

    fn object_hash(&self) -> gix_hash::Kind {
        self.repo.object_hash()
    }

    fn apply(
        &mut self,
        req: &crate::push::Request,
        input: &mut dyn std::io::BufRead,
        messages: &mut dyn crate::push::Messages,
    ) -> Result<crate::push::Outcome, ServeError> {
        let _slot = match &self.slot_later {
            None => None,
            Some((state, runtime)) => match runtime.block_on(super::pipeline::slot(state)) {
                Ok(slot) => Some(slot),
                Err(super::pipeline::Busy(message)) => {
                    // Refused, every command with the reason; the pack is read (the client sends it
                    // whole before it reads the report), within the push limit, and dropped.
                    std::io::copy(&mut input.take(self.ctx.config.max_push_bytes), &mut std::io::sink())?;
                    let refused = crate::push::Refusal::Busy(message);
                    return Ok(crate::push::Outcome {
                        unpack_error: Some(crate::push::UnpackError::Busy(message)),
                        results: req.updates.iter().map(|_| Err(refused.clone())).collect(),
                        objects: 0,
                    });
                }
            },
        };
        crate::push::apply(self.ctx, req, input, messages)
    }
}

/// The outcome of a push that ended with `result`, counted in `gixd_pushes_total`.
pub fn counted(state: &State, served: &Served, result: Result<Option<crate::push::Outcome>, ServeError>) -> Outcome {
    match result {
        // No command: nothing was pushed (a client that only looked at the refs).
        Ok(None) => Outcome::Ok,
        Ok(Some(pushed)) => {
            super::maintenance::asked_after_push(state, &served.git_dir);
            let label = pushed.label();
            state.metrics.push(label);
            if label == "ok" { Outcome::Ok } else { Outcome::Refused }
        }
        Err(err) => {
            state.metrics.push("failed");
            super::ended(served, Err::<(), _>(err))
        }
    }
}

/// A push that arrives as one request (smart HTTP): admitted, then its body, streamed, is read
/// on a blocking thread through the reader `input` makes there (a decoder may read as it is
/// made); the report to send back, once the push is done.
pub async fn stateless(
    state: &Arc<State>,
    served: Served,
    client: Option<IpAddr>,
    pusher: Option<String>,
    version: Version,
    input: impl FnOnce() -> Box<dyn Read> + Send + 'static,
    log: Request,
) -> Result<Vec<u8>, Refusal> {
    let admitted = super::pipeline::admit(state, &served, client).await?;
    let state = state.clone();
    let pushed = tokio::task::spawn_blocking(move || {
        let _admitted = admitted;
        push(&state, &served, pusher.as_deref(), version, input, log).0
    })
    .await;
    pushed.map_err(|_| Refusal::Failed("internal error".into()))
}

/// Push-to-create: a push to the missing repository `name` by someone who may create it. The
/// repository is made in a hidden place ([`crate::repo::create`]), the push lands in it, and it is
/// put in place only if the push moved a ref; else nothing is left. A second creator of the same
/// path meanwhile is refused (`Refusal::Conflict`).
pub async fn create_and_push(
    state: &Arc<State>,
    name: String,
    pusher: Option<String>,
    version: Version,
    input: impl FnOnce() -> Box<dyn Read> + Send + 'static,
    mut log: Request,
) -> Result<Vec<u8>, Refusal> {
    let slot = super::pipeline::slot(state).await?;
    let state = state.clone();
    let pushed = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        let options = crate::repo::create::Options::default();
        let creation = match crate::repo::create::begin(state.repos.base(), &name, &options) {
            Ok(creation) => creation,
            Err(err) => {
                // Another creator holds the path: every command is refused with the reason.
                let mut out = Vec::new();
                let input = std::io::BufReader::with_capacity(64 * 1024, input());
                let max = state.config.max_request_body;
                let refused = protocol::receive::refuse(input, options.object_hash, max, &err.to_string(), &mut out);
                log.record.bytes = out.len() as u64;
                let outcome = if refused.is_ok() { Outcome::Refused } else { Outcome::Failed };
                log.finish(&state, outcome);
                return Ok(out);
            }
        };
        let repo =
            gix::ThreadSafeRepository::open(creation.git_dir()).map_err(|err| Refusal::Failed(err.to_string()))?;
        let served = Served { name: name.clone(), git_dir: creation.git_dir().to_owned(), repo };
        let (report, outcome, moved) = push(&state, &served, pusher.as_deref(), version, input, log);
        if moved && outcome == Outcome::Ok {
            match creation.commit() {
                Ok(git_dir) => {
                    tracing::info!(repo = %name, git_dir = %git_dir.display(), "repository created by a push")
                }
                Err(err) => tracing::error!(repo = %name, %err, "a pushed repository could not be put in place"),
            }
        }
        Ok(report)
    })
    .await;
    pushed.unwrap_or_else(|_| Err(Refusal::Failed("internal error".into())))
}

/// Run one stateless push into `served` on this thread, and record it: the report, how it ended,
/// and whether a ref moved.
fn push(
    state: &State,
    served: &Served,
    pusher: Option<&str>,
    version: Version,
    input: impl FnOnce() -> Box<dyn Read>,
    mut log: Request,
) -> (Vec<u8>, Outcome, bool) {
    let work = Work::start();
    let tally = Tally::default();
    let ctx = state.context(served, pusher, &tally);
    let mut out = Vec::new();
    let input = std::io::BufReader::with_capacity(64 * 1024, input());
    let result = protocol::receive_pack(
        &ctx.bounds(),
        &mut Push::open(&ctx),
        version,
        protocol::Mode::Stateless,
        input,
        &mut out,
    );
    let moved = matches!(&result, Ok(Some(pushed)) if pushed.label() == "ok");
    let outcome = counted(state, served, result);
    log.record.bytes = out.len() as u64;
    log.record.cpu_ms = work.seconds() * 1e3;
    log.finish(state, outcome);
    (out, outcome, moved)
}
