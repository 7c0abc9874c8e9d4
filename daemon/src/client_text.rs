//! Client text in errors (below every layer): what a client sent, quoted bounded into an error
//! value, and an error's message as a client may be shown it. [`crate::error`] re-exports both;
//! [`crate::filter`] quotes through here, as [`crate::error`] holds its errors.

/// The first `chars` characters of something a client sent, for an error that quotes it: an
/// error value never holds client input unbounded. The message it ends in is bounded and
/// escaped once more where it is sent ([`for_client`]). Every quotation of client input goes
/// through here.
pub fn quoted(input: &str, chars: usize) -> String {
    input.chars().take(chars).collect()
}

/// A message as a client may be shown it: at most `max` bytes (cut at a character boundary,
/// marked with `…`), control characters (a NUL, an escape) written as `\xNN` — error texts quote
/// what the client sent, and must not carry it back unbounded or raw. Newlines stay.
pub fn for_client(message: &str, max: usize) -> String {
    let mut out = String::with_capacity(message.len().min(max));
    for c in message.chars() {
        let piece = if c.is_control() && c != '\n' { format!("\\x{:02x}", c as u32 & 0xff) } else { c.to_string() };
        if out.len() + piece.len() > max {
            out.push('…');
            break;
        }
        out.push_str(&piece);
    }
    out
}
