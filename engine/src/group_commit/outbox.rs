//! The outbox: sealed work waiting for the next group commit, and what the
//! syncer sleeps for.
//!
//! Work comes in from the sealer and from callers' threads: new versions
//! of this node's shards, sealed in one order (see `seal`:
//! [`Outbox::add_sealed`], [`Outbox::add_batched`], [`Outbox::add_once`],
//! [`Outbox::add_admission`]), replicas' cells ([`Outbox::add_cell`]), the
//! records the sealer took from its queue ([`Outbox::add_records`]), and
//! waiters ([`Outbox::add_ack`], [`Outbox::hand_over`]); whoever writes a
//! group commit takes it all at once ([`Outbox::take_group`]). Each of
//! these checks the invariants in debug builds.

use tally_world::Instant;

use tokio::sync::oneshot;

use crate::cell::Cell;
use crate::commitlog;
use crate::error::Result;
use crate::ids::ClientId;
use crate::ids::record::Applied;
use crate::ids::tail::TailIds;
use crate::key::Key;
use crate::outcome::AddOutcome;

/// The waiters of adds sealed together, each with the value it answers.
pub(super) type Waiters = Vec<(i64, oneshot::Sender<Result<AddOutcome>>)>;

/// One sealed key: its outcome, and its waiters, answered after the fsync,
/// each with the value it answers (see `seal`).
pub(super) type Sealed = (AddOutcome, Waiters);

/// A waiter for records (or for a barrier).
pub(super) type Ack = oneshot::Sender<Result<()>>;

/// Sealed work waiting for the syncer (or a runtime about to park).
///
/// # Invariants
/// - `waiters == acks.len() + Σ waiters of sealed`: what the next write
///   releases. A batched add has no waiter of its own: the one ack its
///   batch queues behind it counts, in `acks`.
/// - Every sealed add has its record here: `sealed` non-empty or
///   `batched_adds > 0` ⇒ `records` non-empty. (An ack may come alone: a
///   barrier.)
/// - A sealed key's waiters are among the adds it combined:
///   `1 ≤ waiters ≤ combined`.
/// - `records` non-empty ⇒ `gen_max ≥ 1` (generations start at 1): the
///   segment they go to is kept until that memtable is flushed.
/// - `deferred_at` is set only while there is work here (or the outbox is
///   closed, when nothing is written any more).
/// - `batch ≥ 1`: everything here goes into group commit `batch`, and
///   every group commit before it has been taken.
pub(super) struct Outbox {
    records: Vec<u8>,
    gen_max: u64,
    acks: Vec<Ack>,
    sealed: Vec<Sealed>,
    /// Records of new versions without waiters of their own (a batch's
    /// add, adds with ids, admissions), acknowledged through `acks`.
    batched_adds: u64,
    /// Waiters behind `acks` and `sealed`.
    pub(super) waiters: usize,
    /// What the syncer sleeps for: `Some(0)` any work, `Some(n)` until `n`
    /// waiters are in; `None` while it is busy (nobody to wake).
    pub(super) wake_at: Option<usize>,
    /// The syncer sleeps for at most `WATCH_POLL`: it will find work left
    /// for a runtime that parks (see `park`) without being woken.
    pub(super) watching: bool,
    /// When work was first left here for a runtime to write as it parks.
    pub(super) deferred_at: Option<Instant>,
    /// Work came that nobody will write as they park: the syncer acts now.
    pub(super) act_now: bool,
    /// Memtable generation flushed up to (log segments may go).
    pub(super) flushed_gen: u64,
    /// The group commit being filled (numbered from 1).
    pub(super) batch: u64,
    /// Set by the sealer when it has handed over its last work, or when
    /// an engine thread died.
    pub(super) closed: bool,
}

/// One group commit, taken out of the outbox by whoever writes it.
pub(super) struct Group {
    pub(super) batch: u64,
    pub(super) records: Vec<u8>,
    pub(super) gen_max: u64,
    pub(super) acks: Vec<Ack>,
    pub(super) sealed: Vec<Sealed>,
    pub(super) batched_adds: u64,
    /// Waiters this group releases.
    pub(super) released: usize,
    /// The outbox's `flushed_gen` when it was taken.
    pub(super) flushed_gen: u64,
}

impl Outbox {
    /// An empty outbox whose first group commit follows `last_batch`.
    pub(super) fn after(last_batch: u64) -> Self {
        Outbox {
            batch: last_batch + 1,
            ..Outbox::default()
        }
    }
}

