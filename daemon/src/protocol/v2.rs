//! Protocol v2: the capability advertisement and the commands, one row of [`COMMANDS`] each
//! (name, what to advertise, what to run) — adding a command is adding a row. Here: `ls-refs`
//! (ref-prefix, symrefs, peel, unborn) and `fetch` (want, have, done, thin-pack, no-progress,
//! include-tag, ofs-delta, wait-for-done, shallow/deepen*, filter and want-ref where the
//! repository allows them; acknowledgments with ACK/NAK/ready; wanted-refs, shallow-info and
//! packfile sections); `object-info` (`size`) where `transfer.advertiseObjectInfo` turns it on.

use std::io::Write;

use gix_hash::ObjectId;

use super::Bounds;
use super::hash_name;
use super::pkt::{self, Line};
use super::sideband::Framing;
use super::upload::{self, Extras, PackRequest, Upload};
use crate::error::ProtocolError;
use crate::pack::Stats;
use crate::repo::{HeadState, RefSnapshot};
use crate::serve_error::ServeError;

/// A command: its arguments in, its response out; the statistics of a pack it sent.
type Run = fn(&Bounds<'_>, &mut dyn Upload, &[Line<'_>], &mut dyn Write) -> Result<Option<Stats>, ServeError>;

/// One row of the capability table.
pub struct Capability {
    pub name: &'static str,
    /// The value after `=` in the advertisement, if any.
    pub value: fn(&RefSnapshot) -> Option<String>,
    /// For a command: how to run it.
    pub run: Option<Run>,
    /// Whether the repository's settings turn it on: advertised, and (a command) served, only
    /// then — as git refuses a command it did not advertise.
    pub on: fn(&RefSnapshot) -> bool,
}

/// The v2 capabilities, in git's advertisement order.
pub const COMMANDS: &[Capability] = &[
    Capability { name: "agent", value: |_| Some(crate::agent()), run: None, on: |_| true },
    Capability { name: "ls-refs", value: |_| Some("unborn".into()), run: Some(ls_refs), on: |_| true },
    Capability {
        name: "fetch",
        value: |refs| {
            let mut features = String::from("shallow wait-for-done");
            if refs.wants.filter {
                features.push_str(" filter");
            }
            if refs.wants.ref_in_want {
                features.push_str(" ref-in-want");
            }
            Some(features)
        },
        run: Some(fetch),
        on: |_| true,
    },
    Capability { name: "server-option", value: |_| None, run: None, on: |_| true },
    Capability {
        name: "object-format",
        value: |refs| Some(hash_name(refs.object_hash).into()),
        run: None,
        on: |_| true,
    },
    Capability { name: "object-info", value: |_| None, run: Some(object_info), on: |refs| refs.wants.object_info },
    Capability { name: "bundle-uri", value: |_| None, run: Some(bundle_uri), on: |refs| refs.wants.bundle_uri },
];

/// `version 2` and the capability lines, ending in a flush.
pub fn advertise(refs: &RefSnapshot, out: &mut pkt::Writer) {
    out.text("version 2");
    for cap in COMMANDS.iter().filter(|cap| (cap.on)(refs)) {
        match (cap.value)(refs) {
            Some(value) => out.text(format!("{}={value}", cap.name)),
            None => out.text(cap.name),
        };
    }
    out.flush();
}

/// Serve one v2 command request (stateless: one command per request body, ended by its flush).
pub fn serve<W: Write>(
    bounds: &Bounds<'_>,
    upload: &mut dyn Upload,
    body: &[u8],
    mut out: W,
) -> Result<Option<Stats>, ServeError> {
    let request = || -> Result<Option<Vec<Line<'_>>>, ProtocolError> {
        let mut lines = pkt::read_all(body)?;
        if lines.is_empty() || lines == [Line::Flush] {
            return Ok(None); // the client ends the session
        }
        let end = lines.iter().position(|l| *l == Line::Flush).ok_or(ProtocolError::Truncated)?;
        if end + 1 != lines.len() {
            return Err(ProtocolError::Unexpected("data after the request's flush".into()));
        }
        lines.truncate(end);
        Ok(Some(lines))
    };
    match request() {
        Ok(None) => Ok(None),
        Ok(Some(lines)) => serve_request(bounds, upload, &lines, out),
        Err(err) => upload::reply_err(&mut out, err.into()),
    }
}

