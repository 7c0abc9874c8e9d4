//! An observer of whole exchanges: what a client asked and every byte it was answered, with the
//! statistics of the pack, for the wire suite's snapshots and for diagnostics. A server option
//! ([`crate::server::Options`]); nothing is copied when it is not set.

pub use crate::session::{Exchange, Tap};

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
