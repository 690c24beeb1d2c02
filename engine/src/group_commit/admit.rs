//! A unique counter's admissions, sealed on the caller's thread under the
//! count's cell lock (see `unique` for the model and the crash story).

use std::sync::atomic::Ordering::Release;

use super::GroupCommit;
use super::sealer::{added, own_shard, put_next_version, restart_expired};
use crate::cache::Cached;
use crate::cell::Cell;
use crate::error::{Error, Result};
use crate::key::Key;
use crate::unique;
use crate::version::Version;

/// What [`Engine::admit`](crate::Engine::admit) did.
#[derive(Debug)]
pub struct Admission {
    /// Per member, in order: whether this call counted it (false: it was
    /// present already, or earlier in this call).
    pub new: Vec<bool>,
    /// The state to replicate before the call is acknowledged, once
    /// durable: the count (its new own shard, or the whole cell when no
    /// member was new: an earlier attempt may not have reached its
    /// level) and every member's cell.
    pub replicate: Vec<(Key, Cell)>,
}

impl GroupCommit {
    /// Counts the members of `members` (their keys, with their cells as
    /// read just before) absent from the count `key`'s epoch, under its
    /// cell lock (held by `cached`'s owner) and the version `v`
    /// (read-locked): one new own shard of the count, one record with the
    /// members, their cells into `v`'s active memtable. A count whose
    /// deadline passed is restarted first (`restart_expired`): the shard,
    /// the record and the member cells are all in the new epoch.
    pub(crate) fn seal_admission(
        &self,
        key: &Key,
        cached: &mut Cached,
        v: &Version,
        members: &[Key],
        found: &[Cell],
    ) -> Result<Admission> {
        // An expired count starts again, as an add restarts an expired
        // counter: every member of its epoch is absent from the new one.
        restart_expired(&mut cached.cell);
        let epoch = cached.cell.epoch();
        let now_ms = crate::cell::now_ms();
        let mut new = vec![false; members.len()];
        let mut admitted: Vec<usize> = Vec::new();
        for (i, (m, cell)) in members.iter().zip(found).enumerate() {
            let twin = admitted.iter().any(|&j| members[j] == *m);
            if !twin && !unique::is_present(cell, epoch, now_ms) {
                new[i] = true;
                admitted.push(i);
            }
        }
        let member_cell = unique::member_cell(epoch, self.counter_id);
        let mut replicate = Vec::with_capacity(members.len() + 1);
        if admitted.is_empty() {
            replicate.push((key.clone(), cached.cell.clone()));
        } else {
            let cell = &mut cached.cell;
            let clock = cell.next_own_clock(self.counter_id)?;
            let own = own_shard(cell, self.counter_id);
            let others = cell.sum() - i128::from(own.value);
            let n = i64::try_from(admitted.len()).expect("a call's members fit an i64");
            let (value, _) = added(others, own.value, n)?;
            let mut out = self.outbox.lock();
            if out.closed {
                return Err(Error::Closed);
            }
            let outcome = put_next_version(cell, crate::cell::Shard { value, ..own }, clock, 1);
            let names: Vec<&[u8]> = admitted
                .iter()
                .map(|&i| unique::member_of(&members[i]))
                .collect();
            out.add_admission(key, &outcome.shard, epoch, &names, v.active.generation());
            cached.sealed_batch = out.batch;
            self.ids_batch.fetch_max(out.batch, Release);
            drop(out);
            cached.mark_written(key, v);
            // Same version as the record: a flush takes both or neither.
            for &i in &admitted {
                v.active.insert(members[i].clone(), member_cell.clone());
            }
            replicate.push((key.clone(), Cell::from_parts(epoch, [outcome.shard])));
        }
        for (i, m) in members.iter().enumerate() {
            if members[..i].contains(m) {
                continue; // a twin: replicated once
            }
            let cell = if new[i] {
                member_cell.clone()
            } else {
                found[i].clone()
            };
            replicate.push((m.clone(), cell));
        }
        Ok(Admission { new, replicate })
    }
}
