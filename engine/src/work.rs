//! Requests to the background thread: a bounded channel of [`Work`].
//!
//! Whoever finds a memtable to flush (the sealer, the syncer, a writer)
//! sends [`Work::Flush`] without waiting; the background thread takes
//! every request queued at once, so any number of flush requests made
//! while it works come to one more flush.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::time::Duration;

/// Requests the background thread's mailbox holds. A full mailbox holds a
/// flush request already, which covers any new one.
const WORK_QUEUE_MAX: usize = 4;

/// What the background thread is asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Work {
    /// Freeze the active memtable if it is full, flush every frozen one,
    /// then compact what is due.
    Flush,
    /// Stop, whatever else is queued.
    Shutdown,
}

/// A bounded channel to the background thread.
pub(crate) fn channel() -> (WorkSender, WorkReceiver) {
    let (tx, rx) = mpsc::sync_channel(WORK_QUEUE_MAX);
    (WorkSender(tx), WorkReceiver(rx))
}

/// The sending side: cheap to clone, never blocks for a flush.
#[derive(Clone)]
pub(crate) struct WorkSender(SyncSender<Work>);

impl WorkSender {
    /// Asks for a flush. Never blocks: a full mailbox holds a flush request
    /// already, and a background thread that is gone flushes nothing.
    pub(crate) fn flush(&self) {
        let _covered_or_gone = self.0.try_send(Work::Flush);
    }

    /// Tells the background thread to stop; waits while its mailbox is full.
    pub(crate) fn shutdown(&self) {
        let _gone_already = self.0.send(Work::Shutdown);
    }
}

/// The background thread's side.
pub(crate) struct WorkReceiver(Receiver<Work>);

impl WorkReceiver {
    /// Waits up to `timeout` for requests and answers all that are queued as
    /// one: [`Work::Shutdown`] if any is (or every sender is gone), else
    /// [`Work::Flush`]; `None` if none came.
    pub(crate) fn next(&self, timeout: Duration) -> Option<Work> {
        let first = match timeout.is_zero() {
            // A look, not a wait: no clock read (a stepped engine looks at
            // every park).
            true => match self.0.try_recv() {
                Ok(work) => work,
                Err(TryRecvError::Empty) => return None,
                Err(TryRecvError::Disconnected) => return Some(Work::Shutdown),
            },
            false => match self.0.recv_timeout(timeout) {
                Ok(work) => work,
                Err(RecvTimeoutError::Timeout) => return None,
                Err(RecvTimeoutError::Disconnected) => return Some(Work::Shutdown),
            },
        };
        if first == Work::Shutdown {
            return Some(first);
        }
        loop {
            match self.0.try_recv() {
                Ok(Work::Shutdown) | Err(TryRecvError::Disconnected) => {
                    return Some(Work::Shutdown);
                }
                Ok(Work::Flush) => {}
                Err(TryRecvError::Empty) => return Some(Work::Flush),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queued_requests_come_as_one_and_shutdown_wins() {
        let (tx, rx) = channel();
        assert_eq!(rx.next(Duration::ZERO), None);
        for _ in 0..10 {
            tx.flush(); // never blocks, though the mailbox holds fewer
        }
        assert_eq!(rx.next(Duration::ZERO), Some(Work::Flush));
        assert_eq!(rx.next(Duration::ZERO), None);
        tx.flush();
        tx.shutdown();
        tx.flush();
        assert_eq!(rx.next(Duration::ZERO), Some(Work::Shutdown));
        drop(tx);
        assert_eq!(rx.next(Duration::ZERO), Some(Work::Shutdown));
    }
}
