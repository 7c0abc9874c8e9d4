//! Partial-clone filters (object selection layer): parsing a client's `filter <spec>` and what it
//! leaves out. Supported: `blob:none`, `blob:limit=<n>[kmg]`, `tree:<depth>` and `combine:` of
//! these; anything else is refused with an error naming the spec. A combination omits an object
//! when any of its parts would, so it folds into one [`Filter`].

/// What a filter leaves out of a pack. Objects the client named in a `want` are always sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Filter {
    /// `blob:none`: no blobs.
    pub no_blobs: bool,
    /// `blob:limit=<n>`: no blob of `n` bytes or more.
    pub blob_limit: Option<u64>,
    /// `tree:<depth>`: no tree or blob at `depth` or deeper (a commit's root tree is at 0).
    pub tree_depth: Option<u64>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FilterError {
    #[error("invalid filter-spec '{0}'")]
    Invalid(String),
    #[error("filter '{0}' not supported")]
    Unsupported(String),
}

impl Filter {
    /// True when nothing is left out.
    pub fn is_none(&self) -> bool {
        *self == Filter::default()
    }

    /// Parse a filter spec as git's `--filter=` writes it on the wire.
    pub fn parse(spec: &str) -> Result<Filter, FilterError> {
        let mut filter = Filter::default();
        // An error inside a combination names the whole spec, as the client wrote it.
        filter.add(spec, 0).map_err(|err| match err {
            FilterError::Invalid(_) => FilterError::Invalid(crate::client_text::quoted(spec, 100)),
            other => other,
        })?;
        Ok(filter)
    }

    fn add(&mut self, spec: &str, nesting: usize) -> Result<(), FilterError> {
        let shown = || crate::client_text::quoted(spec, 100);
        let invalid = || FilterError::Invalid(shown());
        if spec == "blob:none" {
            self.no_blobs = true;
        } else if let Some(n) = spec.strip_prefix("blob:limit=") {
            let n = parse_size(n).ok_or_else(invalid)?;
            self.blob_limit = Some(self.blob_limit.map_or(n, |old| old.min(n)));
        } else if let Some(n) = spec.strip_prefix("tree:") {
            let n: u64 = n.parse().map_err(|_| invalid())?;
            self.tree_depth = Some(self.tree_depth.map_or(n, |old| old.min(n)));
        } else if let Some(parts) = spec.strip_prefix("combine:") {
            if nesting > 0 || parts.is_empty() {
                return Err(invalid());
            }
            for part in parts.split('+') {
                let part = percent_decode(part).ok_or_else(invalid)?;
                if part.is_empty() {
                    return Err(invalid());
                }
                self.add(&part, nesting + 1)?;
            }
        } else {
            // git's own names for the ones it has and we do not (sparse:oid, object:type).
            let name = spec.split(['=', ':']).take(2).collect::<Vec<_>>().join(":");
            return Err(FilterError::Unsupported(if spec.contains(':') { name } else { shown() }));
        }
        Ok(())
    }
}

/// git_parse_ulong: a number with an optional k, m or g suffix (powers of 1024).
fn parse_size(s: &str) -> Option<u64> {
    let (digits, unit) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 1024),
        (i, 'm' | 'M') => (&s[..i], 1024 * 1024),
        (i, 'g' | 'G') => (&s[..i], 1024 * 1024 * 1024),
        _ => (s, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(unit)
}

/// `combine:` parts are URL-encoded (`%2B` for a `+` inside a part).
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::{Filter, FilterError};

    #[test]
    fn each_supported_spec_parses_to_what_it_omits() {
        assert_eq!(Filter::parse("blob:none").unwrap(), Filter { no_blobs: true, ..Default::default() });
        assert_eq!(Filter::parse("blob:limit=1k").unwrap().blob_limit, Some(1024));
        assert_eq!(Filter::parse("blob:limit=100").unwrap().blob_limit, Some(100));
        assert_eq!(Filter::parse("tree:0").unwrap().tree_depth, Some(0));
        let combined = Filter::parse("combine:blob:limit=2m+tree:3").unwrap();
        assert_eq!(combined, Filter { no_blobs: false, blob_limit: Some(2 << 20), tree_depth: Some(3) });
        assert_eq!(Filter::parse("combine:tree%3A2+blob:none").unwrap().tree_depth, Some(2));
    }

    #[test]
    fn malformed_and_unsupported_specs_are_named_in_the_error() {
        for bad in [
            "blob:limit=",
            "blob:limit=12q",
            "tree:-1",
            "tree:x",
            "combine:",
            "combine:blob:none+",
            "combine:combine:tree:1",
        ] {
            assert_eq!(Filter::parse(bad), Err(FilterError::Invalid(bad.into())), "{bad}");
        }
        assert_eq!(Filter::parse("sparse:oid=main:sparse"), Err(FilterError::Unsupported("sparse:oid".into())));
        assert_eq!(Filter::parse("object:type=blob"), Err(FilterError::Unsupported("object:type".into())));
        assert_eq!(Filter::parse("nonsense"), Err(FilterError::Unsupported("nonsense".into())));
    }
}
