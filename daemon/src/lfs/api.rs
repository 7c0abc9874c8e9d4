//! The Git LFS API's JSON bodies (`application/vnd.git-lfs+json`): the batch request and its
//! answer (transfer `basic`, hash `sha256`), the verify callback's body, and the locks API's
//! requests and answers. Types only; what they mean is the LFS service's (`crate::service::lfs`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::locks::Lock;

pub const MEDIA_TYPE: &str = "application/vnd.git-lfs+json";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    Download,
    Upload,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RefName {
    pub name: String,
}

/// `POST …/objects/batch`.
#[derive(Debug, Deserialize)]
pub struct BatchRequest {
    pub operation: Operation,
    #[serde(default)]
    pub transfers: Vec<String>,
    #[serde(default, rename = "ref")]
    pub reference: Option<RefName>,
    pub objects: Vec<ObjectSpec>,
    #[serde(default)]
    pub hash_algo: Option<String>,
}

/// An object as a request names it: an oid (checked by the service, not here) and a size.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct ObjectSpec {
    pub oid: String,
    pub size: u64,
}

#[derive(Debug, Serialize)]
pub struct BatchResponse {
    pub transfer: &'static str,
    pub objects: Vec<ObjectAnswer>,
    pub hash_algo: &'static str,
}

/// One object of a batch answer: what to do with it, or why not.
#[derive(Debug, Serialize)]
pub struct ObjectAnswer {
    pub oid: String,
    pub size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authenticated: Option<bool>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub actions: BTreeMap<&'static str, Action>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ObjectError>,
}

#[derive(Debug, Serialize)]
pub struct Action {
    pub href: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub header: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_in: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct ObjectError {
    pub code: u16,
    pub message: String,
}

/// A whole request's error body.
#[derive(Debug, Serialize)]
pub struct ErrorBody<'a> {
    pub message: &'a str,
}

/// `POST …/locks`.
#[derive(Debug, Deserialize)]
pub struct LockRequest {
    pub path: String,
    #[serde(default, rename = "ref")]
    pub reference: Option<RefName>,
}

#[derive(Debug, Serialize)]
pub struct LockAnswer {
    pub lock: Lock,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct LockList {
    pub locks: Vec<Lock>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `POST …/locks/verify`.
#[derive(Debug, Default, Deserialize)]
pub struct VerifyLocksRequest {
    #[serde(default)]
    pub cursor: Option<String>,
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default, rename = "ref")]
    pub reference: Option<RefName>,
}

#[derive(Debug, Serialize)]
pub struct VerifyLocksAnswer {
    pub ours: Vec<Lock>,
    pub theirs: Vec<Lock>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `POST …/locks/<id>/unlock`.
#[derive(Debug, Default, Deserialize)]
pub struct UnlockRequest {
    #[serde(default)]
    pub force: bool,
    #[serde(default, rename = "ref")]
    pub reference: Option<RefName>,
}
