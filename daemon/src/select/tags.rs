//! Object selection, include-tag: the annotated tags whose targets a selection sends, added to
//! it (git's `include-tag`), by walking or by a bitmap's bits.

use gix_hash::ObjectId;

use super::Walker;
use crate::bitmap::PackBitmap;
use crate::graph::GraphError;
use crate::repo::RefSnapshot;

/// [`include_tags`] for a selection by bitmap, asked of its bits (and the objects outside the
/// bitmapped pack) rather than of a set of every selected id: a clone of a 420 000-object
/// repository built two such sets, 50 MB, to find a few tags. The tag objects to add, in the
/// order [`include_tags`] adds them.
pub(super) fn tags_of_selected_by_bitmap(
    repo: &gix::Repository,
    refs: &RefSnapshot,
    bitmap: &PackBitmap,
    want: &crate::bitmap::Reach,
) -> Result<Vec<ObjectId>, GraphError> {
    let selected = |id: &ObjectId| bitmap.pos(id).is_some_and(|pos| want.bits.get(pos)) || want.extra.contains_key(id);
    let mut walker = Walker::new(repo);
    for r in refs.refs.iter().filter(|r| r.name.starts_with(b"refs/tags/")) {
        let Some(peeled) = r.peeled else { continue };
        if selected(&peeled) {
            walker.peel_sending_tags(r.id)?;
        }
    }
    Ok(walker.out.objects.into_iter().filter(|id| !selected(id)).collect())
}

impl Walker<'_> {
    /// `include-tag` for a walk's selection: asked of the walk's own set of what it sends
    /// (`met` holds exactly the objects it added), not of copies of it — a clone of a
    /// 336 000-object repository built two such sets, 36 MB, to find a few tags. Each tag
    /// added is counted as the walk counts what it adds.
    pub(super) fn include_tags(&mut self, refs: &RefSnapshot) -> Result<(), GraphError> {
        for r in refs.refs.iter().filter(|r| r.name.starts_with(b"refs/tags/")) {
            let Some(peeled) = r.peeled else { continue };
            // A peeled object is no tag: the tags added on the way do not change the answer.
            if self.met.contains(&self.out.objects, &peeled) {
                self.peel_sending_tags(r.id)?;
            }
        }
        Ok(())
    }
}
