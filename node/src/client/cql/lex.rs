//! CQL's tokens: a statement's text cut into words, literals and symbols
//! for the parser.
//!
//! As Cassandra reads them: keywords and unquoted names are
//! case-insensitive (kept lower-cased), a `"quoted"` name keeps its case
//! (`""` inside is one quote), a `'string'` doubles its quotes (`''`),
//! `$$ ... $$` is a string too; `0x...` is a blob; a number may be
//! negative, a float or an exponent; `--` and `//` comment to the line's
//! end, `/* */` across lines. A word that is a UUID (`8-4-4-4-12` hex) is
//! one token. Anything else is a syntax error naming where it stands.

use std::fmt;

/// One token.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Token {
    /// A keyword or an unquoted name, lower-cased.
    Word(String),
    /// A `"quoted"` name, as written.
    Quoted(String),
    Str(String),
    Int(i128),
    Float(f64),
    Blob(Vec<u8>),
    Uuid([u8; 16]),
    /// Punctuation and operators: `( ) , ; . * = < > <= >= != ? : { } [ ] + -`.
    Symbol(&'static str),
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::Word(w) => write!(f, "{w}"),
            Token::Quoted(q) => write!(f, "\"{q}\""),
            Token::Str(s) => write!(f, "'{s}'"),
            Token::Int(i) => write!(f, "{i}"),
            Token::Float(x) => write!(f, "{x}"),
            Token::Blob(b) => write!(
                f,
                "0x{}",
                b.iter().map(|x| format!("{x:02x}")).collect::<String>()
            ),
            Token::Uuid(_) => write!(f, "a uuid"),
            Token::Symbol(s) => write!(f, "{s}"),
        }
    }
}

/// A statement that does not lex, with the offset it stopped at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LexError(pub(crate) String);

const SYMBOLS: [&str; 21] = [
    "<=", ">=", "!=", "(", ")", ",", ";", ".", "*", "=", "<", ">", "?", ":", "{", "}", "[", "]",
    "+", "-", "%",
];

/// Cuts `text` into tokens.
pub(crate) fn lex(text: &str) -> Result<Vec<Token>, LexError> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let rest = &text[i..];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if rest.starts_with("--") || rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if let Some(body) = rest.strip_prefix("/*") {
            let end = body
                .find("*/")
                .ok_or_else(|| LexError(format!("a comment opened at {i} is never closed")))?;
            i += end + 4;
        } else if c == b'\'' {
            let (s, n) = quoted(rest, '\'', i)?;
            out.push(Token::Str(s));
            i += n;
        } else if c == b'"' {
            let (s, n) = quoted(rest, '"', i)?;
            out.push(Token::Quoted(s));
            i += n;
        } else if let Some(body) = rest.strip_prefix("$$") {
            let end = body
                .find("$$")
                .ok_or_else(|| LexError(format!("a $$ string opened at {i} is never closed")))?;
            out.push(Token::Str(body[..end].to_string()));
            i += end + 4;
        } else if let Some((uuid, n)) = uuid(rest) {
            out.push(Token::Uuid(uuid));
            i += n;
        } else if c.is_ascii_digit()
            || (c == b'-' && b.get(i + 1).is_some_and(u8::is_ascii_digit) && !after_value(&out))
        {
            let (t, n) = number(rest, i)?;
            out.push(t);
            i += n;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let n = rest
                .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
                .unwrap_or(rest.len());
            out.push(Token::Word(rest[..n].to_ascii_lowercase()));
            i += n;
        } else if let Some(s) = SYMBOLS.iter().find(|s| rest.starts_with(**s)) {
            out.push(Token::Symbol(s));
            i += s.len();
        } else {
            let ch = rest.chars().next().unwrap_or('?');
            return Err(LexError(format!("unexpected character '{ch}' at {i}")));
        }
    }
    Ok(out)
}

/// Whether a `-` after `out` is a minus between values (`c - 1`), not a
/// negative number's sign (`c = -1`).
fn after_value(out: &[Token]) -> bool {
    // The words a number follows (`USING TTL -1`) are no values.
    const BEFORE_NUMBERS: [&str; 3] = ["ttl", "timestamp", "limit"];
    if let Some(Token::Word(w)) = out.last() {
        return !BEFORE_NUMBERS.iter().any(|k| w.eq_ignore_ascii_case(k));
    }
    matches!(
        out.last(),
        Some(Token::Quoted(_) | Token::Int(_) | Token::Float(_) | Token::Symbol(")" | "?"))
    )
}

/// A literal quoted by `q` at the start of `rest` (a doubled `q` is one):
/// its text and the bytes it took.
fn quoted(rest: &str, q: char, at: usize) -> Result<(String, usize), LexError> {
    let mut out = String::new();
    let mut chars = rest.char_indices().skip(1).peekable();
    while let Some((i, ch)) = chars.next() {
        if ch != q {
            out.push(ch);
        } else if chars.peek().is_some_and(|&(_, next)| next == q) {
            out.push(q);
            chars.next();
        } else {
            return Ok((out, i + 1));
        }
    }
    Err(LexError(format!(
        "a literal opened at {at} is never closed"
    )))
}

