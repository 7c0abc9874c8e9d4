//! The varint of reftable records: the encoding of a pack's ofs-delta offsets (each
//! continuation adds one before shifting, so every value has exactly one encoding).

use crate::{Error, corrupt};

/// Decode the varint at the start of `buf`: its value and the bytes it took.
pub fn decode(buf: &[u8]) -> Result<(u64, usize), Error> {
    let mut bytes = buf.iter();
    let first = *bytes.next().ok_or_else(|| corrupt("varint past the end of its block"))?;
    let mut value = u64::from(first & 0x7f);
    let mut used = 1;
    let mut byte = first;
    while byte & 0x80 != 0 {
        byte = *bytes.next().ok_or_else(|| corrupt("varint past the end of its block"))?;
        used += 1;
        value =
            value.checked_add(1).and_then(|v| v.checked_mul(128)).ok_or_else(|| corrupt("varint overflows 64 bits"))?
                | u64::from(byte & 0x7f);
    }
    Ok((value, used))
}

/// Append the varint of `value` to `out`.
pub fn encode(mut value: u64, out: &mut Vec<u8>) {
    let mut buf = [0u8; 10];
    let mut at = buf.len() - 1;
    buf[at] = (value & 0x7f) as u8;
    while value >= 0x80 {
        value = (value >> 7) - 1;
        at -= 1;
        buf[at] = 0x80 | (value & 0x7f) as u8;
    }
    out.extend_from_slice(&buf[at..]);
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trips_and_each_value_has_one_encoding() {
        for value in [0u64, 1, 127, 128, 255, 16383, 16384, 16511, 1 << 35, u64::MAX] {
            let mut out = Vec::new();
            super::encode(value, &mut out);
            assert_eq!(super::decode(&out).unwrap(), (value, out.len()), "{value}");
        }
        // 128 is [0x80, 0x00] (not [0x81, 0x00], which a plain base-128 varint would give).
        let mut out = Vec::new();
        super::encode(128, &mut out);
        assert_eq!(out, [0x80, 0x00]);
    }

    #[test]
    fn a_truncated_or_overlong_varint_is_an_error() {
        assert!(super::decode(&[]).is_err());
        assert!(super::decode(&[0x80]).is_err());
        assert!(super::decode(&[0xff; 11]).is_err());
    }
}
