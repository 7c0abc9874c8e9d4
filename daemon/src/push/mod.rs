//! Push, below the protocol: the incoming pack into a [`quarantine`], every object parsed (as
//! git's `receive.fsckObjects` would), each command checked (ref name, hidden refs, the
//! repository's `receive.deny*` settings, fast-forward, connectivity of the new tip), the
//! [`hooks`], then the objects made visible and only after that the refs moved, each under its
//! lock with a compare-and-swap on its old value (all in one transaction with `atomic`).
//! Readers see the old or the new state, never a ref whose objects are missing. While a push
//! holds ref locks its quarantine notes them, so that a start after a kill removes them.
//! `GIXD_TEST_KILL_AT=push-refs-locked` ([`crate::kill_point`]) kills gixd inside that window.

mod commands;
pub mod hooks;
pub mod lfs_pointers;
mod objects;
pub mod quarantine;

use std::io::BufRead;
use std::path::Path;

use gix::bstr::ByteSlice;
use gix_hash::ObjectId;
use gix_object::Kind;

use crate::repo::ref_store::{Edit, LogEntry, RefStore, reftable_transaction};
use crate::repo::{HeadState, RefSnapshot};
use crate::serve_error::ServeError;
use crate::session::Context;
use commands::{Connectivity, check_command};
use objects::{LimitedRead, check_objects};
use quarantine::Quarantine;

/// One ref update: `new` null for a delete, `old` null for a create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefUpdate {
    pub old: ObjectId,
    pub new: ObjectId,
    pub name: String,
}

impl RefUpdate {
    pub fn is_delete(&self) -> bool {
        self.new.is_null()
    }
}

/// What a push asks for, whatever protocol carried it.
#[derive(Debug, Default)]
pub struct Request {
    pub updates: Vec<RefUpdate>,
    /// All updates or none.
    pub atomic: bool,
    /// `push-options`, for the hooks.
    pub options: Vec<String>,
    /// A mirror's sync (`crate::mirror`), not a client: the one writer a mirror takes, and
    /// its upstream's LFS pointers are not checked against this server's store.
    pub from_upstream: bool,
}

/// The repository config key naming a mirror's upstream (`crate::mirror`): a client's push to
/// such a repository is refused.
pub const MIRROR_URL_KEY: &str = "gixd.mirror.url";

/// The upstream `repo` mirrors (its [`MIRROR_URL_KEY`]), if it is a mirror.
pub fn mirrored_from(repo: &gix::Repository) -> Option<String> {
    repo.config_snapshot().string(MIRROR_URL_KEY).map(|url| url.to_string())
}

/// Bytes a push carries for nobody to read (a mirror's sync: no client to tell).
pub struct Silent;

impl Messages for Silent {
    fn remote_message(&mut self, _message: &[u8]) -> std::io::Result<()> {
        Ok(())
    }
}

/// Why one ref update was not made: the rule it broke, in the words git's users know (the `ng`
/// reason of report-status).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("unpacker error")]
    Unpacker,
    #[error("atomic push failure")]
    Atomic,
    #[error("pre-receive hook declined")]
    PreReceive,
    #[error("hook declined")]
    UpdateHook,
    #[error("funny refname")]
    FunnyRefname,
    #[error("multiple updates for ref not allowed")]
    Duplicate,
    #[error("nothing to do: old and new are both null")]
    NothingToDo,
    #[error("deny updating a hidden ref")]
    HiddenRef,
    #[error("deletion prohibited")]
    DeletionProhibited,
    #[error("deletion of the current branch prohibited")]
    DeleteCurrent,
    #[error("branch is currently checked out")]
    CurrentBranch,
    #[error("this repository is a mirror of {0}: push there")]
    Mirror(String),
    #[error("missing necessary objects")]
    MissingObjects,
    #[error("non-commit object to a branch")]
    NonCommitToBranch,
    #[error("non-fast-forward")]
    NonFastForward,
    #[error("reference already exists")]
    AlreadyExists,
    #[error("stale info: the ref is at {current}, the push expected {expected}")]
    Stale { current: ObjectId, expected: ObjectId },
    #[error("stale info: the ref does not exist, the push expected {expected}")]
    StaleMissing { expected: ObjectId },
    #[error("directory/file conflict: '{existing}' exists; cannot create '{name}'")]
    DirectoryFile { existing: String, name: String },
    /// The ref transaction failed for a reason none of the rules above names.
    #[error("failed to update ref: {0}")]
    Update(String),
    #[error("failed to update refs: {0}")]
    Transaction(String),
    /// Reading the objects to check the update failed.
    #[error("{0}")]
    Check(String),
    /// The server had no transfer slot for the push's pack in time.
    #[error("{0}")]
    Busy(&'static str),
}

