//! A command's words, read one by one: node names, keys, numbers, levels,
//! durations. Whatever a command leaves unread is an error, so that a
//! mistyped option fails the script instead of being ignored.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use tally_net::wire::{Consistency, WireRange};

use super::parse::Command;

/// The words of one command, taken as it reads them.
pub struct Words {
    name: String,
    args: std::vec::IntoIter<String>,
    options: BTreeMap<String, String>,
}

impl Words {
    /// The words of `command`.
    pub fn of(command: &Command) -> Words {
        Words {
            name: command.name.clone(),
            args: command.args.clone().into_iter(),
            options: command.options.clone(),
        }
    }

    /// The next positional word.
    pub fn next(&mut self, what: &str) -> Result<String> {
        self.args
            .next()
            .ok_or_else(|| self.error(format!("wants {what}")))
    }

    /// The next positional word, if there is one.
    pub fn next_maybe(&mut self) -> Option<String> {
        self.args.next()
    }

    /// The next word as a node (`n1` is node 0) of a cluster of `nodes`.
    pub fn node(&mut self, nodes: usize) -> Result<usize> {
        let word = self.next("a node (n1, n2, ...)")?;
        node(&word, nodes).map_err(|e| self.error(e))
    }

    /// The next word as a number.
    pub fn number<T: std::str::FromStr>(&mut self, what: &str) -> Result<T> {
        let word = self.next(what)?;
        word.parse()
            .map_err(|_| self.error(format!("{word:?} is not {what}")))
    }

    /// Option `name`, if given.
    pub fn option(&mut self, name: &str) -> Option<String> {
        self.options.remove(name)
    }

    /// Option `name` parsed, or `default`.
    pub fn option_or<T: std::str::FromStr>(&mut self, name: &str, default: T) -> Result<T> {
        match self.options.remove(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| self.error(format!("{name}={v} is not a valid {name}"))),
        }
    }

    /// The consistency level of option `cl`, QUORUM if not given.
    pub fn level(&mut self) -> Result<Consistency> {
        match self.options.remove("cl") {
            None => Ok(Consistency::Quorum),
            Some(v) => level(&v).map_err(|e| self.error(e)),
        }
    }

    /// Every option left, in name order (a command that takes any).
    pub fn rest(&mut self) -> BTreeMap<String, String> {
        std::mem::take(&mut self.options)
    }

    /// The positional words left, all of them.
    pub fn rest_words(&mut self) -> Vec<String> {
        self.args.by_ref().collect()
    }

    /// Ends the reading: anything left unread is an error.
    pub fn done(mut self) -> Result<()> {
        if let Some(extra) = self.args.next() {
            return Err(self.error(format!("does not take {extra:?}")));
        }
        if let Some(name) = self.options.keys().next() {
            return Err(self.error(format!("has no option {name}")));
        }
        Ok(())
    }

    fn error(&self, what: impl std::fmt::Display) -> anyhow::Error {
        anyhow!("{}: {what}", self.name)
    }
}

/// Node `n<i>` of `nodes`, as an index from 0.
pub fn node(word: &str, nodes: usize) -> Result<usize, String> {
    let i: usize = word
        .strip_prefix('n')
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("{word:?} is not a node (n1, n2, ...)"))?;
    match (1..=nodes).contains(&i) {
        true => Ok(i - 1),
        false => Err(format!("there is no node {word} (n1 to n{nodes})")),
    }
}

/// A consistency level, as `tally` spells it.
pub fn level(word: &str) -> Result<Consistency, String> {
    match word.to_ascii_lowercase().as_str() {
        "one" => Ok(Consistency::One),
        "quorum" => Ok(Consistency::Quorum),
        "all" => Ok(Consistency::All),
        "serial" => Ok(Consistency::Serial),
        _ => Err(format!(
            "{word:?} is not a level (one, quorum, all, serial)"
        )),
    }
}

