//! The leader's changes of a counter's epoch: `SET`, `EXPIRE`, `DEL`
//! (the rule is [`crate::change::decide`]; this logs what it made).

use super::Engine;
use crate::cell::Cell;
use crate::change::{Change, Decided, decide_reading};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::list::{ListChange, ListDone, decide_list};

impl Engine {
    /// Makes `change` to the counter at `now_ms` (wall-clock ms) as its
    /// leader, and waits until it is durable here. Answers what it did and
    /// the state for the other replicas: the cell's epoch with no shards
    /// (a new epoch replaces theirs whole; a new deadline merges into the
    /// same epoch). A change whose condition fails logs nothing. Adds
    /// racing a SET or a reset that lose are discarded ("reset wins").
    /// When `reads`, it answers the value before, and is refused on a list
    /// (see [`crate::change::decide_reading`]).
    pub async fn change(
        &self,
        key: &Key,
        change: Change,
        now_ms: u64,
        reads: bool,
    ) -> Result<(Decided, Cell)> {
        let leader = self.counter_id();
        self.change_with(key, |cell| {
            let done = decide_reading(cell, change, leader, now_ms, reads)?;
            Ok((done.applied, done))
        })
        .await
    }

    /// Makes `change` to the list at `when` as its leader, and waits
    /// until it is durable here; like [`Engine::change`] (the rule is
    /// [`crate::list::decide_list`]), the state for the other replicas is
    /// the new epoch with its list.
    pub async fn change_list(
        &self,
        key: &Key,
        change: &ListChange,
        when: crate::list::At,
    ) -> Result<(ListDone, Cell)> {
        let leader = self.counter_id();
        let changed = self
            .change_with(key, |cell| {
                let done = decide_list(cell, change, leader, when)?;
                Ok((done.applied, done))
            })
            .await?;
        if changed.0.applied {
            self.lists.changed(key);
        }
        Ok(changed)
    }

    /// A wake-up for whoever waits on the list `key`: it comes when this
    /// node changes the list (or another list of its bucket), as its
    /// leader or as its replica. Enable it (`Notified::enable`) before
    /// looking at the list, so that a change in between still wakes.
    pub fn list_changed(&self, key: &Key) -> tokio::sync::futures::Notified<'_> {
        self.lists.wait(key)
    }

    /// Makes `change` (an `EXPIRE` of a whole key: see
    /// [`crate::change::expire_targets`] for which columns) to each of
    /// `columns` of `partition` at `now_ms` as their leader, each under its
    /// own cell lock by the rule of [`crate::change::decide`], and waits
    /// until every change made is durable here (all are logged before
    /// the first wait, so one group commit usually covers them). Answers, per column, what it did and the header for the
    /// other replicas. The columns are changed one after the other, not
    /// under one lock: a write racing the change lands before or after it
    /// in each cell, as it would in one counter.
    pub async fn change_row(
        &self,
        partition: &[u8],
        columns: &[&[u8]],
        change: Change,
        now_ms: u64,
    ) -> Result<Vec<(Key, Decided, Cell)>> {
        self.check_writable()?;
        let leader = self.counter_id();
        let mut done = Vec::with_capacity(columns.len());
        let mut logs = Vec::new();
        for column in columns {
            let key = Key::new(partition, column)?;
            let (decided, state, logged) = self.cache.with_cell(&key, |cached, v| {
                let decided = decide_reading(&mut cached.cell, change, leader, now_ms, false)?;
                let state = cached.cell.header();
                if !decided.applied {
                    return Ok::<_, Error>((decided, state, None));
                }
                cached.mark_written(&key, v);
                let logged = self.log_cell(&key, &cached.cell, v)?;
                Ok((decided, state, Some(logged)))
            })??;
            logs.extend(logged);
            done.push((key, decided, state));
        }
        for logged in logs {
            self.durable(logged).await?;
        }
        Ok(done)
    }

    /// A change of the cell's header under its lock by `decide`, which
    /// says whether it changed it: logged if it did, and answered once
    /// durable here, with the header for the other replicas.
    async fn change_with<T>(
        &self,
        key: &Key,
        decide: impl FnOnce(&mut Cell) -> Result<(bool, T)>,
    ) -> Result<(T, Cell)> {
        self.check_writable()?;
        let (done, state, logged) = self.cache.with_cell(key, |cached, v| {
            let (applied, done) = decide(&mut cached.cell)?;
            let state = cached.cell.header();
            if !applied {
                return Ok::<_, Error>((done, state, None));
            }
            cached.mark_written(key, v);
            let logged = self.log_cell(key, &cached.cell, v)?;
            Ok((done, state, Some(logged)))
        })??;
        if let Some(logged) = logged {
            self.durable(logged).await?;
        }
        Ok((done, state))
    }
}
