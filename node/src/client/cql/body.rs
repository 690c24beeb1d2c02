//! The native protocol's notations: how a body's fields are laid out.
//!
//! ```text
//! [int] i32   [long] i64   [short] u16   [byte] u8     (big-endian)
//! [string]      [short] n, n bytes of UTF-8
//! [long string] [int] n, n bytes of UTF-8
//! [bytes]       [int] n, n bytes; n < 0: null
//! [value]       [int] n, n bytes; -1: null, -2: not set
//! [short bytes] [short] n, n bytes
//! [string list] [short] n, n [string]s
//! [string map]  [short] n, n ([string], [string]) pairs
//! [string multimap] [short] n, n ([string], [string list]) pairs
//! [bytes map]   [short] n, n ([string], [bytes]) pairs
//! ```
//!
//! A [`Reader`] takes a body from a client: every length is checked
//! against what is left before anything is taken, so a lying length is an
//! error, never a panic or a large allocation. The writers append to a
//! response being built.

use std::fmt;

/// A body that does not hold what its request says it does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Malformed(pub(crate) String);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a body read answers.
pub(crate) type Read<T> = Result<T, Malformed>;

/// A bound value of a query: its bytes, null, or (v4) not set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Value {
    Bytes(Vec<u8>),
    Null,
    NotSet,
}

/// Reads the fields of one body in order.
pub(crate) struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(body: &'a [u8]) -> Reader<'a> {
        Reader { rest: body }
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.rest.len()
    }

    fn take(&mut self, n: usize, what: &str) -> Read<&'a [u8]> {
        if n > self.rest.len() {
            return Err(Malformed(format!(
                "not enough bytes to read {what}: {n} wanted, {} left",
                self.rest.len()
            )));
        }
        let (taken, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Read<[u8; N]> {
        let bytes = self.take(N, what)?;
        Ok(bytes.try_into().expect("took exactly N bytes"))
    }

    pub(crate) fn byte(&mut self) -> Read<u8> {
        Ok(self.array::<1>("a byte")?[0])
    }

    pub(crate) fn short(&mut self) -> Read<u16> {
        Ok(u16::from_be_bytes(self.array("a short")?))
    }

    pub(crate) fn int(&mut self) -> Read<i32> {
        Ok(i32::from_be_bytes(self.array("an int")?))
    }

    pub(crate) fn long(&mut self) -> Read<i64> {
        Ok(i64::from_be_bytes(self.array("a long")?))
    }

    fn utf8(bytes: &[u8], what: &str) -> Read<String> {
        String::from_utf8(bytes.to_vec()).map_err(|_| Malformed(format!("{what} is not UTF-8")))
    }

    pub(crate) fn string(&mut self) -> Read<String> {
        let n = self.short()? as usize;
        Reader::utf8(self.take(n, "a string")?, "a string")
    }

    pub(crate) fn long_string(&mut self) -> Read<String> {
        let n = self.int()?;
        let n =
            usize::try_from(n).map_err(|_| Malformed(format!("a long string of length {n}")))?;
        Reader::utf8(self.take(n, "a long string")?, "a long string")
    }

    /// `[bytes]`: `None` for null.
    pub(crate) fn bytes(&mut self) -> Read<Option<Vec<u8>>> {
        let n = self.int()?;
        match usize::try_from(n) {
            Ok(n) => Ok(Some(self.take(n, "bytes")?.to_vec())),
            Err(_) => Ok(None),
        }
    }

    pub(crate) fn value(&mut self) -> Read<Value> {
        match self.int()? {
            -1 => Ok(Value::Null),
            -2 => Ok(Value::NotSet),
            n if n < 0 => Err(Malformed(format!("a value of length {n}"))),
            n => Ok(Value::Bytes(self.take(n as usize, "a value")?.to_vec())),
        }
    }

    pub(crate) fn short_bytes(&mut self) -> Read<Vec<u8>> {
        let n = self.short()? as usize;
        Ok(self.take(n, "short bytes")?.to_vec())
    }

    pub(crate) fn string_list(&mut self) -> Read<Vec<String>> {
        let n = self.short()?;
        (0..n).map(|_| self.string()).collect()
    }

    pub(crate) fn string_map(&mut self) -> Read<Vec<(String, String)>> {
        let n = self.short()?;
        (0..n)
            .map(|_| Ok((self.string()?, self.string()?)))
            .collect()
    }

    /// `[bytes map]`: a null value reads as empty.
    pub(crate) fn bytes_map(&mut self) -> Read<Vec<(String, Vec<u8>)>> {
        let n = self.short()?;
        (0..n)
            .map(|_| Ok((self.string()?, self.bytes()?.unwrap_or_default())))
            .collect()
    }
}

pub(crate) fn put_short(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}

pub(crate) fn put_int(out: &mut Vec<u8>, v: i32) {
    out.extend_from_slice(&v.to_be_bytes());
}

pub(crate) fn put_long(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// `[short]` length of a field; a field past 65535 bytes is a bug here.
fn short_len(n: usize) -> u16 {
    u16::try_from(n).expect("a [string] or [short bytes] under 64 KiB")
}

/// `[int]` length of a field; a field past 2 GiB is a bug here.
fn int_len(n: usize) -> i32 {
    i32::try_from(n).expect("a [bytes] under 2 GiB")
}

/// `[string]`: at most 65535 bytes, so a longer one (only a message can
/// be, quoting a client's text) is cut at a character's boundary.
pub(crate) fn put_string(out: &mut Vec<u8>, s: &str) {
    let mut end = s.len().min(usize::from(u16::MAX));
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    put_short(out, short_len(end));
    out.extend_from_slice(&s.as_bytes()[..end]);
}

#[cfg(test)]
pub(crate) fn put_long_string(out: &mut Vec<u8>, s: &str) {
    put_int(out, int_len(s.len()));
    out.extend_from_slice(s.as_bytes());
}

/// `[bytes]`, null for `None`.
pub(crate) fn put_bytes(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        Some(b) => {
            put_int(out, int_len(b.len()));
            out.extend_from_slice(b);
        }
        None => put_int(out, -1),
    }
}

pub(crate) fn put_short_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_short(out, short_len(b.len()));
    out.extend_from_slice(b);
}

