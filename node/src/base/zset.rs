//! Sorted sets, as pure rules: a key's sorted set is one register of its
//! partition (column [`COLUMN`]), changed only through agreement as a
//! string is, so every change and read of it is linearizable through any
//! node. Its value is the members and their scores, sorted by score, then
//! member, as Redis orders them; the register's deadline is the set's.
//!
//! A set travels whole in every round: it is as large as a string may be
//! ([`STRING_BYTES_MAX`]), enough for the semaphores, rate-limit windows
//! and small leaderboards that need agreement, not for a million members.

use std::cmp::Ordering;

use tally_net::wire::{Register, Registers, STRING_BYTES_MAX};

/// The column of a key's sorted set (a reserved one: no client names it;
/// the round history is `\xff\xffrounds`).
pub(crate) const COLUMN: &[u8] = b"\xff\xffzset";

/// The first byte of an encoded set: its format.
const FORMAT: u8 = 1;

/// One member and its score.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Entry {
    pub(crate) score: f64,
    pub(crate) member: Vec<u8>,
}

/// Redis' order: by score, then by member, bytewise.
fn order(a: (f64, &[u8]), b: (f64, &[u8])) -> Ordering {
    a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1))
}

/// A sorted set: its entries in Redis' order, each member once.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ZSet {
    entries: Vec<Entry>,
}

/// One end of a score range: `1.5`, `(1.5` (open), `-inf`, `+inf`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Bound {
    pub(crate) score: f64,
    pub(crate) open: bool,
}

impl Bound {
    /// Parses Redis' syntax of a range end.
    pub(crate) fn parse(arg: &[u8]) -> Option<Bound> {
        let (open, rest) = match arg.strip_prefix(b"(") {
            Some(rest) => (true, rest),
            None => (false, arg),
        };
        Some(Bound {
            score: parse_score(rest)?,
            open,
        })
    }

    fn below_or_at(self, score: f64) -> bool {
        match self.open {
            true => self.score < score,
            false => self.score <= score,
        }
    }

    fn above_or_at(self, score: f64) -> bool {
        match self.open {
            true => score < self.score,
            false => score <= self.score,
        }
    }
}

/// A score as Redis reads one: a decimal or `inf`, `+inf`, `-inf`; never
/// NaN. `-0` is `0`.
pub(crate) fn parse_score(arg: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(arg).ok()?;
    let lower = s.to_ascii_lowercase();
    let v = match lower.as_str() {
        "inf" | "+inf" => f64::INFINITY,
        "-inf" => f64::NEG_INFINITY,
        _ if lower.contains("inf") || lower.contains("nan") => return None,
        _ => s.parse::<f64>().ok()?,
    };
    (!v.is_nan()).then_some(v + 0.0)
}

/// What `ZADD`'s options ask.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct AddOnly {
    /// `NX`: only new members.
    pub(crate) new: bool,
    /// `XX`: only members already there.
    pub(crate) existing: bool,
    /// `GT`: only a greater score.
    pub(crate) greater: bool,
    /// `LT`: only a lesser score.
    pub(crate) less: bool,
}

/// What one `ZADD` of a member did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Added {
    /// The member is new.
    New(f64),
    /// Its score changed.
    Changed(f64),
    /// Its score was already this one.
    Same(f64),
    /// The options refused it.
    Skipped,
}

impl ZSet {
    /// The set of `registers` (live at `now_ms`): empty when there is none;
    /// an error for bytes no proposer writes.
    pub(crate) fn of(registers: &Registers, now_ms: u64) -> Result<ZSet, String> {
        match registers.get(COLUMN, now_ms) {
            Some(r) => ZSet::decode(&r.value),
            None => Ok(ZSet::default()),
        }
    }

    /// Parses an encoded set, checking every rule of the type.
    pub(crate) fn decode(bytes: &[u8]) -> Result<ZSet, String> {
        let corrupt = || "a sorted set's stored bytes do not parse".to_string();
        let (&format, mut rest) = bytes.split_first().ok_or_else(corrupt)?;
        if format != FORMAT {
            return Err(corrupt());
        }
        let mut entries = Vec::new();
        while !rest.is_empty() {
            let (score, tail) = rest.split_at_checked(8).ok_or_else(corrupt)?;
            let (len, tail) = tail.split_at_checked(4).ok_or_else(corrupt)?;
            let score = f64::from_le_bytes(score.try_into().map_err(|_| corrupt())?);
            let len = u32::from_le_bytes(len.try_into().map_err(|_| corrupt())?) as usize;
            let (member, tail) = tail.split_at_checked(len).ok_or_else(corrupt)?;
            let entry = Entry {
                score,
                member: member.to_vec(),
            };
            let sorted = entries.last().is_none_or(|p: &Entry| {
                order((p.score, &p.member), (score, member)) == Ordering::Less
            });
            if score.is_nan() || !sorted {
                return Err(corrupt());
            }
            entries.push(entry);
            rest = tail;
        }
        Ok(ZSet { entries })
    }

