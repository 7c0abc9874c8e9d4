//! Selection by bitmap (object selection layer): what the wants reach and the client does not
//! hold, as bits over the bitmapped pack ([`crate::bitmap`]) — the pack's positions in the order
//! they are sent (a whole pack by its count: [`Positions::Whole`]), the objects outside it by
//! id — and whether all the client holds is readable by it, so any of it may be a thin base.

use std::collections::HashSet;

use gix_hash::ObjectId;
use gix_object::Kind;

use super::tags::tags_of_selected_by_bitmap;
use super::{Request, Selection, Walker};
use crate::bitmap::PackBitmap;
use crate::graph::GraphError;
use crate::graph::TreePath;

/// By bitmap: the pack positions of the first objects sent ([`Selection::in_pack`]), in order.
#[derive(Debug)]
pub enum Positions {
    /// All of the pack's, `0..n`, not listed: a whole-pack selection (a clone), where a list cost
    /// 4 bytes an object per generating slot, and twice that while it grew.
    Whole(usize),
    Listed(Vec<u32>),
}

impl Positions {
    pub fn len(&self) -> usize {
        match self {
            Positions::Whole(n) => *n,
            Positions::Listed(positions) => positions.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.len()).map(move |i| match self {
            Positions::Whole(_) => i as u32,
            Positions::Listed(positions) => positions[i],
        })
    }
}

/// Reachable from the wants and not from the common commits, by bitmap: the pack's objects in
/// pack order, then those outside the bitmapped pack (pushed since the last repack, walked
/// through) in the order the walk met them.
pub(super) fn select_with_bitmap(
    repo: &gix::Repository,
    request: &Request<'_>,
    bitmap: &std::sync::Arc<PackBitmap>,
) -> Result<Option<Selection>, GraphError> {
    // The reach walks decode trees as the walk does: a delta cache of bases only, its share of
    // the walks' budget (the handle's own keeps every tree decoded, and copies each in).
    let walk_repo = crate::repo::with_walk_cache(repo);
    let repo = &walk_repo;
    // What the client has first, then the wants' walk stops at it (git's order): the wants'
    // side then decodes only what is new to the client, not every tree down to covered commits.
    let held = if request.common.is_empty() { None } else { Some(bitmap.reachable_unnamed(repo, request.common)?) };
    let mut want = bitmap.reachable(repo, request.wants, held.as_ref())?;
    let mut held_by_client = None;
    let mut wants_reach = None;
    let mut held_is_readable = false;
    if let Some(held) = held {
        wants_reach = Some(want.bits.clone());
        held_is_readable = common_is_readable(repo, request, bitmap, &want)?;
        want.bits.and_not(&held.bits);
        want.extra.retain(|id, _| !held.extra.contains_key(id));
        held_by_client = Some((bitmap.clone(), held));
    }
    // Named objects are sent whatever the filter says, and so is what a named tag peels to (git
    // treats both as given by the user).
    let mut named = HashSet::new();
    if request.filter.no_blobs {
        let mut walker = Walker::new(repo);
        for want_id in request.wants {
            let (peeled, _) = walker.peel_sending_tags(*want_id)?;
            named.extend([*want_id, peeled]);
        }
        want.bits.and_not(&bitmap.types[2]);
        for id in &named {
            if let Some(pos) = bitmap.pos(id) {
                want.bits.set(pos);
            }
        }
        want.extra.retain(|id, kind| *kind != Kind::Blob || named.contains(id));
    }
    let tags_included = match request.include_tag {
        true => tags_of_selected_by_bitmap(repo, request.refs, bitmap, &want)?,
        false => Vec::new(),
    };
    // What goes out whole is searched for deltas ([`crate::pack`]): the client's version of each
    // path, met in its edge commits' trees, may be the base (thin), as the walk's selection has;
    // so may the version this answer sends, met in the trees of the commits whose bitmaps the
    // walk took.
    let same_path_held = match &held_by_client {
        Some(_) if held_is_readable && !want.names.is_empty() => same_name_in(repo, &want.met, &want.names)?,
        _ => Default::default(),
    };
    let mut same_path_sent = match want.names.is_empty() {
        true => Default::default(),
        false => same_name_in(repo, &want.covered, &want.names)?,
    };
    same_path_sent.retain(|_, base| bitmap.pos(base).is_some_and(|pos| want.bits.get(pos)));
    let [commits, trees, blobs, tags] = &bitmap.types;
    // In the order the walk met them, not by id: the delta search breaks its ties in it.
    let extra: Vec<(ObjectId, Kind)> =
        want.extra_order.iter().filter_map(|id| want.extra.get(id).map(|kind| (*id, *kind))).collect();
    let extra_of = |k: Kind| extra.iter().filter(|(_, kind)| *kind == k).count();
    // A tag that must be included and is not in the pack's bits sends more than the pack.
    let everything = bitmap.is_one_pack() && want.bits.ones().count() == bitmap.len() && tags_included.is_empty();
    // The positions whose entries can be copied from the bitmap's pack (with a multi-pack-index,
    // its disjoint packs'), then the rest by id. The whole pack goes out by its count: its
    // positions and entries are not listed ([`Selection::unlisted`]).
    let (positions, unlisted, mut objects) = if everything {
        (Positions::Whole(bitmap.len()), bitmap.len(), Vec::new())
    } else {
        let (positions, elsewhere): (Vec<u32>, Vec<u32>) =
            bitmap.send_order(&want.bits).map(|pos| pos as u32).partition(|pos| bitmap.is_reusable(*pos as usize));
        let objects = positions.iter().chain(&elsewhere).map(|pos| bitmap.oid_at(*pos as usize)).collect();
        (Positions::Listed(positions), 0, objects)
    };
    objects.extend(extra.iter().map(|(id, _)| *id));
    objects.extend(&tags_included);
    Ok(Some(Selection {
        whole_pack: everything.then(|| bitmap.clone()),
        extra: if everything { extra.iter().map(|(id, _)| *id).collect() } else { Vec::new() },
        commits: want.bits.count_and(commits) + extra_of(Kind::Commit),
        trees: want.bits.count_and(trees) + extra_of(Kind::Tree),
        blobs: want.bits.count_and(blobs) + extra_of(Kind::Blob),
        tags: want.bits.count_and(tags) + extra_of(Kind::Tag) + tags_included.len(),
        objects,
        unlisted,
        client_has: Default::default(),
        held: held_by_client,
        held_is_readable,
        in_pack: Some((bitmap.clone(), positions)),
        wants_reach,
        same_path_held,
        same_path_sent,
        name_hash: want.names.iter().map(|(id, path)| (*id, path.name)).collect(),
        by_bitmap: true,
        history: None,
    }))
}