pub(crate) fn put_string_list(out: &mut Vec<u8>, list: &[&str]) {
    put_short(out, short_len(list.len()));
    list.iter().for_each(|s| put_string(out, s));
}

pub(crate) fn put_string_multimap(out: &mut Vec<u8>, map: &[(&str, &[&str])]) {
    put_short(out, short_len(map.len()));
    for (k, v) in map {
        put_string(out, k);
        put_string_list(out, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_notation_reads_back_what_was_written() {
        let mut out = Vec::new();
        put_short(&mut out, 65535);
        put_int(&mut out, -7);
        put_long(&mut out, i64::MIN);
        put_string(&mut out, "héllo");
        put_long_string(&mut out, "SELECT * FROM system.local");
        put_bytes(&mut out, Some(b"\x00\x01"));
        put_bytes(&mut out, None);
        put_short_bytes(&mut out, b"id");
        put_string_list(&mut out, &["a", "b"]);
        put_string_multimap(
            &mut out,
            &[("COMPRESSION", &[]), ("CQL_VERSION", &["3.3.1"])],
        );
        let mut r = Reader::new(&out);
        assert_eq!(r.short(), Ok(65535));
        assert_eq!(r.int(), Ok(-7));
        assert_eq!(r.long(), Ok(i64::MIN));
        assert_eq!(r.string().unwrap(), "héllo");
        assert_eq!(r.long_string().unwrap(), "SELECT * FROM system.local");
        assert_eq!(r.bytes(), Ok(Some(vec![0, 1])));
        assert_eq!(r.bytes(), Ok(None));
        assert_eq!(r.short_bytes(), Ok(b"id".to_vec()));
        assert_eq!(r.string_list(), Ok(vec!["a".to_string(), "b".to_string()]));
        // A multimap's first entry: a key, then an empty list.
        assert_eq!(r.short(), Ok(2));
        assert_eq!(r.string().unwrap(), "COMPRESSION");
        assert_eq!(r.string_list(), Ok(vec![]));
        assert_eq!(r.string().unwrap(), "CQL_VERSION");
        assert_eq!(r.string_list(), Ok(vec!["3.3.1".to_string()]));
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn a_string_past_its_notation_is_cut_at_a_character() {
        let long = "é".repeat(40_000);
        let mut out = Vec::new();
        put_string(&mut out, &long);
        let read = Reader::new(&out).string().unwrap();
        assert_eq!(read.len(), 65_534, "whole characters only");
        assert!(long.starts_with(&read));
    }

    #[test]
    fn values_tell_null_and_not_set_apart() {
        let mut out = Vec::new();
        put_int(&mut out, -1);
        put_int(&mut out, -2);
        put_int(&mut out, 1);
        out.push(9);
        put_int(&mut out, -3);
        let mut r = Reader::new(&out);
        assert_eq!(r.value(), Ok(Value::Null));
        assert_eq!(r.value(), Ok(Value::NotSet));
        assert_eq!(r.value(), Ok(Value::Bytes(vec![9])));
        assert!(r.value().is_err(), "-3 is no length");
    }

    #[test]
    fn a_lying_length_is_an_error_and_takes_nothing() {
        let mut out = Vec::new();
        put_int(&mut out, i32::MAX);
        out.extend_from_slice(b"short");
        let mut r = Reader::new(&out);
        let e = r.long_string().unwrap_err();
        assert!(e.0.contains("not enough bytes"), "{e}");
        // Truncated anywhere, every notation answers an error.
        let mut full = Vec::new();
        put_string_multimap(&mut full, &[("CQL_VERSION", &["3.3.1"])]);
        for cut in 0..full.len() {
            let mut r = Reader::new(&full[..cut]);
            let read = (|| -> Read<()> {
                for _ in 0..r.short()? {
                    r.string()?;
                    r.string_list()?;
                }
                Ok(())
            })();
            assert!(read.is_err(), "cut at {cut}");
        }
        let mut r = Reader::new(b"\x00\x02\xff\xfe");
        assert!(r.string().is_err(), "not UTF-8");
    }
}