/// A number at the start of `rest`: an integer, or a float (a point or an
/// exponent), or a blob (`0x`).
fn number(rest: &str, at: usize) -> Result<(Token, usize), LexError> {
    let bad = || LexError(format!("a malformed number at {at}"));
    if let Some(hex) = rest.strip_prefix("0x").or_else(|| rest.strip_prefix("0X")) {
        let n = hex
            .find(|c: char| !c.is_ascii_hexdigit())
            .unwrap_or(hex.len());
        if n % 2 == 1 {
            return Err(LexError(format!(
                "a blob of an odd number of hex digits at {at}"
            )));
        }
        let bytes = (0..n)
            .step_by(2)
            .map(|k| u8::from_str_radix(&hex[k..k + 2], 16).map_err(|_| bad()))
            .collect::<Result<Vec<u8>, _>>()?;
        return Ok((Token::Blob(bytes), n + 2));
    }
    let mut n = usize::from(rest.starts_with('-'));
    let digits = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    n += digits(&rest[n..]);
    let mut float = false;
    if rest[n..].starts_with('.') && rest[n + 1..].starts_with(|c: char| c.is_ascii_digit()) {
        float = true;
        n += 1 + digits(&rest[n + 1..]);
    }
    if rest[n..].starts_with(['e', 'E']) {
        let sign = usize::from(rest[n + 1..].starts_with(['+', '-']));
        let exp = digits(&rest[n + 1 + sign..]);
        if exp > 0 {
            float = true;
            n += 1 + sign + exp;
        }
    }
    let text = &rest[..n];
    let token = match float {
        true => Token::Float(text.parse().map_err(|_| bad())?),
        false => Token::Int(text.parse().map_err(|_| bad())?),
    };
    Ok((token, n))
}

/// A UUID at the start of `rest` (`8-4-4-4-12` hex digits, not followed
/// by a word's character): its bytes and its length.
fn uuid(rest: &str) -> Option<([u8; 16], usize)> {
    let s = rest.get(..36)?;
    let groups: Vec<&str> = s.split('-').collect();
    let lens: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    if lens != [8, 4, 4, 4, 12]
        || !groups
            .iter()
            .all(|g| g.chars().all(|c| c.is_ascii_hexdigit()))
    {
        return None;
    }
    if rest[36..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let hex: String = groups.concat();
    let mut out = [0u8; 16];
    for (k, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * k..2 * k + 2], 16).ok()?;
    }
    Some((out, 36))
}

#[cfg(test)]
mod tests {
    use super::Token::*;
    use super::*;

    #[test]
    fn a_counter_update_lexes_as_cassandra_reads_it() {
        let t = lex("UPDATE ks.\"MyTable\" SET c = c + ?, d = d - 1 WHERE pk = 'it''s' -- done")
            .unwrap();
        assert_eq!(
            t,
            [
                Word("update".into()),
                Word("ks".into()),
                Symbol("."),
                Quoted("MyTable".into()),
                Word("set".into()),
                Word("c".into()),
                Symbol("="),
                Word("c".into()),
                Symbol("+"),
                Symbol("?"),
                Symbol(","),
                Word("d".into()),
                Symbol("="),
                Word("d".into()),
                Symbol("-"),
                Int(1),
                Word("where".into()),
                Word("pk".into()),
                Symbol("="),
                Str("it's".into()),
            ]
        );
    }

    #[test]
    fn literals_of_every_kind() {
        let t =
            lex("-5 2.5 1e3 0xCAFE $$a'b$$ 123e4567-e89b-12d3-a456-426614174000 <= != /* x */ :v")
                .unwrap();
        assert_eq!(t[0], Int(-5));
        assert_eq!(t[1], Float(2.5));
        assert_eq!(t[2], Float(1000.0));
        assert_eq!(t[3], Blob(vec![0xca, 0xfe]));
        assert_eq!(t[4], Str("a'b".into()));
        assert!(matches!(t[5], Uuid([0x12, 0x3e, ..])));
        assert_eq!(
            &t[6..],
            [Symbol("<="), Symbol("!="), Symbol(":"), Word("v".into())]
        );
        assert_eq!(lex("c = -1").unwrap()[2], Int(-1));
        assert_eq!(lex("c-1").unwrap(), [Word("c".into()), Symbol("-"), Int(1)]);
    }

    #[test]
    fn what_does_not_lex_says_where() {
        for bad in ["'open", "\"open", "/* open", "0xabc", "a # b", "$$ open"] {
            assert!(lex(bad).is_err(), "{bad}");
        }
        assert_eq!(lex("a # b").unwrap_err().0, "unexpected character '#' at 2");
    }
}
