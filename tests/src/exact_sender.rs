//! How an exact worker sends an add with an operation id, whatever
//! carries it (a client connection in the chaos run, a node's own call in
//! the simulation): it retries the add, with the same id and delta,
//! through random nodes until it is known (acknowledged, or refused for
//! good). A retry through another coordinator races the original still
//! in flight, which is the point. On purpose, too, some adds are sent
//! through two different nodes at once, and some are sent again through
//! another node after their acknowledgement (a client that never saw
//! it): a correct cluster answers those as duplicates, with the original
//! value, and counts nothing. [`crate::checker::exact`] judges the adds.

use std::future::Future;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tally_net::Outcome;
use tally_net::once::OpId;
use tally_net::wire::{Consistency, ErrorKind, WireError};

use crate::checker::exact::{Ended, IdAdd};

/// The share of adds sent through two nodes at once.
const RACE_SHARE: f64 = 0.1;
/// The share of acknowledged adds sent again through another node.
const RESEND_SHARE: f64 = 0.05;

const LEVELS: [Consistency; 3] = [Consistency::One, Consistency::Quorum, Consistency::All];

/// How a worker reaches the nodes.
pub trait Nodes {
    /// How many nodes it may send through.
    fn count(&self) -> usize;

    /// Gets ready to send through `node` (connects, if it has to).
    fn ready(&mut self, node: usize) -> impl Future<Output = ()>;

    /// One send of `add` through `node` at `cl`: what the node answered,
    /// or `None` if it could not be asked (down, not connected). A send
    /// that had no answer is an error of unknown outcome.
    fn send(
        &self,
        node: usize,
        add: &IdAdd,
        cl: Consistency,
    ) -> impl Future<Output = Option<Result<i64, WireError>>>;

    /// Whether the workload has ended: no add is sent again on purpose.
    fn stopped(&self) -> bool;

    /// Whether an add still unknown must be given up (the workload ended
    /// long enough ago); it records it unknown.
    fn give_up(&mut self) -> bool;

    /// The wait before a retry.
    fn backoff(&self) -> impl Future<Output = ()>;
}

/// What one send of an add tells: known (acknowledged, refused for good,
/// or never to be known) or nothing (`None`: retry the same id).
pub fn classify(result: &Result<i64, WireError>) -> Option<Ended> {
    let e = match result {
        Ok(v) => return Some(Ended::Acked(*v)),
        Err(e) => e,
    };
    match e.kind {
        // Past the retention window: no retry will ever know.
        ErrorKind::IdExpired => Some(Ended::Unknown),
        ErrorKind::Invalid | ErrorKind::Overflow | ErrorKind::IdConflict
            if e.outcome == Outcome::NotApplied =>
        {
            Some(Ended::Refused(e.to_string()))
        }
        // Unavailable, a node that cannot write, a timeout, a lost connection.
        _ => None,
    }
}

/// A node other than `avoid` (any node if there is no other).
pub fn other_node(rng: &mut SmallRng, nodes: usize, avoid: usize) -> usize {
    match nodes {
        0 | 1 => 0,
        n => (avoid + rng.random_range(1..n)) % n,
    }
}

/// A small delta, negatives included, never 0 (a 0 would hide a double count).
fn small_delta(rng: &mut SmallRng) -> i64 {
    match rng.random_range(-3..=8) {
        d if d >= 0 => d + 1,
        d => d,
    }
}

/// One worker's sender: its nodes and its randomness.
pub struct Sender<N> {
    /// How it reaches the nodes.
    pub nodes: N,
    /// Every choice it makes.
    pub rng: SmallRng,
}

