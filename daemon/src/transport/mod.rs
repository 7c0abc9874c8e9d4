//! Transports: bytes in and out. They resolve the repository, read bounded request bodies and
//! stream responses; the protocol layer never sees them. HTTP now ([`http`]); git:// joins later.

pub mod http;
pub mod stream;
