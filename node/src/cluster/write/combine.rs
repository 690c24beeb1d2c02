//! Adds to one counter in one batch, made as one add of their sum.
//!
//! A hot counter's adds thus cost about what one add costs: one
//! read-modify-write, one record, one shard to replicate.
//!
//! The arithmetic is the engine's ([`tally_engine::add::Combined`]): the
//! exact sum, an add that would overflow it starting a combined add of its
//! own, the value each add answers (as if the adds combined ran one after
//! another in arrival order, the rule by which the engine answers the adds
//! it combines itself, so it holds on every path), and which refusals of
//! a sum make its adds again one by one. This module only groups a
//! batch's adds by counter and level and says where each answer goes.

use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

use hashbrown::HashTable;

use tally_engine::add::Combined as Adds;
use tally_engine::{Cell, Key};
use tally_net::wire::{Consistency, WireError};

use super::Writes;
use super::again::Attempted;
use super::attempt::{Attempt, Why};
use super::queue::{Origin, QueuedAdd, Replies, Reply};
use super::replicate::Write;
use crate::cluster::ctx::Ctx;
use crate::ring::Replicas;

/// The batch's adds to one counter at one level, made as one add of their
/// sum.
pub(crate) struct Combined {
    pub(crate) key: Key,
    pub(crate) cl: Consistency,
    pub(crate) replicas: Replicas,
    /// Where they are: at the highest attempt among the members.
    pub(crate) attempt: Attempt,
    /// The adds and the sum they make; each add's answer is taken when
    /// answered.
    pub(crate) adds: Adds<Option<Reply>>,
    /// The value the engine made of their sum, once sealed.
    pub(crate) value: i64,
}

impl Combined {
    /// The delta of the one add they make.
    pub(crate) fn delta(&self) -> i64 {
        self.adds.delta()
    }

    /// The write of `cell`, this counter's new state, to its replicas.
    pub(crate) fn write(&self, ctx: &Ctx, cell: Cell) -> Write {
        Write::new(
            ctx,
            self.key.clone(),
            cell,
            self.replicas.clone(),
            self.cl,
            self.attempt.n(),
        )
    }
}

impl Attempted for Combined {
    fn attempt(&mut self) -> &mut Attempt {
        &mut self.attempt
    }

    fn at(&self) -> (&Key, &Replicas, Consistency) {
        (&self.key, &self.replicas, self.cl)
    }

    /// Answers the members as-if-sequential values, the last one the
    /// engine's.
    fn succeed(&mut self, replies: &mut Replies) {
        for (reply, v) in self.adds.answers(self.value) {
            if let Some(reply) = reply.take() {
                replies.add(reply, Ok(v));
            }
        }
    }

    /// Answers every member the same error.
    fn fail(&mut self, replies: &mut Replies, e: &WireError) {
        for reply in self.adds.members_mut() {
            if let Some(reply) = reply.take() {
                replies.add(reply, Err(e.clone()));
            }
        }
    }

    /// The members, taken out (answered elsewhere), as one of their own.
    fn take(&mut self) -> Combined {
        Combined {
            key: self.key.clone(),
            cl: self.cl,
            replicas: self.replicas.clone(),
            attempt: self.attempt.clone(),
            adds: self.adds.take(),
            value: self.value,
        }
    }

    /// Queues every member again, to be led here; split, each on its own
    /// (a sum that would overflow, where some members alone may not).
    fn queue_again(self, writes: &Writes, attempt: u32, why: Why) {
        for (reply, delta) in self.adds.into_members() {
            if let Some(reply) = reply {
                writes.queue.push(QueuedAdd {
                    key: self.key.clone(),
                    delta,
                    cl: self.cl,
                    origin: Origin::Lead,
                    attempt,
                    alone: why == Why::Split,
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
        let mut reply = Some(add.reply);
        if !add.alone
            && let Some(&i) = open.find(h, |&i| same(&combined[i]))
        {
            let c = &mut combined[i];
            match c.adds.join(reply, add.delta) {
                Ok(()) => {
                    if add.attempt > c.attempt.n() {
                        c.attempt = Attempt::new(add.attempt);
                    }
                    continue;
                }
                Err(back) => reply = back, // the sum would overflow
            }
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
            attempt: Attempt::new(add.attempt),
            adds: Adds::one(reply, add.delta),
            value: 0,
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
            .map(|c| (c.key.partition().to_vec(), c.delta(), c.adds.len()))
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
