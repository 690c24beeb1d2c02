//! The add pipeline: a node's adds, coordinated in batches.
//!
//! Every add a node coordinates (from the client protocol, the RESP
//! listener, or a peer that forwarded it) joins one queue. A task takes
//! everything queued once per scheduler turn and runs it as one batch:
//!
//! ```text
//! adds ─▶ queue ─▶ batch: route each add, combine the adds to one counter
//!   ─▶ engine.leader_add_batch (one read-modify-write per counter, one
//!   waiter for the fsync) ─▶ one call per replica with every shard ─▶ wait
//!   for the fsync and the answers ─▶ reply, grouped per client connection
//!   (one write each)
//! ```
//!
//! A batch costs one task, one timer, one fsync waiter and one peer call
//! per replica, where adds one by one cost all of these each. Nothing waits
//! for a batch to fill: it holds what arrived while the node was busy, so
//! an idle node answers an add as soon as it would have alone.
//!
//! One batch is in flight at a time: the next one starts when the last has
//! answered, and holds every add that arrived meanwhile (group commit for
//! the whole pipeline). A batch costs a few hundred microseconds of CPU
//! across the cluster (fsyncs, datagrams, wake-ups) whatever its size, and
//! a batch every scheduler turn split 50 Redis clients on one node into
//! about three batches in flight. A batch that takes much longer than the
//! one before it (it waits for a slow replica at `ALL`, or for its timeout)
//! stops holding the next back after [`OVERLAP_FACTOR`] times that one's
//! time, at least [`OVERLAP_MIN`] and at most [`OVERLAP_MAX`].
//!
//! A hot counter's adds in one batch become one add of their sum: one
//! record and one shard to replicate for all of them. Each answers the
//! value it would have seen had they run one after another in arrival order.
//!
//! The rules are the coordinator's (see `coordinator`): an add is
//! acknowledged once `cl` durable copies exist; replicas that are down or
//! fail get a hint. Adds that do not fit the common case take the one-add
//! path, on a task of their own: a cell that lone adds are waiting on (the
//! engine's sealer combines it), a sum that would overflow, an add this
//! node forwards to a leader, and adds that must be made again because a
//! replica has seen a newer reset.

use std::collections::HashMap;
use std::future::Future;
use std::hash::{BuildHasherDefault, Hasher};
use std::pin::pin;
use std::sync::{Arc, Weak};
use std::task::Poll;
use std::time::Duration;

use parking_lot::Mutex;
use smallvec::{SmallVec, smallvec};
use tally_engine::{Cell, Key, Staged};
use tally_net::frame::put_frame;
use tally_net::peer::Answers;
use tally_net::wire::{
    BATCH_MESSAGES_MAX, ClientReply, ClientResponse, Consistency, ErrorKind, PeerRequest,
    PeerResponse, WireError,
};
use tokio::sync::{Notify, OwnedSemaphorePermit, mpsc, oneshot};
use tokio::time::Instant;
use tracing::debug;

use crate::convert::{engine_error, wire_cell, wire_key};
use crate::coordinator::Route;
use crate::node::Node;
use crate::ring::Replicas;

/// Where an add's answer goes.
pub(crate) enum Reply {
    /// To a waiting task.
    Task(oneshot::Sender<Result<i64, WireError>>),
    /// As a response frame to a client connection's writer. The permit is
    /// the connection's in-flight slot, freed once answered.
    Frame {
        id: u64,
        conn: mpsc::Sender<Vec<u8>>,
        slot: OwnedSemaphorePermit,
    },
}

/// One add waiting for its batch.
pub(crate) struct QueuedAdd {
    pub(crate) key: Key,
    pub(crate) delta: i64,
    pub(crate) cl: Consistency,
    /// A peer forwarded it here to lead: never forward it again.
    pub(crate) lead_only: bool,
    pub(crate) reply: Reply,
}

/// The queue of adds waiting for the batch task.
#[derive(Default)]
pub(crate) struct AddQueue {
    adds: Mutex<Vec<QueuedAdd>>,
    ready: Notify,
}