/// Why the pack of a push was not taken: report-status's `unpack` line says it.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    #[error("push larger than {0} bytes")]
    PushTooLarge(u64),
    /// The server had no transfer slot for the pack in time: nothing was read into it.
    #[error("{0}")]
    Busy(&'static str),
    #[error("index-pack failed: {} (an object may be at most {max} bytes: max_object_bytes)", with_causes(source.as_ref()))]
    ObjectTooLarge { source: Box<dyn std::error::Error + Send + Sync>, max: usize },
    #[error("index-pack failed: {}", with_causes(.0.as_ref()))]
    Index(Box<dyn std::error::Error + Send + Sync>),
    #[error("reading the received objects: {}", with_causes(.0.as_ref()))]
    Read(Box<dyn std::error::Error + Send + Sync>),
    #[error("no quarantine for the objects: {}", with_causes(.0))]
    Quarantine(std::io::Error),
    #[error("object {0} vanished")]
    Vanished(ObjectId),
    #[error("invalid {kind} {id}: {reason}")]
    Invalid { kind: Kind, id: ObjectId, reason: String },
}

/// `err` and what caused it, as one line: the pusher learns the reason ("No space left on
/// device"), not only the step that failed ("An IO operation failed while streaming an entry").
/// An operating-system error is named by itself alone: the causes that wrap it name server
/// paths, which are not the client's business.
fn with_causes(err: &(dyn std::error::Error + 'static)) -> String {
    // An io::Error is said by its OS error, or its kind when a crate wrapped it (tempfile's
    // carries the path, and keeps only the kind of the error it wraps).
    fn said_of_io(e: &(dyn std::error::Error + 'static)) -> Option<String> {
        let io = e.downcast_ref::<std::io::Error>()?;
        Some(match io.raw_os_error() {
            Some(code) => std::io::Error::from_raw_os_error(code).to_string(),
            None => io.kind().to_string(),
        })
    }
    let mut causes = Vec::new();
    let mut source = err.source();
    while let Some(cause) = source {
        if let Some(said) = said_of_io(cause) {
            return format!("{err}: {said}");
        }
        causes.push(cause.to_string());
        source = cause.source();
    }
    let mut text = err.to_string();
    for said in causes {
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
    }
    text
}

fn read_error(err: impl std::error::Error + Send + Sync + 'static) -> UnpackError {
    UnpackError::Read(Box::new(err))
}

/// What a push did: the `unpack` status and one result per update.
#[derive(Debug)]
pub struct Outcome {
    pub unpack_error: Option<UnpackError>,
    pub results: Vec<Result<(), Refusal>>,
    /// Objects in the received pack.
    pub objects: u32,
}

impl Outcome {
    /// How the push ended, as the metrics count it: every update made, or some refused.
    pub fn label(&self) -> &'static str {
        if self.results.iter().all(Result::is_ok) { "ok" } else { "refused" }
    }
}

/// The repository's `receive.*` rules.
struct Rules {
    deny_non_fast_forwards: bool,
    deny_deletes: bool,
    /// `receive.denyDeleteCurrent`: refuse unless set to ignore/warn/false.
    deny_delete_current: bool,
    /// `receive.denyCurrentBranch` in a repository with a work tree: refuse unless ignore/warn/false.
    deny_current_branch: bool,
}

impl Rules {
    fn read(repo: &gix::Repository) -> Rules {
        let config = repo.config_snapshot();
        let flag = |key: &str| config.boolean(key).unwrap_or(false);
        // refuse (the default) unless the value says otherwise
        let refuse = |key: &str| match config.string(key) {
            Some(v) => !matches!(
                v.to_str_lossy().to_ascii_lowercase().as_str(),
                "ignore" | "warn" | "false" | "no" | "off" | "0"
            ),
            None => true,
        };
        Rules {
            deny_non_fast_forwards: flag("receive.denyNonFastForwards"),
            deny_deletes: flag("receive.denyDeletes"),
            deny_delete_current: refuse("receive.denyDeleteCurrent"),
            deny_current_branch: !repo.is_bare() && refuse("receive.denyCurrentBranch"),
        }
    }
}

/// Apply a push whose commands are `req` and whose pack is the rest of `input`: the pack into
/// quarantine, each command checked, the hooks before, objects made visible and then the refs
/// moved, the hooks after.
pub fn apply(
    ctx: &Context<'_>,
    req: &Request,
    input: &mut dyn BufRead,
    bands: &mut dyn Messages,
) -> Result<Outcome, ServeError> {
    let repo = ctx.served.repo.to_thread_local();
    let hash = repo.object_hash();
    let objects_dir = repo.objects.store_ref().path().to_owned();
    let git_dir = ctx.served.git_dir.clone();
    let mut results: Vec<Result<(), Refusal>> = vec![Ok(()); req.updates.len()];

    // 1. The pack, into quarantine (only deletes: no pack follows).
    let mut quarantine = match Quarantine::create(&objects_dir) {
        Ok(quarantine) => quarantine,
        Err(err) => {
            fail_all(&mut results, Refusal::Unpacker);
            return Ok(Outcome { unpack_error: Some(UnpackError::Quarantine(err)), results, objects: 0 });
        }
    };
    let mut complete = true;
    let started = std::time::Instant::now();
    if req.updates.iter().any(|c| !c.is_delete()) {
        match receive(ctx, &repo, &mut quarantine, input)? {
            Ok(all_present) => complete = all_present,
            Err((err, objects)) => {
                fail_all(&mut results, Refusal::Unpacker);
                return Ok(Outcome { unpack_error: Some(err), results, objects });
            }
        }
    }
    let received = quarantine.odb(hash)?;
    let unpacked = started.elapsed();

    // 2. Each command on its own; then the LFS objects the pack's pointers name. A mirror
    // takes no client's push (the pack read is dropped with the quarantine).
    check_commands(&repo, &received, req, complete, &mut results)?;
    if let Some(upstream) = mirrored_from(&repo).filter(|_| !req.from_upstream) {
        fail_all(&mut results, Refusal::Mirror(upstream));
    }
    if let Some(refusal) = lfs_objects_missing(ctx, &repo, &quarantine, &received)?.filter(|_| !req.from_upstream) {
        fail_all(&mut results, refusal);
    }
    let checked = started.elapsed();
    if req.atomic && results.iter().any(Result::is_err) {
        fail_all(&mut results, Refusal::Atomic);
        return Ok(Outcome { unpack_error: None, results, objects: quarantine.objects });
    }

    // 3. Hooks before anything is visible.
    let env = HookEnv::new(req, &git_dir, &quarantine.dir, &objects_dir);
    if let Some(refusal) = hooks_before(&repo, &git_dir, req, &env, &mut results, bands)? {
        fail_all(&mut results, refusal);
        return Ok(Outcome { unpack_error: None, results, objects: quarantine.objects });
    }

    // 4. Objects visible first, refs after — unless the server's stop cancelled the push
    // meanwhile: then it ends here, and its quarantine goes with it.
    if ctx.life.is_cancelled() {
        return Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "the server is shutting down").into());
    }
    if results.iter().any(Result::is_ok) {
        quarantine.migrate(&objects_dir)?;
    }
    let who = ctx.pusher.unwrap_or("anonymous");
    let migrated = started.elapsed();
    update_refs(&repo, &quarantine, req, who, &mut results);
    // Where a push's time went (the pack's arrival with its indexing and object checks, the
    // commands' checks, the hooks and the objects made visible, the ref updates).
    tracing::debug!(
        repo = %ctx.served.name,
        unpack_ms = unpacked.as_millis() as u64,
        commands_ms = (checked - unpacked).as_millis() as u64,
        visible_ms = (migrated - checked).as_millis() as u64,
        refs_ms = (started.elapsed() - migrated).as_millis() as u64,
        "push phases"
    );

    // 5. Hooks after.
    let updated = hooks_after(&repo, &git_dir, req, &env, &results, bands)?;
    tracing::info!(
        repo = %ctx.served.name,
        pusher = who,
        objects = quarantine.objects,
        updated,
        refused = results.len() - updated,
        "push"
    );
    Ok(Outcome { unpack_error: None, results, objects: quarantine.objects })
}

