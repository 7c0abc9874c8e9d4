//! Transports: bytes in and out. They resolve the repository, read bounded request bodies and
//! stream responses; the protocol layer never sees them. Smart HTTP ([`http`]) and git://
//! ([`git`]), HTTPS's TLS ([`tls`]), SSH ([`ssh`]); an HTTP connection sends cached packs from their files
//! ([`zero_copy`]).

pub mod git;
pub mod http;
pub mod pace;
pub mod ssh;
pub mod stream;
pub mod tls;
pub mod zero_copy;
