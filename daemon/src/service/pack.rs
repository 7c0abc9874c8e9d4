//! The upload service's pack step: a negotiated request's pack selected and written into the
//! framing the protocol layer gives it (the session's answer to `Upload::pack`). The decisions a pack takes
//! live here: a selection retried through the repository opened anew when a repack swapped the packs under
//! it, which objects a delta base may be (the readable set, asked only when it costs nothing),
//! the pack's options, its progress lines and the log line of what was sent.

use crate::pack;
use crate::protocol::upload::PackRequest;
use crate::select;
use crate::serve_error::ServeError;
use crate::session::Context;

/// Select `request`'s objects and write its pack into `out`.
pub fn select_and_write(
    ctx: &Context<'_>,
    view: select::View<'_>,
    request: &PackRequest<'_>,
    bands: &mut dyn pack::Sink,
) -> Result<pack::Stats, ServeError> {
    // git's running count while a walk selects (a line a second at most); the final count
    // follows the selection.
    let bands = std::cell::RefCell::new(bands);
    let pace = std::cell::RefCell::new(pack::Throttle::new(ctx.config.progress_interval));
    let tell = |objects: usize| {
        if pace.borrow_mut().due() {
            // A client gone is found by the pack's next write.
            let _ = pack::Sink::progress(&mut **bands.borrow_mut(), &format!("Enumerating objects: {objects}\r"));
        }
    };
    let refs = view.refs;
    let select = |view: select::View<'_>| {
        let (bitmap, repo) = (view.bitmap(), view.repo);
        // A walk takes commits' trees from the commit-graph; a bitmap selection needs none.
        let commit_graph = bitmap.is_none().then(|| view.repos.commit_graph(view.served, repo));
        let request = select::Request {
            wants: request.wants,
            common: request.common,
            include_tag: request.include_tag,
            refs,
            filter: request.filter,
            boundary: request.boundary,
            progress: Some(&tell),
            commit_graph: commit_graph.as_deref().and_then(Option::as_ref),
        };
        select::select(repo, &request, bitmap.as_ref()).map_err(ServeError::from)
    };
    // Nothing is sent yet: a selection that met an object gix-odb could not find or read (what
    // it answers now and then while a repack swaps packs under a handle's snapshot) is made once
    // more through the repository opened anew, as git re-reads the pack directory on a miss.
    let fresh;
    let (view, selection) = match select(view) {
        Err(err) if err.may_be_a_pack_swap() => {
            tracing::debug!(repo = %ctx.served.name, %err, "selection again through the repository opened anew");
            fresh = crate::repo::reopened(view.repo);
            let view = select::View { repo: &fresh, ..view };
            (view, select(view)?)
        }
        selected => (view, selected?),
    };
    let repo = view.repo;
    let bands = bands.into_inner();
    // A filtered or shallow client lacks objects a thin delta or an added base would assume
    // (or would get objects it did not ask for): both only for plain requests.
    let plain = request.filter.is_none() && request.boundary.is_none_or(|b| b.grafts.is_empty());
    pack::Sink::progress(bands, &format!("Enumerating objects: {}, done.\n", selection.len()))?;
    // The readable set is costly: asked for the first time a delta base outside the selection
    // could be added or referred to thin (and not on the edge), and only then.
    let readable = std::cell::OnceCell::new();
    let wants_everything = request.common.is_empty()
        && request.boundary.is_none()
        && request.filter.is_none()
        && refs.tips().iter().all(|tip| request.wants.contains(tip));
    let stats = pack::write(
        repo,
        &selection,
        pack::Options {
            thin_pack: request.thin_pack && request.filter.is_none(),
            ofs_delta: request.ofs_delta,
            include_unselected_bases: request.common.is_empty() && plain,
            packs: &|| crate::packs::of(&view.caches.packs, view.served, repo),
            deltify: false,
            search_anew: None,
            progress_every: ctx.config.progress_interval,
        },
        |id| {
            // Wanting every visible tip with nothing in common, the selection is everything the
            // client may read: an object outside it is not readable, no set needed.
            if wants_everything {
                return false;
            }
            // What the wants reach is readable: most bases (older versions of what is sent) are
            // answered by the selection's own reach, with no second one over every visible ref.
            if selection.wants_reach_has(id) {
                return true;
            }
            // Only when that costs no walk of every object: else the delta is re-deflated
            // (never a leak, at worst CPU).
            match readable.get_or_init(|| view.readable_objects_if_cheap()) {
                Some(set) => set.contains(id),
                None => false,
            }
        },
        &mut &mut *bands,
    )?;
    pack::Sink::progress(
        bands,
        &format!(
            "Total {} (reused {}, re-deflated {}, delta bases added {}, thin deltas {})\n",
            stats.entries, stats.copied, stats.re_deflated, stats.bases_included, stats.thin_deltas
        ),
    )?;
    tracing::info!(
        repo = %ctx.served.name,
        objects = selection.len(),
        bitmap = selection.by_bitmap,
        verbatim = stats.verbatim,
        entries = stats.entries,
        copied = stats.copied,
        re_deflated = stats.re_deflated,
        bases_included = stats.bases_included,
        thin_deltas = stats.thin_deltas,
        deltas_computed = stats.deltas_computed,
        reused = stats.reused,
        bytes = stats.bytes,
        "pack sent"
    );
    Ok(stats)
}