impl<N: Nodes> Sender<N> {
    /// A sender through `nodes`, its choices drawn from `seed`.
    pub fn new(nodes: N, seed: u64) -> Sender<N> {
        Sender {
            nodes,
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// The next add, with id `id`, to one of `keys` exact keys: a small
    /// delta, and whether it races a twin.
    pub fn next(&mut self, id: OpId, keys: usize) -> IdAdd {
        IdAdd {
            key: self.rng.random_range(0..keys),
            id,
            delta: small_delta(&mut self.rng),
            ended: Ended::Unknown,
            attempts: 0,
            raced: self.rng.random_bool(RACE_SHARE),
            resent: false,
            again: Vec::new(),
        }
    }

    /// Sends `add` until it knows (raced on its first send if it says
    /// so), then perhaps once more through another node; answers it with
    /// what it learned.
    pub async fn add(&mut self, mut add: IdAdd) -> IdAdd {
        let mut known = None;
        if add.raced {
            add.attempts = 1;
            let (first, twin) = self.race(&add).await;
            add.again.extend(twin);
            known = first;
        }
        let (node, ended) = match known {
            Some(known) => known,
            None => {
                let (node, ended, attempts) = self.until_known(&add, None).await;
                add.attempts += attempts;
                (node, ended)
            }
        };
        add.ended = ended;
        let acked = matches!(add.ended, Ended::Acked(_));
        if acked && !self.nodes.stopped() && self.rng.random_bool(RESEND_SHARE) {
            add.resent = true;
            let (_, again, _) = self.until_known(&add, Some(node)).await;
            add.again.push(again);
        }
        add
    }

    /// Sends `add` through two different nodes at once: the node and
    /// outcome of the first send that knew, and what the other one knew.
    async fn race(&mut self, add: &IdAdd) -> (Option<(usize, Ended)>, Option<Ended>) {
        let n = self.nodes.count();
        let a = self.rng.random_range(0..n);
        let b = other_node(&mut self.rng, n, a);
        self.nodes.ready(a).await;
        self.nodes.ready(b).await;
        let (cl_a, cl_b) = (self.level(), self.level());
        let (ra, rb) = tokio::join!(self.send(a, add, cl_a), self.send(b, add, cl_b));
        match (ra, rb) {
            (Some(known), twin) => (Some((a, known)), twin),
            (None, known) => (known.map(|k| (b, k)), None),
        }
    }

    /// Sends `add` through random nodes (never `avoid`) until one send
    /// knows: the node, the outcome, and the sends it took. Unknown (and
    /// node 0) once the nodes say to give up.
    async fn until_known(&mut self, add: &IdAdd, avoid: Option<usize>) -> (usize, Ended, u32) {
        let n = self.nodes.count();
        let mut attempts = 0;
        loop {
            if attempts > 0 {
                self.nodes.backoff().await;
            }
            if self.nodes.give_up() {
                return (0, Ended::Unknown, attempts);
            }
            attempts += 1;
            let node = match avoid {
                Some(a) => other_node(&mut self.rng, n, a),
                None => self.rng.random_range(0..n),
            };
            self.nodes.ready(node).await;
            let cl = self.level();
            if let Some(ended) = self.send(node, add, cl).await {
                return (node, ended, attempts);
            }
        }
    }

    /// A random consistency level.
    fn level(&mut self) -> Consistency {
        LEVELS[self.rng.random_range(0..LEVELS.len())]
    }

    async fn send(&self, node: usize, add: &IdAdd, cl: Consistency) -> Option<Ended> {
        classify(&self.nodes.send(node, add, cl).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_knows_only_an_ack_or_a_refusal_for_good() {
        assert_eq!(classify(&Ok(-4)), Some(Ended::Acked(-4)));
        for kind in [
            ErrorKind::IdConflict,
            ErrorKind::Invalid,
            ErrorKind::Overflow,
        ] {
            let known = classify(&Err(WireError::not_applied(kind, "no")));
            assert!(
                matches!(known, Some(Ended::Refused(_))),
                "{kind:?}: {known:?}"
            );
        }
        let expired = WireError::unknown(ErrorKind::IdExpired, "too old");
        assert_eq!(classify(&Err(expired)), Some(Ended::Unknown));
        // Not applied this time, or perhaps applied: retry the same id.
        let retry = [
            WireError::not_applied(ErrorKind::Unavailable, "applier down"),
            WireError::not_applied(ErrorKind::Storage, "poisoned"),
            WireError::unknown(ErrorKind::Timeout, "slow"),
            WireError::unknown(ErrorKind::Invalid, "odd"),
        ];
        for e in retry {
            assert_eq!(classify(&Err(e.clone())), None, "{e:?}");
        }
    }

    #[test]
    fn another_node_is_never_the_avoided_one() {
        let mut rng = SmallRng::seed_from_u64(3);
        for avoid in 0..3 {
            let picked: std::collections::BTreeSet<usize> =
                (0..100).map(|_| other_node(&mut rng, 3, avoid)).collect();
            assert_eq!(picked.len(), 2, "{picked:?}");
            assert!(!picked.contains(&avoid));
        }
        assert_eq!(other_node(&mut rng, 1, 0), 0);
    }
}
