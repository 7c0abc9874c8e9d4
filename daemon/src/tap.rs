//! An observer of whole exchanges: what a client asked and every byte it was answered, with the
//! statistics of the pack, for the wire suite's snapshots and for diagnostics. Set through
//! [`Config::tap`](crate::config::Config::tap); nothing is copied when it is not set.

use crate::pack::Stats;
use crate::protocol::Version;

/// One request and its complete response.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// The repository as the client named it.
    pub repo: String,
    /// `info/refs` or `git-upload-pack`.
    pub service: &'static str,
    pub version: Version,
    pub request: Vec<u8>,
    pub response: Vec<u8>,
    /// The pack sent, if any.
    pub pack: Option<Stats>,
}

pub trait Tap: Send + Sync {
    fn exchange(&self, exchange: Exchange);
}

/// A tap that keeps every exchange in memory.
#[derive(Default)]
pub struct Recorder(std::sync::Mutex<Vec<Exchange>>);

impl Recorder {
    /// The exchanges recorded since the last call.
    pub fn take(&self) -> Vec<Exchange> {
        std::mem::take(&mut *self.0.lock().expect("not poisoned"))
    }
}

impl Tap for Recorder {
    fn exchange(&self, exchange: Exchange) {
        self.0.lock().expect("not poisoned").push(exchange);
    }
}
