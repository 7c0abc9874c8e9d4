//! What one request and the whole server share, whatever the transport: the server's state
//! (repositories, limits, access, transfer slots, the tap), a request's context as the protocol
//! and push layers see it, the protocol version it asked for, and what a tap is told. Neutral
//! ground: transports build these, protocols and push read them.

use std::sync::Arc;

use crate::config::Config;
use crate::repo::{Repos, Served};

/// What every request handler shares.
pub struct State {
    pub repos: Repos,
    pub config: Config,
    pub access: crate::auth::Access,
    /// One permit per transfer in flight (`Config::max_transfers`).
    pub transfers: Arc<tokio::sync::Semaphore>,
    /// An observer of whole exchanges (the wire suite's snapshots), a server option: nothing
    /// is copied without one.
    pub tap: Option<Arc<dyn Tap>>,
}

/// What one request needs from the server.
pub struct Context<'a> {
    pub repos: &'a Repos,
    pub served: &'a Served,
    pub config: &'a Config,
    /// Who is pushing (the token's user), for the reflog and the log; `None`: anonymous.
    pub pusher: Option<&'a str>,
}

/// The protocol a client asked for (HTTP `Git-Protocol` header, git:// extra parameters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// v0 and v1 (v1 is v0 with a `version 1` line in front of the advertisement).
    V0,
    V1,
    V2,
}

impl Version {
    /// Parse `version=N` out of colon-separated parameters; the highest version we speak wins.
    pub fn from_params(params: &str) -> Version {
        let mut version = Version::V0;
        for p in params.split(':') {
            match p.trim() {
                "version=2" => version = Version::V2,
                "version=1" if version == Version::V0 => version = Version::V1,
                _ => {}
            }
        }
        version
    }
}

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
    pub pack: Option<crate::pack::Stats>,
}

pub trait Tap: Send + Sync {
    fn exchange(&self, exchange: Exchange);
}
