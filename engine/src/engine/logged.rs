//! How the record of a whole cell, made under the cell's lock, reaches
//! the log: straight into the group commit's outbox on the caller's
//! thread, as a replica's apply does (no hand-off to the sealer, and on a
//! runtime that writes group commits as it parks, none to the syncer
//! either), or through the sealer while flushes are behind (the sealer
//! stalls records until a memtable is flushed).

use tokio::sync::oneshot;

use super::Engine;
use crate::cell::Cell;
use crate::error::{Error, Result};
use crate::key::Key;
use crate::version::Version;

/// Where a record went: its answer comes from [`Engine::durable`].
pub(super) enum Logged {
    /// In the outbox; `full`: the active memtable is due for a flush.
    Outbox { full: bool },
    /// With the sealer, and its waiter.
    Sealer(oneshot::Receiver<Result<()>>),
}

impl Engine {
    /// Logs `cell` for `key`, under the cell lock the caller holds, in
    /// version `v` (read-locked): in the outbox before the lock is
    /// released, so a barrier queued by anyone who then sees the new state
    /// follows it.
    pub(super) fn log_cell(&self, key: &Key, cell: &Cell, v: &Version) -> Result<Logged> {
        if v.frozen.len() < self.opts.frozen_memtables_max.max(1) {
            self.commit.append_now(key, cell, v)?;
            let full = v.active.bytes() >= self.opts.memtable_bytes_max;
            return Ok(Logged::Outbox { full });
        }
        let generation = v.active.generation();
        Ok(Logged::Sealer(
            self.commit.log_record(key, cell, generation),
        ))
    }

    /// Waits until a record [`Engine::log_cell`] made is durable (called
    /// once the cell lock is released).
    pub(super) async fn durable(&self, logged: Logged) -> Result<()> {
        let rx = self.written(logged);
        rx.await.map_err(|_| Error::Closed)?
    }

    /// Sees a record [`Engine::log_cell`] made written with the next group
    /// commit, without waiting for it.
    pub(super) fn let_go(&self, logged: Logged) {
        drop(self.written(logged));
    }

    /// The waiter of a record's group commit, which is due to be written.
    fn written(&self, logged: Logged) -> oneshot::Receiver<Result<()>> {
        match logged {
            Logged::Outbox { full } => {
                if full {
                    self.work.flush();
                }
                self.commit.ack_now()
            }
            Logged::Sealer(rx) => rx,
        }
    }
}
