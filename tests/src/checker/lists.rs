//! The judgement of a list (see `chaos::lists`): one writer pushed
//! increasing values onto it, one at a time, each acknowledged or of
//! unknown outcome; the list every node reads at ALL after healing must be
//! explained by them:
//!
//! - every element is a value pushed to it, once;
//! - every acknowledged push is in it (an acknowledged write is never lost);
//! - the acknowledged ones are in the order they were pushed.
//!
//! A push of unknown outcome may be anywhere, or nowhere: its leader may
//! have made it after later pushes were made elsewhere.

use std::collections::{BTreeMap, BTreeSet};

/// One push: its value and whether it was acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Push {
    /// The value, increasing from push to push.
    pub value: u64,
    /// Acknowledged (else its outcome is unknown).
    pub acked: bool,
}

/// What is wrong with `got` (the list read, head first) as the result of
/// `pushes` (in the order made, RPUSHed); `None` when it is explained.
pub fn judge(pushes: &[Push], got: &[u64]) -> Option<String> {
    let pushed: BTreeMap<u64, bool> = pushes.iter().map(|p| (p.value, p.acked)).collect();
    let mut seen = BTreeSet::new();
    for v in got {
        if !pushed.contains_key(v) {
            return Some(format!("holds {v}, which was never pushed"));
        }
        if !seen.insert(*v) {
            return Some(format!("holds {v} twice"));
        }
    }
    if let Some(lost) = pushes.iter().find(|p| p.acked && !seen.contains(&p.value)) {
        return Some(format!("lost the acknowledged push of {}", lost.value));
    }
    let acked: Vec<u64> = got.iter().copied().filter(|v| pushed[v]).collect();
    if let Some(w) = acked.windows(2).find(|w| w[0] > w[1]) {
        return Some(format!(
            "holds the acknowledged {} before {}, pushed in the other order",
            w[0], w[1]
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pushes(spec: &str) -> Vec<Push> {
        // "1 2? 3": 2's outcome unknown.
        spec.split_whitespace()
            .map(|w| Push {
                value: w.trim_end_matches('?').parse().unwrap(),
                acked: !w.ends_with('?'),
            })
            .collect()
    }

    #[test]
    fn a_list_is_explained_by_its_pushes_or_says_what_is_wrong() {
        let p = pushes("1 2? 3 4? 5");
        assert_eq!(judge(&p, &[1, 2, 3, 4, 5]), None);
        assert_eq!(judge(&p, &[1, 3, 5]), None, "unknown ones may be missing");
        assert_eq!(judge(&p, &[1, 3, 2, 5]), None, "or made late");
        assert_eq!(
            judge(&p, &[1, 5]).unwrap(),
            "lost the acknowledged push of 3"
        );
        assert_eq!(
            judge(&p, &[1, 3, 5, 9]).unwrap(),
            "holds 9, which was never pushed"
        );
        assert_eq!(judge(&p, &[1, 3, 3, 5]).unwrap(), "holds 3 twice");
        assert_eq!(
            judge(&p, &[3, 1, 5]).unwrap(),
            "holds the acknowledged 3 before 1, pushed in the other order"
        );
        assert_eq!(judge(&[], &[]), None);
    }
}