impl AddQueue {
    pub(crate) fn push(&self, add: QueuedAdd) {
        let mut adds = self.adds.lock();
        adds.push(add);
        if adds.len() == 1 {
            // A stored permit if the task is busy: it looks again.
            self.ready.notify_one();
        }
    }
}

/// How long the next batch waits for a slow one, in multiples of the time
/// the last batch took.
const OVERLAP_FACTOR: u32 = 2;
/// The next batch waits at least this long for the one in flight.
const OVERLAP_MIN: Duration = Duration::from_millis(1);
/// The next batch never waits longer than this for the one in flight.
const OVERLAP_MAX: Duration = Duration::from_millis(10);

/// Held by the batch in flight (shared by its parts when it is split);
/// tells when it ended once the last part drops it, its adds answered.
struct InFlight(Option<oneshot::Sender<Instant>>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(done) = self.0.take() {
            let _ = done.send(Instant::now());
        }
    }
}

/// Takes the queue's adds in batches and runs each batch on its own task,
/// until the node is gone.
pub(crate) async fn run(node: Weak<Node>) {
    let Some(queue) = node.upgrade().map(|n| n.add_queue.clone()) else {
        return;
    };
    let mut spare = Vec::new();
    // The batch in flight: when it started, and its end.
    let mut in_flight: Option<(Instant, oneshot::Receiver<Instant>)> = None;
    // How long the last batch that ended took.
    let mut last = OVERLAP_MIN;
    loop {
        queue.ready.notified().await;
        if let Some((started, done)) = in_flight.take() {
            let patience = (last * OVERLAP_FACTOR).clamp(OVERLAP_MIN, OVERLAP_MAX);
            if let Ok(Ok(ended)) = tokio::time::timeout_at(started + patience, done).await {
                last = ended - started;
            }
        }
        // Let the tasks that are ready run first, so that the adds they
        // make join this batch.
        tokio::task::yield_now().await;
        let Some(node) = node.upgrade() else { return };
        let mut adds = std::mem::replace(&mut *queue.adds.lock(), std::mem::take(&mut spare));
        let (done, end) = oneshot::channel();
        let batch = Arc::new(InFlight(Some(done)));
        in_flight = Some((Instant::now(), end));
        while !adds.is_empty() {
            let rest = adds.split_off(adds.len().min(BATCH_MESSAGES_MAX));
            let adds = std::mem::replace(&mut adds, rest);
            tokio::spawn(run_batch(node.clone(), adds, batch.clone()));
        }
        spare = adds;
    }
}

/// Answers grouped per client connection, sent with one write each.
#[derive(Default)]
struct Replies {
    conns: Vec<ConnReplies>,
}

/// One connection's answers, and the in-flight slots they free.
struct ConnReplies {
    conn: mpsc::Sender<Vec<u8>>,
    frames: Vec<u8>,
    /// Freed once the frames are queued for the connection's writer.
    slots: Vec<OwnedSemaphorePermit>,
}

impl Replies {
    fn add(&mut self, reply: Reply, result: Result<i64, WireError>) {
        match reply {
            Reply::Task(tx) => {
                let _ = tx.send(result);
            }
            Reply::Frame { id, conn, slot } => {
                let i = match self.conns.iter().position(|c| c.conn.same_channel(&conn)) {
                    Some(i) => i,
                    None => {
                        self.conns.push(ConnReplies {
                            conn,
                            frames: Vec::new(),
                            slots: Vec::new(),
                        });
                        self.conns.len() - 1
                    }
                };
                let c = &mut self.conns[i];
                let result = result.map(ClientReply::Value);
                put_frame(&mut c.frames, &ClientResponse { id, result });
                c.slots.push(slot);
            }
        }
    }

    /// Queues the frames for their connections' writers, never waiting: a
    /// client that does not read its answers must not hold up the other
    /// adds of a batch. Its frames wait on a task of their own instead,
    /// keeping its slots, so that it runs out of them and its connection
    /// stops being read.
    fn send(&mut self) {
        for c in self.conns.drain(..) {
            match c.conn.try_send(c.frames) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(frames)) => {
                    tokio::spawn(async move {
                        let _ = c.conn.send(frames).await;
                        drop(c.slots);
                    });
                }
                // A connection that closed needs no answers.
                Err(mpsc::error::TrySendError::Closed(_)) => {}
            }
        }
    }
}