impl Default for Outbox {
    fn default() -> Self {
        Outbox {
            records: Vec::new(),
            gen_max: 0,
            acks: Vec::new(),
            sealed: Vec::new(),
            batched_adds: 0,
            waiters: 0,
            wake_at: None,
            watching: false,
            deferred_at: None,
            act_now: false,
            flushed_gen: 0,
            batch: 1,
            closed: false,
        }
    }
}

impl Outbox {
    /// Whether a write would have anything to do.
    pub(super) fn has_work(&self) -> bool {
        !self.acks.is_empty() || !self.sealed.is_empty() || !self.records.is_empty()
    }

    /// Whether the syncer, asleep, would act on what is here now. It is
    /// woken only then: a futex wake-up per sealed batch cost more than the
    /// sealing.
    pub(super) fn syncer_would_act(&self) -> bool {
        match self.wake_at {
            Some(0) => self.has_work(),
            Some(n) => self.waiters >= n,
            None => false,
        }
    }

    /// After work was added by a thread that holds the outbox: whether that
    /// thread must wake the syncer. A thread whose runtime writes group
    /// commits as it parks (`parks_soon`, asked only while the syncer
    /// watches) leaves the work to itself, unless work left earlier is
    /// overdue (`WATCH`); otherwise the syncer is woken if it would act.
    pub(super) fn wake_for(&mut self, parks_soon: impl FnOnce() -> bool) -> bool {
        if self.watching && parks_soon() {
            let now = Instant::now();
            let since = *self.deferred_at.get_or_insert(now);
            if now < since + super::park::WATCH {
                return false;
            }
            // The runtime has not parked for a while: hand over to the syncer.
        }
        self.act_now = true;
        self.syncer_would_act()
    }

    /// Adds the record of combined adds' new version of this node's shard
    /// of `key` (`outcome`), written into memtable `generation`, with the
    /// adds' waiters.
    pub(super) fn add_sealed(
        &mut self,
        key: &Key,
        outcome: &AddOutcome,
        generation: u64,
        waiters: Waiters,
    ) {
        self.append_own(key, outcome, generation);
        self.waiters += waiters.len();
        self.sealed.push((outcome.clone(), waiters));
        self.check_invariants();
    }

    /// Adds the record of one add of a batch; the batch's ack comes apart.
    pub(super) fn add_batched(&mut self, key: &Key, outcome: &AddOutcome, generation: u64) {
        self.append_own(key, outcome, generation);
        self.batched_adds += 1;
        self.check_invariants();
    }

    /// Adds the record of adds with ids: the new own shard and the ids it
    /// applied, in one record; the batch's ack comes apart.
    pub(super) fn add_once(
        &mut self,
        key: &Key,
        outcome: &AddOutcome,
        ops: &[(ClientId, Applied)],
        generation: u64,
    ) {
        let own = std::slice::from_ref(&outcome.shard);
        commitlog::encode_record_ops(&mut self.records, key, outcome.epoch, own, ops);
        self.gen_max = self.gen_max.max(generation);
        self.batched_adds += 1;
        self.check_invariants();
    }

    /// Adds the record of a unique counter's admissions: the count's new
    /// own shard and the members it admitted, in one record; the ack comes
    /// apart.
    pub(super) fn add_admission(
        &mut self,
        key: &Key,
        outcome: &AddOutcome,
        members: &[&[u8]],
        generation: u64,
    ) {
        let own = std::slice::from_ref(&outcome.shard);
        let epoch = outcome.epoch;
        commitlog::encode_record_members(&mut self.records, key, epoch, own, &[], members);
        self.gen_max = self.gen_max.max(generation);
        self.batched_adds += 1;
        self.check_invariants();
    }

    /// Adds the record of a replica's `cell`; its ack comes apart.
    pub(super) fn add_cell(&mut self, key: &Key, cell: &Cell, generation: u64) {
        commitlog::encode_record(&mut self.records, key, cell);
        self.gen_max = self.gen_max.max(generation);
        self.check_invariants();
    }

    /// Adds the record of a replica's `cell` and the ids `tail` that came
    /// with it; its ack comes apart.
    pub(super) fn add_tail_cell(
        &mut self,
        key: &Key,
        cell: &Cell,
        tail: &TailIds,
        generation: u64,
    ) {
        commitlog::encode_record_tail(&mut self.records, key, cell, tail);
        self.gen_max = self.gen_max.max(generation);
        self.check_invariants();
    }

