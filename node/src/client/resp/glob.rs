//! Redis' glob patterns, as `KEYS`, `SCAN MATCH` and `HSCAN MATCH` use
//! them: `*` is any run of bytes, `?` any one byte, `[abc]` one of a set,
//! `[^abc]` one not in it, `[a-z]` a range (its ends in either order) and
//! `\x` the byte `x`, in a set too. Bytes compare exactly, case and all.
//!
//! Sets are read as Redis' `stringmatchlen` reads them. `]` right after
//! `[` closes an empty set. A set the pattern ends in closes there, so
//! `[ab` is `[ab]` and `[^` is `?`. A `\` that ends the pattern is itself.
//!
//! The match never turns exponential, as Redis' did (CVE-2022-36021).
//! Every other item takes exactly one byte, so only the last `*` ever has
//! to take more: on a miss we go back to it and let it take one byte more.
//! That bounds the work by pattern length times text length.
//!
//! Two corners differ from Redis. A pattern of only stars matches the
//! empty text (Redis says no, but `KEYS *` and `SCAN` skip `*` anyway).
//! Range ends compare as unsigned bytes (Redis compares C chars, signed
//! on x86), which matters only for ranges with bytes over 0x7f.

/// Whether `text` matches the glob `pattern`.
pub(crate) fn matches(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // The pattern just after the last `*`, and where in the text it is tried.
    let mut star: Option<(usize, usize)> = None;
    while let Some(&byte) = text.get(t) {
        if pattern.get(p) == Some(&b'*') {
            p += 1;
            star = Some((p, t));
        } else if let Some(next) = one(pattern, p, byte) {
            (p, t) = (next, t + 1);
        } else if let Some((after, from)) = star {
            (p, t) = (after, from + 1);
            star = Some((after, from + 1));
        } else {
            return false;
        }
    }
    pattern.iter().skip(p).all(|&b| b == b'*')
}

/// Whether `pattern` is `*`, which matches everything: callers skip it.
pub(crate) fn matches_all(pattern: &[u8]) -> bool {
    pattern == b"*"
}

/// Where the pattern goes on if its item at `p` (not a `*`) takes `byte`.
fn one(pattern: &[u8], p: usize, byte: u8) -> Option<usize> {
    let (hit, next) = match *pattern.get(p)? {
        b'?' => (true, p + 1),
        b'[' => set(pattern, p + 1, byte),
        b'\\' => match pattern.get(p + 1) {
            Some(&x) => (x == byte, p + 2),
            None => (byte == b'\\', p + 1),
        },
        x => (x == byte, p + 1),
    };
    hit.then_some(next)
}

