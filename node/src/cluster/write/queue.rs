//! The queue every add and every admission enters by, and the answers
//! that leave by it.
//!
//! An add is a [`QueuedAdd`]: the counter, the delta, the level, where it
//! came from, and where its answer goes ([`Reply`]). An admission of
//! members to a unique counter is a [`QueuedAdmission`]. Both wait in one
//! [`WriteQueue`] for the batch task (`batch`), which takes them together
//! once per scheduler turn. Answers to one client connection are gathered
//! and written with one send ([`Replies`]), in the framing its client
//! layer gives ([`Sink`]): the write path knows none.

use parking_lot::Mutex;
use tally_engine::{Key, OpId};
use tally_net::wire::{Consistency, WireError};
use tokio::sync::{Notify, OwnedSemaphorePermit, mpsc, oneshot};

use crate::base::registry::Registry;

/// Where an add's answer goes.
pub(crate) enum Reply {
    /// To a waiting task.
    Task(oneshot::Sender<Result<i64, WireError>>),
    /// As a response frame to a client connection's writer. The permit is
    /// the connection's in-flight slot, freed once answered.
    Frame {
        /// The request id.
        id: u64,
        /// The connection's writer, and its framing.
        conn: Sink,
        /// The connection's in-flight slot.
        slot: OwnedSemaphorePermit,
        /// When the client's add came, for the metrics.
        timer: Timer,
    },
}

/// A client connection's answers to adds: its writer, and how the client
/// layer frames one answer for it.
pub(crate) struct Sink {
    writer: mpsc::Sender<Vec<u8>>,
    put: Put,
}

/// Appends the answer to the request `id` to a connection's buffer, in
/// its client protocol's framing.
pub(crate) type Put = fn(&mut Vec<u8>, u64, Result<i64, WireError>);

impl Sink {
    /// Answers framed by `put`, written by `writer`.
    pub(crate) fn new(writer: mpsc::Sender<Vec<u8>>, put: Put) -> Sink {
        Sink { writer, put }
    }
}

/// When a client's add came, and at which level: its latency is counted
/// in the metrics once it is answered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timer {
    since: tally_world::Instant,
    cl: Consistency,
    /// The node's metrics, which count it.
    metrics: &'static Registry,
}

impl Timer {
    /// A timer started now, counted in `metrics`.
    pub(crate) fn start(cl: Consistency, metrics: &'static Registry) -> Timer {
        Timer {
            since: tally_world::Instant::now(),
            cl,
            metrics,
        }
    }

    /// Counts the answer `result` in the metrics.
    pub(crate) fn stop<T>(self, result: &Result<T, WireError>) {
        self.stop_at(tally_world::Instant::now(), result);
    }

    /// [`Timer::stop`] for an answer given at `now`.
    pub(crate) fn stop_at<T>(self, now: tally_world::Instant, result: &Result<T, WireError>) {
        self.metrics.coordinated(
            crate::base::registry::Op::Add,
            self.cl,
            now.saturating_duration_since(self.since),
            result,
        );
    }
}

/// Where an add came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A client of this node: this node leads it or forwards it.
    Client,
    /// A peer forwarded it here to lead, or this node queued it again
    /// (see `Again`): never forwarded.
    Lead,
}

/// One add waiting for its batch.
pub(crate) struct QueuedAdd {
    pub(crate) key: Key,
    pub(crate) delta: i64,
    pub(crate) cl: Consistency,
    pub(crate) origin: Origin,
    /// Its attempt (from 1): more after resets overtook it.
    pub(crate) attempt: u32,
    /// Made on its own, not combined with others (an add split out of a
    /// sum that would overflow).
    pub(crate) alone: bool,
    pub(crate) reply: Reply,
    /// Its operation id, if it has one: applied at most once (see `once`).
    pub(crate) id: Option<Box<OnceId>>,
}

/// An add's operation id, and what its leader's catch-up asks of it.
#[derive(Debug, Clone)]
pub(crate) struct OnceId {
    pub(crate) id: OpId,
    /// Made again if it was applied in an epoch other than the cell's
    /// current one (see `tally_engine::OnceAdd::reapply_stale`).
    pub(crate) reapply_stale: bool,
}

impl QueuedAdd {
    /// A first attempt from `origin`.
    pub(crate) fn new(key: Key, delta: i64, cl: Consistency, origin: Origin, reply: Reply) -> Self {
        QueuedAdd {
            key,
            delta,
            cl,
            origin,
            attempt: 1,
            alone: false,
            reply,
            id: None,
        }
    }

    /// A first attempt of an add with an operation id.
    pub(crate) fn with_id(
        key: Key,
        delta: i64,
        id: OpId,
        cl: Consistency,
        origin: Origin,
        reply: Reply,
    ) -> Self {
        QueuedAdd {
            id: Some(Box::new(OnceId {
                id,
                reapply_stale: false,
            })),
            ..QueuedAdd::new(key, delta, cl, origin, reply)
        }
    }
}

