//! The git wire protocol, independent of transport: pkt-lines ([`pkt`]), v0/v1 ([`v0`]), v2
//! ([`v2`]), the negotiation both share ([`negotiate`]), what upload-pack does once negotiation
//! is over ([`upload`]), receive-pack ([`receive`]) and upload-archive ([`archive`]). Functions here read a request body and
//! write a response to any `io::Write`; they never see HTTP or a socket.

pub mod archive;
pub mod negotiate;
pub mod pkt;
pub mod receive;
pub mod upload;
pub mod v0;
pub mod v2;

use crate::config::Config;
use crate::repo::{Repos, Served};

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

/// What one request needs from the server.
pub struct Context<'a> {
    pub repos: &'a Repos,
    pub served: &'a Served,
    pub config: &'a Config,
    /// Who is pushing (the token's user), for the reflog and the log; `None`: anonymous.
    pub pusher: Option<&'a str>,
}

#[cfg(test)]
mod tests {
    use super::Version;

    #[test]
    fn the_version_comes_from_the_version_parameter_only() {
        assert_eq!(Version::from_params("version=2"), Version::V2);
        assert_eq!(Version::from_params("foo=bar:version=2"), Version::V2);
        assert_eq!(Version::from_params("version=1"), Version::V1);
        assert_eq!(Version::from_params("version=3"), Version::V0);
        assert_eq!(Version::from_params(""), Version::V0);
    }
}
