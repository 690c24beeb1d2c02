//! This node's changes of a partition, one round at a time.
//!
//! Proposers of one partition on one node would only outbid each other:
//! each prepare of one makes the other's proposal fail. So a node runs at
//! most one round per partition: a change asked while one runs waits, and
//! the next round makes every change that waited, in the order they came,
//! each from the state the one before it left (a batch: one prepare and
//! one proposal for all of them, however many clients asked). Only nodes
//! contend with each other, not clients.
//!
//! The waiting lists are pure bookkeeping ([`Queues`]); the runner that
//! takes them, a task of its own so that a client that goes away does not
//! stop the changes of the others, is `Proposer::agree`.

use std::any::Any;
use std::collections::HashMap;

use parking_lot::Mutex;
use tally_net::wire::{Registers, WireError};
use tokio::sync::oneshot;

/// What a change answers its client, typed by the caller
/// (`Node::agree`).
pub(crate) type Answer = Box<dyn Any + Send>;

/// A change of a partition's registers: from the registers decided so far
/// (live at the wall-clock reading it is given), the next ones and its
/// answer, or an error that changes nothing. It may run once per attempt.
pub(crate) type Change =
    Box<dyn FnMut(&Registers, u64) -> Result<(Registers, Answer), WireError> + Send>;

/// The most changes one round makes.
pub(crate) const BATCH_MAX: usize = 256;

/// A change waiting for its partition's next round.
pub(crate) struct Waiting {
    pub(crate) change: Change,
    pub(crate) reply: oneshot::Sender<Result<Answer, WireError>>,
}

/// Per partition, the changes waiting; a partition is listed while its
/// runner runs.
#[derive(Default)]
pub(crate) struct Queues {
    waiting: Mutex<HashMap<Vec<u8>, Vec<Waiting>>>,
}

impl Queues {
    /// Queues `w` for `partition`; true when no runner runs for it, so the
    /// caller must start one.
    pub(crate) fn push(&self, partition: &[u8], w: Waiting) -> bool {
        let mut waiting = self.waiting.lock();
        match waiting.get_mut(partition) {
            Some(q) => {
                q.push(w);
                false
            }
            None => {
                waiting.insert(partition.to_vec(), vec![w]);
                true
            }
        }
    }

    /// The next batch of `partition`'s changes, oldest first; `None` when
    /// none waits, and then the runner stops (the next push starts one).
    pub(crate) fn take(&self, partition: &[u8]) -> Option<Vec<Waiting>> {
        let mut waiting = self.waiting.lock();
        let q = waiting.get_mut(partition)?;
        if q.is_empty() {
            waiting.remove(partition);
            return None;
        }
        let rest = q.split_off(q.len().min(BATCH_MAX));
        Some(std::mem::replace(q, rest))
    }
}

/// A runner's hold on its partition: should the runner unwind, the
/// changes still waiting are dropped (their clients told the round
/// stopped) and the next change starts a new runner, rather than wait
/// for one that is gone.
pub(crate) struct Running<'a> {
    pub(crate) queues: &'a Queues,
    pub(crate) partition: &'a [u8],
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.queues.waiting.lock().remove(self.partition);
        }
    }
}

/// The most partitions [`Hints`] remembers; past it, it forgets them all.
const HINTS_MAX: usize = 4096;

/// What this node last saw each partition's registers hold, after its
/// own rounds: a hint of whether a batch would change anything (a poll of
/// a held lock would not), never an answer.
#[derive(Default)]
pub(crate) struct Hints {
    seen: Mutex<HashMap<Vec<u8>, Registers>>,
}

impl Hints {
    /// What this node last saw of `partition`.
    pub(crate) fn get(&self, partition: &[u8]) -> Option<Registers> {
        self.seen.lock().get(partition).cloned()
    }

    /// Whether this node saw anything of `partition`.
    pub(crate) fn has(&self, partition: &[u8]) -> bool {
        self.seen.lock().contains_key(partition)
    }

    /// Remembers `registers` as what `partition` holds.
    pub(crate) fn saw(&self, partition: &[u8], registers: Registers) {
        let mut seen = self.seen.lock();
        if seen.len() >= HINTS_MAX && !seen.contains_key(partition) {
            seen.clear();
        }
        seen.insert(partition.to_vec(), registers);
    }
}

/// Whether `batch` would leave `registers` as they are: every change in
/// it a no-op there (a `SET NX` of a key that is held, a compare that
/// fails), so that a read can answer it rather than a round.
pub(crate) fn changes_nothing(batch: &mut [Waiting], registers: &Registers, now_ms: u64) -> bool {
    apply_all(batch, registers, now_ms).0 == *registers
}