/// Why the push is refused when an LFS pointer of its pack names an object the repository's LFS
/// store lacks ([`lfs_pointers`]); `None` when every one is there, when LFS is off on this
/// server, or when the repository turned the check off (`gixd.lfsPointerCheck=false`).
fn lfs_objects_missing(
    ctx: &Context<'_>,
    repo: &gix::Repository,
    quarantine: &Quarantine,
    received: &gix_odb::Handle,
) -> Result<Option<Refusal>, ServeError> {
    let checked = ctx.config.lfs.enabled && repo.config_snapshot().boolean("gixd.lfsPointerCheck").unwrap_or(true);
    let Some(index) = quarantine.index().filter(|_| checked) else { return Ok(None) };
    let missing =
        lfs_pointers::first_missing(index, received, &ctx.lfs.store(&ctx.served.git_dir), repo.object_hash())?;
    Ok(missing.map(|(oid, size)| {
        Refusal::Check(format!("LFS object {oid} ({size} bytes) is not on the server: push it first (git lfs push)"))
    }))
}

/// Every command not refused yet is refused for `reason`.
fn fail_all(results: &mut [Result<(), Refusal>], reason: Refusal) {
    for r in results.iter_mut().filter(|r| r.is_ok()) {
        *r = Err(reason.clone());
    }
}

