//! The refs one request sees: a snapshot of HEAD, the refs (loose over packed, peeled), the
//! hiding settings applied, and what the repository allows to be wanted by id; the state
//! fingerprint that says when to read them again.

use std::hash::{Hash, Hasher};

use gix::bstr::{BString, ByteSlice};
use gix_hash::ObjectId;

use super::ref_store::{Peel, RefStore, StoredHead, StoredRef};
use super::*;

/// Reading a repository's refs failed: the files or reftable backend, or the object a tag peels to.
#[derive(Debug, thiserror::Error)]
pub enum RefsError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The reftable stack could not be read (a damaged table, a `tables.list` that kept changing).
    #[error("refs: {0}")]
    Reftable(#[from] gix_reftable::Error),
    #[error("repository access failed: {0}")]
    Git(#[from] gix::Error),
    #[error("object {0} is missing from the repository")]
    MissingObject(ObjectId),
}

impl From<crate::graph::GraphError> for RefsError {
    fn from(err: crate::graph::GraphError) -> Self {
        match err {
            crate::graph::GraphError::Missing(id) => RefsError::MissingObject(id),
            crate::graph::GraphError::Git(err) => RefsError::Git(err),
        }
    }
}

/// One ref as advertised.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AdvertisedRef {
    /// Full name, e.g. `refs/heads/main`.
    pub name: BString,
    /// What the ref points at (symbolic refs followed).
    pub id: ObjectId,
    /// For an annotated tag: the object it finally points at.
    pub peeled: Option<ObjectId>,
    /// For a symbolic ref: the ref it points to.
    pub symref_target: Option<BString>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HeadState {
    /// HEAD names a branch that exists.
    Symbolic {
        target: BString,
        id: ObjectId,
    },
    /// HEAD names a branch that does not exist yet (an empty repository).
    Unborn {
        target: BString,
    },
    Detached {
        id: ObjectId,
    },
    /// No readable HEAD.
    Missing,
}

/// A fingerprint of everything [`RefSnapshot::load`] reads but the objects (an id fixes what a
/// tag peels to): a reftable stack by its `tables.list`; else packed-refs by its stat, as git and gix trust it (a rewrite is a new file:
/// new inode, size or times); every loose ref's path and bytes ([`loose_refs_state`]); HEAD;
/// and the settings that hide refs or widen wants. What a request is answered from is
/// keyed by it (the ref snapshot, the pack cache).
pub fn upload_ref_state(repo: &gix::Repository) -> Result<u64, RefsError> {
    use std::os::unix::fs::MetadataExt;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    if !RefStore::of(repo).hash_state(&mut h)? {
        match std::fs::metadata(repo.common_dir().join("packed-refs")) {
            Ok(m) => (m.dev(), m.ino(), m.len(), m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec()).hash(&mut h),
            Err(_) => "no packed-refs".hash(&mut h),
        }
        loose_refs_state(&repo.common_dir().join("refs")).map_err(RefsError::Io)?.hash(&mut h);
        match repo.head_name() {
            Ok(Some(name)) => name.as_bstr().hash(&mut h),
            Ok(None) => repo.head_id().ok().map(|id| id.detach()).hash(&mut h),
            Err(_) => "no HEAD".hash(&mut h),
        }
    }
    hide_refs_patterns(repo, "uploadpack.hideRefs").hash(&mut h);
    WantPolicy::read(repo).hash(&mut h);
    Ok(h.finish())
}

/// The refs one request sees, read once, sorted by name like git's.
#[derive(Debug, Clone)]
pub struct RefSnapshot {
    pub head: HeadState,
    pub refs: Vec<AdvertisedRef>,
    pub object_hash: gix_hash::Kind,
    /// Which wants beyond the ref tips the repository allows.
    pub wants: WantPolicy,
    /// The refs' objects and peeled objects as sets, built at the first question
    /// ([`RefSnapshot::is_tip`]): a fetch of every branch and tag asks once per want, and a scan
    /// of the list each time was wants × refs (a bundle-uri clone of tokio: half its server CPU).
    pub tip_index: std::sync::OnceLock<TipIndex>,
}

/// [`RefSnapshot::tip_index`].
#[derive(Debug, Clone, Default)]
pub struct TipIndex {
    tips: gix::hashtable::HashSet<ObjectId>,
    peeled: gix::hashtable::HashSet<ObjectId>,
}

/// What the repository's `uploadpack.*` settings allow a request: wants by id
/// (`allow{Tip,Reachable,Any}SHA1InWant`, as far as the rule "never an object not reachable from
/// a ref the client may read" lets them go), filters and `want-ref`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct WantPolicy {
    /// `allowTipSHA1InWant`: advertised, but hidden refs stay unreadable, so only visible tips
    /// (which are allowed anyway) qualify.
    pub tip: bool,
    /// `allowReachableSHA1InWant` (or `allowAnySHA1InWant`, narrowed to the same): any object
    /// reachable from a visible ref.
    pub reachable: bool,
    /// `uploadpack.allowFilter`: partial-clone filters are advertised and accepted.
    pub filter: bool,
    /// `uploadpack.allowRefInWant`: v2 `want-ref` is advertised and accepted.
    pub ref_in_want: bool,
    /// `transfer.advertiseObjectInfo`: v2 `object-info` is advertised and served.
    pub object_info: bool,
    /// `uploadpack.advertiseBundleURIs`: v2 `bundle-uri` is advertised and served.
    pub bundle_uri: bool,
}

