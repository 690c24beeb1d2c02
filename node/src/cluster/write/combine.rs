//! Adds to one counter in one batch, made as one add of their sum, and
//! the rule for the value each of them answers.
//!
//! A hot counter's adds thus cost about what one add costs: one
//! read-modify-write, one record, one shard to replicate.
//!
//! # The value an add answers
//!
//! Every add answers the value the leader sees right after it, as if the
//! adds it was combined with ran one after another in arrival order: the
//! last one the value after all of them, each earlier one that minus the
//! deltas after it: the engine's rule ([`sequential_values`]), by which
//! it answers the adds it combines itself, so the rule holds on every path.
//! Through one leader, adds of +1 thus answer distinct values.

use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

use hashbrown::HashTable;

use smallvec::{SmallVec, smallvec};
use tally_engine::add::sequential_values;
use tally_engine::{Cell, Key};
use tally_net::wire::{Consistency, WireError};

use super::queue::{AddQueue, Origin, QueuedAdd, Replies, Reply};
use super::replicate::Write;
use crate::cluster::ctx::Ctx;
use crate::ring::Replicas;

/// The batch's adds to one counter at one level, made as one add of their
/// sum.
///
/// # Invariants
/// - `delta` is the sum of the members' deltas, without overflow.
pub(crate) struct Combined {
    pub(crate) key: Key,
    pub(crate) cl: Consistency,
    pub(crate) replicas: Replicas,
    pub(crate) delta: i64,
    /// The highest attempt among the members.
    pub(crate) attempt: u32,
    /// Each add's answer (taken when answered) and delta, in arrival order;
    /// inline for the usual one.
    pub(crate) members: SmallVec<[(Option<Reply>, i64); 1]>,
}

impl Combined {
    /// The write of `cell`, this counter's new state, to its replicas.
    pub(crate) fn write(&self, ctx: &Ctx, cell: Cell) -> Write {
        Write::new(
            ctx,
            self.key.clone(),
            cell,
            self.replicas.clone(),
            self.cl,
            self.attempt,
        )
    }

    /// The members, taken out (answered elsewhere), as one of their own.
    pub(crate) fn take(&mut self) -> Combined {
        Combined {
            key: self.key.clone(),
            cl: self.cl,
            replicas: self.replicas.clone(),
            delta: self.delta,
            attempt: self.attempt,
            members: std::mem::take(&mut self.members),
        }
    }

    /// Answers every member the same error, at once.
    pub(crate) fn fail_now(&mut self, e: &WireError) {
        let mut replies = Replies::default();
        self.fail(&mut replies, e);
        replies.send();
    }

    /// Answers every member the same error.
    pub(crate) fn fail(&mut self, replies: &mut Replies, e: &WireError) {
        for (reply, _) in &mut self.members {
            if let Some(reply) = reply.take() {
                replies.add(reply, Err(e.clone()));
            }
        }
    }

    /// Answers the members as-if-sequential values, the last one `value`.
    pub(crate) fn succeed(&mut self, replies: &mut Replies, value: i64) {
        let values = sequential_values(value, self.members.iter().map(|(_, d)| *d));
        for ((reply, _), v) in self.members.iter_mut().zip(values) {
            if let Some(reply) = reply.take() {
                replies.add(reply, Ok(v));
            }
        }
    }

    /// Queues every member again, to be led here. `alone`: each on its
    /// own (a sum that would overflow, where some members alone may not).
    pub(crate) fn queue_again(self, queue: &AddQueue, attempt: u32, alone: bool) {
        for (reply, delta) in self.members {
            if let Some(reply) = reply {
                queue.push(QueuedAdd {
                    key: self.key.clone(),
                    delta,
                    cl: self.cl,
                    origin: Origin::Lead,
                    attempt,
                    alone,
                    reply,
                    id: None,
                });
            }
        }
    }
}

/// Combines the adds to one counter (and level) into one [`Combined`], in
/// order of first arrival. An add whose delta would overflow the sum, or
/// that must be made alone, starts a new one.
pub(crate) fn combine(lead: Vec<(QueuedAdd, Replicas)>) -> Vec<Combined> {
    let mut combined: Vec<Combined> = Vec::with_capacity(lead.len());
    // The newest of each counter and level that later adds may join, by
    // its place in `combined`.
    let mut open: HashTable<usize> = HashTable::with_capacity(lead.len());
    let hash =
        |key: &Key, cl: Consistency| BuildHasherDefault::<Fold>::default().hash_one((key, cl));
    for (add, replicas) in lead {
        let h = hash(&add.key, add.cl);
        let same = |c: &Combined| c.key == add.key && c.cl == add.cl;
        if !add.alone
            && let Some(&i) = open.find(h, |&i| same(&combined[i]))
            && let Some(sum) = combined[i].delta.checked_add(add.delta)
        {
            let c = &mut combined[i];
            c.delta = sum;
            c.attempt = c.attempt.max(add.attempt);
            c.members.push((Some(add.reply), add.delta));
            continue;
        }
        if !add.alone {
            let at = combined.len();
            match open.find_mut(h, |&i| same(&combined[i])) {
                Some(newest) => *newest = at,
                None => {
                    open.insert_unique(h, at, |&i| hash(&combined[i].key, combined[i].cl));
                }
            }
        }
        combined.push(Combined {
            key: add.key,
            cl: add.cl,
            replicas,
            delta: add.delta,
            attempt: add.attempt,
            members: smallvec![(Some(add.reply), add.delta)],
        });
    }
    combined
}

/// A hasher for what a key already hashed: a [`Key`] hashes as its
/// precomputed (seeded) hash, which this only folds with the level.
#[derive(Default)]
struct Fold(u64);

impl Hasher for Fold {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(29) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use crate::cluster::write::queue::Reply;
    use tokio::sync::oneshot;

    fn add(key: &str, delta: i64, alone: bool) -> (QueuedAdd, Replicas) {
        let ids: Vec<String> = ["n1"].map(String::from).into();
        let ring = crate::ring::Ring::new(&ids, 1, 1);
        let (tx, _rx) = oneshot::channel();
        let key = Key::new(key.as_bytes(), b"").unwrap();
        let mut q = QueuedAdd::new(
            key,
            delta,
            Consistency::Quorum,
            Origin::Client,
            Reply::Task(tx),
        );
        q.alone = alone;
        (q, ring.replicas(b"k"))
    }

    #[test]
    fn adds_to_one_counter_combine_unless_the_sum_overflows_or_they_are_alone() {
        let got = combine(vec![
            add("a", 1, false),
            add("b", 2, false),
            add("a", 3, false),
            add("a", i64::MAX, false), // overflows a's sum: a new one
            add("a", -1, false),       // joins the newest
            add("b", 5, true),         // alone
        ]);
        let summary: Vec<(Vec<u8>, i64, usize)> = got
            .iter()
            .map(|c| (c.key.partition().to_vec(), c.delta, c.members.len()))
            .collect();
        assert_eq!(
            summary,
            [
                (b"a".to_vec(), 4, 2),
                (b"b".to_vec(), 2, 1),
                (b"a".to_vec(), i64::MAX - 1, 2),
                (b"b".to_vec(), 5, 1),
            ]
        );
    }
}