/// The pack of `input` indexed into `quarantine` within the push limits, and its objects checked:
/// whether every object they refer to is present (in the quarantine or the repository), or the
/// unpack error (with the objects received) if it is refused.
fn receive(
    ctx: &Context<'_>,
    repo: &gix::Repository,
    quarantine: &mut Quarantine,
    input: &mut dyn BufRead,
) -> Result<Result<bool, (UnpackError, u32)>, ServeError> {
    let hash = repo.object_hash();
    let mut limited = LimitedRead { inner: input, left: ctx.config.max_push_bytes };
    let max_object = ctx.config.max_object_bytes.min(usize::try_from(ctx.config.max_push_bytes).unwrap_or(usize::MAX));
    if let Err(source) = quarantine.receive(&mut limited, &repo.objects, hash, max_object) {
        // gix-pack says an object was over the allocation limit only in its words.
        let text = source.to_string();
        let err = if limited.left == 0 {
            UnpackError::PushTooLarge(ctx.config.max_push_bytes)
        } else if text.contains("too large") || text.contains("llocation") {
            UnpackError::ObjectTooLarge { source, max: max_object }
        } else {
            UnpackError::Index(source)
        };
        return Ok(Err((err, 0)));
    }
    let received = quarantine.odb(hash)?;
    let known = Connectivity::new(repo);
    let mut fresh = None;
    let present = |id| known.quick.has_object(id) || commands::has_object(repo, &mut fresh, id);
    Ok(check_objects(quarantine.index(), &received, hash, present).map_err(|err| (err, quarantine.objects)))
}

