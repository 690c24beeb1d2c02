//! An engine without threads (`Options::stepped`), for a deterministic
//! simulation: the work of the sealer, the syncer and the background
//! thread is done on the runtime's thread as it parks, through the
//! engine's [`ParkCommit`](crate::ParkCommit) hook, turn by turn until
//! none is left. Nothing then happens but what the runtime's tasks cause,
//! in the order they cause it.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::background::Background;
use crate::error::{Error, Result};
use crate::group_commit::{GroupCommit, Steps};
use crate::options::{OnPark, Options, SyncMode};
use crate::work::WorkReceiver;

/// Refuses options a stepped engine cannot run with, before anything is
/// opened: it needs the park hook that runs its work, and syncs in batch
/// mode only.
pub(crate) fn check(opts: &Options) -> Result<()> {
    if !opts.stepped {
        return Ok(());
    }
    if opts.park_commit.is_none() {
        return Err(Error::Options(
            "a stepped engine needs a park hook to run its work".into(),
        ));
    }
    if opts.sync != SyncMode::Batch {
        return Err(Error::Options(
            "a stepped engine syncs in batch mode only".into(),
        ));
    }
    Ok(())
}

/// Turns in a row one park takes at most: each seals, writes or flushes
/// something, so more means a loop that makes no progress.
const TURNS_MAX: usize = 10_000;

/// The threads' work, for the hook to run.
pub(crate) struct Stepper {
    commit: Arc<GroupCommit>,
    background: Arc<Background>,
    state: Mutex<(Steps, WorkReceiver)>,
}

impl Stepper {
    pub(crate) fn new(
        commit: Arc<GroupCommit>,
        background: Arc<Background>,
        work: WorkReceiver,
    ) -> Arc<Stepper> {
        let steps = commit.steps();
        Arc::new(Stepper {
            commit,
            background,
            state: Mutex::new((steps, work)),
        })
    }

    /// One turn of each: flushes first (a sealer turn never waits for
    /// them), then the sealer and the syncer. Whether any did anything.
    fn turn(&self) -> bool {
        let mut state = self.state.lock();
        let (steps, work) = &mut *state;
        let flushed = self.background.step(work);
        self.commit.step(steps) || flushed
    }

    /// Turns until none is left.
    pub(crate) fn drain(&self) {
        for _ in 0..TURNS_MAX {
            if !self.turn() {
                return;
            }
        }
        tracing::error!("a stepped engine still had work after {TURNS_MAX} turns");
    }
}

impl OnPark for Stepper {
    fn on_park(&self) {
        self.drain();
    }
}

impl crate::Engine {
    /// Stops a stepped engine as a killed process stops: nothing more is
    /// written (no log record, no flush, no clean marker: the next open
    /// is a new incarnation), and every waiter is answered with an error
    /// (a killed process's clients see their connection drop). What was
    /// written before stays, as a killed process's writes stay in the
    /// OS's page cache. For the simulator's crashes; an engine with
    /// threads is left to them.
    pub fn crash(&self) {
        self.poison.set(|| "the node crashed".into());
        self.commit.fail_waiters();
        // Dropped without a last turn: a turn would flush memtables that
        // hold what the log never got.
        drop(self.stepper.lock().take());
        self.commit.close();
        self.versions.close();
        self.commit.close_relay();
    }
}
