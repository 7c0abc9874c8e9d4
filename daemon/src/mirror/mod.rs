//! Pull mirrors, beside the push: a repository that follows an upstream. A sync asks the
//! upstream for its branches and tags with gix's client (protocol v2 where the upstream speaks
//! it: handshake, ls-refs, one fetch round with the mirror's own ref tips as haves), over git://,
//! ssh (the system's OpenSSH) or a local path, and hands the pack and the ref updates to the
//! push's ingest ([`crate::push::apply`]): quarantine, object and connectivity checks, the refs
//! moved under the same locks as a push, all of them or none. A mirror follows its upstream
//! exactly (`git fetch --prune`'s way: a force-push is followed, a deleted branch deleted), and
//! nobody pushes to it but its sync.
//!
//! A mirror is a repository whose config names its upstream (`gixd.mirror.url`).

use std::collections::BTreeMap;

use gix_hash::ObjectId;

use crate::push::{self, RefUpdate};
use crate::serve_error::ServeError;
use crate::session::Context;

/// The repository config key naming a mirror's upstream.
pub const URL_KEY: &str = push::MIRROR_URL_KEY;

/// The refs a mirror follows.
const PREFIXES: [&str; 2] = ["refs/heads/", "refs/tags/"];

/// Why a sync did not bring the mirror up to its upstream.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    #[error("'{0}' is not a mirror ({URL_KEY} is not set)")]
    NotAMirror(String),
    #[error("the upstream {url}: {reason}")]
    Upstream { url: String, reason: String },
    #[error("the upstream {0}: HTTP(S) upstreams are not supported yet (git://, ssh:// and local paths are)")]
    Unsupported(String),
    #[error("the upstream's objects were refused: {0}")]
    Refused(String),
    #[error(transparent)]
    Serve(#[from] ServeError),
}

/// What a sync did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Synced {
    /// Refs created, moved or deleted.
    pub updated: usize,
    /// Objects in the pack fetched (0: none was needed).
    pub objects: u32,
}

/// The upstream of the repository `repo` mirrors, if it is a mirror.
pub use push::mirrored_from as upstream;