/// Whether the set opening just before `i` holds `byte`, and where the
/// pattern goes on after it. Mirrors Redis, quirks included: a range's
/// end is taken as is, so `[a-]` is the range from `]` to `a`, unclosed.
fn set(pattern: &[u8], mut i: usize, byte: u8) -> (bool, usize) {
    let not = pattern.get(i) == Some(&b'^');
    if not {
        i += 1;
    }
    let mut hit = false;
    loop {
        match (pattern.get(i), pattern.get(i + 1), pattern.get(i + 2)) {
            (None, _, _) => break,
            (Some(b']'), _, _) => {
                i += 1;
                break;
            }
            (Some(b'\\'), Some(&x), _) => {
                hit |= x == byte;
                i += 2;
            }
            (Some(&a), Some(b'-'), Some(&b)) => {
                hit |= (a.min(b)..=a.max(b)).contains(&byte);
                i += 3;
            }
            (Some(&x), _, _) => {
                hit |= x == byte;
                i += 1;
            }
        }
    }
    (hit != not, i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, text: &str) -> bool {
        matches(pattern.as_bytes(), text.as_bytes())
    }

    #[test]
    fn literals_and_question_marks() {
        assert!(m("hello", "hello"));
        assert!(!m("hello", "hell"));
        assert!(!m("hell", "hello"));
        assert!(!m("Hello", "hello"));
        assert!(m("h?llo", "hallo"));
        assert!(!m("h?llo", "hllo"));
        assert!(m("???", "abc"));
        assert!(!m("???", "ab"));
    }

    #[test]
    fn stars_take_any_run() {
        assert!(m("*", "anything"));
        assert!(m("*llo", "hello"));
        assert!(m("he*", "hello"));
        assert!(m("he*", "he"));
        assert!(m("h*o", "hello"));
        assert!(m("h*o", "ho"));
        assert!(!m("h*o", "hellx"));
        assert!(m("user:*:name", "user:42:name"));
        assert!(!m("user:*:name", "user:42:names"));
        assert!(m("*a*b*c*", "xxaxxbxxcxx"));
        assert!(!m("*a*b*c*", "xxcxxbxxaxx"));
        assert!(m("a**b", "ab"));
        assert!(m("*?", "x"));
        assert!(!m("*?", ""));
        // The last star backs off when a later item misses.
        assert!(m("*ab", "aab"));
        assert!(m("*a?c", "abacabc"));
    }

    #[test]
    fn empty_pattern_and_text() {
        assert!(m("", ""));
        assert!(!m("", "a"));
        assert!(!m("a", ""));
        assert!(!m("?", ""));
        assert!(!m("[a]", ""));
        // Redis says no to these; see the module doc.
        assert!(m("*", ""));
        assert!(m("**", ""));
    }

    #[test]
    fn sets_and_negated_sets() {
        assert!(m("h[ae]llo", "hello"));
        assert!(m("h[ae]llo", "hallo"));
        assert!(!m("h[ae]llo", "hillo"));
        assert!(m("h[^e]llo", "hallo"));
        assert!(!m("h[^e]llo", "hello"));
        assert!(!m("h[^e]llo", "hllo"));
        // `]` right after `[` closes the set: `[]` holds nothing, `[^]` all.
        assert!(!m("[]", "]"));
        assert!(!m("[]a]", "a"));
        assert!(!m("[]a]", "]"));
        assert!(!m("[]a]", "]a]"));
        assert!(m("[^]", "x"));
        assert!(m("x[^]", "x]"));
    }

    #[test]
    fn ranges_in_either_order() {
        assert!(m("h[a-b]llo", "hallo"));
        assert!(m("h[a-b]llo", "hbllo"));
        assert!(!m("h[a-b]llo", "hello"));
        assert!(m("[z-a]", "m"));
        assert!(m("[0-9a-f]", "c"));
        assert!(!m("[0-9a-f]", "g"));
        assert!(!m("[^0-9]", "5"));
        assert!(m("[^0-9]", "x"));
        // A `-` that cannot start a range is itself.
        assert!(m("[-a]", "-"));
        assert!(m("[a-]x", "x"));
        // But a range may end with the `]`: `[a-]` is the range from `]`
        // to `a`, and the set is then unclosed, as in Redis.
        assert!(m("[a-]", "_"));
        assert!(m("[a-]", "]"));
        assert!(!m("[a-]", "-"));
        assert!(!m("[ab-]", "-"));
        assert!(!m("[a-]x", "-x"));
    }

    #[test]
    fn escapes() {
        assert!(m("\\*", "*"));
        assert!(!m("\\*", "a"));
        assert!(m("a\\?", "a?"));
        assert!(!m("a\\?", "ab"));
        assert!(m("\\[a]", "[a]"));
        assert!(!m("\\[a]", "a"));
        assert!(m("\\a", "a"));
        assert!(m("\\\\", "\\"));
        // In a set an escaped byte is itself and starts no range.
        assert!(m("[\\]]", "]"));
        assert!(m("[\\^a]", "^"));
        assert!(m("[\\a-z]", "-"));
        assert!(!m("[\\a-z]", "m"));
        assert!(m("[a\\-z]", "-"));
        assert!(!m("[a\\-z]", "m"));
    }

    #[test]
    fn a_trailing_backslash_is_itself() {
        assert!(m("a\\", "a\\"));
        assert!(!m("a\\", "a"));
        assert!(!m("a\\", "ab"));
        assert!(m("\\", "\\"));
        // In an unclosed set, too.
        assert!(m("[a\\", "\\"));
        assert!(m("[a\\", "a"));
    }

    #[test]
    fn an_unclosed_set_ends_with_the_pattern() {
        assert!(m("[abc", "a"));
        assert!(m("[abc", "c"));
        assert!(!m("[abc", "d"));
        assert!(!m("[abc", "ab"));
        assert!(m("x[a-c", "xb"));
        assert!(m("[^a", "b"));
        assert!(!m("[^a", "a"));
        assert!(!m("[", "["));
        assert!(!m("[", ""));
        assert!(m("[^", "q"));
        assert!(!m("[^", "qq"));
        assert!(!m("*[", "x"));
        assert!(!m("*[", "x["));
    }

    #[test]
    fn bytes_are_not_utf8() {
        assert!(matches(b"\xff*", b"\xff\x00\x80"));
        assert!(matches(b"[\x80-\xff]", b"\xc0"));
        assert!(!matches(b"[\x80-\xff]", b"a"));
        assert!(matches(b"?", b"\x00"));
    }

    #[test]
    fn pathological_patterns_stay_linear() {
        let pattern = format!("{}b", "*a".repeat(50));
        let many = "a".repeat(10_000);
        assert!(!m(&pattern, &many));
        assert!(m(&pattern, &format!("{many}b")));
        assert!(!m(&pattern, &format!("{}b", "a".repeat(49))));
        assert!(m(&pattern, &format!("{}b", "a".repeat(50))));
        assert!(!m(&pattern, &format!("{many}bc")));
        // Redis' own regression test for CVE-2022-36021.
        let redis = format!("{}b", "a*".repeat(20));
        assert!(!m(&redis, &"a".repeat(40)));
    }

    #[test]
    fn only_a_lone_star_matches_all() {
        assert!(matches_all(b"*"));
        assert!(!matches_all(b"**"));
        assert!(!matches_all(b"a*"));
        assert!(!matches_all(b""));
        assert!(!matches_all(b"\\*"));
    }
}
