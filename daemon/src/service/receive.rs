//! receive-pack as a service: a push is admitted (a place and a slot), run by the protocol layer
//! on a blocking thread, counted by its outcome, and recorded once.

use std::io::Read;
use std::net::IpAddr;
use std::sync::Arc;

use super::{Outcome, Refusal, Request, Work};
use crate::error::ServeError;
use crate::protocol::{self, Version};
use crate::repo::Served;
use crate::session::{State, Tally};

/// The outcome of a push that ended with `result`, counted in `gixd_pushes_total`.
pub fn counted(state: &State, served: &Served, result: Result<Option<crate::push::Outcome>, ServeError>) -> Outcome {
    match result {
        // No command: nothing was pushed (a client that only looked at the refs).
        Ok(None) => Outcome::Ok,
        Ok(Some(pushed)) => {
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
    mut log: Request,
) -> Result<Vec<u8>, Refusal> {
    let admitted = super::admit(state, &served, client).await?;
    let state = state.clone();
    let pushed = tokio::task::spawn_blocking(move || {
        let _admitted = admitted;
        let work = Work::start();
        let tally = Tally::default();
        let ctx = state.context(&served, pusher.as_deref(), &tally);
        let mut out = Vec::new();
        let input = std::io::BufReader::with_capacity(64 * 1024, input());
        let result = protocol::receive_pack(&ctx, version, protocol::Mode::Stateless, input, &mut out);
        let outcome = counted(&state, &served, result);
        log.record.bytes = out.len() as u64;
        log.record.cpu_ms = work.seconds() * 1e3;
        log.finish(&state, outcome);
        out
    })
    .await;
    pushed.map_err(|_| Refusal::Failed("internal error".into()))
}
