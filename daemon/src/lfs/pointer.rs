//! Git LFS pointers (git-lfs's spec v1): the small text a repository holds in place of a large
//! file — `version`, `oid sha256:…`, `size …` — naming the LFS object it stands for.

use super::Oid;

/// A pointer is never larger (git-lfs's own limit for reading one).
pub const MOST_POINTER_BYTES: u64 = 1024;

/// The LFS object a pointer names: its oid and size, if `data` is a pointer.
pub fn parse(data: &[u8]) -> Option<(Oid, u64)> {
    let text = std::str::from_utf8(data).ok()?;
    let mut lines = text.lines();
    let version = lines.next()?.strip_prefix("version ")?;
    if !matches!(version, "https://git-lfs.github.com/spec/v1" | "https://hawser.github.com/spec/v1") {
        return None;
    }
    let (mut oid, mut size) = (None, None);
    for line in lines {
        if let Some(hex) = line.strip_prefix("oid sha256:") {
            oid = Oid::parse(hex);
        } else if let Some(n) = line.strip_prefix("size ") {
            size = n.parse().ok();
        }
    }
    Some((oid?, size?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_are_read_as_git_lfs_writes_them_and_nothing_else_is_one() {
        let oid = "4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393";
        let text = format!("version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize 12345\n");
        assert_eq!(parse(text.as_bytes()), Some((Oid::parse(oid).unwrap(), 12345)));
        for not in [
            "hello\n".to_owned(),
            text.replace("v1", "v9"),
            text.replace("size 12345\n", ""),
            text.replace(oid, &oid[..60]),
        ] {
            assert_eq!(parse(not.as_bytes()), None, "{not:?}");
        }
    }
}
