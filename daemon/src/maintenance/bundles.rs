//! Bundles for bundle-uri (maintenance layer): where a repository's config says `gixd.bundles =
//! true`, a full run writes git bundles of what a reader may see into `<git dir>/gixd-bundles/` —
//! a full bundle first, then an incremental one per run that finds new tips (prerequisites: the
//! commits the listed bundles end at), each with a `creationToken`, so that a client holding the
//! older bundles downloads only the newer ones (git's `bundle.heuristic=creationToken`). When the
//! listed bundles outgrow `gixd.bundleBudget` (bytes, default 4 GiB) the next run writes one full
//! bundle in their place. The list, in git's bundle-list format (`list`, relative URIs), is
//! replaced atomically after its bundles are in place; a bundle no list names is removed once it
//! has been unlisted for an hour (a client may be downloading it).
//!
//! Only refs under `refs/heads/` and `refs/tags/` that a client may read go in (hidden refs never
//! do, nor anything only they reach); the packs come from gixd's own selection and pack writer,
//! never thin. Format v2 for SHA-1, v3 with `@object-format=sha256` for SHA-256.

use std::collections::HashSet;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use gix::bstr::{BString, ByteSlice};
use gix_hash::ObjectId;

use super::MaintenanceError;

/// The bundle directory below a git directory.
pub const DIR: &str = "gixd-bundles";
/// The bundle list's file name in [`DIR`].
pub const LIST: &str = "list";
/// How long a bundle stays after no list names it.
const UNLISTED_GRACE: Duration = Duration::from_secs(3600);

/// One bundle of the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub id: String,
    /// Its file name in [`DIR`] (the list's URI, relative to the list).
    pub file: String,
    pub creation_token: u64,
}

/// The listed bundles, oldest first (none without a list).
pub fn read_list(git_dir: &Path) -> Vec<Listed> {
    let Ok(text) = std::fs::read(git_dir.join(DIR).join(LIST)) else { return Vec::new() };
    let Ok(config) = gix::config::File::try_from(text.to_str_lossy().as_ref()) else { return Vec::new() };
    let mut out = Vec::new();
    for section in config.sections_by_name("bundle").into_iter().flatten() {
        let Some(id) = section.header().subsection_name() else { continue };
        let file = section.value("uri").map(|v| v.to_string());
        let token = section.value("creationToken").and_then(|v| v.to_str().ok()?.parse().ok());
        if let (Some(file), Some(creation_token)) = (file, token)
            && is_bundle_name(&file)
        {
            out.push(Listed { id: id.to_string(), file, creation_token });
        }
    }
    out.sort_by_key(|l| l.creation_token);
    out
}

/// The list as git's bundle-list format has it (a config file).
pub fn list_text(listed: &[Listed]) -> String {
    let mut text = String::from("[bundle]\n\tversion = 1\n\tmode = all\n\theuristic = creationToken\n");
    for l in listed {
        text.push_str(&format!("[bundle \"{}\"]\n\turi = {}\n\tcreationToken = {}\n", l.id, l.file, l.creation_token));
    }
    text
}

/// The list as the v2 `bundle-uri` command sends it: git's `bundle.*` keys, lowercased as git's
/// config reader gives them, each bundle's URI relative to the repository's URL.
pub fn advertised(listed: &[Listed]) -> Vec<(String, String)> {
    let mut out = vec![
        ("bundle.version".to_owned(), "1".to_owned()),
        ("bundle.mode".to_owned(), "all".to_owned()),
        ("bundle.heuristic".to_owned(), "creationToken".to_owned()),
    ];
    for l in listed {
        out.push((format!("bundle.{}.uri", l.id), format!("{DIR}/{}", l.file)));
        out.push((format!("bundle.{}.creationtoken", l.id), l.creation_token.to_string()));
    }
    out
}

/// A file name a bundle of this directory can have (what the HTTP route serves, nothing else).
pub fn is_bundle_name(name: &str) -> bool {
    name.strip_suffix(".bundle").is_some_and(|stem| !stem.is_empty() && stem.bytes().all(|b| b.is_ascii_digit()))
}

/// The objects a bundle's refs point at (its `<oid> <name>` lines), from its header.
fn header_tips(path: &Path) -> std::io::Result<Vec<ObjectId>> {
    let mut reader = std::io::BufReader::new(std::fs::File::open(path)?);
    let mut tips = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 || line == b"\n" {
            break;
        }
        let text = line.trim_end_with(|c| c == '\n');
        if text.starts_with(b"#") || text.starts_with(b"@") {
            continue;
        }
        if text.starts_with(b"-") {
            continue; // a prerequisite
        }
        let hex = text.split_once_str(" ").map_or(text, |(hex, _)| hex);
        if let Ok(id) = ObjectId::from_hex(hex) {
            tips.push(id);
        }
    }
    Ok(tips)
}

