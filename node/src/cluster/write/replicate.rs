//! The I/O shell around replication rounds: sends each write's shard state
//! to its replicas, feeds their answers, this node's fsync and the write
//! timeout to each write's [`Round`], and reports once every round has its
//! verdict. Every decision is the round's.
//!
//! Writes that go to the same nodes share one call per replica carrying
//! all of their states, so a batch costs one message per replica whatever
//! its size. After the verdicts the shell keeps listening, up to the
//! timeout, so that a replica that fails late still gets its hints.

use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::task::{Context, Poll};

use tally_engine::{Cell, Key};
use tally_net::encoded::Encoded;
use tally_net::peer::Answers;
use tally_net::wire::{Consistency, PeerRequest, WireError, WireTail};
use tally_world::Instant;
use tracing::debug;

use super::round::{Answer, Round};
use crate::base::convert::{wire_cell, wire_key};
use crate::cluster::ctx::Ctx;
use crate::ring::Replicas;

/// One shard state on its way to its replicas.
pub(crate) struct Write {
    pub(crate) key: Key,
    pub(crate) cell: Cell,
    /// The ids that go with the state (see `tally_engine::ids::tail`).
    pub(crate) tail: Option<WireTail>,
    pub(crate) replicas: Replicas,
    pub(crate) round: Round,
    /// A replica's `Stale` counts as holding the write: its newer state
    /// overwrote it (a last-write-wins cell's, `cells`).
    superseded_holds: bool,
}

impl Write {
    /// The `attempt`-th write of `cell` to `key`'s `replicas`, led here.
    pub(crate) fn new(
        ctx: &Ctx,
        key: Key,
        cell: Cell,
        replicas: Replicas,
        cl: Consistency,
        attempt: u32,
    ) -> Write {
        let timeout_ms = u64::try_from(ctx.write_timeout().as_millis()).unwrap_or(u64::MAX);
        let round = Round::new(cl, &replicas, ctx.me(), attempt, timeout_ms);
        Write {
            key,
            cell,
            tail: None,
            replicas,
            round,
            superseded_holds: false,
        }
    }

    /// The write, of a cell that a newer state of a replica overwrites as
    /// the write itself would have: that replica's `Stale` holds it.
    pub(crate) fn superseded_holds(mut self) -> Write {
        self.superseded_holds = true;
        self
    }

    /// The write with the ids that go with its state.
    pub(crate) fn with_tail(mut self, tail: WireTail) -> Write {
        self.tail = Some(tail);
        self
    }
}

/// One replica's call, carrying the states of one group's writes.
struct Call {
    replica: usize,
    /// Index into the groups (see [`groups`]).
    group: usize,
    /// `None` once answered.
    answers: Option<Answers>,
}

/// Replicates `writes`, led by this node, whose own records are durable
/// once `local` resolves; calls `decided` once every round has a verdict,
/// then returns when the rounds are settled or the timeout passed.
pub(crate) async fn replicate(
    ctx: &Ctx,
    writes: &mut [Write],
    local: impl Future<Output = Result<(), WireError>>,
    decided: impl FnOnce(&mut [Write]),
) {
    let groups = groups(writes);
    let mut calls = send(ctx, &groups, writes);
    let mut local = pin!(local);
    let mut local_done = false;
    let mut timeout = pin!(tokio::time::sleep_until(
        Instant::now() + ctx.write_timeout()
    ));
    let mut timed_out = false;
    poll_fn(|cx| {
        loop {
            let mut progressed = false;
            if !local_done && let Poll::Ready(result) = local.as_mut().poll(cx) {
                local_done = true;
                progressed = true;
                for w in writes.iter_mut() {
                    w.round.on_local(result.clone());
                }
            }
            progressed |= poll_calls(cx, &mut calls, &groups, writes);
            if writes.iter().all(|w| w.round.verdict().is_some()) {
                return Poll::Ready(());
            }
            if !timed_out && timeout.as_mut().poll(cx).is_ready() {
                timed_out = true;
                progressed = true;
                writes.iter_mut().for_each(|w| w.round.on_timeout());
            }
            if !progressed {
                return Poll::Pending;
            }
        }
    })
    .await;
    hint(ctx, writes);
    decided(writes);
    if timed_out {
        return;
    }
    // Stragglers: listened to up to the timeout, for their hints.
    poll_fn(|cx| {
        loop {
            let progressed = poll_calls(cx, &mut calls, &groups, writes);
            if calls.iter().all(|c| c.answers.is_none()) {
                return Poll::Ready(());
            }
            if timeout.as_mut().poll(cx).is_ready() {
                writes.iter_mut().for_each(|w| w.round.on_timeout());
                return Poll::Ready(());
            }
            if !progressed {
                return Poll::Pending;
            }
        }
    })
    .await;
    hint(ctx, writes);
}

/// Sends one call per replica and group of writes that go to the same
/// nodes; replicas that are down or cannot be sent to are told to the rounds.
fn send(ctx: &Ctx, groups: &[Vec<usize>], writes: &mut [Write]) -> Vec<Call> {
    let mut calls = Vec::new();
    for (group, members) in groups.iter().enumerate() {
        let replicas = writes[members[0]].replicas.clone();
        // Encoded once, for every replica that is up.
        let mut body = None;
        for &r in replicas.all().iter().filter(|&&r| r != ctx.me()) {
            let answers = if ctx.is_up(r) {
                let body = body.get_or_insert_with(|| encode(members, writes)).clone();
                ctx.transport()
                    .submit_encoded(r, body)
                    .inspect_err(|e| debug!(replica = r, error = %e, "replication failed"))
                    .ok()
            } else {
                None
            };
            match answers {
                Some(answers) => calls.push(Call {
                    replica: r,
                    group,
                    answers: Some(answers),
                }),
                None => members.iter().for_each(|&i| writes[i].round.unreachable(r)),
            }
        }
    }
    calls
}