/// One caller's members of one applier to a unique counter, waiting for
/// the batch task to admit them (see `unique`).
pub(crate) struct QueuedAdmission {
    /// The unique counter's count.
    pub(crate) count: Key,
    pub(crate) cl: Consistency,
    /// Between 1 and `MEMBERS_MAX`, all of this node as their applier.
    pub(crate) members: Vec<Vec<u8>>,
    /// Which of `members` were new.
    pub(crate) answer: oneshot::Sender<Result<Vec<bool>, WireError>>,
}

/// What waits for the next batch.
#[derive(Default)]
pub(crate) struct Waiting {
    pub(crate) adds: Vec<QueuedAdd>,
    pub(crate) admissions: Vec<QueuedAdmission>,
}

impl Waiting {
    fn len(&self) -> usize {
        self.adds.len() + self.admissions.len()
    }
}

/// The adds and admissions waiting for the batch task: one queue, one
/// task, one pace (see `batch`).
///
/// # Invariants
/// - `ready` holds a permit whenever `waiting` is not empty and the batch
///   task has not taken it yet.
#[derive(Default)]
pub(crate) struct WriteQueue {
    waiting: Mutex<Waiting>,
    ready: Notify,
}

impl WriteQueue {
    /// Queues an add for the next batch.
    pub(crate) fn push(&self, add: QueuedAdd) {
        let mut waiting = self.waiting.lock();
        waiting.adds.push(add);
        Self::wake(&waiting, &self.ready);
    }

    /// Queues an admission for the next batch.
    pub(crate) fn push_admission(&self, admission: QueuedAdmission) {
        let mut waiting = self.waiting.lock();
        waiting.admissions.push(admission);
        Self::wake(&waiting, &self.ready);
    }

    /// Wakes the batch task for the first entry after it took the last.
    #[inline]
    fn wake(waiting: &Waiting, ready: &Notify) {
        if waiting.len() == 1 {
            // A stored permit if the task is busy: it looks again.
            ready.notify_one();
        }
    }

    /// Waits until something is queued.
    pub(crate) async fn ready(&self) {
        self.ready.notified().await;
    }

    /// Takes everything queued, leaving `spare` (empty, kept allocated).
    pub(crate) fn take(&self, spare: Waiting) -> Waiting {
        debug_assert_eq!(spare.len(), 0);
        std::mem::replace(&mut *self.waiting.lock(), spare)
    }
}

/// Answers grouped per client connection, sent with one write each.
#[derive(Default)]
pub(crate) struct Replies {
    conns: Vec<ConnReplies>,
    /// When the first frame was added: one clock read for a batch.
    now: Option<tally_world::Instant>,
}

/// One connection's answers, and the in-flight slots they free.
struct ConnReplies {
    conn: Sink,
    frames: Vec<u8>,
    /// Freed once the frames are queued for the connection's writer.
    slots: Vec<OwnedSemaphorePermit>,
}

impl Replies {
    /// Adds an answer; tasks are answered at once, frames by [`Replies::send`].
    pub(crate) fn add(&mut self, reply: Reply, result: Result<i64, WireError>) {
        match reply {
            Reply::Task(tx) => {
                let _ = tx.send(result);
            }
            Reply::Frame {
                id,
                conn,
                slot,
                timer,
            } => {
                let now = *self.now.get_or_insert_with(tally_world::Instant::now);
                timer.stop_at(now, &result);
                let i = match self
                    .conns
                    .iter()
                    .position(|c| c.conn.writer.same_channel(&conn.writer))
                {
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
                (c.conn.put)(&mut c.frames, id, result);
                c.slots.push(slot);
            }
        }
    }

    /// Queues the frames for their connections' writers, never waiting: a
    /// client that does not read its answers must not hold up the other
    /// adds of a batch. Its frames wait on a task of their own instead,
    /// keeping its slots, so that it runs out of them and its connection
    /// stops being read.
    pub(crate) fn send(&mut self) {
        for c in self.conns.drain(..) {
            match c.conn.writer.try_send(c.frames) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(frames)) => {
                    tokio::spawn(async move {
                        let _ = c.conn.writer.send(frames).await;
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use std::sync::Arc;
    use tally_net::frame::put_frame;
    use tally_net::wire::{ClientReply, ClientResponse};
    use tokio::sync::Semaphore;

    /// The native protocol's framing, as `client::server` gives it.
    fn put(frames: &mut Vec<u8>, id: u64, result: Result<i64, WireError>) {
        let result = result.map(ClientReply::Value);
        put_frame(frames, &ClientResponse { id, result });
    }

    fn frame_reply(id: u64, conn: &mpsc::Sender<Vec<u8>>, slots: &Arc<Semaphore>) -> Reply {
        Reply::Frame {
            id,
            conn: Sink::new(conn.clone(), put),
            slot: slots.clone().try_acquire_owned().unwrap(),
            timer: Timer::start(Consistency::Quorum, Registry::leak()),
        }
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