/// The [`super::FetchKey`] of a command request (its packets up to its flush): `Some` for a
/// `fetch` that says `done`.
pub fn fetch_key(lines: &[Line<'_>]) -> Option<super::FetchKey> {
    let lines = match lines.split_last() {
        Some((Line::Flush, request)) => request,
        _ => lines,
    };
    if lines.first()?.as_text()? != "command=fetch" {
        return None;
    }
    let delim = lines.iter().position(|l| *l == Line::Delim).unwrap_or(lines.len());
    let mut capabilities = std::collections::BTreeSet::new();
    for line in &lines[1..delim] {
        let text = line.as_text()?.trim_end_matches('\n');
        if super::shapes_the_answer(text) {
            capabilities.insert(text.to_owned());
        }
    }
    let mut arguments = Vec::new();
    for line in lines.get(delim + 1..).unwrap_or_default() {
        arguments.push(line.as_text()?.trim_end_matches('\n').to_owned());
    }
    arguments.iter().any(|a| a == "done").then_some(super::FetchKey { version: 2, capabilities, arguments })
}

/// Serve one command request given as its packets up to (not including) the flush that ends it,
/// however they arrived.
pub fn serve_request<W: Write>(
    bounds: &Bounds<'_>,
    upload: &mut dyn Upload,
    lines: &[Line<'_>],
    mut out: W,
) -> Result<Option<Stats>, ServeError> {
    let hash = upload.refs().object_hash;
    let refs = upload.refs();
    let run = || -> Result<(Run, &[Line<'_>]), ServeError> {
        // The command line comes first from most clients, but git's serve takes it anywhere among
        // the capability lines (git's own bundle-uri request sends agent and object-format
        // before it), once.
        let mut command = None;
        // Capability lines up to the delimiter (or the end when there are no arguments).
        let mut i = 0;
        while let Some(line) = lines.get(i) {
            match line {
                Line::Delim => break,
                Line::Data(_) => {
                    let text = line.as_text().unwrap_or_default();
                    let (key, value) = text.split_once('=').unwrap_or((text, ""));
                    match key {
                        "command" if command.is_some() => {
                            return Err(ProtocolError::Unexpected("a second 'command=' line".into()).into());
                        }
                        "command" => command = Some(value),
                        "agent" | "server-option" | "session-id" => {}
                        "object-format" => upload::check_object_format(value, hash)?,
                        other => return Err(ProtocolError::UnknownCapability(crate::error::quoted(other, 64)).into()),
                    }
                }
                Line::ResponseEnd => return Err(ProtocolError::Unexpected("response-end in a request".into()).into()),
                Line::Flush => unreachable!("a request ends at its flush"),
            }
            i += 1;
        }
        let command = command.ok_or_else(|| ProtocolError::Unexpected("expected 'command=<name>'".into()))?;
        let row = COMMANDS
            .iter()
            .find(|c| c.name == command && c.run.is_some() && (c.on)(refs))
            .ok_or_else(|| ProtocolError::UnknownCommand(crate::error::quoted(command, 64)))?;
        let args = lines.get(i + 1..).unwrap_or_default();
        Ok((row.run.expect("a command"), args))
    };
    match run() {
        Ok((command, args)) => command(bounds, upload, args, &mut out),
        Err(err) => upload::reply_err(&mut out, err),
    }
}

fn arg_text<'a>(line: &Line<'a>) -> Result<&'a str, ProtocolError> {
    match line {
        Line::Data(_) => line.as_text().ok_or_else(|| ProtocolError::Unexpected("non-UTF-8 argument".into())),
        _ => Err(ProtocolError::Unexpected("a delimiter among arguments".into())),
    }
}

/// `ls-refs`: the refs (HEAD first) matching any `ref-prefix`, with `symref-target:` and
/// `peeled:` attributes when asked, and `unborn HEAD` when asked and HEAD is unborn.
fn ls_refs(
    bounds: &Bounds<'_>,
    upload: &mut dyn Upload,
    args: &[Line<'_>],
    out: &mut dyn Write,
) -> Result<Option<Stats>, ServeError> {
    let refs = upload.refs();
    let (mut peel, mut symrefs, mut unborn) = (false, false, false);
    let mut prefixes: Vec<&str> = Vec::new();
    for line in args {
        let text = match arg_text(line) {
            Ok(t) => t,
            Err(err) => return upload::reply_err(out, err.into()),
        };
        match text {
            "peel" => peel = true,
            "symrefs" => symrefs = true,
            "unborn" => unborn = true,
            t if t.starts_with("ref-prefix ") => {
                // git stops honouring prefixes past a limit and lists everything; so do we.
                if prefixes.len() < bounds.max_wants {
                    prefixes.push(&t["ref-prefix ".len()..]);
                } else {
                    prefixes.clear();
                }
            }
            other => {
                return upload::reply_err(out, ProtocolError::UnknownArgument(crate::error::quoted(other, 64)).into());
            }
        }
    }
    let matches = |name: &[u8]| prefixes.is_empty() || prefixes.iter().any(|p| name.starts_with(p.as_bytes()));
    // Lines leave in chunks of one reused buffer: a thousand refs are not built up in a growing
    // buffer and then copied again.
    const CHUNK: usize = 16 * 1024;
    let mut w = pkt::Writer { buf: Vec::with_capacity(CHUNK + 1024) };
    match &refs.head {
        HeadState::Symbolic { target, id } if matches(b"HEAD") => {
            let mut line = format!("{id} HEAD");
            if symrefs {
                line.push_str(&format!(" symref-target:{target}"));
            }
            // HEAD peels as the branch it names does: the snapshot knows that already (no read).
            if peel && let Some(peeled) = refs.refs.iter().find(|r| r.name == *target).and_then(|r| r.peeled) {
                line.push_str(&format!(" peeled:{peeled}"));
            }
            w.text(line);
        }
        HeadState::Detached { id } if matches(b"HEAD") => {
            w.text(format!("{id} HEAD"));
        }
        HeadState::Unborn { target } if unborn && symrefs && matches(b"HEAD") => {
            w.text(format!("unborn HEAD symref-target:{target}"));
        }
        _ => {}
    }
    let mut line = Vec::with_capacity(256);
    let mut hex = [0u8; gix_hash::Kind::longest().len_in_hex()];
    for r in refs.refs.iter().filter(|r| matches(&r.name)) {
        line.clear();
        line.extend_from_slice(r.id.hex_to_buf(&mut hex).as_bytes());
        line.push(b' ');
        line.extend_from_slice(&r.name);
        if symrefs && let Some(target) = &r.symref_target {
            line.extend_from_slice(b" symref-target:");
            line.extend_from_slice(target);
        }
        if peel && let Some(peeled) = r.peeled {
            line.extend_from_slice(b" peeled:");
            line.extend_from_slice(peeled.hex_to_buf(&mut hex).as_bytes());
        }
        line.push(b'\n');
        w.data(&line);
        if w.buf.len() >= CHUNK {
            out.write_all(&w.buf)?;
            w.buf.clear();
        }
    }
    w.flush();
    out.write_all(&w.buf)?;
    Ok(None)
}

/// `object-info`: with `size`, each `oid` line's object and its size, as git answers
/// (`<oid> <size>`; `<oid> ` for an object it does not have). An object this client may not read
/// (no visible ref reaches it) is answered exactly as a missing one.
fn object_info(
    bounds: &Bounds<'_>,
    upload: &mut dyn Upload,
    args: &[Line<'_>],
    out: &mut dyn Write,
) -> Result<Option<Stats>, ServeError> {
    let hash = upload.refs().object_hash;
    let mut size = false;
    let mut asked: Vec<&str> = Vec::new();
    for line in args {
        let text = match arg_text(line) {
            Ok(t) => t.trim_end_matches('\n'),
            Err(err) => return upload::reply_err(out, err.into()),
        };
        if text == "size" {
            size = true;
        } else if let Some(oid) = text.strip_prefix("oid ") {
            if asked.len() == bounds.max_wants {
                let err = ProtocolError::TooMany { what: "object-info oid", limit: bounds.max_wants };
                return upload::reply_err(out, err.into());
            }
            asked.push(oid);
        } else {
            return upload::reply_err(out, ProtocolError::UnknownArgument(crate::error::quoted(text, 64)).into());
        }
    }
    let ids: Vec<Option<ObjectId>> = asked.iter().map(|oid| upload::parse_oid(oid, hash).ok()).collect();
    let sizes =
        if size { upload.object_sizes(&ids.iter().flatten().copied().collect::<Vec<_>>())? } else { Vec::new() };
    let mut sizes = sizes.into_iter();
    let mut w = pkt::Writer { buf: Vec::new() };
    if size {
        w.data(b"size");
    }
    for (oid, id) in asked.iter().zip(&ids) {
        if id.is_none() {
            // git goes on after a line that is not an id, with an error packet in its place.
            w.data(format!("ERR object-info: protocol error, expected to get oid, not '{oid}'").as_bytes());
            continue;
        }
        let mut line = (*oid).to_owned();
        if size {
            match sizes.next().flatten() {
                Some(n) => line.push_str(&format!(" {n}")),
                None => line.push(' '),
            }
        }
        w.data(line.as_bytes());
    }
    w.flush();
    out.write_all(&w.buf)?;
    Ok(None)
}

/// `bundle-uri`: the repository's bundle list as `key=value` packets, as git sends its `bundle.*`
/// settings (keys lowercased as git's config reader has them); no arguments.
fn bundle_uri(
    _bounds: &Bounds<'_>,
    upload: &mut dyn Upload,
    args: &[Line<'_>],
    out: &mut dyn Write,
) -> Result<Option<Stats>, ServeError> {
    if let Some(line) = args.first() {
        let text = line.as_text().unwrap_or_default();
        return upload::reply_err(out, ProtocolError::UnknownArgument(crate::error::quoted(text, 64)).into());
    }
    let mut w = pkt::Writer { buf: Vec::new() };
    for (key, value) in upload.bundle_list()? {
        w.data(format!("{key}={value}").as_bytes());
    }
    w.flush();
    out.write_all(&w.buf)?;
    Ok(None)
}

/// The arguments of one `fetch` request.
#[derive(Debug, Default)]
struct FetchArgs {
    wants: Vec<ObjectId>,
    haves: Vec<ObjectId>,
    done: bool,
    thin_pack: bool,
    no_progress: bool,
    include_tag: bool,
    ofs_delta: bool,
    wait_for_done: bool,
    extras: Extras,
    /// `want-ref <name>` as sent, each once.
    want_refs: Vec<String>,
    /// The wanted refs and what they point at ([`FetchArgs::resolve`]).
    wanted_refs: Vec<(String, ObjectId)>,
}

impl FetchArgs {
    /// The names the request gave (`want-ref`, `deepen-not`) as the refs they mean.
    fn resolve(&mut self, refs: &RefSnapshot) -> Result<(), ProtocolError> {
        self.extras.resolve(refs)?;
        for name in std::mem::take(&mut self.want_refs) {
            let id = refs
                .refs
                .iter()
                .find(|r| r.name == name.as_bytes())
                .map(|r| r.id)
                .or_else(|| if name == "HEAD" { refs.head_id() } else { None })
                .ok_or_else(|| ProtocolError::UnknownRef(crate::error::quoted(&name, 100)))?;
            self.wanted_refs.push((name, id));
        }
        Ok(())
    }
}

/// A `fetch` command's arguments, as typed values (names not yet resolved).
fn parse_fetch(args: &[Line<'_>], grammar: &upload::Grammar, max_haves: usize) -> Result<FetchArgs, ProtocolError> {
    let hash = grammar.hash;
    let mut f = FetchArgs::default();
    for line in args {
        let text = arg_text(line)?;
        let (word, value) = text.split_once(' ').unwrap_or((text, ""));
        if f.extras.line(grammar, word, value)? {
            continue;
        }
        match word {
            "want-ref" if grammar.ref_in_want => {
                if !f.want_refs.iter().any(|name| name == value) {
                    f.want_refs.push(value.to_owned());
                }
            }
            "want" => f.wants.push(upload::parse_oid(value, hash)?),
            "have" => upload::push_have(&mut f.haves, value, hash, max_haves)?,
            "done" => f.done = true,
            "thin-pack" => f.thin_pack = true,
            "no-progress" => f.no_progress = true,
            "include-tag" => f.include_tag = true,
            "ofs-delta" => f.ofs_delta = true,
            "wait-for-done" => f.wait_for_done = true,
            other => return Err(ProtocolError::UnknownArgument(crate::error::quoted(other, 64))),
        }
    }
    Ok(f)
}

/// `fetch`: with haves and without `done`, an acknowledgments section (ACK per common have, or
/// NAK; `ready` when every want reaches a common commit, unless `wait-for-done`) and, if ready,
/// the pack; with `done` or without haves, the pack right away. Before the packfile section:
/// `wanted-refs` for `want-ref`s, `shallow-info` for a shallow request.
fn fetch(
    bounds: &Bounds<'_>,
    upload: &mut dyn Upload,
    args: &[Line<'_>],
    out: &mut dyn Write,
) -> Result<Option<Stats>, ServeError> {
    let mut w = pkt::Writer::new();
    type Negotiated = (FetchArgs, Vec<ObjectId>, Option<crate::shallow::Boundary>);
    let negotiated = (|| -> Result<Option<Negotiated>, ServeError> {
        let mut f = parse_fetch(args, &upload::Grammar::of(upload.refs()), bounds.max_haves)?;
        f.resolve(upload.refs())?;
        bounds.tally.asked(f.wants.len(), f.haves.len());
        upload.check_wants(&f.wants, upload::WantRule::Reachable)?;
        for (_, id) in &f.wanted_refs {
            if !f.wants.contains(id) {
                f.wants.push(*id);
            }
        }
        if f.wants.is_empty() {
            return Ok(None);
        }
        for have in &f.haves {
            upload.have(*have)?;
        }
        if !f.done && !f.haves.is_empty() {
            w.text("acknowledgments");
            if upload.acked().is_empty() {
                w.text("NAK");
            }
            for id in upload.acked() {
                w.text(format!("ACK {id}"));
            }
            if !f.wait_for_done && upload.ready(&f.wants)? {
                w.text("ready");
                w.delim();
            } else {
                w.flush();
                return Ok(None);
            }
        }
        let boundary = upload.boundary(&f.wants, &mut f.extras)?;
        if !f.wanted_refs.is_empty() {
            w.text("wanted-refs");
            for (name, id) in &f.wanted_refs {
                w.text(format!("{id} {name}"));
            }
            w.delim();
        }
        if let Some(boundary) = &boundary {
            w.text("shallow-info");
            upload::write_boundary(boundary, &mut w);
            w.delim();
        }
        Ok(Some((f, upload.common(), boundary)))
    })();
    let (f, common, boundary) = match negotiated {
        Ok(Some(n)) => n,
        Ok(None) => {
            out.write_all(&w.buf)?;
            return Ok(None);
        }
        Err(err) => {
            out.write_all(&w.buf)?; // acknowledgments written before the failure
            return upload::reply_err(out, err);
        }
    };
    w.text("packfile");
    out.write_all(&w.buf)?;
    upload::send_pack(
        upload,
        &PackRequest {
            wants: &f.wants,
            common: &common,
            filter: f.extras.filter(),
            boundary: boundary.as_ref(),
            include_tag: f.include_tag,
            thin_pack: f.thin_pack,
            ofs_delta: f.ofs_delta,
        },
        (Framing::SideBand64k, !f.no_progress),
        &mut *out,
    )
    .map(Some)
}

/// How a connection's command requests are answered: its packets up to its flush in, the
/// answer written to the connection; the statistics of a pack it sent.
pub type Answer<'a, W> = dyn FnMut(&[Line<'_>], &mut W) -> Result<Option<Stats>, ServeError> + 'a;

/// Serve v2 over a connection (git://): the capability advertisement (from `settings`, the
/// repository's settings: [`RefSnapshot::settings_only`]), then one command request
/// after another (each up to its flush) until the client hangs up or sends an empty request;
/// `answer` answers each (the service decides how: [`serve_request`], or a cached answer).
/// `out` is flushed after every response. The statistics of the last pack sent.
pub fn serve_stateful<R: std::io::Read, W: Write>(
    bounds: &Bounds<'_>,
    settings: &RefSnapshot,
    input: R,
    mut out: W,
    answer: &mut Answer<'_, W>,
) -> Result<Option<Stats>, ServeError> {
    let mut w = pkt::Writer::new();
    advertise(settings, &mut w);
    out.write_all(&w.buf)?;
    out.flush()?;
    let mut lines = pkt::stream(input);
    let rules = pkt::SectionRules { delim: true, done_ends: false };
    let mut last = None;
    loop {
        let (request, end) = match pkt::read_section(&mut lines, bounds.max_request_body, rules) {
            Ok(section) => section,
            Err(err) => return upload::reply_err(&mut out, err.into()),
        };
        if end == pkt::End::HungUp || request.is_empty() {
            return Ok(last);
        }
        let request: Vec<Line<'_>> = request.iter().map(pkt::Owned::as_line).collect();
        // A fetch that said `done` (or was answered with a pack) is the connection's last
        // command: git's clients send nothing after their pack but the end, and the connection's
        // thread and slot are not held while the client reads it.
        let last_command = fetch_key(&request).is_some();
        let answered = answer(&request, &mut out)?;
        last = answered.or(last);
        out.flush()?;
        if last_command || answered.is_some() {
            return Ok(last);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args<'a>(text: &[&'a str]) -> Vec<Line<'a>> {
        text.iter().map(|l| Line::Data(l.as_bytes())).collect()
    }

    #[test]
    fn fetch_arguments_are_read_by_name() {
        let refs = crate::repo::fixture_refs();
        let want = &format!("want {}", "3".repeat(40));
        let have = &format!("have {}", "1".repeat(40));
        let f = parse_fetch(
            &args(&[
                want,
                have,
                "thin-pack",
                "ofs-delta",
                "include-tag",
                "no-progress",
                "wait-for-done",
                "deepen 2",
                "done",
            ]),
            &upload::Grammar::of(&refs),
            10,
        )
        .unwrap();
        assert_eq!((f.wants.len(), f.haves.len()), (1, 1));
        assert!(f.thin_pack && f.ofs_delta && f.include_tag && f.no_progress && f.wait_for_done && f.done);
        assert_eq!(f.extras.deepen.depth, Some(2));
    }

    #[test]
    fn unknown_arguments_want_refs_without_the_setting_and_filters_without_it_are_refused() {
        let refs = crate::repo::fixture_refs();
        let grammar = upload::Grammar::of(&refs);
        assert!(
            matches!(parse_fetch(&args(&["frobnicate"]), &grammar, 10), Err(ProtocolError::UnknownArgument(a)) if a == "frobnicate")
        );
        assert!(matches!(
            parse_fetch(&args(&["want-ref refs/heads/main"]), &grammar, 10),
            Err(ProtocolError::UnknownArgument(_))
        ));
        assert!(matches!(
            parse_fetch(&args(&["filter blob:none"]), &grammar, 10),
            Err(ProtocolError::FilterNotAllowed)
        ));
        let allowing = upload::Grammar { ref_in_want: true, ..grammar };
        let mut f =
            parse_fetch(&args(&["want-ref refs/heads/main", "want-ref refs/heads/main"]), &allowing, 10).unwrap();
        assert_eq!(f.want_refs, vec!["refs/heads/main".to_owned()], "parsed as sent, each once");
        f.resolve(&refs).unwrap();
        assert_eq!(f.wanted_refs, vec![("refs/heads/main".to_owned(), refs.refs[0].id)]);
        let mut unknown = parse_fetch(&args(&["want-ref refs/heads/nope"]), &allowing, 10).unwrap();
        assert!(matches!(unknown.resolve(&refs), Err(ProtocolError::UnknownRef(_))));
    }
}
