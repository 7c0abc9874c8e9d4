//! Git LFS, below the service: a repository's LFS objects ([`store`]: files in git-lfs's layout,
//! or objects of an S3-compatible bucket reached through [`s3`]; uploads checked before they are
//! visible), its file locks ([`locks`]: one file per locked
//! path, created exclusively), the API's JSON bodies ([`api`]) and the short-lived credentials
//! SSH users are issued for the HTTP API ([`token`]). Who may do what, and the
//! answers, are the LFS service's (`crate::service::lfs`); the HTTP framing is the transport's.

pub mod api;
pub mod locks;
pub mod pointer;
pub mod s3;
pub mod store;
pub mod token;
pub mod transfer;

pub use store::{Backend, Located, Oid, Store, Upload, UploadError};
