//! URL paths to git directories: percent-decoding, `..` refused wherever it is, `~user` homes
//! from the password database, and what counts as a git directory.

use std::path::{Component, Path, PathBuf};

/// The git directory at `path`: a bare repository, or the `.git` of a work tree.
pub(super) fn git_dir_of(path: &Path) -> Option<PathBuf> {
    let dot_git = path.join(".git");
    if is_git_dir(&dot_git) {
        return Some(dot_git);
    }
    is_git_dir(path).then(|| path.to_owned())
}

pub(super) fn is_git_dir(path: &Path) -> bool {
    path.join("HEAD").is_file() && path.join("objects").is_dir()
}

/// A user's home directory from the password database (for `~user` paths).
pub(super) fn home_of(user: &str) -> Option<PathBuf> {
    if user.is_empty() || user.len() > 256 {
        return None;
    }
    let name = std::ffi::CString::new(user).ok()?;
    // SAFETY: `passwd` is plain data (integers and pointers), for which all zeroes is a value.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; the strings it fills in live in `buf`.
    let rc = unsafe { libc::getpwnam_r(name.as_ptr(), &mut pwd, buf.as_mut_ptr(), buf.len(), &mut result) };
    if rc != 0 || result.is_null() || pwd.pw_dir.is_null() {
        return None;
    }
    // SAFETY: `pw_dir` points into `buf`, NUL-terminated, set by a successful call.
    let dir = unsafe { std::ffi::CStr::from_ptr(pwd.pw_dir) };
    use std::os::unix::ffi::OsStrExt;
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(dir.to_bytes())))
}

/// A URL path made relative and checked: no `..`, no `.`, no empty or absolute tricks, no NUL or
/// backslash. `None` when the path is not acceptable.
pub fn relative_repo_path(decoded: &str) -> Option<PathBuf> {
    if decoded.contains('\0') || decoded.contains('\\') {
        return None;
    }
    let trimmed = decoded.trim_start_matches('/').trim_end_matches('/');
    if trimmed.is_empty() {
        return None;
    }
    let mut out = PathBuf::new();
    for segment in trimmed.split('/') {
        // `.gixd-new-…`: a repository being made ([`super::create`]) is never served.
        if segment.is_empty() || segment == "." || segment == ".." || segment.starts_with(super::create::NEW_PREFIX) {
            return None;
        }
        out.push(segment);
    }
    out.components().all(|c| matches!(c, Component::Normal(_))).then_some(out)
}

/// Decode `%XX` escapes; `None` for a broken escape or a result that is not UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}
