//! Redis 8.4's conditions on a string's value (`IFEQ`, `IFNE`, `IFDEQ`,
//! `IFDNE`, of `SET` and `DELEX`) and its digests (`DIGEST`), as pure
//! rules: `strings` checks them inside the agreed change of the string,
//! so the compare and the change are one step through any node.
//! A digest is the XXH3 64-bit hash of the value, as 16 lowercase hex
//! digits (Redis' `DIGEST`); a digest given to `IFDEQ`/`IFDNE` is read as
//! hex, in either case.

/// A condition on a string's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Compare {
    /// `IFEQ`: the string is this.
    Eq(Vec<u8>),
    /// `IFNE`: the string is not this (or there is none).
    Ne(Vec<u8>),
    /// `IFDEQ`: the string's digest is this.
    DigestEq(u64),
    /// `IFDNE`: the string's digest is not this (or there is none).
    DigestNe(u64),
}

impl Compare {
    /// The condition `word arg` names, if `word` is one of the four;
    /// Redis' error for a digest that is not one.
    pub(crate) fn parse(word: &[u8], arg: &[u8]) -> Option<Result<Compare, &'static str>> {
        let digest = || {
            std::str::from_utf8(arg)
                .ok()
                .filter(|d| (1..=16).contains(&d.len()))
                .and_then(|d| u64::from_str_radix(d, 16).ok())
                .ok_or("ERR digest must be 1 to 16 hexadecimal digits")
        };
        Some(match word.to_ascii_uppercase().as_slice() {
            b"IFEQ" => Ok(Compare::Eq(arg.to_vec())),
            b"IFNE" => Ok(Compare::Ne(arg.to_vec())),
            b"IFDEQ" => digest().map(Compare::DigestEq),
            b"IFDNE" => digest().map(Compare::DigestNe),
            _ => return None,
        })
    }

    /// Whether it holds of the string `current` (`None`: no string):
    /// the equal ones need a string, the unequal ones hold of none.
    pub(crate) fn holds(&self, current: Option<&[u8]>) -> bool {
        match (self, current) {
            (Compare::Eq(v), Some(c)) => c == v.as_slice(),
            (Compare::Ne(v), Some(c)) => c != v.as_slice(),
            (Compare::DigestEq(d), Some(c)) => digest(c) == *d,
            (Compare::DigestNe(d), Some(c)) => digest(c) != *d,
            (Compare::Eq(_) | Compare::DigestEq(_), None) => false,
            (Compare::Ne(_) | Compare::DigestNe(_), None) => true,
        }
    }
}

/// A value's digest (XXH3, 64 bits).
pub(crate) fn digest(value: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(value)
}

/// A digest as `DIGEST` answers it.
pub(crate) fn digest_hex(value: &[u8]) -> String {
    format!("{:016x}", digest(value))
}

/// `DELEX`'s condition, if it has one; else Redis' error.
pub(crate) fn delex_args(opts: &[Vec<u8>]) -> Result<Option<Compare>, &'static str> {
    match opts {
        [] => Ok(None),
        [word, arg] => match Compare::parse(word, arg) {
            Some(c) => c.map(Some),
            None => Err("ERR syntax error"),
        },
        _ => Err("ERR syntax error"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(word: &str, arg: &str) -> Compare {
        match Compare::parse(word.as_bytes(), arg.as_bytes()) {
            Some(Ok(c)) => c,
            other => panic!("{word} {arg}: {other:?}"),
        }
    }

    #[test]
    fn conditions_hold_as_redis_says() {
        let abc = Some(&b"abc"[..]);
        assert!(parsed("IFEQ", "abc").holds(abc));
        assert!(!parsed("ifeq", "abd").holds(abc));
        assert!(!parsed("IFEQ", "abc").holds(None), "IFEQ needs a string");
        assert!(parsed("IFNE", "abd").holds(abc));
        assert!(!parsed("IFNE", "abc").holds(abc));
        assert!(parsed("IFNE", "abc").holds(None), "IFNE creates");
        let d = digest_hex(b"abc");
        assert_eq!(d.len(), 16);
        assert!(parsed("IFDEQ", &d).holds(abc));
        assert!(parsed("IFDEQ", &d.to_uppercase()).holds(abc));
        assert!(!parsed("IFDNE", &d).holds(abc));
        assert!(parsed("IFDNE", &d).holds(None));
        assert!(Compare::parse(b"NX", b"x").is_none());
        for bad in ["", "xyz", "00000000000000000"] {
            assert!(
                matches!(Compare::parse(b"IFDEQ", bad.as_bytes()), Some(Err(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn digests_are_xxh3_in_sixteen_hex_digits() {
        // XXH3-64 of the empty string, as xxHash publishes it.
        assert_eq!(digest_hex(b""), "2d06800538d394c2");
        assert_eq!(digest_hex(b"hello world"), "d447b1ea40e6988b");
    }

    #[test]
    fn delex_takes_one_condition_or_none() {
        assert_eq!(delex_args(&[]), Ok(None));
        let two = [b"IFEQ".to_vec(), b"v".to_vec()];
        assert_eq!(delex_args(&two), Ok(Some(Compare::Eq(b"v".to_vec()))));
        assert!(delex_args(&[b"IFEQ".to_vec()]).is_err());
        assert!(delex_args(&[b"NX".to_vec(), b"v".to_vec()]).is_err());
    }
}