/// Answers one add on its own.
pub(crate) fn reply_one(reply: Reply, result: Result<i64, WireError>) {
    let mut replies = Replies::default();
    replies.add(reply, result);
    replies.send();
}

/// Runs an add on the one-add path, on a task of its own.
fn spawn_one(node: &Arc<Node>, key: Key, delta: i64, cl: Consistency, reply: Reply, route: Route) {
    let node = node.clone();
    tokio::spawn(async move {
        let result = node.add_routed(&key, delta, cl, route).await;
        reply_one(reply, result);
    });
}

/// The batch's adds to one counter at one consistency level, made as one
/// add of their sum: one read-modify-write, one record, one shard to
/// replicate. A hot counter's adds thus cost about what one add costs.
struct Combined {
    key: Key,
    cl: Consistency,
    replicas: Replicas,
    /// The sum of the members' deltas.
    delta: i64,
    /// Each add's answer (taken when answered) and delta, in arrival order;
    /// inline for the usual one.
    members: SmallVec<[(Option<Reply>, i64); 1]>,
}

impl Combined {
    /// Runs every member on the one-add path, where each is refused or
    /// made on its own.
    fn spawn_each(self, node: &Arc<Node>) {
        for (reply, delta) in self.members {
            if let Some(reply) = reply {
                let route = Route::Lead(self.replicas.clone());
                spawn_one(node, self.key.clone(), delta, self.cl, reply, route);
            }
        }
    }
}