/// Each command checked on its own against the refs as they were (a second command for the same
/// ref is refused, as git's ref transactions refuse it).
/// `received_complete`: every object the received ones refer to is present (the object check
/// saw to it), so a command's new tip that is present is complete without a walk.
fn check_commands(
    repo: &gix::Repository,
    received: &gix_odb::Handle,
    req: &Request,
    received_complete: bool,
    results: &mut [Result<(), Refusal>],
) -> Result<(), ServeError> {
    let refs = RefSnapshot::load_for_push(repo)?;
    let all_refs = RefSnapshot::load_hiding_nothing(repo)?;
    let rules = Rules::read(repo);
    let head_target = match &all_refs.head {
        HeadState::Symbolic { target, .. } | HeadState::Unborn { target } => Some(target.to_string()),
        _ => None,
    };
    let mut named = std::collections::HashSet::new();
    let mut known = Connectivity::new(repo);
    known.received_complete = received_complete;
    for (command, result) in req.updates.iter().zip(results.iter_mut()) {
        if !named.insert(command.name.as_str()) {
            *result = Err(Refusal::Duplicate);
        } else if let Err(reason) =
            check_command(repo, received, &refs, &all_refs, &rules, head_target.as_deref(), command, &mut known)
        {
            *result = Err(reason);
        }
    }
    Ok(())
}

/// The environment of the hooks: after the push (`env`), and before it, with the quarantine as
/// the object directory (`quarantined`).
struct HookEnv {
    env: Vec<(String, String)>,
    quarantined: Vec<(String, String)>,
}

impl HookEnv {
    fn new(req: &Request, git_dir: &Path, quarantine: &Path, objects_dir: &Path) -> Self {
        let mut env = vec![("GIT_DIR".to_owned(), git_dir.display().to_string())];
        env.push(("GIT_PUSH_OPTION_COUNT".into(), req.options.len().to_string()));
        for (i, option) in req.options.iter().enumerate() {
            env.push((format!("GIT_PUSH_OPTION_{i}"), option.clone()));
        }
        let mut quarantined = env.clone();
        quarantined.extend([
            ("GIT_QUARANTINE_PATH".to_owned(), quarantine.display().to_string()),
            ("GIT_OBJECT_DIRECTORY".to_owned(), quarantine.display().to_string()),
            ("GIT_ALTERNATE_OBJECT_DIRECTORIES".to_owned(), objects_dir.display().to_string()),
        ]);
        HookEnv { env, quarantined }
    }
}

/// `<old> <new> <ref>` of each command not refused: a pre- and post-receive hook's input.
fn update_lines(req: &Request, results: &[Result<(), Refusal>]) -> String {
    req.updates
        .iter()
        .zip(results)
        .filter(|(_, r)| r.is_ok())
        .map(|(c, _)| format!("{} {} {}\n", c.old, c.new, c.name))
        .collect()
}

/// pre-receive (all or nothing) and update (per command) in quarantine; the reason every command
/// left is refused for, when one is (a failed pre-receive; an atomic push an update hook refused).
fn hooks_before(
    repo: &gix::Repository,
    git_dir: &Path,
    req: &Request,
    env: &HookEnv,
    results: &mut [Result<(), Refusal>],
    bands: &mut dyn Messages,
) -> Result<Option<Refusal>, ServeError> {
    if let Some(hook) = hooks::find(repo, git_dir, "pre-receive") {
        let stdin = update_lines(req, results);
        if !stdin.is_empty() {
            let ran = hooks::run(&hook, &[], stdin.as_bytes(), &env.quarantined, git_dir)?;
            bands.remote_message(&ran.output)?;
            if !ran.success {
                return Ok(Some(Refusal::PreReceive));
            }
        }
    }
    if let Some(hook) = hooks::find(repo, git_dir, "update") {
        for (command, result) in req.updates.iter().zip(results.iter_mut()) {
            if result.is_err() {
                continue;
            }
            let (old, new) = (command.old.to_string(), command.new.to_string());
            let ran = hooks::run(&hook, &[&command.name, &old, &new], b"", &env.quarantined, git_dir)?;
            bands.remote_message(&ran.output)?;
            if !ran.success {
                *result = Err(Refusal::UpdateHook);
            }
        }
        if req.atomic && results.iter().any(Result::is_err) {
            return Ok(Some(Refusal::Atomic));
        }
    }
    Ok(None)
}

