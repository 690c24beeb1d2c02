//! A unique counter's admissions, sealed on the caller's thread under the
//! count's cell lock (see `unique` for the model and the crash story).

use std::sync::atomic::Ordering::Release;

use super::GroupCommit;
use crate::add::OwnAdd;
use crate::cache::Cached;
use crate::cell::Cell;
use crate::error::Result;
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
    /// (read-locked): one new own shard of the count, sealed as every one
    /// is (see `seal`), one record with the members, their cells into
    /// `v`'s active memtable. A count whose deadline passed is restarted
    /// by the rule (once confirmed, as an add's: else the admission is
    /// refused with `Error::Expired`): the shard, the record and the
    /// member cells are all in the new epoch, where every member of the
    /// old one is absent.
    pub(crate) fn seal_admission(
        &self,
        key: &Key,
        cached: &mut Cached,
        v: &Version,
        members: &[Key],
        found: &[Cell],
    ) -> Result<Admission> {
        // A count whose deadline passed restarts as a counter does, once
        // confirmed if the options ask (`Options::confirm_restarts`): until
        // then `rule.add` refuses the admission, before anything is sealed.
        let mut rule = OwnAdd::start(&cached.cell, self.counter_id, self.on_expired(cached));
        // The epoch the count's new version lands in: a member admitted
        // before it is absent from it.
        let epoch = rule.epoch();
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
            rule.add(i64::try_from(admitted.len()).expect("a call's members fit an i64"))?;
            let names: Vec<&[u8]> = admitted
                .iter()
                .map(|&i| unique::member_of(&members[i]))
                .collect();
            let generation = v.active.generation();
            let outcome = self.seal_own(key, cached, v, &rule, |out, outcome| {
                out.add_admission(key, outcome, &names, generation);
                self.ids_batch.fetch_max(out.batch, Release);
                false // the call's ack wakes the syncer
            })?;
            // Same version as the record: a flush takes both or neither.
            for &i in &admitted {
                v.active.insert(
                    members[i].clone(),
                    member_cell.clone(),
                    self.versions.merger(),
                );
            }
            replicate.push((key.clone(), outcome.replica_cell()));
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
