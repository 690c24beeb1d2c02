//! Every published Cassandra Murmur3 vector, checked against our hash.
//!
//! The vectors come from running Cassandra's `hash3_x64_128` on the JVM, so
//! they pin the signed-tail-byte quirk and the token normalization that
//! generic MurmurHash3 implementations get "wrong".

#![allow(clippy::unwrap_used, reason = "tests")]

use tally_net::ring::{murmur3_token, murmur3_x64_128_cassandra};

const VECTORS: &str = include_str!("fixtures/murmur3-cassandra-vectors.txt");
const EXPECTED_VECTORS: usize = 457;

fn decode_hex(hex: &str) -> Vec<u8> {
    assert!(hex.len().is_multiple_of(2), "odd-length hex key {hex:?}");
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&hex[i..i + 2], 16)
                .unwrap_or_else(|e| panic!("bad hex in key {hex:?}: {e}"))
        })
        .collect()
}

#[test]
fn all_cassandra_vectors_match() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for (lineno, line) in VECTORS.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            fields.len(),
            4,
            "line {}: want 4 columns: {line:?}",
            lineno + 1
        );
        let key = if fields[0] == "-" {
            Vec::new()
        } else {
            decode_hex(fields[0])
        };
        let parse = |s: &str| -> i64 {
            s.parse()
                .unwrap_or_else(|e| panic!("line {}: bad number {s:?}: {e}", lineno + 1))
        };
        let (token, h1, h2) = (parse(fields[1]), parse(fields[2]), parse(fields[3]));

        let got_token = murmur3_token(&key);
        let got_hash = murmur3_x64_128_cassandra(&key, 0);
        if got_token != token || got_hash != (h1, h2) {
            failures.push(format!(
                "line {} key {}: token {got_token} want {token}; (h1, h2) {got_hash:?} want {:?}",
                lineno + 1,
                fields[0],
                (h1, h2),
            ));
        }
        checked += 1;
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} vectors differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(
        checked, EXPECTED_VECTORS,
        "vector file has the wrong number of vectors"
    );
}

#[test]
fn empty_key_is_the_minimum_token() {
    assert_eq!(murmur3_token(b""), i64::MIN);
    assert_eq!(murmur3_x64_128_cassandra(b"", 0), (0, 0));
}
