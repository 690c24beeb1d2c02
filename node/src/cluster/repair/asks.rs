//! The digests of a repair, one scan per replica: each replica is asked
//! once for the slices of every group it is in (their ranges are
//! disjoint: a range has one set of replicas), not once a group, and its
//! answer is cut back into each group's part. A node of a ring of six
//! is in up to ten groups: its repair scanned each replica's whole engine
//! ten times for their digests.

use std::collections::HashMap;

/// A group of a repair, as the asks see it: its replicas, and how many
/// ranges it has.
pub(crate) type Group<'a> = (&'a [usize], usize);

/// One request for digests: the node asked, and the groups whose ranges
/// it carries, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ask {
    pub(crate) node: usize,
    pub(crate) groups: Vec<usize>,
}

/// The requests that bring every replica's digests of `groups`: one a
/// node, or as few as keep each within `max_ranges` ranges. A group of
/// more than `max_ranges` ranges goes alone.
pub(crate) fn plan(groups: &[Group<'_>], max_ranges: usize) -> Vec<Ask> {
    let mut nodes: Vec<usize> = groups.iter().flat_map(|g| g.0.iter().copied()).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let mut asks = Vec::new();
    for node in nodes {
        let mut ask = Ask {
            node,
            groups: Vec::new(),
        };
        let mut ranges = 0;
        for (i, (replicas, n)) in groups.iter().enumerate() {
            if !replicas.contains(&node) {
                continue;
            }
            if !ask.groups.is_empty() && ranges + n > max_ranges {
                let full = std::mem::take(&mut ask.groups);
                asks.push(Ask { node, groups: full });
                ranges = 0;
            }
            ask.groups.push(i);
            ranges += n;
        }
        asks.push(ask);
    }
    asks
}

/// How many sums the answer to `ask` holds, at `slices` a range.
pub(crate) fn answer_len(groups: &[Group<'_>], ask: &Ask, slices: usize) -> usize {
    ask.groups.iter().map(|&g| groups[g].1 * slices).sum()
}

/// Cuts `answers` (to `asks`, in order, each [`answer_len`] sums) into
/// each group's digests: one list per replica, in the group's order.
/// `None` if the answers do not cover every replica of every group.
pub(crate) fn split(
    groups: &[Group<'_>],
    asks: &[Ask],
    answers: Vec<Vec<u64>>,
    slices: usize,
) -> Option<Vec<Vec<Vec<u64>>>> {
    let mut parts: HashMap<(usize, usize), Vec<u64>> = HashMap::new();
    for (ask, answer) in asks.iter().zip(answers) {
        if answer.len() != answer_len(groups, ask, slices) {
            return None;
        }
        let mut at = 0;
        for &g in &ask.groups {
            let len = groups[g].1 * slices;
            parts.insert((g, ask.node), answer[at..at + len].to_vec());
            at += len;
        }
    }
    groups
        .iter()
        .enumerate()
        .map(|(g, (replicas, _))| {
            replicas
                .iter()
                .map(|&r| parts.remove(&(g, r)))
                .collect::<Option<Vec<_>>>()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four nodes, three groups of three replicas.
    fn groups() -> Vec<(Vec<usize>, usize)> {
        vec![(vec![0, 1, 2], 2), (vec![0, 1, 3], 1), (vec![0, 2, 3], 3)]
    }

    fn view(groups: &[(Vec<usize>, usize)]) -> Vec<Group<'_>> {
        groups.iter().map(|(r, n)| (r.as_slice(), *n)).collect()
    }

    #[test]
    fn each_replica_is_asked_once_for_every_group_it_is_in() {
        let groups = groups();
        let asks = plan(&view(&groups), 4096);
        let asked: Vec<(usize, Vec<usize>)> =
            asks.iter().map(|a| (a.node, a.groups.clone())).collect();
        assert_eq!(
            asked,
            vec![
                (0, vec![0, 1, 2]),
                (1, vec![0, 1]),
                (2, vec![0, 2]),
                (3, vec![1, 2]),
            ]
        );
        assert_eq!(answer_len(&view(&groups), &asks[0], 10), 60);
    }

    #[test]
    fn asks_stay_within_the_ranges_a_request_may_carry() {
        let groups = groups();
        let asks = plan(&view(&groups), 3);
        let of_0: Vec<Vec<usize>> = asks
            .iter()
            .filter(|a| a.node == 0)
            .map(|a| a.groups.clone())
            .collect();
        assert_eq!(of_0, vec![vec![0, 1], vec![2]]);
        // A group larger than the bound goes alone.
        let of_3: Vec<Vec<usize>> = plan(&view(&groups), 2)
            .into_iter()
            .filter(|a| a.node == 3)
            .map(|a| a.groups)
            .collect();
        assert_eq!(of_3, vec![vec![1], vec![2]]);
    }

    #[test]
    fn answers_are_cut_back_into_each_groups_digests() {
        let groups = groups();
        let view = view(&groups);
        let asks = plan(&view, 4096);
        // Each node answers sums that say whose and which group's they are.
        let answers: Vec<Vec<u64>> = asks
            .iter()
            .map(|a| {
                a.groups
                    .iter()
                    .flat_map(|&g| {
                        let n = view[g].1 * 2;
                        (0..n).map(move |s| (a.node * 100 + g * 10 + s) as u64)
                    })
                    .collect()
            })
            .collect();
        let split = split(&view, &asks, answers, 2).unwrap();
        assert_eq!(split.len(), 3);
        assert_eq!(split[1], vec![vec![10, 11], vec![110, 111], vec![310, 311]]);
        assert_eq!(split[2][1], vec![220, 221, 222, 223, 224, 225]);
    }

    #[test]
    fn an_answer_of_the_wrong_length_or_a_replica_missing_is_refused() {
        let groups = groups();
        let view = view(&groups);
        let asks = plan(&view, 4096);
        let right: Vec<Vec<u64>> = asks
            .iter()
            .map(|a| vec![0; answer_len(&view, a, 2)])
            .collect();
        assert!(split(&view, &asks, right.clone(), 2).is_some());
        let mut short = right.clone();
        short[1].pop();
        assert!(split(&view, &asks, short, 2).is_none());
        assert!(split(&view, &asks[1..], right[1..].to_vec(), 2).is_none());
    }
}
