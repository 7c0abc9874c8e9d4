//! The git wire protocol, independent of transport: pkt-lines ([`pkt`]) and side-band framing
//! ([`sideband`]), v0/v1 ([`v0`]), v2 ([`v2`]), the negotiation both share ([`negotiate`]), what
//! upload-pack does once negotiation is over ([`upload`]), receive-pack ([`receive`]) and
//! upload-archive ([`archive`]). Functions here read a request body and write a response to any
//! `io::Write`; they never see HTTP or a socket.

pub mod archive;
pub mod negotiate;
pub mod pkt;
pub mod receive;
pub mod sideband;
pub mod upload;
pub mod v0;
pub mod v2;

pub use crate::session::{Context, Version};

/// The `object-format=` name of a hash, as every service advertises it.
pub fn hash_name(kind: gix_hash::Kind) -> &'static str {
    match kind {
        gix_hash::Kind::Sha1 => "sha1",
        gix_hash::Kind::Sha256 => "sha256",
        _ => "unknown",
    }
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