    /// Adds a waiter for everything here now.
    pub(super) fn add_ack(&mut self, ack: Ack) {
        self.acks.push(ack);
        self.waiters += 1;
        self.check_invariants();
    }

    /// Adds the framed records the sealer took from its queue (`apply`'s
    /// and `reset`'s, applied in memory already), written into memtables
    /// up to `gen_max`; their acks come with [`Outbox::hand_over`].
    pub(super) fn add_records(&mut self, records: &[u8], gen_max: u64) {
        self.records.extend_from_slice(records);
        self.gen_max = self.gen_max.max(gen_max);
        self.check_invariants();
    }

    /// Ends one turn of the sealer: the acks queued with its records, behind
    /// everything it put here; the syncer acts now.
    pub(super) fn hand_over(&mut self, acks: Vec<Ack>) {
        self.waiters += acks.len();
        self.acks.extend(acks);
        self.act_now = true;
        self.check_invariants();
    }

    /// Takes everything here as the next group commit, leaving `spare` (an
    /// empty buffer) for the records that come next.
    pub(super) fn take_group(&mut self, spare: Vec<u8>) -> Group {
        debug_assert!(spare.is_empty(), "spare buffer holds {} bytes", spare.len());
        let batch = self.batch;
        self.batch += 1;
        self.deferred_at = None;
        self.act_now = false;
        let group = Group {
            batch,
            records: std::mem::replace(&mut self.records, spare),
            gen_max: std::mem::take(&mut self.gen_max),
            acks: std::mem::take(&mut self.acks),
            sealed: std::mem::take(&mut self.sealed),
            batched_adds: std::mem::take(&mut self.batched_adds),
            released: std::mem::take(&mut self.waiters),
            flushed_gen: self.flushed_gen,
        };
        self.check_invariants();
        group
    }

    /// Memtables up to `generation` are flushed.
    pub(super) fn set_flushed(&mut self, generation: u64) {
        // Frozen memtables are flushed oldest first, one flush at a time.
        debug_assert!(
            generation >= self.flushed_gen,
            "flushed generation went back: {generation} < {}",
            self.flushed_gen
        );
        self.flushed_gen = generation;
    }

    /// Nothing more comes in; what is here is still written.
    pub(super) fn close(&mut self) {
        self.closed = true;
    }

    /// An engine thread died: closes the outbox, drops its records (a
    /// poisoned engine writes nothing) and hands back its waiters.
    pub(super) fn fail(&mut self) -> (Vec<Ack>, Vec<Sealed>) {
        self.closed = true;
        self.records.clear();
        self.batched_adds = 0;
        self.waiters = 0;
        let taken = (
            std::mem::take(&mut self.acks),
            std::mem::take(&mut self.sealed),
        );
        self.check_invariants();
        taken
    }

    /// The record of a new own shard alone: the rest of the cell is
    /// already wherever it came from.
    fn append_own(&mut self, key: &Key, outcome: &AddOutcome, generation: u64) {
        let own = std::slice::from_ref(&outcome.shard);
        commitlog::encode_record_parts(&mut self.records, key, outcome.epoch, own);
        self.gen_max = self.gen_max.max(generation);
    }

    /// Asserts the invariants (debug builds only).
    fn check_invariants(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        let mut sealed_waiters = 0;
        for (outcome, waiters) in &self.sealed {
            let combined = outcome.combined as usize;
            assert!(
                (1..=combined).contains(&waiters.len()),
                "sealed key with {} waiters for {combined} combined adds",
                waiters.len()
            );
            sealed_waiters += waiters.len();
        }
        assert_eq!(
            self.waiters,
            self.acks.len() + sealed_waiters,
            "waiters miscounted: {} acks, {sealed_waiters} sealed adds' waiters",
            self.acks.len()
        );
        assert!(
            !self.records.is_empty() || (self.sealed.is_empty() && self.batched_adds == 0),
            "{} sealed keys and {} batched adds without records",
            self.sealed.len(),
            self.batched_adds
        );
        assert!(
            self.records.is_empty() || self.gen_max >= 1,
            "{} bytes of records with no memtable generation",
            self.records.len()
        );
        assert!(
            self.deferred_at.is_none() || self.has_work() || self.closed,
            "work deferred to a parking runtime, but none is here"
        );
        assert!(self.batch >= 1, "group commits are numbered from 1");
    }
}
