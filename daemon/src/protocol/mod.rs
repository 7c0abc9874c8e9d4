//! The git wire protocol, independent of transport: pkt-lines ([`pkt`]) and side-band framing
//! ([`sideband`]), v0/v1 ([`v0`]) and v2 ([`v2`]) upload-pack as codecs — requests parsed into
//! typed values, answers encoded, every question about the repository asked of an
//! [`upload::Upload`] session the service gives them —, what both share ([`upload`]),
//! receive-pack ([`receive`]) and upload-archive ([`archive`]). Functions here read a request
//! body and write a response to any `io::Write`; they never see HTTP or a socket.

pub mod archive;
pub mod pkt;
pub mod receive;
pub mod sideband;
pub mod upload;
pub mod v0;
pub mod v2;

pub use crate::session::{Bounds, Version};

use std::io::{BufRead, Write};

use crate::repo::RefSnapshot;
use crate::serve_error::ServeError;

/// How a service's request arrives, whatever carries it.
pub enum Input<'a, R> {
    /// One whole request body (smart HTTP): the advertisement was a request of its own
    /// ([`advertise_http`]) and every round of negotiation is a new request.
    Stateless(&'a [u8]),
    /// A connection (git://): the advertisement, then the whole conversation.
    Stateful(R),
}

/// The services a client can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    UploadPack,
    ReceivePack,
}

impl Service {
    pub fn name(self) -> &'static str {
        match self {
            Service::UploadPack => "git-upload-pack",
            Service::ReceivePack => "git-receive-pack",
        }
    }
}

/// Whether a push arrives as one request after a separate advertisement (smart HTTP) or on a
/// connection that gets the advertisement first (git://); either way its body is streamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Stateless,
    Stateful,
}

/// receive-pack, over any transport; on a connection the push snapshot's advertisement
/// ([`RefSnapshot::load_for_push`]) goes first.
pub fn receive_pack<R: BufRead, W: Write>(
    bounds: &Bounds<'_>,
    receiver: &mut dyn receive::Receiver,
    version: Version,
    mode: Mode,
    input: R,
    mut out: W,
) -> Result<Option<crate::push::Outcome>, ServeError> {
    match mode {
        Mode::Stateless => receive::receive_pack(bounds, receiver, input, out),
        Mode::Stateful => {
            let refs = receiver.advertised()?;
            let mut w = pkt::Writer::new();
            receive::advertise(&refs, version, &mut w);
            out.write_all(&w.buf)?;
            out.flush()?;
            receive::receive_pack(bounds, receiver, input, out)
        }
    }
}

/// A service's advertisement as smart HTTP sends it (`GET info/refs?service=…`): v0/v1 behind a
/// `# service=` line, v2 upload-pack as its capability list.
pub fn advertise_http(service: Service, refs: &RefSnapshot, version: Version, w: &mut pkt::Writer) {
    match (service, version) {
        (Service::UploadPack, Version::V2) => v2::advertise(refs, w),
        (Service::UploadPack, v0_or_v1) => {
            w.text(format!("# service={}", service.name())).flush();
            v0::advertise(refs, v0_or_v1, true, w);
        }
        (Service::ReceivePack, version) => {
            w.text(format!("# service={}", service.name())).flush();
            receive::advertise(refs, version, w);
        }
    }
}

/// A fetch that ends its negotiation (it says `done`), as the pack cache keys it: its
/// capabilities as a set, without the ones that change no byte of the answer (`agent`,
/// `session-id`, `server-option`), and its other lines in the order sent. Two requests with the
/// same key get the same answer from the same state of a repository, whichever transport carried
/// them (a v2 `fetch` is answered alike over HTTP and a connection).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FetchKey {
    pub version: u8,
    pub capabilities: std::collections::BTreeSet<String>,
    pub arguments: Vec<String>,
}

impl FetchKey {
    /// One unambiguous byte string of the key (lines are pkt-lines: no separator is needed).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = pkt::Writer::new();
        w.text(format!("version {}", self.version));
        for capability in &self.capabilities {
            w.text(capability);
        }
        w.delim();
        for argument in &self.arguments {
            w.text(argument);
        }
        w.into_bytes()
    }
}

/// Whether a capability changes the answer (and so belongs in a [`FetchKey`]).
fn shapes_the_answer(capability: &str) -> bool {
    !["agent", "session-id", "server-option"]
        .iter()
        .any(|noise| capability.strip_prefix(noise).is_some_and(|rest| rest.is_empty() || rest.starts_with('=')))
}

/// The [`FetchKey`] of a stateless request body; `None` when it does not end negotiation (its
/// answer depends on more than its bytes: a round of acknowledgements) or is not a fetch.
pub fn fetch_key(version: Version, body: &[u8]) -> Option<FetchKey> {
    let lines = pkt::read_all(body).ok()?;
    match version {
        Version::V2 => v2::fetch_key(&lines),
        v0_or_v1 => v0::fetch_key(v0_or_v1, &lines),
    }
}

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