/// A duration: `250ms`, `3s`, `2m`.
pub fn duration(word: &str) -> Result<Duration> {
    let (number, unit) = word.split_at(
        word.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(word.len()),
    );
    let n: u64 = number
        .parse()
        .with_context(|| format!("{word:?} is not a duration (250ms, 3s, 2m)"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => n
            .checked_mul(60)
            .map(Duration::from_secs)
            .ok_or_else(|| anyhow!("{word:?} is too long")),
        _ => bail!("{word:?} is not a duration (250ms, 3s, 2m)"),
    }
}

/// The most keys one run names.
const KEYS_MAX: u64 = 100_000;

/// The keys a word names: `k` is one, `k{0..30}` thirty (`k0` to `k29`).
pub fn keys(word: &str) -> Result<Vec<String>> {
    let Some((stem, range)) = word.split_once('{') else {
        return Ok(vec![word.to_string()]);
    };
    let bad = || anyhow!("{word:?}: write a run of keys as k{{0..30}}");
    let (range, rest) = range.split_once('}').ok_or_else(bad)?;
    let (from, to) = range.split_once("..").ok_or_else(bad)?;
    let (from, to): (u64, u64) = (
        from.parse().map_err(|_| bad())?,
        to.parse().map_err(|_| bad())?,
    );
    if from >= to || !rest.is_empty() {
        return Err(bad());
    }
    if to - from > KEYS_MAX {
        bail!("{word:?}: at most {KEYS_MAX} keys in a run");
    }
    Ok((from..to).map(|i| format!("{stem}{i}")).collect())
}

/// Answers for the keys `word` names on one line, keys that answered
/// alike in a row together: `k{0..200}: 3, k{200..300}: 2`.
pub fn per_key(word: &str, answers: &[String]) -> String {
    let Some((stem, range)) = word.split_once('{') else {
        return answers.join(", ");
    };
    let from: usize = range
        .split_once("..")
        .and_then(|(f, _)| f.parse().ok())
        .unwrap_or(0);
    let mut parts = Vec::new();
    let mut start = 0;
    for i in 1..=answers.len() {
        if i == answers.len() || answers[i] != answers[start] {
            let keys = match i - start {
                1 => format!("{stem}{}", from + start),
                _ => format!("{stem}{{{}..{}}}", from + start, from + i),
            };
            parts.push(format!("{keys}: {}", answers[start]));
            start = i;
        }
    }
    parts.join(", ")
}

/// A token range `START:END` (start exclusive, end inclusive), `min` and
/// `max` for the ends of the ring.
pub fn range(word: &str) -> Result<WireRange> {
    let token = |t: &str| match t {
        "min" => Ok(i64::MIN),
        "max" => Ok(i64::MAX),
        t => t.parse().map_err(|_| anyhow!("{t:?} is not a token")),
    };
    let (start, end) = word
        .split_once(':')
        .ok_or_else(|| anyhow!("range={word}: write START:END (min:0)"))?;
    Ok(WireRange {
        start: token(start)?,
        end: token(end)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::parse::parse;

    fn command(text: &str) -> Command {
        parse(&format!("{text}\n----\n")).unwrap().blocks[0].commands[0].clone()
    }

    #[test]
    fn words_read_in_order_and_leftovers_are_errors() {
        let mut w = Words::of(&command("add n2 k 5 cl=all"));
        assert_eq!(w.node(3).unwrap(), 1);
        assert_eq!(w.next("a key").unwrap(), "k");
        assert_eq!(w.number::<i64>("a delta").unwrap(), 5);
        assert_eq!(w.level().unwrap(), Consistency::All);
        w.done().unwrap();
        let mut w = Words::of(&command("add n1 k 5 cll=all"));
        for _ in 0..3 {
            w.next("a word").unwrap();
        }
        let e = w.done().unwrap_err().to_string();
        assert_eq!(e, "add: has no option cll");
    }

    #[test]
    fn nodes_levels_and_durations_are_checked() {
        assert_eq!(node("n3", 3), Ok(2));
        assert!(node("n4", 3).unwrap_err().contains("no node n4"));
        assert!(node("x1", 3).is_err());
        assert!(node("n0", 3).is_err());
        assert_eq!(level("ALL"), Ok(Consistency::All));
        assert!(level("two").is_err());
        assert_eq!(duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(duration("3s").unwrap(), Duration::from_secs(3));
        assert_eq!(duration("2m").unwrap(), Duration::from_secs(120));
        assert!(duration("3h").is_err());
        assert!(duration("s").is_err());
    }

    #[test]
    fn a_run_of_keys_expands_and_answers_on_one_line() {
        assert_eq!(keys("k").unwrap(), vec!["k"]);
        assert_eq!(keys("k{2..5}").unwrap(), vec!["k2", "k3", "k4"]);
        for bad in ["k{5..2}", "k{1..x}", "k{1..3", "k{1..3}x"] {
            assert!(keys(bad).is_err(), "{bad}");
        }
        let answers = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(per_key("k{0..3}", &answers(&["5", "5", "5"])), "k{0..3}: 5");
        assert_eq!(
            per_key("k{4..9}", &answers(&["5", "6", "6", "5", "5"])),
            "k4: 5, k{5..7}: 6, k{7..9}: 5"
        );
        assert_eq!(per_key("k", &answers(&["7"])), "7");
        let r = range("min:0").unwrap();
        assert_eq!((r.start, r.end), (i64::MIN, 0));
        assert!(range("0").is_err() && range("a:b").is_err());
    }
}