/// Combines the adds to one counter (and level) into one [`Combined`],
/// in order of first arrival. An add whose delta would overflow the sum
/// starts a new one.
fn combine(lead: Vec<(QueuedAdd, Replicas)>) -> Vec<Combined> {
    let mut combined: Vec<Combined> = Vec::with_capacity(lead.len());
    let mut index: HashMap<(Key, Consistency), usize, BuildHasherDefault<Fold>> =
        HashMap::with_capacity_and_hasher(lead.len(), BuildHasherDefault::default());
    for (add, replicas) in lead {
        let id = (add.key, add.cl);
        if let Some(&i) = index.get(&id)
            && let Some(sum) = combined[i].delta.checked_add(add.delta)
        {
            combined[i].delta = sum;
            combined[i].members.push((Some(add.reply), add.delta));
            continue;
        }
        index.insert(id.clone(), combined.len());
        combined.push(Combined {
            key: id.0,
            cl: id.1,
            replicas,
            delta: add.delta,
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

/// Adds this batch leads, sealed by the engine as one.
struct Led {
    adds: Combined,
    /// The value after all of them.
    value: i64,
    cell: Cell,
    /// Copies needed, and durable copies so far (this node's included).
    required: usize,
    acks: usize,
    /// The newest epoch a replica answered `Stale` with.
    newer_epoch: Option<u64>,
}

/// The replicas of some of the batch's adds: each of the others gets one
/// call carrying all of their shards.
struct Group {
    replicas: Replicas,
    members: Vec<usize>,
}

impl Group {
    /// Whether an add to `replicas` goes to the same nodes. Order does not
    /// matter: the ring lists a range's replicas primary first, so with
    /// three nodes and three replicas the keys one node leads come in up to
    /// six orders, and grouping by order sent each replica two to six
    /// calls per batch instead of one.
    fn same_nodes(&self, replicas: &Replicas) -> bool {
        self.replicas.len() == replicas.len() && replicas.iter().all(|r| self.replicas.contains(r))
    }
}

/// One replica's call for one group.
struct Pending {
    group: usize,
    replica: usize,
    answers: Option<Answers>,
}

async fn run_batch(node: Arc<Node>, adds: Vec<QueuedAdd>, in_flight: Arc<InFlight>) {
    let mut replies = Replies::default();
    // Route every add; keep the ones this node leads.
    let mut lead: Vec<(QueuedAdd, Replicas)> = Vec::with_capacity(adds.len());
    for add in adds {
        let route = if add.lead_only {
            node.lead_route(&add.key, add.cl)
        } else {
            node.route(&add.key, add.cl, "add")
        };
        match route {
            Err(e) => replies.add(add.reply, Err(e)),
            Ok(Route::Lead(_)) if node.drop_this_add() => {
                replies.add(add.reply, Ok(0)); // fault injection: a lost write
            }
            Ok(Route::Lead(replicas)) => lead.push((add, replicas)),
            Ok(route @ Route::Forward(_)) => {
                spawn_one(&node, add.key, add.delta, add.cl, add.reply, route);
            }
        }
    }
    let combined = combine(lead);
    let staged = node
        .engine
        .leader_add_batch(combined.iter().map(|c| (&c.key, c.delta)));
    let (staged, durable) = match staged {
        Ok(s) => s,
        Err(e) => {
            let e = engine_error(&e);
            for c in combined {
                for reply in c.members.into_iter().filter_map(|(reply, _)| reply) {
                    replies.add(reply, Err(e.clone()));
                }
            }
            replies.send();
            return;
        }
    };

    let mut led: Vec<Led> = Vec::with_capacity(combined.len());
    let mut groups: Vec<Group> = Vec::new();
    for (mut adds, staged) in combined.into_iter().zip(staged) {
        let outcome = match staged {
            Staged::Sealed(outcome) => outcome,
            Staged::Hot => {
                adds.spawn_each(&node);
                continue;
            }
            // A sum may overflow where some of its adds alone would not.
            Staged::Refused(_) if adds.members.len() > 1 => {
                adds.spawn_each(&node);
                continue;
            }
            Staged::Refused(e) => {
                if let Some(reply) = adds.members[0].0.take() {
                    replies.add(reply, Err(engine_error(&e)));
                }
                continue;
            }
        };
        let group = match groups.iter().position(|g| g.same_nodes(&adds.replicas)) {
            Some(g) => g,
            None => {
                groups.push(Group {
                    replicas: adds.replicas.clone(),
                    members: Vec::new(),
                });
                groups.len() - 1
            }
        };
        groups[group].members.push(led.len());
        led.push(Led {
            required: adds.cl.required(adds.replicas.len()),
            adds,
            value: outcome.value,
            cell: outcome.replica_cell(),
            acks: 0,
            newer_epoch: None,
        });
    }
    // Early answers first: they need nothing from the replicas.
    replies.send();
    if led.is_empty() {
        // Nothing sealed here: nothing to wait for either.
        return;
    }

    // One call per replica and group, carrying every shard of the group.
    let transport = node.transport();
    let mut pending: Vec<Pending> = Vec::new();
    for (g, group) in groups.iter().enumerate() {
        for &r in group.replicas.iter().filter(|&&r| r != node.me) {
            let answers = if transport.is_up(r) {
                let reqs = group
                    .members
                    .iter()
                    .map(|&i| PeerRequest::Apply {
                        key: wire_key(&led[i].adds.key),
                        cell: wire_cell(&led[i].cell),
                    })
                    .collect();
                match transport.submit(r, reqs) {
                    Ok(answers) => Some(answers),
                    Err(e) => {
                        debug!(replica = r, error = %e, "replication failed");
                        None
                    }
                }
            } else {
                None
            };
            if answers.is_none() {
                for &i in &group.members {
                    node.hint(r, &led[i].adds.key);
                }
                continue;
            }
            pending.push(Pending {
                group: g,
                replica: r,
                answers,
            });
        }
    }

    // Wait for this node's fsync and the replicas, until every add has its
    // copies, or every replica answered, or the write timeout passed. The
    // fsync is always waited for.
    let mut local = pin!(durable.wait());
    let mut mine: Option<Result<(), WireError>> = None;
    let mut sleep = pin!(tokio::time::sleep_until(
        Instant::now() + node.write_timeout
    ));
    let mut timed_out = false;
    std::future::poll_fn(|cx| {
        loop {
            let mut progressed = false;
            if mine.is_none()
                && let Poll::Ready(done) = local.as_mut().poll(cx)
            {
                let ok = done.is_ok();
                mine = Some(done.map_err(|e| engine_error(&e)));
                if ok {
                    for l in &mut led {
                        l.acks += 1;
                    }
                }
                progressed = true;
            }
            for p in &mut pending {
                let Some(rx) = p.answers.as_mut() else {
                    continue;
                };
                let Poll::Ready(answer) = std::pin::Pin::new(rx).poll(cx) else {
                    continue;
                };
                p.answers = None;
                progressed = true;
                let members = &groups[p.group].members;
                match answer {
                    Ok(Ok(answers)) if answers.len() == members.len() => {
                        for (&i, answer) in members.iter().zip(answers) {
                            let l = &mut led[i];
                            match answer {
                                PeerResponse::Applied => l.acks += 1,
                                // Ahead of us: it needs nothing from this epoch.
                                PeerResponse::Stale { epoch } => {
                                    l.newer_epoch = l.newer_epoch.max(Some(epoch));
                                }
                                other => {
                                    debug!(replica = p.replica, answer = ?other, "replica refused a shard");
                                    node.hint(p.replica, &l.adds.key);
                                }
                            }
                        }
                    }
                    failed => {
                        debug!(replica = p.replica, answer = ?failed.map(|a| a.map(|a| a.len())), "replication failed");
                        for &i in members {
                            node.hint(p.replica, &led[i].adds.key);
                        }
                    }
                }
            }
            let replicas_done = timed_out || pending.iter().all(|p| p.answers.is_none());
            let all_met = led.iter().all(|l| l.acks >= l.required);
            if mine.is_some() && (all_met || replicas_done) {
                return Poll::Ready(());
            }
            if !timed_out && sleep.as_mut().poll(cx).is_ready() {
                timed_out = true;
                progressed = true;
            }
            if !progressed {
                return Poll::Pending;
            }
        }
    })
    .await;

    let mine = mine.expect("the loop ends only once the fsync is done");
    let mut retries = Vec::new();
    for (n, l) in led.iter_mut().enumerate() {
        let result = if l.acks >= l.required {
            Ok(())
        } else {
            match (&mine, l.newer_epoch) {
                (Err(e), _) => Err(WireError::new(
                    ErrorKind::Storage,
                    format!(
                        "{}; the shard may already be on other replicas, so the add may or may not have been applied",
                        e.message
                    ),
                )),
                // This node missed a reset that a replica has seen: the adds
                // just made are in the old epoch, which every replica
                // discards. Catch up and make them again, one by one.
                (Ok(()), Some(epoch)) => {
                    retries.push((n, epoch));
                    continue;
                }
                (Ok(()), None) => Err(WireError::new(
                    ErrorKind::Timeout,
                    format!(
                        "{} of {} copies acknowledged within {} ms at {cl}; the write is durable on the leader and will reach the others, but may not be visible at {cl} yet",
                        l.acks,
                        l.required,
                        node.write_timeout.as_millis(),
                        cl = l.adds.cl,
                    ),
                )),
            }
        };
        // Each add answers the value as if the batch's adds to the counter
        // ran one after another in arrival order: the last one sees the
        // sum, each earlier one that minus the deltas after it.
        let mut after = l.value;
        for (reply, delta) in l.adds.members.iter_mut().rev() {
            if let Some(reply) = reply.take() {
                replies.add(reply, result.clone().map(|()| after));
            }
            after = after.wrapping_sub(*delta);
        }
    }
    replies.send();
    // Answered: the next batch may start.
    drop(in_flight);
    for (n, epoch) in retries {
        let l = &mut led[n];
        let adds = Combined {
            key: l.adds.key.clone(),
            cl: l.adds.cl,
            replicas: l.adds.replicas.clone(),
            delta: l.adds.delta,
            members: std::mem::take(&mut l.adds.members),
        };
        let node = node.clone();
        tokio::spawn(async move {
            debug!(
                epoch,
                "leader was behind a reset; adding again in the new epoch"
            );
            match node
                .engine
                .apply(&adds.key, &Cell::from_parts(epoch, []))
                .await
            {
                Ok(()) => adds.spawn_each(&node),
                Err(e) => {
                    let e = engine_error(&e);
                    for (reply, _) in adds.members {
                        if let Some(reply) = reply {
                            reply_one(reply, Err(e.clone()));
                        }
                    }
                }
            }
        });
    }

    // Replicas that had not answered when the adds were: still waited for
    // (up to the write timeout), so that one that fails gets its hints.
    for p in pending {
        let Some(answers) = p.answers else { continue };
        let answers = tokio::select! {
            answers = answers => answers.ok().and_then(Result::ok),
            () = &mut sleep => None,
        };
        for (n, &i) in groups[p.group].members.iter().enumerate() {
            let ok = answers
                .as_ref()
                .and_then(|a| a.get(n))
                .is_some_and(|a| matches!(a, PeerResponse::Applied | PeerResponse::Stale { .. }));
            if !ok {
                node.hint(p.replica, &led[i].adds.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use tokio::sync::Semaphore;

    fn frame_reply(id: u64, conn: &mpsc::Sender<Vec<u8>>, slots: &Arc<Semaphore>) -> Reply {
        Reply::Frame {
            id,
            conn: conn.clone(),
            slot: slots.clone().try_acquire_owned().unwrap(),
        }
    }

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
            let group = Group {
                replicas: a.clone(),
                members: Vec::new(),
            };
            for b in &placements {
                let mut x = a.to_vec();
                let mut y = b.to_vec();
                x.sort_unstable();
                y.sort_unstable();
                assert_eq!(group.same_nodes(b), x == y, "{a:?} vs {b:?}");
                orders += usize::from(x == y && a[..] != b[..]);
                sets += usize::from(x != y);
            }
        }
        assert!(orders > 0, "the ring gave no set of replicas in two orders");
        assert!(sets > 0, "the ring gave one set of replicas only");
    }

    /// A connection whose writer is stuck (a client that reads no answers)
    /// does not hold up the answers to anyone else in the batch; its own
    /// wait on a task, keeping their slots until they are queued.
    #[tokio::test(flavor = "current_thread")]
    async fn a_stuck_connection_holds_up_no_one_else() {
        let (stuck, mut stuck_rx) = mpsc::channel::<Vec<u8>>(1);
        stuck.try_send(b"queued earlier".to_vec()).unwrap();
        let (fine, mut fine_rx) = mpsc::channel::<Vec<u8>>(1);
        let stuck_slots = Arc::new(Semaphore::new(2));
        let fine_slots = Arc::new(Semaphore::new(2));

        let mut replies = Replies::default();
        replies.add(frame_reply(1, &stuck, &stuck_slots), Ok(10));
        replies.add(frame_reply(2, &fine, &fine_slots), Ok(20));
        replies.add(frame_reply(3, &stuck, &stuck_slots), Ok(30));
        replies.send(); // returns without waiting for the stuck writer

        let mut expected = Vec::new();
        put_frame(
            &mut expected,
            &ClientResponse {
                id: 2,
                result: Ok(ClientReply::Value(20)),
            },
        );
        assert_eq!(fine_rx.try_recv().unwrap(), expected);
        assert_eq!(fine_slots.available_permits(), 2);
        assert_eq!(stuck_slots.available_permits(), 0, "held until queued");

        assert_eq!(stuck_rx.recv().await.unwrap(), b"queued earlier");
        let frames = stuck_rx.recv().await.unwrap();
        let mut expected = Vec::new();
        for (id, v) in [(1, 10), (3, 30)] {
            put_frame(
                &mut expected,
                &ClientResponse {
                    id,
                    result: Ok(ClientReply::Value(v)),
                },
            );
        }
        assert_eq!(frames, expected, "one buffer, in order");
        tokio::task::yield_now().await;
        assert_eq!(stuck_slots.available_permits(), 2);
    }
}
