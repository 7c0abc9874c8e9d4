//! The upload-pack session: the repository's side of one request's negotiation, as the codecs
//! ([`crate::protocol::v0`], [`crate::protocol::v2`]) ask it ([`Upload`]) — the refs it is served
//! from, which wants are allowed (and by which rule), the shallow boundary, which haves are
//! common and when the server is ready ([`super::negotiate`]), and the pack ([`super::pack`]).
//! One session per request: a stateless round, a v2 command, a v0 connection.

use std::sync::Arc;

use gix_hash::ObjectId;

use super::negotiate::Common;
use crate::error::ProtocolError;
use crate::pack;
use crate::protocol::upload::{Extras, Have, PackRequest, Upload, WantRule};
use crate::repo::RefSnapshot;
use crate::serve_error::ServeError;
use crate::session::Context;
use crate::shallow::Boundary;

/// One request's session with its repository.
pub struct Session<'a> {
    ctx: &'a Context<'a>,
    repo: gix::Repository,
    refs: Arc<RefSnapshot>,
    /// The haves so far, made at the first one (with the pack bitmap's types, if there is one).
    common: Option<Common>,
    /// `ready` is costly (a walk): the answer, and for how many common commits it holds.
    ready: Option<(usize, bool)>,
    /// The repository opened anew at the first object this request's handle missed
    /// ([`crate::repo::header`]).
    again: Option<gix::Repository>,
}

impl<'a> Session<'a> {
    /// The request's repository, and the refs it serves now.
    pub fn open(ctx: &'a Context<'a>) -> Result<Self, ServeError> {
        let repo = ctx.served.repo.to_thread_local();
        let (refs, seen) = ctx.repos.upload_refs(ctx.served, &repo)?;
        // Refs that moved since this server last served them may have come with objects it did
        // not write (stock git's receive-pack and its loose objects, another server's packs):
        // the repository is asked for what maintenance it is due, as after a push through gixd.
        if seen == crate::repo::Refs::Moved
            && let Some(asks) = ctx.maintenance
        {
            let _ = asks.send(ctx.served.git_dir.clone());
        }
        Ok(Session { ctx, repo, refs, common: None, ready: None, again: None })
    }

    /// The request's view of its repository ([`crate::select::View`]).
    fn view(&self) -> crate::select::View<'_> {
        let ctx = self.ctx;
        crate::select::View {
            caches: ctx.caches,
            repos: ctx.repos,
            served: ctx.served,
            repo: &self.repo,
            refs: &self.refs,
        }
    }

    /// Which of `commits` the refs this request is served from reach ([`crate::select::View::readable_commits`]).
    fn readable_commits(&self, commits: &[ObjectId]) -> Result<std::collections::HashSet<ObjectId>, ServeError> {
        Ok(self.view().readable_commits(commits)?)
    }

    /// Whether each of `ids` (object, is a commit; each present) is reachable from a ref this
    /// request may read: commits decided at commit level, any other object by the readable set
    /// of objects, computed only when one is asked about.
    fn reachable(&self, ids: &[(ObjectId, bool)]) -> Result<Vec<bool>, ServeError> {
        let commits: Vec<ObjectId> = ids.iter().filter(|(_, commit)| *commit).map(|(id, _)| *id).collect();
        let readable_commits = self.readable_commits(&commits)?;
        let objects = match ids.iter().any(|(_, commit)| !commit) {
            true => Some(self.view().readable_objects()?),
            false => None,
        };
        Ok(ids
            .iter()
            .map(|(id, commit)| match commit {
                true => readable_commits.contains(id),
                false => objects.as_ref().is_some_and(|set| set.contains(id)),
            })
            .collect())
    }

    /// A want refused, and why, told on the `gixd::refusal` target (INFO: what a client asks for
    /// and may not have is its own business, but an operator tracing a refusal needs the reason
    /// and the refs it was judged against).
    fn refused(&self, want: ObjectId, why: &'static str) -> ServeError {
        let refs: Vec<String> =
            self.refs.refs.iter().take(8).map(|r| format!("{} {}", r.id.to_hex_with_len(12), r.name)).collect();
        tracing::info!(
            target: "gixd::refusal",
            repo = %self.ctx.served.name,
            %want,
            why,
            refs = self.refs.refs.len(),
            first = ?refs,
            "want refused"
        );
        ProtocolError::WantNotAdvertised(want).into()
    }

    /// The haves so far, and the repository to ask about more (two fields borrowed at once).
    fn negotiation(&mut self) -> (&mut Common, &gix::Repository) {
        if self.common.is_none() {
            self.common = Some(Common::with_kinds(self.view().bitmap()));
        }
        (self.common.as_mut().expect("made above"), &self.repo)
    }
}