impl WantPolicy {
    fn read(repo: &gix::Repository) -> Self {
        let config = repo.config_snapshot();
        let flag = |key: &str| config.boolean(key).unwrap_or(false);
        let any = flag("uploadpack.allowAnySHA1InWant");
        WantPolicy {
            tip: flag("uploadpack.allowTipSHA1InWant") || any,
            reachable: flag("uploadpack.allowReachableSHA1InWant") || any,
            filter: flag("uploadpack.allowFilter"),
            ref_in_want: flag("uploadpack.allowRefInWant"),
            object_info: flag("transfer.advertiseObjectInfo"),
            bundle_uri: flag("uploadpack.advertiseBundleURIs"),
        }
    }
}

impl RefSnapshot {
    /// The refs as upload-pack serves them (`transfer.hideRefs`, `uploadpack.hideRefs`).
    pub fn load(repo: &gix::Repository) -> Result<RefSnapshot, RefsError> {
        Self::load_hiding(repo, Some("uploadpack.hideRefs"))
    }

    /// Every ref, hidden or not (to tell a hidden ref from a new one).
    pub fn load_hiding_nothing(repo: &gix::Repository) -> Result<RefSnapshot, RefsError> {
        Self::load_hiding(repo, None)
    }

    /// The refs as receive-pack shows them (`transfer.hideRefs`, `receive.hideRefs`); a hidden
    /// ref cannot be pushed to either.
    pub fn load_for_push(repo: &gix::Repository) -> Result<RefSnapshot, RefsError> {
        Self::load_hiding(repo, Some("receive.hideRefs"))
    }

    /// What an advertisement of capabilities needs and nothing more: the hash and the
    /// repository's want settings, no ref read (v2's capability advertisement lists no refs).
    /// The refs of a repository that does not exist yet (push-to-create advertises it).
    pub fn empty(object_hash: gix_hash::Kind) -> RefSnapshot {
        RefSnapshot {
            head: HeadState::Missing,
            refs: Vec::new(),
            object_hash,
            wants: WantPolicy::default(),
            tip_index: Default::default(),
        }
    }

    pub fn settings_only(repo: &gix::Repository) -> RefSnapshot {
        RefSnapshot {
            head: HeadState::Missing,
            refs: Vec::new(),
            object_hash: repo.object_hash(),
            wants: WantPolicy::read(repo),
            tip_index: Default::default(),
        }
    }

    fn load_hiding(repo: &gix::Repository, service_key: Option<&str>) -> Result<RefSnapshot, RefsError> {
        let store = RefStore::of(repo);
        let (stored, stored_head) = store.stored(repo)?;
        // Symbolic refs are few: each one's object, found before the list is consumed (a
        // reftable symref is followed within the list, which holds every ref).
        let followed: Vec<Option<ObjectId>> = stored
            .iter()
            .filter_map(|(_, s)| match &s.target {
                gix::refs::Target::Symbolic(target) => Some(match store {
                    RefStore::Files => follow_symbolic(repo, target.as_bstr()),
                    RefStore::Reftable(_) => follow_in(&stored, target.as_bstr()),
                }),
                gix::refs::Target::Object(_) => None,
            })
            .collect();
        let mut followed = followed.into_iter();
        let mut refs = Vec::with_capacity(stored.len());
        for (name, stored) in stored {
            let (id, symref_target) = match stored.target {
                gix::refs::Target::Object(id) => (id, None),
                gix::refs::Target::Symbolic(target) => match followed.next().flatten() {
                    Some(id) => (id, Some(target.as_bstr().to_owned())),
                    None => continue,
                },
            };
            let peeled = match stored.peel {
                Peel::To(peeled) if symref_target.is_none() && peeled != id => Some(peeled),
                Peel::Itself if symref_target.is_none() => None,
                _ => crate::graph::peel_tag(repo, id)?,
            };
            refs.push(AdvertisedRef { name, id, peeled, symref_target });
        }
        // Sorted by name already (a merge of sorted lists).
        // Hidden refs are not served at all: not advertised, not wantable, and what only they
        // reach is not readable.
        if let Some(key) = service_key {
            let hidden = hide_refs_patterns(repo, key);
            refs.retain(|r| !is_hidden(&r.name, &hidden));
        }
        let head = match stored_head {
            StoredHead::Symbolic(target) => match refs.iter().find(|r| r.name == target) {
                Some(r) => HeadState::Symbolic { id: r.id, target },
                None => HeadState::Unborn { target },
            },
            StoredHead::Detached(id) => HeadState::Detached { id },
            StoredHead::Missing => HeadState::Missing,
        };
        Ok(RefSnapshot {
            head,
            refs,
            object_hash: repo.object_hash(),
            wants: WantPolicy::read(repo),
            tip_index: Default::default(),
        })
    }

