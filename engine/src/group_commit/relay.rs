//! Answers from the sealer and the syncer, handed to the callers' runtime
//! in one wake-up per batch.
//!
//! The sealer and the syncer answer waiters through tokio oneshot channels.
//! Sent from a thread outside the runtime, every answer schedules its task
//! remotely, and a current-thread runtime pays one `write` to its eventfd
//! per remote wake-up (plus a context switch when it was asleep). One
//! fsync can release dozens of waiters: a leader's hot counter, a
//! replication batch. With a relay, those threads append the batch to a
//! mailbox and wake one task, the relay, which runs on the callers'
//! runtime and sends every answer there, where waking a task costs no
//! system call.
//!
//! The relay is optional (`Options::answer_on`): without one, or once its
//! task is gone, answers are sent from those threads as before.
//!
//! # Invariants
//! - An answer is delivered exactly once: by the relay task, or directly
//!   when no relay runs (the task's drop hands back what it still holds).
//! - The relay task ends after the engine closes and the mailbox is empty.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::error::Result;
use crate::outcome::AddOutcome;

/// One answer for one waiter.
pub(crate) enum Answer {
    /// A record or barrier is durable (or failed).
    Ack(oneshot::Sender<Result<()>>, Result<()>),
    /// A leader add is durable (or failed).
    Add(oneshot::Sender<Result<AddOutcome>>, Result<AddOutcome>),
    /// A queued leader add is sealed, its fsync still to come.
    Sealed(oneshot::Sender<AddOutcome>, AddOutcome),
}

impl Answer {
    /// Sends the answer from this thread.
    pub(crate) fn send(self) {
        // A waiter that gave up needs no answer.
        match self {
            Answer::Ack(tx, r) => drop(tx.send(r)),
            Answer::Add(tx, r) => drop(tx.send(r)),
            Answer::Sealed(tx, o) => drop(tx.send(o)),
        }
    }
}

#[derive(Default)]
struct Mailbox {
    answers: Vec<Answer>,
    waker: Option<Waker>,
    /// A relay task exists (spawned, not yet dropped).
    running: bool,
    /// The engine closed: the task ends once the mailbox is empty.
    closed: bool,
}

/// The mailbox shared by the sealer, the syncer and the relay task.
#[derive(Default)]
pub(crate) struct Relay {
    mailbox: Mutex<Mailbox>,
}

impl Relay {
    /// Starts the relay task on `runtime`.
    pub(crate) fn start(self: &Arc<Self>, runtime: &tokio::runtime::Handle) {
        self.mailbox.lock().running = true;
        runtime.spawn(RelayTask {
            relay: self.clone(),
            batch: Vec::new(),
        });
    }

    /// Delivers (and empties) `answers`: through the relay task with one
    /// wake-up, or right here when none runs.
    pub(crate) fn deliver(&self, answers: &mut Vec<Answer>) {
        if answers.is_empty() {
            return;
        }
        let mut m = self.mailbox.lock();
        if !m.running {
            drop(m);
            answers.drain(..).for_each(Answer::send);
            return;
        }
        let was_empty = m.answers.is_empty();
        m.answers.append(answers);
        // A non-empty mailbox means the task was woken and has not run yet.
        let waker = if was_empty { m.waker.take() } else { None };
        drop(m);
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// The engine closed: the task ends once it has delivered everything.
    pub(crate) fn close(&self) {
        let waker = {
            let mut m = self.mailbox.lock();
            m.closed = true;
            m.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// The task that sends answers on the callers' runtime.
struct RelayTask {
    relay: Arc<Relay>,
    /// Kept allocated between batches.
    batch: Vec<Answer>,
}

impl Future for RelayTask {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        loop {
            {
                let mut m = this.relay.mailbox.lock();
                if m.answers.is_empty() {
                    if m.closed {
                        return Poll::Ready(());
                    }
                    if !m.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                        m.waker = Some(cx.waker().clone());
                    }
                    return Poll::Pending;
                }
                std::mem::swap(&mut this.batch, &mut m.answers);
            }
            this.batch.drain(..).for_each(Answer::send);
        }
    }
}

impl Drop for RelayTask {
    fn drop(&mut self) {
        // The runtime is going away: whatever is left is answered directly.
        let left = {
            let mut m = self.relay.mailbox.lock();
            m.running = false;
            m.waker = None;
            std::mem::take(&mut m.answers)
        };
        left.into_iter()
            .chain(self.batch.drain(..))
            .for_each(Answer::send);
    }
}