/// The shard states of a group's writes, as the requests that carry them.
fn encode(members: &[usize], writes: &[Write]) -> Encoded {
    let reqs: Vec<PeerRequest> = members
        .iter()
        .map(|&i| {
            let (key, cell) = (wire_key(&writes[i].key), wire_cell(&writes[i].cell));
            match &writes[i].tail {
                None => PeerRequest::Apply { key, cell },
                Some(tail) => PeerRequest::ApplyTail {
                    key,
                    cell,
                    tail: Box::new(tail.clone()),
                },
            }
        })
        .collect();
    Encoded::new(&reqs)
}

/// Feeds every call that answered to its writes' rounds; whether any did.
fn poll_calls(
    cx: &mut Context<'_>,
    calls: &mut [Call],
    groups: &[Vec<usize>],
    writes: &mut [Write],
) -> bool {
    let mut progressed = false;
    for call in calls {
        let Some(rx) = call.answers.as_mut() else {
            continue;
        };
        let Poll::Ready(answer) = Pin::new(rx).poll(cx) else {
            continue;
        };
        call.answers = None;
        progressed = true;
        let members = &groups[call.group];
        match answer {
            Ok(Ok(answers)) if answers.len() == members.len() => {
                for (&i, resp) in members.iter().zip(&answers) {
                    let answer = match Answer::of(resp) {
                        Answer::Stale(_) if writes[i].superseded_holds => Answer::Applied,
                        answer => answer,
                    };
                    if answer == Answer::Failed {
                        debug!(replica = call.replica, answer = ?resp, "replica refused a shard");
                    }
                    writes[i].round.on_replica(call.replica, answer);
                }
            }
            failed => {
                debug!(replica = call.replica, answer = ?failed.map(|a| a.map(|a| a.len())), "replication failed");
                for &i in members {
                    writes[i].round.on_replica(call.replica, Answer::Failed);
                }
            }
        }
    }
    progressed
}

/// Records the hints the rounds asked for.
fn hint(ctx: &Ctx, writes: &mut [Write]) {
    for w in writes {
        for r in w.round.take_hints() {
            ctx.hint(r, &w.key);
        }
    }
}

/// The writes grouped by the nodes they go to, in order of first
/// appearance. Order within a write's replicas does not matter: the ring
/// lists a range's replicas primary first, so with three nodes and three
/// replicas the keys one node leads come in up to six orders, and grouping
/// by order sent each replica two to six calls per batch instead of one.
fn groups(writes: &[Write]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, w) in writes.iter().enumerate() {
        match groups
            .iter_mut()
            .find(|g| same_nodes(&writes[g[0]].replicas, &w.replicas))
        {
            Some(g) => g.push(i),
            None => groups.push(vec![i]),
        }
    }
    groups
}

/// Whether two writes go to the same nodes, in any order: the same
/// natural replicas and the same pending ones (a ring change in progress).
fn same_nodes(a: &Replicas, b: &Replicas) -> bool {
    let same = |x: &[usize], y: &[usize]| x.len() == y.len() && y.iter().all(|r| x.contains(r));
    same(a, b) && same(a.pending(), b.pending())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys one node leads come with their replicas in different
    /// orders; a batch still makes one group (one call per replica) of all
    /// of those that go to the same nodes.
    #[test]
    fn replicas_in_any_order_make_one_group() {
        let ids: Vec<String> = ["n1", "n2", "n3", "n4"].map(String::from).into();
        let ring = crate::ring::Ring::new(&ids, 16, 3);
        let placements: Vec<Replicas> = (0..256)
            .map(|i: i64| ring.replicas_for_token(i64::MIN.wrapping_add(i.wrapping_mul(1 << 56))))
            .collect();
        let mut orders = 0;
        let mut sets = 0;
        for a in &placements {
            for b in &placements {
                let mut x = a.to_vec();
                let mut y = b.to_vec();
                x.sort_unstable();
                y.sort_unstable();
                assert_eq!(same_nodes(a, b), x == y, "{a:?} vs {b:?}");
                orders += usize::from(x == y && a[..] != b[..]);
                sets += usize::from(x != y);
            }
        }
        assert!(orders > 0, "the ring gave no set of replicas in two orders");
        assert!(sets > 0, "the ring gave one set of replicas only");
    }

    /// During a ring change writes to the same natural replicas may have
    /// different pending ones: each must reach its own.
    #[test]
    fn writes_with_other_pending_replicas_are_grouped_apart() {
        let plain = Replicas::new(&[0, 1, 2], &[]);
        let to_n4 = Replicas::new(&[1, 0, 2], &[3]);
        let to_n5 = Replicas::new(&[0, 1, 2], &[4]);
        assert!(same_nodes(&plain, &Replicas::new(&[2, 1, 0], &[])));
        assert!(!same_nodes(&plain, &to_n4));
        assert!(!same_nodes(&to_n4, &to_n5));
        assert!(same_nodes(&to_n4, &Replicas::new(&[0, 1, 2], &[3])));
    }
}