/// The refs of the commands not refused moved (one transaction when atomic; else one for all,
/// and one each when that fails), each failure recorded as its command's refusal.
fn update_refs(
    repo: &gix::Repository,
    quarantine: &Quarantine,
    req: &Request,
    who: &str,
    results: &mut [Result<(), Refusal>],
) {
    let committer_email = format!("{who}@gixd");
    let time = gix::date::Time::now_local_or_utc().to_string();
    let committer = gix::actor::SignatureRef { name: who.into(), email: committer_email.as_str().into(), time: &time };
    if req.atomic {
        let edits: Vec<_> = req.updates.iter().collect();
        if let Err(err) = edit_refs(repo, quarantine, &edits, committer) {
            // The commands that broke a rule say which; the others failed with them.
            for (command, result) in req.updates.iter().zip(results.iter_mut()) {
                *result = Err(ref_refusal(repo, command).unwrap_or(Refusal::Atomic));
            }
            if results.iter().all(|r| r == &Err(Refusal::Atomic)) {
                results.iter_mut().for_each(|r| *r = Err(Refusal::Transaction(crate::error::chain(err.as_ref()))));
            }
        }
    } else {
        // One transaction for every command still standing, so a mirror push of hundreds of refs
        // takes and notes its locks once. When it fails, each command is tried on its own (its
        // refusal then names its rule); an update whose ref already holds its new value was made
        // by that transaction's commit before it failed.
        let standing: Vec<&RefUpdate> =
            req.updates.iter().zip(results.iter()).filter(|(_, r)| r.is_ok()).map(|(c, _)| c).collect();
        let batched = standing.len() > 1;
        if batched && edit_refs(repo, quarantine, &standing, committer).is_ok() {
            return;
        }
        for (command, result) in req.updates.iter().zip(results.iter_mut()) {
            if result.is_ok()
                && !(batched && holds_new_value(repo, command))
                && let Err(err) = edit_refs(repo, quarantine, &[command], committer)
            {
                *result =
                    Err(ref_refusal(repo, command)
                        .unwrap_or_else(|| Refusal::Update(crate::error::chain(err.as_ref()))));
            }
        }
    }
}

/// Whether the ref an update (not a delete: a ref that is missing may have been missing all
/// along) names already holds the update's new value.
fn holds_new_value(repo: &gix::Repository, command: &RefUpdate) -> bool {
    !command.is_delete() && RefStore::of(repo).value(repo, &command.name) == Some(command.new)
}

/// post-receive and post-update, when a ref moved; how many did.
fn hooks_after(
    repo: &gix::Repository,
    git_dir: &Path,
    req: &Request,
    env: &HookEnv,
    results: &[Result<(), Refusal>],
    bands: &mut dyn Messages,
) -> Result<usize, ServeError> {
    let updated: Vec<&RefUpdate> = req.updates.iter().zip(results).filter(|(_, r)| r.is_ok()).map(|(c, _)| c).collect();
    if !updated.is_empty() {
        if let Some(hook) = hooks::find(repo, git_dir, "post-receive") {
            let ran = hooks::run(&hook, &[], update_lines(req, results).as_bytes(), &env.env, git_dir)?;
            bands.remote_message(&ran.output)?;
        }
        if let Some(hook) = hooks::find(repo, git_dir, "post-update") {
            let names: Vec<&str> = updated.iter().map(|c| c.name.as_str()).collect();
            let ran = hooks::run(&hook, &names, b"", &env.env, git_dir)?;
            bands.remote_message(&ran.output)?;
        }
    }
    Ok(updated.len())
}