impl Upload for Session<'_> {
    fn refs(&self) -> &RefSnapshot {
        &self.refs
    }

    fn bundle_list(&mut self) -> Result<Vec<(String, String)>, ServeError> {
        let listed = crate::maintenance::bundles::read_list(&self.ctx.served.git_dir);
        Ok(crate::maintenance::bundles::advertised(&listed))
    }

    fn object_sizes(&mut self, ids: &[ObjectId]) -> Result<Vec<Option<u64>>, ServeError> {
        // What a client may read decides, as for a want by id: a visible tip or what one peels
        // to, else what a visible ref reaches.
        let headers: Vec<_> = ids.iter().map(|id| crate::repo::header(&self.repo, &mut self.again, *id)).collect();
        let candidates: Vec<(ObjectId, bool)> = ids
            .iter()
            .zip(&headers)
            .filter(|(id, h)| h.is_some() && !self.refs.is_tip(id) && !self.refs.is_peeled_tip(id))
            .map(|(id, h)| (*id, h.as_ref().is_some_and(|h| h.kind() == gix_object::Kind::Commit)))
            .collect();
        let reachable = self.reachable(&candidates)?;
        let unreadable: std::collections::HashSet<ObjectId> =
            candidates.iter().zip(&reachable).filter(|(_, ok)| !**ok).map(|((id, _), _)| *id).collect();
        Ok(ids.iter().zip(headers).map(|(id, h)| h.filter(|_| !unreadable.contains(id)).map(|h| h.size())).collect())
    }

    fn check_wants(&mut self, wants: &[ObjectId], rule: WantRule) -> Result<(), ServeError> {
        let max_wants = self.ctx.config.max_wants;
        if wants.len() > max_wants {
            return Err(ProtocolError::TooMany { what: "want", limit: max_wants }.into());
        }
        let by_id = match rule {
            WantRule::Reachable => true,
            WantRule::Advertised => self.refs.wants.reachable || self.refs.wants.filter,
        };
        // Tips, and the peeled targets of advertised tags (a client that wants every `^{}` line
        // asks for these), need no look-up; the rest must be reachable from a visible ref.
        let mut candidates = Vec::new();
        for want in wants {
            if self.refs.is_tip(want) || (by_id && self.refs.is_peeled_tip(want)) {
                continue;
            }
            if !by_id {
                return Err(self.refused(*want, "not a tip"));
            }
            match crate::repo::header(&self.repo, &mut self.again, *want) {
                Some(h) => candidates.push((*want, h.kind() == gix_object::Kind::Commit)),
                None => return Err(self.refused(*want, "no such object")),
            }
        }
        let reachable = self.reachable(&candidates)?;
        // The first commit refused, else the first other object.
        let refused = |commits: bool| {
            candidates
                .iter()
                .zip(&reachable)
                .find(|((_, commit), ok)| *commit == commits && !**ok)
                .map(|((id, _), _)| *id)
        };
        match refused(true).or_else(|| refused(false)) {
            Some(want) => Err(self.refused(want, "not reachable from a visible ref")),
            None => Ok(()),
        }
    }

    fn boundary(&mut self, wants: &[ObjectId], extras: &mut Extras) -> Result<Option<Boundary>, ServeError> {
        extras.deepen.check()?;
        if !extras.shallow_lines.is_empty() {
            // Each line's object is looked up once: missing ones are ignored, non-commits refused.
            let mut commits = Vec::new();
            for id in std::mem::take(&mut extras.shallow_lines) {
                match crate::repo::header(&self.repo, &mut self.again, id) {
                    None => continue,
                    Some(h) if h.kind() != gix_object::Kind::Commit => {
                        return Err(ProtocolError::Shallow(format!("invalid shallow object {id}")).into());
                    }
                    Some(_) => commits.push(id),
                }
            }
            let readable = self.readable_commits(&commits)?;
            for id in commits {
                if readable.contains(&id) && !extras.deepen.client_shallows.contains(&id) {
                    extras.deepen.client_shallows.push(id);
                }
            }
        }
        if !extras.deepen.is_active() {
            return Ok(None);
        }
        Ok(Some(crate::shallow::compute(&self.repo, wants, &extras.deepen)?))
    }

    fn have(&mut self, id: ObjectId) -> Result<Have, ServeError> {
        let (common, repo) = self.negotiation();
        common.have(repo, id)
    }

    fn acked(&self) -> &[ObjectId] {
        self.common.as_ref().map_or(&[], |c| &c.acked)
    }

    fn ready(&mut self, wants: &[ObjectId]) -> Result<bool, ServeError> {
        let commits = self.common.as_ref().map_or(0, |c| c.commits.len());
        if let Some((for_commits, ready)) = self.ready
            && for_commits == commits
        {
            return Ok(ready);
        }
        let cache = self.ctx.repos.commits(self.ctx.served);
        let (common, repo) = self.negotiation();
        let ready = common.ready(repo, &cache, wants)?;
        self.ready = Some((commits, ready));
        Ok(ready)
    }

    fn common(&mut self) -> Vec<ObjectId> {
        self.common.take().map(Common::into_hidden).unwrap_or_default()
    }

    fn pack(&mut self, request: &PackRequest<'_>, out: &mut dyn pack::Sink) -> Result<pack::Stats, ServeError> {
        super::pack::select_and_write(self.ctx, self.view(), request, out)
    }
}
