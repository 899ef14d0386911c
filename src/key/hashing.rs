//! SHA-256 hex digests, and the canonical JSON of payload hashes before the `v2:` format.
//!
//! The legacy form sorts object keys but writes numbers as `serde_json::Value` holds them
//! (through `f64` past `u64`). It is kept only so that payload hashes stored by earlier
//! versions still match their payloads for one expiry window after an upgrade; new hashes
//! use [`crate::canonical`].

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Writes `value` as compact JSON with object keys sorted by their UTF-8 bytes.
fn write_canonical_json(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_scalar(&Value::String(k.clone()), out);
                out.push(b':');
                write_canonical_json(v, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical_json(v, out);
            }
            out.push(b']');
        }
        scalar => write_scalar(scalar, out),
    }
}

fn write_scalar(value: &Value, out: &mut Vec<u8>) {
    // Serializing a scalar into a Vec cannot fail.
    serde_json::to_writer(&mut *out, value).expect("scalar JSON serialization");
}

/// Legacy canonical JSON bytes of `value`.
pub(crate) fn legacy_canonical_json(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_canonical_json(value, &mut out);
    out
}

/// Lower-case hex SHA-256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    prefixed_sha256_hex(&[], bytes)
}

/// `prefix` (its parts in turn) followed by the lower-case hex SHA-256 of `bytes`, in one
/// allocation of the exact size.
pub(crate) fn prefixed_sha256_hex(prefix: &[&str], bytes: &[u8]) -> String {
    to_hex(prefix, &Sha256::digest(bytes))
}

/// `prefix` (its parts in turn) followed by `digest` in lower-case hex.
pub(crate) fn to_hex(prefix: &[&str], digest: &[u8]) -> String {
    let mut hex =
        String::with_capacity(prefix.iter().map(|p| p.len()).sum::<usize>() + 2 * digest.len());
    for part in prefix {
        hex.push_str(part);
    }
    // Each byte's two digits at once, written as bytes in chunks (a `char` pushed at a time
    // costs an encoding and a capacity check each).
    let mut digits = [0u8; 64];
    for chunk in digest.chunks(digits.len() / 2) {
        let (pairs, _) = digits.as_chunks_mut::<2>();
        for (pair, byte) in pairs.iter_mut().zip(chunk) {
            *pair = DIGIT_PAIRS[usize::from(*byte)];
        }
        let written = &digits[..2 * chunk.len()];
        hex.push_str(std::str::from_utf8(written).expect("hex digits are ASCII"));
    }
    hex
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Each byte's two lower-case hex digits.
const DIGIT_PAIRS: [[u8; 2]; 256] = {
    let mut pairs = [[0u8; 2]; 256];
    let mut byte = 0;
    while byte < 256 {
        pairs[byte] = [HEX[byte >> 4], HEX[byte & 0x0f]];
        byte += 1;
    }
    pairs
};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn object_key_order_does_not_change_the_bytes() {
        let a: Value =
            serde_json::from_str(r#"{"b":1,"a":{"y":[1,{"d":2,"c":3}],"x":null}}"#).unwrap();
        let b: Value =
            serde_json::from_str(r#"{"a":{"x":null,"y":[1,{"c":3,"d":2}]},"b":1}"#).unwrap();
        assert_eq!(legacy_canonical_json(&a), legacy_canonical_json(&b));
        assert_eq!(
            String::from_utf8(legacy_canonical_json(&a)).unwrap(),
            r#"{"a":{"x":null,"y":[1,{"c":3,"d":2}]},"b":1}"#
        );
    }

    #[test]
    fn array_order_and_values_matter() {
        assert_ne!(
            legacy_canonical_json(&json!([1, 2])),
            legacy_canonical_json(&json!([2, 1]))
        );
        assert_ne!(
            legacy_canonical_json(&json!({"a": 1})),
            legacy_canonical_json(&json!({"a": 2}))
        );
    }

    #[test]
    fn strings_are_escaped_like_json() {
        assert_eq!(
            String::from_utf8(legacy_canonical_json(&json!({"k\"": "é\n"}))).unwrap(),
            "{\"k\\\"\":\"é\\n\"}"
        );
    }

    #[test]
    fn every_byte_is_written_as_its_two_lower_case_digits_across_chunks() {
        let bytes: Vec<u8> = (0..=255).collect();
        let expected: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(to_hex(&["p", "#"], &bytes), format!("p#{expected}"));
        assert_eq!(to_hex(&[], &bytes[..33]), expected[..66]);
        assert_eq!(to_hex(&[], &[]), "");
    }

    #[test]
    fn sha256_matches_known_vector() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_prefixed_digest_is_its_parts_then_the_digest() {
        let digest = sha256_hex(b"abc");
        assert_eq!(
            prefixed_sha256_hex(&["fn", "#"], b"abc"),
            format!("fn#{digest}")
        );
        assert_eq!(prefixed_sha256_hex(&[], b"abc"), digest);
    }
}
