//! Typed errors of every layer. Each is reported once, at the edge (the transport), in the form
//! the client understands: an HTTP status with a text body, or an `ERR` pkt-line / band-3 message.

use gix_hash::ObjectId;

/// Finding and opening a repository for a URL path.
#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    #[error("repository '{0}' not found")]
    NotFound(String),
    #[error("repository '{0}' is not exported")]
    NotExported(String),
    #[error("invalid repository path '{0}'")]
    BadPath(String),
    #[error("could not read repository '{path}': {source}")]
    Open {
        path: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// What a client sent that breaks the protocol; the message goes back to that client.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("malformed pkt-line: {0}")]
    PktLine(String),
    #[error("request ended before its flush packet")]
    Truncated,
    #[error("unexpected line: {0}")]
    Unexpected(String),
    #[error("unknown command '{0}'")]
    UnknownCommand(String),
    #[error("unknown argument '{0}'")]
    UnknownArgument(String),
    #[error("unsupported capability '{0}'")]
    UnknownCapability(String),
    #[error("invalid object id '{0}'")]
    BadObjectId(String),
    #[error("want {0} is not our ref")]
    WantNotAdvertised(ObjectId),
    #[error("want {0}: no such object")]
    WantMissing(ObjectId),
    #[error("too many {what} lines (limit {limit})")]
    TooMany { what: &'static str, limit: usize },
    #[error("{0}")]
    Shallow(String),
    #[error(transparent)]
    Filter(#[from] crate::filter::FilterError),
    #[error("filtering capability not negotiated")]
    FilterNotAllowed,
    #[error("unknown ref {0}")]
    UnknownRef(String),
    #[error("object-format '{asked}' requested, the repository uses '{ours}'")]
    ObjectFormat { asked: String, ours: String },
}

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
    Pack(String),
    /// The client went away (or stopped reading); nothing can be reported to it.
    #[error("client disconnected")]
    Disconnected,
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

impl ServeError {
    pub fn pack(err: impl std::fmt::Display) -> Self {
        ServeError::Pack(err.to_string())
    }
}