/// Is every common commit reachable from a ref this client may read? Then so is all the client
/// is known to have (their reach), and any of it may be a thin base. Decided at commit level:
/// a common commit is readable when it is a visible tip (or what one peels to), when the
/// wants' walk met it (a parent of a commit the wants reach) or reached it through a covered
/// commit's bitmap; the rest must be reached, commits only, from those.
fn common_is_readable(
    repo: &gix::Repository,
    request: &Request<'_>,
    bitmap: &PackBitmap,
    want: &crate::bitmap::Reach,
) -> Result<bool, GraphError> {
    let met: HashSet<ObjectId> = want.met.iter().copied().collect();
    let readable_by_itself = |id: &ObjectId| {
        request.refs.is_tip(id)
            || request.refs.is_peeled_tip(id)
            || met.contains(id)
            || bitmap.pos(id).is_some_and(|pos| want.bits.get(pos))
    };
    let (known, rest): (Vec<ObjectId>, Vec<ObjectId>) = request.common.iter().copied().partition(readable_by_itself);
    if rest.is_empty() {
        return Ok(true);
    }
    let reach = bitmap.reachable_commits(repo, &known)?;
    Ok(rest.iter().all(|id| reach.has(bitmap, id)))
}

/// The commits whose trees are read for [`same_name_in`]: a linear history has one.
const EDGE_TREES: usize = 4;

/// For each object of `names` (a tree or blob going out whole, with the path it was met at), the
/// object at the same path in the trees of the first [`EDGE_TREES`] of `edges` (the client's
/// commits where the wants' walk stopped, or the commits whose bitmaps the walk took), if it is
/// another one: the first edge's that has the path. By the path's full hash, not by git's name
/// hash, which many paths share (tokio's `tokio/src/sync/batch_semaphore.rs` and
/// `tokio/tests/sync_semaphore.rs`: the first met would be offered for both).
fn same_name_in(
    repo: &gix::Repository,
    edges: &[ObjectId],
    names: &gix::hashtable::HashMap<ObjectId, TreePath>,
) -> Result<gix::hashtable::HashMap<ObjectId, ObjectId>, GraphError> {
    let wanted: HashSet<u64> = names.values().map(|path| path.full).collect();
    let mut held: std::collections::HashMap<u64, ObjectId> = std::collections::HashMap::new();
    let mut read: HashSet<ObjectId> = HashSet::new();
    let mut buf = Vec::new();
    for edge in edges.iter().take(EDGE_TREES) {
        let Ok(commit) = repo.find_commit(*edge) else { continue };
        let Ok(root) = commit.tree_id() else { continue };
        if wanted.contains(&TreePath::ROOT.full) {
            held.entry(TreePath::ROOT.full).or_insert(root.detach());
        }
        let mut stack: Vec<(ObjectId, TreePath)> = vec![(root.detach(), TreePath::ROOT)];
        while let Some((tree, path)) = stack.pop() {
            if !read.insert(tree) {
                continue;
            }
            let data = gix_object::Find::try_find(&repo.objects, &tree, &mut buf)?.ok_or(GraphError::Missing(tree))?;
            let mut subtrees = Vec::new();
            for entry in gix_object::TreeRefIter::from_bytes(data.data, tree.kind()) {
                let entry = entry.map_err(|_| GraphError::Missing(tree))?;
                if entry.mode.is_commit() {
                    continue;
                }
                let child = path.child(entry.filename);
                if wanted.contains(&child.full) {
                    held.entry(child.full).or_insert_with(|| entry.oid.to_owned());
                }
                if entry.mode.is_tree() {
                    subtrees.push((entry.oid.to_owned(), child));
                }
            }
            stack.extend(subtrees);
        }
    }
    Ok(names
        .iter()
        .filter_map(|(id, path)| held.get(&path.full).filter(|held| *held != id).map(|held| (*id, *held)))
        .collect())
}