/// Runs `batch`'s changes in order on `registers`, each from the state
/// the one before left (a change that fails leaves it as it was): the
/// final state and each change's answer.
pub(crate) fn apply_all(
    batch: &mut [Waiting],
    registers: &Registers,
    now_ms: u64,
) -> (Registers, Vec<Result<Answer, WireError>>) {
    let mut state = registers.clone();
    let answers = batch
        .iter_mut()
        .map(|w| {
            (w.change)(&state, now_ms).map(|(next, answer)| {
                state = next;
                answer
            })
        })
        .collect();
    (state, answers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_net::wire::{ErrorKind, Register};

    fn waiting(change: Change) -> (Waiting, oneshot::Receiver<Result<Answer, WireError>>) {
        let (reply, rx) = oneshot::channel();
        (Waiting { change, reply }, rx)
    }

    fn append(byte: u8) -> Change {
        Box::new(move |r: &Registers, _| {
            let mut value = r.get(b"", 0).map(|r| r.value.clone()).unwrap_or_default();
            value.push(byte);
            let mut next = r.clone();
            next.put(Register {
                column: Vec::new(),
                value: value.clone(),
                at_ms: 0,
            });
            Ok((next, Box::new(value) as Answer))
        })
    }

    #[test]
    fn a_partition_has_one_runner_and_batches_what_waits() {
        let q = Queues::default();
        assert!(
            q.push(b"p", waiting(append(b'a')).0),
            "the first starts a runner"
        );
        assert!(!q.push(b"p", waiting(append(b'b')).0), "the second waits");
        assert!(
            q.push(b"other", waiting(append(b'z')).0),
            "partitions are apart"
        );
        assert_eq!(q.take(b"p").map(|b| b.len()), Some(2));
        // Taken while the runner runs: a push joins the next batch.
        assert!(!q.push(b"p", waiting(append(b'c')).0));
        assert_eq!(q.take(b"p").map(|b| b.len()), Some(1));
        // Nothing left: the runner stops, and the next push starts one.
        assert!(q.take(b"p").is_none());
        assert!(q.push(b"p", waiting(append(b'd')).0));
    }

    #[test]
    fn a_runner_that_unwinds_lets_the_next_change_start_one() {
        let q = Queues::default();
        let (w, told) = waiting(append(b'a'));
        assert!(q.push(b"p", w));
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _running = Running {
                queues: &q,
                partition: b"p",
            };
            panic!("a runner unwinds");
        }));
        assert!(unwound.is_err());
        assert!(q.push(b"p", waiting(append(b'b')).0));
        // The change that waited was dropped: its client hears so.
        assert!(told.blocking_recv().is_err());
    }

    #[test]
    fn hints_say_whether_a_batch_would_change_nothing() {
        let hints = Hints::default();
        assert!(hints.get(b"p").is_none());
        let held = apply_all(&mut [waiting(append(b'a')).0], &Registers::default(), 0).0;
        hints.saw(b"p", held.clone());
        assert_eq!(hints.get(b"p"), Some(held.clone()));
        let keep: Change = Box::new(|r: &Registers, _| Ok((r.clone(), Box::new(()) as Answer)));
        assert!(changes_nothing(&mut [waiting(keep).0], &held, 0));
        assert!(!changes_nothing(&mut [waiting(append(b'b')).0], &held, 0));
        for i in 0..HINTS_MAX as u32 {
            hints.saw(&i.to_be_bytes(), Registers::default());
        }
        assert!(hints.get(b"p").is_none(), "forgotten once full");
    }

    #[test]
    fn a_batch_is_at_most_batch_max_oldest_first() {
        let q = Queues::default();
        for i in 0..BATCH_MAX + 3 {
            let _ = q.push(b"p", waiting(append(i as u8)).0);
        }
        let mut first = q.take(b"p").unwrap_or_default();
        assert_eq!(first.len(), BATCH_MAX);
        let (state, _) = apply_all(&mut first[..2], &Registers::default(), 0);
        assert_eq!(state.get(b"", 0).map(|r| r.value.clone()), Some(vec![0, 1]));
        assert_eq!(q.take(b"p").map(|b| b.len()), Some(3));
    }

    #[test]
    fn each_change_sees_the_one_before_and_a_failure_changes_nothing() {
        let fail: Change = Box::new(|_, _| Err(WireError::new(ErrorKind::Internal, "no")));
        let mut batch: Vec<Waiting> = [append(b'a'), fail, append(b'b')]
            .into_iter()
            .map(|c| waiting(c).0)
            .collect();
        let (state, answers) = apply_all(&mut batch, &Registers::default(), 0);
        assert_eq!(
            state.get(b"", 0).map(|r| r.value.clone()),
            Some(b"ab".to_vec())
        );
        let values: Vec<Option<Vec<u8>>> = answers
            .into_iter()
            .map(|a| {
                a.ok()
                    .and_then(|a| a.downcast::<Vec<u8>>().ok())
                    .map(|v| *v)
            })
            .collect();
        assert_eq!(values, [Some(b"a".to_vec()), None, Some(b"ab".to_vec())]);
    }
}