/// One ref transaction: every lock taken (with the compare-and-swap checked under it), then all
/// changes made. Between the two the quarantine records which lock files are this push's, so a
/// start after this process was killed there removes them (and no one else's). A reftable
/// repository's transaction is one table ([`crate::repo::ref_store::reftable_transaction`]).
fn edit_refs(
    repo: &gix::Repository,
    quarantine: &Quarantine,
    commands: &[&RefUpdate],
    committer: gix::actor::SignatureRef<'_>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    if let RefStore::Reftable(dir) = RefStore::of(repo) {
        let edits: Vec<Edit<'_>> =
            commands.iter().map(|c| Edit { name: c.name.as_str(), old: c.old, new: c.new }).collect();
        let message = format!("push by {}", committer.name);
        let (name, email) = (committer.name.to_str_lossy(), committer.email.to_str_lossy());
        let log = LogEntry { name: &name, email: &email, message: &message };
        return Ok(reftable_transaction(repo, &dir, &edits, &log, quarantine)?);
    }
    let who = committer.name.to_string();
    let edits = commands.iter().map(|c| edit_for(c, &who)).collect::<Vec<_>>();
    let timeout = |key: &str, default_ms: u64| {
        use gix::lock::acquire::Fail;
        match repo.config_snapshot().integer(key) {
            Some(ms) if ms < 0 => Fail::AfterDurationWithBackoff(std::time::Duration::from_secs(u64::MAX)),
            Some(0) => Fail::Immediately,
            Some(ms) => Fail::AfterDurationWithBackoff(std::time::Duration::from_millis(ms as u64)),
            None => Fail::AfterDurationWithBackoff(std::time::Duration::from_millis(default_ms)),
        }
    };
    let names: Vec<String> = edits.iter().map(|e| e.name.as_bstr().to_string()).collect();
    quarantine.intend_ref_locks(&crate::ref_locks::held_for(repo, &names, false));
    let prepared = repo.refs.transaction().prepare(
        edits,
        timeout("core.filesRefLockTimeout", 100),
        timeout("core.packedRefsTimeout", 1000),
    );
    let locked = match prepared {
        Ok(locked) => locked,
        Err(err) => {
            quarantine.forget_ref_locks(); // it took none: gix-ref let go of what it had
            return Err(err.into());
        }
    };
    quarantine.note_ref_locks(&crate::ref_locks::held_for(repo, &names, false));
    crate::kill_point("push-refs-locked");
    let committed = locked.commit(Some(committer));
    quarantine.forget_ref_locks();
    Ok(committed.map(drop)?)
}

/// Which rule a refused ref update broke, read from the refs as they are now (the transaction's
/// compare-and-swap refused it): the words git's users know.
fn ref_refusal(repo: &gix::Repository, command: &RefUpdate) -> Option<Refusal> {
    let name = command.name.as_str();
    // What the ref holds, as the command's old value names it (an annotated tag's own id, not
    // the commit it peels to).
    let store = RefStore::of(repo);
    let current = store.value(repo, name);
    match current {
        Some(_) if command.old.is_null() => return Some(Refusal::AlreadyExists),
        Some(current) if current != command.old => return Some(Refusal::Stale { current, expected: command.old }),
        None if !command.old.is_null() => return Some(Refusal::StaleMissing { expected: command.old }),
        _ => {}
    }
    // A directory/file conflict: `refs/heads/a` blocks `refs/heads/a/b` and the other way round.
    let existing = crate::repo::ref_store::conflicting(name, store.names(repo))?;
    Some(Refusal::DirectoryFile { existing, name: name.to_owned() })
}

/// Where a push says what the server's side (hooks) printed, for the client to show
/// (`remote: …`); the protocol layer puts it on side-band 2.
pub trait Messages {
    fn remote_message(&mut self, message: &[u8]) -> std::io::Result<()>;
}

fn edit_for(command: &RefUpdate, who: &str) -> gix::refs::transaction::RefEdit {
    use gix::refs::Target;
    use gix::refs::transaction::{Change, LogChange, PreviousValue, RefEdit, RefLog};
    let name: gix::refs::FullName = command.name.as_str().try_into().expect("checked before");
    let expected = if command.old.is_null() {
        PreviousValue::MustNotExist
    } else {
        PreviousValue::MustExistAndMatch(Target::Object(command.old))
    };
    let change = if command.is_delete() {
        Change::Delete { expected, log: RefLog::AndReference }
    } else {
        Change::Update {
            log: LogChange {
                mode: RefLog::AndReference,
                force_create_reflog: false,
                message: format!("push by {who}").into(),
            },
            expected,
            new: Target::Object(command.new),
        }
    };
    RefEdit { change, name, deref: false }
}
