//! The error that stops serving one request ([`ServeError`]), above the layers it is made from:
//! a repository not found or not served, what a client sent that breaks the protocol
//! ([`crate::error`]), and each lower layer's own error — the object graph's walks, selection,
//! the refs, pack writing — taken in by [`From`], the cases the service tells apart (a client
//! gone, an object missing, the object database failing) made its own.

use gix_hash::ObjectId;

use crate::error::{ProtocolError, RepoError};
use crate::graph::GraphError;
use crate::pack::PackError;

/// Anything that stops serving one request.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Repo(#[from] RepoError),
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    #[error("repository access failed: {0}")]
    Git(#[from] gix::Error),
    #[error("object {0} is missing from the repository")]
    MissingObject(ObjectId),
    #[error("pack generation failed: {0}")]
    Pack(PackError),
    /// The client went away (or stopped reading); nothing can be reported to it.
    #[error("client disconnected")]
    Disconnected,
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Refs(#[from] crate::repo::RefsError),
}

/// What only a pack writer can fail with stays a pack error.
impl From<PackError> for ServeError {
    fn from(err: PackError) -> Self {
        match err {
            PackError::Disconnected => ServeError::Disconnected,
            PackError::MissingObject(id) => ServeError::MissingObject(id),
            PackError::Git(err) => ServeError::Git(err),
            PackError::Io(err) => ServeError::Io(err),
            other => ServeError::Pack(other),
        }
    }
}

impl From<GraphError> for ServeError {
    fn from(err: GraphError) -> Self {
        match err {
            GraphError::Missing(id) => ServeError::MissingObject(id),
            GraphError::Git(err) => ServeError::Git(err),
        }
    }
}

impl ServeError {
    /// A gitoxide error while writing a pack or an archive.
    pub fn pack(err: impl std::error::Error + Send + Sync + 'static) -> Self {
        ServeError::Pack(PackError::gix(err))
    }

    /// An object not found or not read: what gix-odb answers, now and then, while a repack
    /// replaces the packs of a handle's snapshot (as well as for a broken repository).
    pub fn may_be_a_pack_swap(&self) -> bool {
        matches!(self, ServeError::MissingObject(_) | ServeError::Git(_) | ServeError::Pack(PackError::Gix(_)))
    }
}

impl From<crate::shallow::ShallowError> for ServeError {
    fn from(err: crate::shallow::ShallowError) -> Self {
        match err {
            crate::shallow::ShallowError::Graph(err) => err.into(),
            crate::shallow::ShallowError::Protocol(err) => err.into(),
        }
    }
}