    /// HEAD's object, if it has one.
    pub fn head_id(&self) -> Option<ObjectId> {
        match &self.head {
            HeadState::Symbolic { id, .. } | HeadState::Detached { id } => Some(*id),
            _ => None,
        }
    }

    /// Every object a ref (or HEAD) points at: the only objects a client may want.
    pub fn tips(&self) -> Vec<ObjectId> {
        let mut tips: Vec<ObjectId> = self.refs.iter().map(|r| r.id).chain(self.head_id()).collect();
        tips.sort();
        tips.dedup();
        tips
    }

    /// What a short ref name means under git's rev-parse rules (`x`, `refs/x`, `refs/tags/x`,
    /// `refs/heads/x`, `refs/remotes/x`, `refs/remotes/x/HEAD`) among the visible refs: every
    /// match, in that order, as (full name, object).
    pub fn dwim(&self, name: &str) -> Vec<(String, ObjectId)> {
        let candidates = [
            name.to_owned(),
            format!("refs/{name}"),
            format!("refs/tags/{name}"),
            format!("refs/heads/{name}"),
            format!("refs/remotes/{name}"),
            format!("refs/remotes/{name}/HEAD"),
        ];
        let mut found = Vec::new();
        for candidate in candidates {
            let id = if candidate == "HEAD" {
                self.head_id()
            } else {
                self.refs.iter().find(|r| r.name == candidate.as_bytes()).map(|r| r.id)
            };
            if let Some(id) = id {
                found.push((candidate, id));
            }
        }
        found
    }

    pub fn is_tip(&self, id: &ObjectId) -> bool {
        self.head_id().as_ref() == Some(id) || self.index().tips.contains(id)
    }

    /// Is `id` what an advertised annotated tag peels to (a `^{}` line)?
    pub fn is_peeled_tip(&self, id: &ObjectId) -> bool {
        self.index().peeled.contains(id)
    }

    fn index(&self) -> &TipIndex {
        self.tip_index.get_or_init(|| TipIndex {
            tips: self.refs.iter().map(|r| r.id).collect(),
            peeled: self.refs.iter().filter_map(|r| r.peeled).collect(),
        })
    }

    /// Changes whenever a ref is added, removed or moved.
    pub fn fingerprint(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.head.hash(&mut h);
        self.refs.hash(&mut h);
        h.finish()
    }
}

/// The repository's `transfer.hideRefs` then `<service>.hideRefs` values, trailing slashes
/// removed (as git reads them). Both keys' values keep their order within each key; git orders
/// them as they appear across config files, which only matters when one key negates the other.
pub(super) fn hide_refs_patterns(repo: &gix::Repository, service_key: &str) -> Vec<BString> {
    let config = repo.config_snapshot();
    ["transfer.hideRefs", service_key]
        .iter()
        .flat_map(|key| config.plumbing().strings(*key).unwrap_or_default())
        .map(|mut p| {
            while p.last() == Some(&b'/') {
                p.pop();
            }
            p
        })
        .filter(|p| !p.is_empty())
        .collect()
}

/// git's `ref_is_hidden`: the last pattern that matches decides; `!` un-hides; a pattern matches
/// a name it equals or that continues with `/` after it; `^` anchors to the full name (without
/// namespaces, the same thing here).
pub fn is_hidden(name: &[u8], patterns: &[BString]) -> bool {
    for pattern in patterns.iter().rev() {
        let (negated, pattern) = match pattern.strip_prefix(b"!") {
            Some(rest) => (true, rest),
            None => (false, &pattern[..]),
        };
        let pattern = pattern.strip_prefix(b"^").unwrap_or(pattern);
        if let Some(rest) = name.strip_prefix(pattern)
            && (rest.is_empty() || rest[0] == b'/')
        {
            return !negated;
        }
    }
    false
}

/// Follow a symbolic ref to an object through `stored` (a few levels, as git does).
fn follow_in(stored: &[(BString, StoredRef)], target: &gix::bstr::BStr) -> Option<ObjectId> {
    let mut target: BString = target.to_owned();
    for _ in 0..5 {
        let at = stored.binary_search_by(|(name, _)| name.as_bstr().cmp(target.as_bstr())).ok()?;
        match &stored[at].1.target {
            gix::refs::Target::Object(id) => return Some(*id),
            gix::refs::Target::Symbolic(next) => target = next.as_bstr().to_owned(),
        }
    }
    None
}

/// Follow a symbolic ref to an object (a few levels, as git does).
pub(super) fn follow_symbolic(repo: &gix::Repository, target: &gix::bstr::BStr) -> Option<ObjectId> {
    let mut target: BString = target.to_owned();
    for _ in 0..5 {
        let reference = repo.find_reference(target.as_bstr()).ok()?;
        match reference.target() {
            gix::refs::TargetRef::Object(id) => return Some(id.to_owned()),
            gix::refs::TargetRef::Symbolic(next) => target = next.as_bstr().to_owned(),
        }
    }
    None
}