/// Bring the mirror `ctx` serves up to its upstream. Blocks (network and disk): call it on a
/// blocking thread.
pub fn sync(ctx: &Context<'_>) -> Result<Synced, MirrorError> {
    let repo = ctx.served.repo.to_thread_local();
    let url = upstream(&repo).ok_or_else(|| MirrorError::NotAMirror(ctx.served.name.clone()))?;
    let failed = |reason: String| MirrorError::Upstream { url: url.clone(), reason };
    let parsed = gix_url::parse(gix::bstr::BStr::new(url.as_bytes())).map_err(|e| failed(e.to_string()))?;
    if matches!(parsed.scheme, gix_url::Scheme::Http | gix_url::Scheme::Https) {
        return Err(MirrorError::Unsupported(url));
    }
    let options = gix_transport::client::blocking_io::connect::Options {
        version: gix_transport::Protocol::V2,
        ..Default::default()
    };
    let mut transport =
        gix_transport::client::blocking_io::connect::connect(parsed, options).map_err(|e| failed(e.to_string()))?;
    let mut progress = gix_utils::progress::Discard;
    let mut handshake = gix_protocol::handshake(
        &mut transport,
        gix_transport::Service::UploadPack,
        |_| Ok(None),
        Vec::new(),
        &mut progress,
    )
    .map_err(|e| failed(crate::error::chain(&e)))?;
    // The mirror's objects are named as upstream's are, or nothing it sends fits.
    let theirs_format = handshake
        .capabilities
        .capability("object-format")
        .and_then(|c| c.value().map(|v| v.to_string()))
        .unwrap_or_else(|| "sha1".into());
    let ours_format = repo.object_hash().to_string();
    if theirs_format != ours_format {
        return Err(failed(format!(
            "its objects are {theirs_format}, the mirror's {ours_format}: make the mirror with --object-format {theirs_format}"
        )));
    }
    let agent: gix_protocol::command::Feature =
        ("agent", Some(gix_protocol::agent(concat!("gixd/", env!("CARGO_PKG_VERSION")))));
    let refs = match handshake.refs.take() {
        Some(refs) => refs,
        None => {
            let mut prefixes = gix_protocol::ls_refs::RefPrefixes::new();
            prefixes.extend(PREFIXES.iter().chain(&["HEAD"]).map(|p| (*p).into()));
            gix_protocol::LsRefsCommand::new(Some(prefixes), &handshake.capabilities, agent.clone())
                .invoke_blocking(&mut transport, &mut progress, false)
                .map_err(|e| failed(crate::error::chain(&e)))?
        }
    };
    // What the upstream has, and what the mirror has, of the refs it follows.
    let theirs: BTreeMap<String, ObjectId> = refs
        .iter()
        .filter_map(|r| {
            let (name, target, _peeled) = r.unpack();
            let name = name.to_string();
            (PREFIXES.iter().any(|p| name.starts_with(p)) && !name.ends_with("^{}"))
                .then_some((name, target?.to_owned()))
        })
        .collect();
    // The branch upstream's HEAD names becomes the mirror's (what a clone of it checks out).
    let head = refs.iter().find_map(|r| match r {
        gix_protocol::handshake::Ref::Symbolic { full_ref_name, target, .. }
        | gix_protocol::handshake::Ref::Unborn { full_ref_name, target }
            if full_ref_name == "HEAD" =>
        {
            Some(target.to_string())
        }
        _ => None,
    });
    let ours = local_refs(&repo)?;
    let mut updates = Vec::new();
    for (name, new) in &theirs {
        let old = ours.get(name).copied();
        if old != Some(*new) {
            updates.push(RefUpdate {
                old: old.unwrap_or_else(|| ObjectId::null(new.kind())),
                new: *new,
                name: name.clone(),
            });
        }
    }
    for (name, old) in &ours {
        if !theirs.contains_key(name) {
            updates.push(RefUpdate { old: *old, new: ObjectId::null(old.kind()), name: name.clone() });
        }
    }
    if let Some(head) = head.filter(|h| h.starts_with("refs/heads/")) {
        follow_head(&repo, &head).map_err(|reason| failed(format!("the mirror's HEAD: {reason}")))?;
    }
    if updates.is_empty() {
        let _ = gix_protocol::indicate_end_of_interaction(&mut transport, false);
        return Ok(Synced::default());
    }
    let wants: Vec<ObjectId> = {
        let mut wants: Vec<_> =
            updates.iter().filter(|u| !u.is_delete() && !repo.has_object(u.new)).map(|u| u.new).collect();
        wants.sort();
        wants.dedup();
        wants
    };
    let request = push::Request { updates, atomic: true, options: Vec::new(), from_upstream: true };
    let outcome = if wants.is_empty() {
        let _ = gix_protocol::indicate_end_of_interaction(&mut transport, false);
        push::apply(ctx, &request, &mut std::io::empty(), &mut push::Silent)?
    } else {
        let version = handshake.server_protocol_version;
        let mut features = gix_protocol::Command::Fetch.default_features(version, &handshake.capabilities);
        // Every line the answer has would be side-band framed: one reader for all is simpler.
        features.retain(|(name, _)| *name != "sideband-all");
        features.push(agent);
        let mut arguments = gix_protocol::fetch::Arguments::new(version, features, false);
        for want in &wants {
            arguments.want(want);
        }
        let mut haves: Vec<_> = ours.values().copied().collect();
        haves.sort();
        haves.dedup();
        for have in &haves {
            arguments.have(have);
        }
        let outcome = {
            let mut reader = arguments.send(&mut transport, true).map_err(|e| failed(crate::error::chain(&e)))?;
            let response = gix_protocol::fetch::Response::from_line_reader(version, &mut reader, true, false)
                .map_err(|e| failed(crate::error::chain(&e)))?;
            if !response.has_pack() {
                return Err(failed("it sent no pack".into()));
            }
            // With a handler, the reader takes the side-band's frames apart: the pack's bytes
            // are read, the upstream's progress dropped.
            reader.set_progress_handler(Some(Box::new(|_is_error, _text: &[u8]| std::ops::ControlFlow::Continue(()))));
            push::apply(ctx, &request, &mut reader, &mut push::Silent)?
        };
        let _ = gix_protocol::indicate_end_of_interaction(&mut transport, false);
        outcome
    };
    if let Some(err) = &outcome.unpack_error {
        return Err(MirrorError::Refused(err.to_string()));
    }
    if let Some(Err(refusal)) = outcome.results.iter().find(|r| r.is_err()) {
        return Err(MirrorError::Refused(refusal.to_string()));
    }
    Ok(Synced { updated: outcome.results.len(), objects: outcome.objects })
}

