//! What every RESP connection of one node shares: when it began serving
//! (`INFO`'s uptime), the numbers of its connections (`CLIENT ID`), its
//! `SCAN` cursors, and its scripts' threads, memory and runs (`lua`), and
//! the turns its scripts of one key take (`turns`). One per `serve`, which a node runs once; each
//! connection's `Session` holds it, so that two nodes in one process keep
//! their own.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tally_world::Instant;

use parking_lot::{Mutex, MutexGuard};

use super::cursors::{CURSORS_MAX, Cursors};
use super::lua::runner::Pool;
use super::lua::runs::Runs;
use super::turns::Turns;

/// One node's RESP state.
#[derive(Debug)]
pub(crate) struct Shared {
    started: Instant,
    next_session: AtomicU64,
    cursors: Mutex<Cursors>,
    scripts: Pool,
    runs: Runs,
    turns: Turns,
}

impl Shared {
    /// The state of a node that begins serving RESP now.
    pub(crate) fn new() -> Arc<Shared> {
        // Cursor numbers from a clock: a cursor from before a restart is
        // unlikely to name a place of this run.
        let seed = (tally_world::since_epoch().as_micros() as u64 & 0x0000_FFFF_FFFF_FFFF).max(1);
        Arc::new(Shared {
            started: Instant::now(),
            next_session: AtomicU64::new(1),
            cursors: Mutex::new(Cursors::new(CURSORS_MAX, seed << 8)),
            scripts: Pool::default(),
            runs: Runs::default(),
            turns: Turns::default(),
        })
    }

    /// When this node began serving RESP.
    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    /// A new connection's id, unique on this node.
    pub(crate) fn next_session_id(&self) -> u64 {
        self.next_session.fetch_add(1, Ordering::Relaxed)
    }

    /// The threads this node's scripts run on.
    pub(crate) fn scripts(&self) -> &Pool {
        &self.scripts
    }

    /// The runs of this node's scripts, as `SCRIPT KILL` sees them.
    /// The turns of the scripts of one key (`turns`).
    pub(crate) fn turns(&self) -> &Turns {
        &self.turns
    }

    pub(crate) fn runs(&self) -> &Runs {
        &self.runs
    }

    /// This node's `SCAN` cursors.
    pub(crate) fn cursors(&self) -> MutexGuard<'_, Cursors> {
        self.cursors.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::resp::cursors::Place;

    #[test]
    fn two_nodes_keep_their_own_ids_and_cursors() {
        let (one, two) = (Shared::new(), Shared::new());
        assert_eq!((one.next_session_id(), one.next_session_id()), (1, 2));
        assert_eq!(two.next_session_id(), 1, "numbered per node");
        let place = Place {
            db: 0,
            after: tally_net::wire::WireKey::new(b"k", b""),
            last: None,
        };
        let id = one.cursors().issue(place.clone());
        assert_eq!(one.cursors().place(id), Some(place));
        assert_eq!(two.cursors().place(id), None, "another node's cursor");
    }
}