/// Write the bundle the repository at `git_dir` is due, if it asks for bundles and has new tips;
/// the new bundle's size in bytes.
pub fn write(git_dir: &Path) -> Result<Option<u64>, MaintenanceError> {
    let repo = super::open(git_dir)?;
    let config = repo.config_snapshot();
    if !config.boolean("gixd.bundles").unwrap_or(false) {
        return Ok(None);
    }
    let budget = config.integer("gixd.bundleBudget").and_then(|b| u64::try_from(b).ok()).unwrap_or(4 << 30);
    let dir = git_dir.join(DIR);
    std::fs::create_dir_all(&dir)?;
    remove_unlisted(&dir);
    // What a client sees: hidden refs (and so what only they reach) never go in.
    let refs = crate::repo::RefSnapshot::load(&repo)?;
    let included: Vec<(ObjectId, BString)> = refs
        .refs
        .iter()
        .filter(|r| r.name.starts_with(b"refs/heads/") || r.name.starts_with(b"refs/tags/"))
        .map(|r| (r.id, r.name.clone()))
        .collect();
    if included.is_empty() {
        return Ok(None);
    }
    let mut listed = read_list(git_dir);
    let listed_bytes: u64 =
        listed.iter().filter_map(|l| std::fs::metadata(dir.join(&l.file)).ok()).map(|m| m.len()).sum();
    let mut covered = HashSet::new();
    for l in &listed {
        covered.extend(header_tips(&dir.join(&l.file))?);
    }
    let tips: Vec<ObjectId> = included.iter().map(|(id, _)| *id).collect();
    if !listed.is_empty() && tips.iter().all(|id| covered.contains(id)) {
        return Ok(None);
    }
    let full = listed.is_empty() || listed_bytes > budget;
    // Prerequisites: the commits the listed bundles end at (a client with them has the rest).
    let mut prerequisites = Vec::new();
    if !full {
        for id in &covered {
            if let Some(commit) = crate::graph::peel_tag(&repo, *id)?.or(Some(*id))
                && repo.find_header(commit).is_ok_and(|h| h.kind() == gix_object::Kind::Commit)
            {
                prerequisites.push(commit);
            }
        }
        prerequisites.sort();
        prerequisites.dedup();
    }
    let selection = if full {
        crate::select::everything_reachable(&repo, &tips, None)?
    } else {
        let request = crate::select::Request {
            wants: &tips,
            common: &prerequisites,
            include_tag: false,
            refs: &refs,
            filter: crate::filter::Filter::default(),
            boundary: None,
            progress: None,
            commit_graph: None,
        };
        crate::select::select_by_walking(&repo, &request)?
    };
    let token = {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
        now.max(listed.last().map_or(0, |l| l.creation_token + 1))
    };
    let file = format!("{token}.bundle");
    let tmp = dir.join(format!(".tmp-{file}"));
    let written = (|| -> Result<u64, MaintenanceError> {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        match repo.object_hash() {
            gix_hash::Kind::Sha1 => out.write_all(b"# v2 git bundle\n")?,
            _ => out.write_all(b"# v3 git bundle\n@object-format=sha256\n")?,
        }
        for id in &prerequisites {
            writeln!(out, "-{id}")?;
        }
        for (id, name) in &included {
            out.write_all(format!("{id} ").as_bytes())?;
            out.write_all(name)?;
            out.write_all(b"\n")?;
        }
        out.write_all(b"\n")?;
        let options = crate::pack::Options {
            thin_pack: false,
            ofs_delta: true,
            include_unselected_bases: false,
            packs: &|| None,
            deltify: false,
            search_anew: None,
            progress_every: Duration::from_secs(1),
        };
        // A delta whose base is not selected is stored whole: nothing outside goes in.
        crate::pack::write(&repo, &selection, options, |_| false, &mut out)?;
        let file = out.into_inner().map_err(|err| err.into_error())?;
        file.sync_all()?;
        Ok(file.metadata()?.len())
    })();
    let bytes = match written {
        Ok(bytes) => bytes,
        Err(err) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(err);
        }
    };
    std::fs::rename(&tmp, dir.join(&file))?;
    let entry = Listed { id: token.to_string(), file, creation_token: token };
    if full {
        // Leaving the list now: their hour of grace starts now.
        for old in &listed {
            let _ = std::fs::File::options()
                .write(true)
                .open(dir.join(&old.file))
                .and_then(|f| f.set_modified(std::time::SystemTime::now()));
        }
        listed = vec![entry];
    } else {
        listed.push(entry);
    }
    let list_tmp = dir.join(format!(".tmp-{LIST}"));
    std::fs::write(&list_tmp, list_text(&listed))?;
    std::fs::File::open(&list_tmp)?.sync_all()?;
    std::fs::rename(&list_tmp, dir.join(LIST))?;
    Ok(Some(bytes))
}

/// Remove bundles no list has named for [`UNLISTED_GRACE`] (by their change time: a bundle that
/// left the list is touched then) and temporary files of runs that died.
fn remove_unlisted(dir: &Path) {
    let listed: HashSet<String> = dir.parent().map(read_list).unwrap_or_default().into_iter().map(|l| l.file).collect();
    let now = std::time::SystemTime::now();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path: PathBuf = entry.path();
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| now.duration_since(t).unwrap_or_default() > UNLISTED_GRACE);
        if (is_bundle_name(&name) && !listed.contains(&name) && old) || (name.starts_with(".tmp-") && old) {
            let _ = std::fs::remove_file(path);
        }
    }
}