/// Point the mirror's HEAD at `branch` (symbolically, as upstream's is), if it points elsewhere.
fn follow_head(repo: &gix::Repository, branch: &str) -> Result<(), String> {
    use gix::refs::transaction::{Change, LogChange, PreviousValue, RefEdit};
    let current = repo.find_reference("HEAD").ok().and_then(|r| r.target().try_name().map(|n| n.as_bstr().to_string()));
    if current.as_deref() == Some(branch) {
        return Ok(());
    }
    let target = gix::refs::FullName::try_from(branch).map_err(|e| e.to_string())?;
    repo.edit_reference(RefEdit {
        change: Change::Update {
            log: LogChange::default(),
            expected: PreviousValue::Any,
            new: gix::refs::Target::Symbolic(target),
        },
        name: "HEAD".try_into().map_err(|e: gix::validate::reference::name::Error| e.to_string())?,
        deref: false,
    })
    .map(drop)
    .map_err(|e| e.to_string())
}

/// The mirror's branches and tags (their direct targets: a tag's object, not its commit).
fn local_refs(repo: &gix::Repository) -> Result<BTreeMap<String, ObjectId>, MirrorError> {
    let store = crate::repo::ref_store::RefStore::of(repo);
    let mut out = BTreeMap::new();
    for name in store.names(repo) {
        if PREFIXES.iter().any(|p| name.starts_with(p))
            && let Some(id) = store.value(repo, &name)
        {
            out.insert(name, id);
        }
    }
    Ok(out)
}

/// Make the repository `name` below `base` a new mirror of `url` (empty until its first sync):
/// its git directory.
pub fn create(
    base: &std::path::Path,
    name: &str,
    url: &str,
    options: &crate::repo::create::Options,
) -> Result<std::path::PathBuf, MirrorError> {
    let failed = |reason: String| MirrorError::Upstream { url: url.to_owned(), reason };
    gix_url::parse(gix::bstr::BStr::new(url.as_bytes())).map_err(|e| failed(e.to_string()))?;
    let git_dir = crate::repo::create::create(base, name, options).map_err(|e| failed(format!("the mirror: {e}")))?;
    let path = git_dir.join("config");
    let written = (|| -> Result<(), String> {
        let mut config = gix::config::File::from_path_no_includes(path.clone(), gix::config::Source::Local)
            .map_err(|e| e.to_string())?;
        config.set_raw_value_by("gixd", Some("mirror".into()), "url", url).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        config.write_to(&mut out).map_err(|e| e.to_string())?;
        std::fs::write(&path, out).map_err(|e| e.to_string())
    })();
    if let Err(reason) = written {
        let _ = std::fs::remove_dir_all(&git_dir);
        return Err(failed(format!("the mirror's config: {reason}")));
    }
    Ok(git_dir)
}
