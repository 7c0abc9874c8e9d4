//! Git LFS, below the service: a repository's LFS objects as files ([`store`]: git-lfs's layout,
//! uploads checked before they are visible), its file locks ([`locks`]: one file per locked
//! path, created exclusively), the API's JSON bodies ([`api`]) and the short-lived credentials
//! SSH users are issued for the HTTP API ([`token`]). Who may do what, and the
//! answers, are the LFS service's (`crate::service::lfs`); the HTTP framing is the transport's.

pub mod api;
pub mod locks;
pub mod pointer;
pub mod store;
pub mod token;
pub mod transfer;

pub use store::{Oid, Store, Upload, UploadError};
