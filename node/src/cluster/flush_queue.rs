//! Flushes asked of one coordinator at once run together, the way a group
//! commit writes the records that queued behind the one being written.
//!
//! A flush must drop every add acknowledged before it was asked, so one
//! asked while another runs cannot simply share the running one's result:
//! that one may already have moved the database, and adds acknowledged
//! since sit in the new generation. It queues instead, and every flush
//! asked while the current one runs joins the same queued batch, which
//! runs once, after the current one ends, with the union of their
//! databases; each caller gets that batch's answer.
//!
//! [`Queue`] is the rule, with no I/O: who joins which batch and when a
//! driver must start. `topology::flush::run` drives it. [`Coalesced`] is
//! the simpler rule the background collection of flushed generations
//! follows (`topology::collect`): a run asked for while one is queued
//! joins it.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};

use tally_net::wire::WireError;
use tokio::sync::oneshot;

/// Who waits for a flush's answer.
pub(crate) type Waiter = oneshot::Sender<Result<(), WireError>>;

/// The flushes that will run together, and who waits for their answer.
#[derive(Debug)]
pub(crate) struct Batch<W> {
    /// The databases to move to a new generation.
    pub(crate) dbs: BTreeSet<u8>,
    /// Whoever asked, each told the batch's answer.
    pub(crate) waiters: Vec<W>,
}

/// The flushes a coordinator runs, one batch at a time.
///
/// # Invariants
/// - A batch is taken only after every [`Queue::join`] it holds: each
///   caller's flush begins after it asked.
/// - At most one driver runs: [`Queue::join`] answers "start one" only
///   when none is running, and a driver stops only when [`Queue::take`]
///   finds nothing queued, in the same critical section that clears it.
#[derive(Debug)]
pub(crate) struct Queue<W> {
    /// Whether a driver is running batches.
    driving: bool,
    /// The batch the next flush runs, gathering joins until it is taken.
    next: Option<Batch<W>>,
}

impl<W> Default for Queue<W> {
    fn default() -> Self {
        Queue {
            driving: false,
            next: None,
        }
    }
}

impl<W> Queue<W> {
    /// Joins `waiter`, flushing `dbs`, to the queued batch (a new one if
    /// none is queued); answers whether the caller must start a driver.
    pub(crate) fn join(&mut self, dbs: &[u8], waiter: W) -> bool {
        let batch = self.next.get_or_insert_with(|| Batch {
            dbs: BTreeSet::new(),
            waiters: Vec::new(),
        });
        batch.dbs.extend(dbs);
        batch.waiters.push(waiter);
        !std::mem::replace(&mut self.driving, true)
    }

    /// Whether a driver is running batches.
    pub(crate) fn is_driving(&self) -> bool {
        self.driving
    }

    /// The driver's next batch; `None` when none is queued, and the driver
    /// stops (the next join starts another).
    pub(crate) fn take(&mut self) -> Option<Batch<W>> {
        let next = self.next.take();
        self.driving = next.is_some();
        next
    }
}

/// A job asked for again while a run of it is queued runs once: the
/// queued run reads what it works on only when it begins.
///
/// # Invariants
/// - Every [`Coalesced::ask`] is followed by a [`Coalesced::begin`] that
///   comes after it: the one it queued, or the queued one it joined.
#[derive(Debug, Default)]
pub(crate) struct Coalesced(AtomicBool);

impl Coalesced {
    /// Asks for a run: whether the caller must queue one (none is).
    pub(crate) fn ask(&self) -> bool {
        !self.0.swap(true, Ordering::AcqRel)
    }

    /// A queued run begins: asks from here on queue another.
    pub(crate) fn begin(&self) {
        self.0.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn flushes_asked_while_one_runs_share_the_next_batch_and_one_driver() {
        let mut q = Queue::default();
        assert!(q.join(&[0], 'a'), "nothing running: start a driver");
        let first = q.take().unwrap();
        assert_eq!((first.dbs, first.waiters), (BTreeSet::from([0]), vec!['a']));
        assert!(!q.join(&[3], 'b'), "the driver runs the next batch");
        assert!(!q.join(&[0, 3], 'c') && !q.join(&[5], 'd'));
        let second = q.take().unwrap();
        assert_eq!(second.dbs, BTreeSet::from([0, 3, 5]), "the union");
        assert_eq!(second.waiters, vec!['b', 'c', 'd']);
        assert!(!q.join(&[1], 'e'), "asked while the second runs");
        assert_eq!(q.take().unwrap().waiters, vec!['e']);
        assert!(q.take().is_none(), "nothing queued: the driver stops");
        assert!(q.join(&[1], 'f'), "and the next flush starts another");
    }

    #[test]
    fn asks_while_a_run_is_queued_join_it_and_asks_after_it_began_queue_another() {
        let c = Coalesced::default();
        assert!(c.ask(), "none queued: queue one");
        assert!(
            !c.ask() && !c.ask(),
            "flushes meanwhile join the queued run"
        );
        c.begin();
        assert!(c.ask(), "the run may have read the ring before this flush");
        assert!(!c.ask());
        c.begin();
        c.begin();
        assert!(c.ask());
    }
}
