//! The errors every layer shares: a repository not found or not served ([`RepoError`], with why
//! its format is not: [`Unsupported`]) and what a client sent that breaks the protocol
//! ([`ProtocolError`]). The layers below the service return errors of their own (the graph's,
//! the refs', pack and bitmap writing's), which [`crate::serve_error::ServeError`] takes in.
//! Each is reported once, where the answer to its request is written, in the form the client understands: an HTTP status with a text body (the transport,
//! before a response has started), an `ERR` pkt-line or a band-3 message (the protocol layer,
//! once it has), a `ng`/`unpack` line of report-status (push); and logged once, by the transport.

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
    /// The repository is there, but gixd cannot read its format: served as empty it would lie.
    #[error("repository '{path}' cannot be served by gixd: {reason}")]
    Unsupported {
        path: String,
        /// Whether it is exported: to everyone else it is "not found", as any private repository.
        exported: bool,
        reason: Unsupported,
    },
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
    PktLine(#[from] gix_error::Error),
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
    #[error("request section larger than {limit} bytes before its flush")]
    TooLarge { limit: usize },
    #[error("could not read the request: {0}")]
    Read(#[source] std::io::Error),
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

pub use crate::client_text::{for_client, quoted};

/// Why gixd does not serve a repository: its format ([`crate::repo::format`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    #[error("its core.repositoryformatversion is {0}; gixd reads versions 0 and 1")]
    Version(i64),
    #[error("it stores refs in {0} (extensions.refStorage); gixd reads the files and reftable backends")]
    RefStorage(String),
    #[error("its object format is {0} (extensions.objectFormat); gixd knows sha1 and sha256")]
    ObjectFormat(String),
    #[error("it is a partial clone (extensions.partialClone): objects it lacks cannot be served")]
    PartialClone,
    #[error("it keeps a second object format (extensions.compatObjectFormat), which gixd does not maintain")]
    CompatObjectFormat,
    #[error("it uses extensions.{0}, which gixd does not know")]
    Unknown(String),
    /// Only maintenance refuses it: it deletes what a new pack holds.
    #[error("its objects are precious (extensions.preciousObjects): maintenance never deletes any")]
    PreciousObjects,
    #[error("its config cannot be read: {0}")]
    Config(String),
}

/// An error and its sources on one line (`outer: inner: innermost`).
pub fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::for_client;

    #[test]
    fn client_messages_are_clipped_and_control_characters_escaped() {
        assert_eq!(for_client("want x\0y", 100), "want x\\x00y");
        assert_eq!(for_client(&"a".repeat(70_000), 1000).len(), 1000 + '…'.len_utf8());
        assert_eq!(for_client("é".repeat(10).as_str(), 5), "éé…");
        assert_eq!(for_client("two\nlines", 100), "two\nlines");
    }
}