    /// The bytes of the set.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + self.size());
        out.push(FORMAT);
        for e in &self.entries {
            out.extend_from_slice(&e.score.to_le_bytes());
            out.extend_from_slice(&(e.member.len() as u32).to_le_bytes());
            out.extend_from_slice(&e.member);
        }
        out
    }

    /// Bytes the encoded entries take.
    fn size(&self) -> usize {
        self.entries.iter().map(|e| 12 + e.member.len()).sum()
    }

    /// Whether the encoded set fits a register.
    pub(crate) fn fits(&self) -> bool {
        self.size() < STRING_BYTES_MAX
    }

    /// `registers` holding this set (none when it is empty), its deadline
    /// `at_ms` (0: none).
    pub(crate) fn store(&self, registers: &Registers, at_ms: u64) -> Registers {
        let mut next = registers.clone();
        match self.entries.is_empty() {
            true => {
                next.remove(COLUMN);
            }
            false => next.put(Register {
                column: COLUMN.to_vec(),
                value: self.encode(),
                at_ms,
            }),
        }
        next
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The entries, in order.
    pub(crate) fn entries(&self) -> &[Entry] {
        &self.entries
    }

    fn find(&self, member: &[u8]) -> Option<usize> {
        self.entries.iter().position(|e| e.member == member)
    }

    /// The score of `member`.
    pub(crate) fn score(&self, member: &[u8]) -> Option<f64> {
        self.find(member).map(|i| self.entries[i].score)
    }

    /// The rank of `member` (0: the lowest score).
    pub(crate) fn rank(&self, member: &[u8]) -> Option<usize> {
        self.find(member)
    }

    /// Puts `member` at `score` (replacing its old score).
    fn put(&mut self, member: &[u8], score: f64) {
        if let Some(i) = self.find(member) {
            self.entries.remove(i);
        }
        let at = self
            .entries
            .partition_point(|e| order((e.score, &e.member), (score, member)) == Ordering::Less);
        self.entries.insert(
            at,
            Entry {
                score,
                member: member.to_vec(),
            },
        );
    }

    /// `ZADD` of one member (`incr`: the score is an increment), as
    /// `only` allows; `Err` for an increment that makes NaN.
    pub(crate) fn add(
        &mut self,
        member: &[u8],
        score: f64,
        only: AddOnly,
        incr: bool,
    ) -> Result<Added, String> {
        let old = self.score(member);
        let new = match (old, incr) {
            (Some(old), true) => old + score,
            _ => score,
        };
        if new.is_nan() {
            return Err("ERR resulting score is not a number (NaN)".into());
        }
        let new = new + 0.0;
        let refused = match old {
            None => only.existing,
            Some(old) => only.new || (only.greater && new <= old) || (only.less && new >= old),
        };
        if refused {
            return Ok(Added::Skipped);
        }
        Ok(match old {
            None => {
                self.put(member, new);
                Added::New(new)
            }
            Some(old) if old == new => Added::Same(new),
            Some(_) => {
                self.put(member, new);
                Added::Changed(new)
            }
        })
    }

    /// Removes `member`; whether it was there.
    pub(crate) fn remove(&mut self, member: &[u8]) -> bool {
        match self.find(member) {
            Some(i) => {
                self.entries.remove(i);
                true
            }
            None => false,
        }
    }

    /// The ranks of the entries scored from `min` to `max`.
    pub(crate) fn by_score(&self, min: Bound, max: Bound) -> std::ops::Range<usize> {
        let start = self.entries.partition_point(|e| !min.below_or_at(e.score));
        let end = self.entries.partition_point(|e| max.above_or_at(e.score));
        start..end.max(start)
    }

    /// The ranks from `start` to `stop` (inclusive; negative from the
    /// end), as Redis clamps them.
    pub(crate) fn by_rank(&self, start: i64, stop: i64) -> std::ops::Range<usize> {
        let len = self.entries.len() as i64;
        let at = |i: i64| if i < 0 { (len + i).max(0) } else { i };
        let (start, stop) = (at(start), at(stop).min(len - 1));
        match start <= stop && start < len {
            true => start as usize..stop as usize + 1,
            false => 0..0,
        }
    }

    /// Removes the entries of ranks `ranks`; how many.
    pub(crate) fn remove_ranks(&mut self, ranks: std::ops::Range<usize>) -> usize {
        let n = ranks.len();
        self.entries.drain(ranks);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(pairs: &[(f64, &str)]) -> ZSet {
        let mut z = ZSet::default();
        for (s, m) in pairs {
            z.add(m.as_bytes(), *s, AddOnly::default(), false).unwrap();
        }
        z
    }

    fn members(z: &ZSet, ranks: std::ops::Range<usize>) -> Vec<String> {
        z.entries()[ranks]
            .iter()
            .map(|e| String::from_utf8_lossy(&e.member).into_owned())
            .collect()
    }

    #[test]
    fn entries_sort_by_score_then_member_and_round_trip() {
        let z = set(&[(2.0, "b"), (1.0, "z"), (2.0, "a"), (f64::NEG_INFINITY, "m")]);
        assert_eq!(members(&z, 0..4), ["m", "z", "a", "b"]);
        assert_eq!(ZSet::decode(&z.encode()), Ok(z.clone()));
        assert_eq!(ZSet::decode(&[FORMAT]), Ok(ZSet::default()));
        // Bytes no proposer writes are refused, never trusted.
        let mut unsorted = z.encode();
        unsorted.truncate(unsorted.len() - 1);
        assert!(ZSet::decode(&unsorted).is_err());
        assert!(ZSet::decode(&[]).is_err());
        assert!(ZSet::decode(&[9]).is_err());
        let mut nan = vec![FORMAT];
        nan.extend_from_slice(&f64::NAN.to_le_bytes());
        nan.extend_from_slice(&0u32.to_le_bytes());
        assert!(ZSet::decode(&nan).is_err());
    }

    #[test]
    fn zadd_options_decide_as_in_redis() {
        let mut z = set(&[(5.0, "a")]);
        let only = |new, existing, greater, less| AddOnly {
            new,
            existing,
            greater,
            less,
        };
        let none = AddOnly::default();
        assert_eq!(z.add(b"a", 5.0, none, false), Ok(Added::Same(5.0)));
        assert_eq!(z.add(b"a", 6.0, none, false), Ok(Added::Changed(6.0)));
        assert_eq!(
            z.add(b"b", 1.0, only(false, true, false, false), false),
            Ok(Added::Skipped)
        );
        assert_eq!(
            z.add(b"a", 9.0, only(true, false, false, false), false),
            Ok(Added::Skipped)
        );
        assert_eq!(
            z.add(b"a", 4.0, only(false, false, true, false), false),
            Ok(Added::Skipped)
        );
        assert_eq!(
            z.add(b"a", 7.0, only(false, false, true, false), false),
            Ok(Added::Changed(7.0))
        );
        assert_eq!(
            z.add(b"a", 8.0, only(false, false, false, true), false),
            Ok(Added::Skipped)
        );
        // GT and LT do not stop new members.
        assert_eq!(
            z.add(b"c", 1.0, only(false, false, true, false), false),
            Ok(Added::New(1.0))
        );
        assert_eq!(z.add(b"a", 3.0, none, true), Ok(Added::Changed(10.0)));
        z.add(b"i", f64::INFINITY, none, false).unwrap();
        assert!(
            z.add(b"i", f64::NEG_INFINITY, none, true).is_err(),
            "inf - inf"
        );
        assert_eq!(z.add(b"n", -0.0, none, false), Ok(Added::New(0.0)));
        assert!(z.score(b"n").unwrap().is_sign_positive());
    }

    #[test]
    fn score_ranges_and_ranks_clamp_as_in_redis() {
        let z = set(&[(1.0, "a"), (2.0, "b"), (3.0, "c"), (4.0, "d")]);
        let b = |s: &str| Bound::parse(s.as_bytes()).unwrap();
        assert_eq!(members(&z, z.by_score(b("2"), b("3"))), ["b", "c"]);
        assert_eq!(members(&z, z.by_score(b("(2"), b("+inf"))), ["c", "d"]);
        assert_eq!(members(&z, z.by_score(b("-inf"), b("(3"))), ["a", "b"]);
        assert!(z.by_score(b("3"), b("2")).is_empty());
        assert!(z.by_score(b("(2"), b("(2")).is_empty());
        assert_eq!(members(&z, z.by_rank(0, -1)), ["a", "b", "c", "d"]);
        assert_eq!(members(&z, z.by_rank(-2, 10)), ["c", "d"]);
        assert_eq!(members(&z, z.by_rank(-10, 0)), ["a"]);
        assert!(z.by_rank(4, 10).is_empty());
        assert!(z.by_rank(2, 1).is_empty());
        assert!(ZSet::default().by_rank(0, -1).is_empty());
        assert_eq!(z.rank(b"c"), Some(2));
        assert_eq!(Bound::parse(b"(x"), None);
        assert_eq!(parse_score(b"nan"), None);
        assert_eq!(parse_score(b"-INF"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_score(b"1e3"), Some(1000.0));
        assert_eq!(parse_score(b"infinity"), None);
    }

    #[test]
    fn a_set_is_stored_in_its_register_and_an_empty_one_is_none() {
        let z = set(&[(1.0, "a")]);
        let r = z.store(&Registers::default(), 99);
        assert_eq!(r.get(COLUMN, 0).map(|r| r.at_ms), Some(99));
        assert_eq!(ZSet::of(&r, 0), Ok(z));
        assert_eq!(ZSet::of(&r, 99), Ok(ZSet::default()), "expired");
        assert_eq!(ZSet::default().store(&r, 0), Registers::default());
    }
}
