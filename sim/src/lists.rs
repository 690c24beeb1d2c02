//! Lists in the simulation, as the chaos run has them: each client owns
//! its lists and `RPUSH`es increasing values onto them through random
//! nodes at QUORUM, one push at a time, [`PUSHES_PER_LIST`] to a list. A
//! push is acknowledged, certainly not applied (not recorded), or of
//! unknown outcome; it is never retried. After healing every list is read
//! at ALL through every member and judged by the chaos harness's list
//! checker: nothing acknowledged lost, nothing invented or doubled, the
//! acknowledged in push order.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tally_net::Outcome;
use tally_net::list::{End, ListChange};
use tally_net::wire::{Consistency, WireKey};
use tally_tests::checker::lists::{Push, judge};

use crate::cluster::Cluster;
use crate::trace;
use crate::world::{Stream, stream};

/// Pushes onto one list before the client starts the next.
const PUSHES_PER_LIST: u64 = 100;
/// How long a client waits for an answer.
const TIMEOUT: Duration = Duration::from_secs(5);

/// The pushes onto each list, in the order made.
pub type Lists = BTreeMap<String, Vec<Push>>;

/// The list client `id` pushes its `value` onto.
fn list_name(id: usize, value: u64) -> String {
    format!("sim-list-{id}-{}", value / PUSHES_PER_LIST)
}

/// List client `id`: pushes until `until`.
pub async fn client(
    id: usize,
    cluster: Arc<Cluster>,
    seed: u64,
    until: tally_world::Instant,
) -> Lists {
    let mut rng = SmallRng::seed_from_u64(stream(seed, Stream::Client(id as u64)));
    let mut lists = Lists::new();
    let mut value = 0u64;
    while tally_world::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(rng.random_range(5..60))).await;
        let at = rng.random_range(0..cluster.len());
        let Some(node) = cluster.serving(at) else {
            continue;
        };
        let name = list_name(id, value);
        let change = ListChange::Push {
            end: End::Right,
            values: vec![value.to_string().into_bytes()],
            only_existing: false,
        };
        let key = WireKey::new(name.as_bytes(), b"");
        let pushed =
            tokio::time::timeout(TIMEOUT, node.change_list(&key, change, Consistency::Quorum))
                .await;
        let acked = match pushed {
            Ok(Ok(_)) => Some(true),
            Ok(Err(e)) if e.outcome == Outcome::NotApplied => None,
            _ => Some(false),
        };
        trace!(
            "list client {id}: push {value} onto {name} via n{} -> {acked:?}",
            at + 1
        );
        if let Some(acked) = acked {
            lists.entry(name).or_default().push(Push { value, acked });
        }
        value += 1;
    }
    lists
}

/// Every list read at ALL through every member, after healing, and
/// judged: what is wrong.
pub async fn check(cluster: &Cluster, lists: &Lists) -> Vec<String> {
    let mut violations = Vec::new();
    for n in cluster.membership().members {
        let Some(node) = cluster.node(n) else {
            continue;
        };
        for (name, pushes) in lists {
            let key = WireKey::new(name.as_bytes(), b"");
            let got = match node.get_cell(&key, Consistency::All).await {
                Ok(cell) => cell
                    .list()
                    .map(|l| numbers(l.elements()))
                    .unwrap_or_default(),
                Err(e) => {
                    violations.push(format!(
                        "the final read of {name} through n{} failed: {e}",
                        n + 1
                    ));
                    continue;
                }
            };
            if let Some(why) = judge(pushes, &got) {
                violations.push(format!("list {name} read through n{}: {why}", n + 1));
            }
        }
    }
    violations
}

/// A list's elements as the numbers pushed (`u64::MAX` for one that is
/// none, which no push made).
fn numbers(elements: &[Vec<u8>]) -> Vec<u64> {
    let number = |e: &Vec<u8>| std::str::from_utf8(e).ok()?.parse().ok();
    elements
        .iter()
        .map(|e| number(e).unwrap_or(u64::MAX))
        .collect()
}
