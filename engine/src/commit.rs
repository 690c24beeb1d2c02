//! The commit path: hot-counter combining, then group commit.
//!
//! Two threads, so that sealing never waits for the disk (and a runtime
//! may write group commits itself, see below):
//!
//! ```text
//! callers ──queue──▶ sealer ──outbox──▶ syncer ──▶ write + fsync ──▶ answer waiters
//! ```
//!
//! - The **sealer** takes everything queued: framed records from
//!   `apply`/`reset`, and the keys with pending leader adds. For each such
//!   key it does *one* read-modify-write of this node's shard covering every
//!   add waiting on it (clock + 1, value + Σ deltas), one memtable update and
//!   one log record, all in memory, and moves the result to the outbox.
//! - The **syncer** takes everything in the outbox, writes it with one
//!   `write` and covers it with one fsync, then answers every waiter.
//!
//! While an fsync runs, the sealer keeps sealing into the outbox, so batches
//! grow with the load, and one hot counter's adds collapse into one record
//! per turn.
//!
//! An add to a cold cell (no add waiting on it, and no record of it in the
//! last durable group commit or after: `Cached::sealed_batch`) skips the
//! sealer: the adding thread seals it under the cell lock
//! and puts the record straight into the outbox ([`seal_now`]). Sealing then
//! runs on every thread that adds, with one hand-off fewer; with 64 writers
//! over 1M keys this took durable adds from 214k to 250k (medians of five
//! alternating runs). Either path leaves the same state: a record holds the
//! whole own shard, so records of one cell may reach the log in any order.
//! A replica's batch of cells skips the sealer the same way when every cell
//! changes ([`append_now`], then one ack behind them, [`ack_now`]): a
//! replica's apply then wakes one commit thread, not two.
//!
//! Writers released by one fsync come back a few microseconds later; if the
//! next fsync started at once it would miss them, and the writers would split
//! into two half-size groups taking turns. So after an fsync that released W
//! waiters, the syncer waits until W waiters are queued again, or for at most
//! `group_commit_window_us` or as long as the last fsync took, whichever
//! comes first. A lone writer is never delayed by more than its own round
//! trip, and nobody by more than another fsync would have cost: with 50
//! Redis clients on one node (fsyncs of 60-80 us), the cap took a batch's
//! wait for its leader's fsync from 410-485 us to 280-350 us.
//!
//! Writers that take longer than the window to come back (a leader's adds
//! wait for replicas; replica applies arrive when peers send them) gain
//! nothing from it, and every window would only delay the fsync. So when
//! fewer than half of them are back by its end, the next windows are
//! skipped, for twice as many cycles each time (up to
//! [`WINDOW_SKIP_MAX`]); a window that fills resets that.
//!
//! # Writing on the runtime's thread as it parks
//!
//! A replica's apply, or a leader's batch, puts its records in the outbox
//! from a task, then waits. Handing the fsync to the syncer costs two
//! wake-ups between threads: the syncer's, and the runtime's when the
//! answers come back (each some tens to over a hundred microseconds on a
//! busy machine). So a runtime can be given a hook ([`ParkCommit`]): when
//! it has no task left to run and is about to park, its thread writes the
//! open group commit itself and answers the waiters, its own tasks, at
//! once. Whatever its tasks queue until then wakes nobody.
//!
//! Whoever writes a group commit holds the [`Committer`] (the log); the
//! runtime only tries to take it, so it never waits behind the syncer,
//! which looks at the outbox again when it is done. The syncer is the
//! fallback:
//! - work left for longer than [`WATCH`] is the syncer's: the runtime,
//!   still busy, wakes it when it adds more, and while group commits are
//!   being written the syncer also looks by itself every [`WATCH_POLL`];
//! - work from any other thread (the sealer's, or an add from a thread
//!   without the hook) wakes it as before;
//! - after an fsync slower than [`PARK_SYNC_MAX`] the runtime leaves every
//!   group commit to the syncer, as its tasks would wait behind a slow
//!   disk, until an fsync is fast again.
//!
//! On uniform cluster load this took fsyncs per add from 0.117 to 0.077,
//! futex calls from 0.165 to 0.010 and context switches from 0.86 to 0.46
//! (`perf stat`, whole cluster), and throughput from 82k to 98k adds/s
//! (medians of five alternated runs).
//!
//! # When a commit thread dies
//!
//! A panic on the sealer or the syncer (or the background thread) poisons
//! the engine at once (see `spawn` in `engine`), and [`fail_waiters`]
//! closes the queue and the outbox and answers everything waiting in them,
//! or pending on a cell, with the poison error: the thread that would have
//! answered them may be the one that is gone.
//!
//! [`ParkCommit`]: crate::ParkCommit

use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::time::{Duration, Instant};

use parking_lot::MutexGuard;
use tokio::sync::oneshot;

use crate::cache::{Cached, PendingAdd};
use crate::cell::{Cell, Shard};
use crate::commitlog::{self, LogWriter};
use crate::engine::Inner;
use crate::error::{Error, Result};
use crate::key::Key;
use crate::options::SyncMode;
use crate::outcome::{AddOutcome, Staged};
use crate::relay::Answer;
use crate::version::Version;

/// Most fsync cycles skipped between two group-commit windows that failed.
pub(crate) const WINDOW_SKIP_MAX: u32 = 64;

/// One sealed key: its outcome, and its waiters, answered after the fsync,
/// each with the value it answers (see [`seal`]).
type Sealed = (AddOutcome, Vec<(i64, oneshot::Sender<Result<AddOutcome>>)>);

/// Sealed work waiting for the syncer.
pub(crate) struct Outbox {
    records: Vec<u8>,
    gen_max: u64,
    acks: Vec<oneshot::Sender<Result<()>>>,
    sealed: Vec<Sealed>,
    /// Adds sealed by [`seal_one_now`], acknowledged through `acks`.
    batched_adds: u64,
    /// Waiters behind `acks` and `sealed`.
    waiters: usize,
    /// What the syncer sleeps for: `Some(0)` any work, `Some(n)` until `n`
    /// waiters are in; `None` while it is busy (nobody to wake).
    wake_at: Option<usize>,
    /// The syncer sleeps for at most [`WATCH_POLL`]: it will find work left
    /// for a runtime that parks (see [`commit_on_park`]) without being woken.
    watching: bool,
    /// When work was first left here for a runtime to write as it parks.
    deferred_at: Option<Instant>,
    /// Work came that nobody will write as they park: the syncer acts now.
    act_now: bool,
    /// Memtable generation flushed up to (log segments may go).
    pub(crate) flushed_gen: u64,
    /// The group commit being filled (numbered from 1).
    batch: u64,
    /// Set by the sealer when it has handed over its last work.
    closed: bool,
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
    fn has_work(&self) -> bool {
        !self.acks.is_empty() || !self.sealed.is_empty() || !self.records.is_empty()
    }

    /// Whether the syncer, asleep, would act on what is here now. It is
    /// woken only then: a futex wake-up per sealed batch cost more than the
    /// sealing.
    fn syncer_would_act(&self) -> bool {
        match self.wake_at {
            Some(0) => self.has_work(),
            Some(n) => self.waiters >= n,
            None => false,
        }
    }

    /// After work was added by a thread that holds the outbox: whether that
    /// thread must wake the syncer. A thread whose runtime writes group
    /// commits as it parks leaves the work to itself while the syncer
    /// watches, unless work left earlier is overdue ([`WATCH`]); otherwise
    /// the syncer is woken if it would act.
    fn wake_for(&mut self, inner: &Inner) -> bool {
        if self.watching && inner.fast_syncs.load(Relaxed) && commits_on_park(inner) {
            let now = Instant::now();
            let since = *self.deferred_at.get_or_insert(now);
            if now < since + WATCH {
                return false;
            }
            // The runtime has not parked for a while: hand over to the syncer.
        }
        self.act_now = true;
        self.syncer_would_act()
    }
}

thread_local! {
    /// The engine (its `Inner`'s address) whose group commits this thread
    /// writes when its runtime parks; 0 for none.
    static COMMITS_ON_PARK: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Whether this thread writes `inner`'s group commits when it parks.
fn commits_on_park(inner: &Inner) -> bool {
    COMMITS_ON_PARK.with(|c| c.get()) == std::ptr::from_ref(inner) as usize
}

/// Runs the sealer until the engine closes.
pub(crate) fn run_sealer(inner: &Inner) {
    let mut records = Vec::new();
    loop {
        let mut q = inner.queue.lock();
        while !q.has_work() && !q.closed {
            inner.queue_cv.wait(&mut q);
        }
        let closing = q.closed && !q.has_work();
        std::mem::swap(&mut records, &mut q.records);
        let gen_max = std::mem::take(&mut q.gen_max);
        let acks = std::mem::take(&mut q.acks);
        let adds = std::mem::take(&mut q.adds);
        drop(q);
        if closing {
            inner.outbox.lock().closed = true;
            inner.outbox_cv.notify_one();
            return;
        }
        if let Some(seam) = &inner.opts.panic_seal
            && seam.load(Relaxed)
        {
            panic!("injected sealer panic");
        }

        // Backpressure: while too many frozen memtables wait for
        // flushing, writes wait.
        let frozen_max = inner.opts.frozen_memtables_max.max(1);
        inner
            .versions
            .stall_while_behind(frozen_max, || inner.poisoned.load(Acquire));
        let mut sealed = Vec::with_capacity(adds.len());
        let generation = seal_all(inner, &adds, &mut records, &mut sealed);

        let mut out = inner.outbox.lock();
        if out.closed {
            // The syncer is gone (see `fail_waiters`): nobody will write this.
            drop(out);
            records.clear();
            complete(
                inner,
                &Err(inner.poison_error()),
                acks,
                sealed,
                0,
                false,
                false,
            );
            continue;
        }
        out.records.extend_from_slice(&records);
        out.gen_max = out.gen_max.max(gen_max).max(generation);
        out.waiters += acks.len() + sealed.iter().map(|(_, w): &Sealed| w.len()).sum::<usize>();
        out.acks.extend(acks);
        out.sealed.extend(sealed);
        out.act_now = true;
        let wake = out.syncer_would_act();
        drop(out);
        if wake {
            inner.outbox_cv.notify_one();
        }
        records.clear();

        if inner.versions.read().active.bytes() >= inner.opts.memtable_bytes_max
            && inner.versions.freeze_if_full(inner.opts.memtable_bytes_max)
        {
            inner.request_flush();
        }
    }
}

/// Seals every key in `adds`; returns the memtable generation written to.
fn seal_all(inner: &Inner, adds: &[Key], records: &mut Vec<u8>, sealed: &mut Vec<Sealed>) -> u64 {
    let poisoned = inner.poisoned.load(Acquire);
    let v = inner.versions.read();
    // Swapped with each key's pending list, so both stay allocated.
    let mut waiting = Vec::new();
    // Early outcomes and refusals, delivered once every key is sealed.
    let mut answers = Vec::new();
    for key in adds {
        let mut stripe = inner.cache.stripe(key).lock();
        let Some(cached) = stripe.get_mut(key) else {
            continue; // never evicted while adds are pending; nothing to seal
        };
        std::mem::swap(&mut cached.pending, &mut waiting);
        if waiting.is_empty() {
            continue;
        }
        if poisoned {
            for done in waiting.drain(..).filter_map(|w| w.done) {
                answers.push(Answer::Add(done, Err(inner.poison_error())));
            }
            continue;
        }
        // This record joins the open group commit or the next one.
        cached.sealed_batch = inner.durable_batch.load(Acquire) + 2;
        if let Some(outcome) = seal(
            inner.counter_id,
            &mut cached.cell,
            &mut waiting,
            sealed,
            &mut |a| answers.push(a),
        ) {
            cached.mark_written(key, &v);
            // The log gets only the new own shard: the rest of the cell is
            // already wherever it came from.
            let own = std::slice::from_ref(&outcome.shard);
            commitlog::encode_record_parts(records, key, outcome.epoch, own);
        }
    }
    let generation = v.active.generation();
    drop(v);
    inner.relay.deliver(&mut answers);
    generation
}

/// Seals one add on the caller's thread, under the cell lock held by
/// `cached`'s owner and the version `v` (read-locked), straight into the
/// outbox. For an add with nothing to combine with: it skips the hand-off to
/// the sealer, and sealing runs on every thread that adds.
///
/// The record is in the outbox before the cell lock is released, so a
/// barrier queued by anyone who then sees the new state follows it.
pub(crate) fn seal_now(
    inner: &Inner,
    key: &Key,
    cached: &mut Cached,
    v: &Version,
    add: PendingAdd,
) {
    cached.pending.push(add);
    let mut sealed = Vec::with_capacity(1);
    // On the adding thread, its own waiter is answered without a hand-off.
    let Some(outcome) = seal(
        inner.counter_id,
        &mut cached.cell,
        &mut cached.pending,
        &mut sealed,
        &mut Answer::send,
    ) else {
        return; // refused (overflow), and answered
    };
    let own = [outcome.shard];
    let epoch = outcome.epoch;
    cached.mark_written(key, v);
    let mut out = inner.outbox.lock();
    if out.closed {
        return; // closing: the dropped waiter reads as `Closed`
    }
    commitlog::encode_record_parts(&mut out.records, key, epoch, &own);
    out.gen_max = out.gen_max.max(v.active.generation());
    out.waiters += 1;
    out.sealed.extend(sealed);
    cached.sealed_batch = out.batch;
    let wake = out.wake_for(inner);
    drop(out);
    if wake {
        inner.outbox_cv.notify_one();
    }
}

/// Seals one add of [`Engine::leader_add_batch`](crate::Engine) on the
/// caller's thread, like [`seal_now`] but with no waiter: the batch's one
/// ack, from [`ack_now`], covers its record. An add that would overflow is
/// refused and changes nothing.
pub(crate) fn seal_one_now(
    inner: &Inner,
    key: &Key,
    cached: &mut Cached,
    v: &Version,
    delta: i64,
) -> Result<Staged> {
    let cell = &mut cached.cell;
    let mut own = own_shard(cell, inner.counter_id);
    let view = cell.value();
    let (Some(value), Some(_)) = (own.value.checked_add(delta), view.checked_add(delta)) else {
        return Ok(Staged::Refused(Error::Overflow { value: view, delta }));
    };
    let mut out = inner.outbox.lock();
    if out.closed {
        return Err(Error::Closed);
    }
    own.value = value;
    let outcome = put_next_version(cell, own, 1);
    cached.mark_written(key, v);
    let own = std::slice::from_ref(&outcome.shard);
    commitlog::encode_record_parts(&mut out.records, key, outcome.epoch, own);
    out.gen_max = out.gen_max.max(v.active.generation());
    out.batched_adds += 1;
    cached.sealed_batch = out.batch;
    Ok(Staged::Sealed(outcome))
}

/// Puts the record of a replica's `cell` for `key` straight into the outbox,
/// on the caller's thread, under the cell lock the caller holds (so a
/// barrier queued by anyone who then sees the merged state follows it).
/// Its waiter comes separately, from [`ack_now`].
pub(crate) fn append_now(inner: &Inner, key: &Key, cell: &Cell, v: &Version) -> Result<()> {
    let mut out = inner.outbox.lock();
    if out.closed {
        return Err(Error::Closed);
    }
    commitlog::encode_record(&mut out.records, key, cell);
    out.gen_max = out.gen_max.max(v.active.generation());
    Ok(())
}

/// A receiver that fires once everything now in the outbox is durable:
/// the barrier for records put there by [`append_now`] and [`seal_now`].
/// Records still with the sealer are not covered (see `Engine::apply_many`).
pub(crate) fn ack_now(inner: &Inner) -> oneshot::Receiver<Result<()>> {
    let (tx, rx) = oneshot::channel();
    let mut out = inner.outbox.lock();
    if out.closed {
        let _ = tx.send(Err(Error::Closed));
        return rx;
    }
    out.acks.push(tx);
    out.waiters += 1;
    let wake = out.wake_for(inner);
    drop(out);
    if wake {
        inner.outbox_cv.notify_one();
    }
    rx
}

/// One read-modify-write of `cell` (under its lock) for all the adds in
/// `waiting`, which it empties. Returns the outcome, or `None` if every add
/// was refused. Refusals and early outcomes go to `answer`.
///
/// The adds kept share one outcome but each answers its own value: the one
/// it would have seen had they run one after another in arrival order (the
/// cell with this node's shard as far as that add moved it); the last one
/// answers the cell's value. Combining thus leaves the values answered as
/// they would have been without it; the node's batches answer by this rule
/// too.
fn seal<'s>(
    counter_id: u64,
    cell: &mut Cell,
    waiting: &mut Vec<PendingAdd>,
    sealed: &'s mut Vec<Sealed>,
    answer: &mut impl FnMut(Answer),
) -> Option<&'s AddOutcome> {
    let mut own = own_shard(cell, counter_id);
    let own_before = own.value;
    let mut view = cell.value();
    // Refuse what would overflow, in arrival order; keep the rest.
    waiting.retain_mut(|add| {
        match (
            own.value.checked_add(add.delta),
            view.checked_add(add.delta),
        ) {
            (Some(o), Some(v)) => {
                own.value = o;
                view = v;
                true
            }
            _ => {
                if let Some(done) = add.done.take() {
                    answer(Answer::Add(
                        done,
                        Err(Error::Overflow {
                            value: view,
                            delta: add.delta,
                        }),
                    ));
                }
                false
            }
        }
    });
    if waiting.is_empty() {
        return None;
    }
    let combined = u32::try_from(waiting.len()).unwrap_or(u32::MAX);
    let outcome = put_next_version(cell, own, combined);
    let others: i128 = cell
        .shards()
        .iter()
        .filter(|s| s.counter_id != counter_id)
        .map(|s| i128::from(s.value))
        .sum();
    let mut done = Vec::with_capacity(waiting.len());
    let mut own_value = own_before;
    for add in waiting.drain(..) {
        // Cannot overflow: the same sums, in the same order, were checked above.
        own_value += add.delta;
        let value = crate::cell::saturate(others + i128::from(own_value));
        if let Some(early) = add.sealed {
            let outcome = AddOutcome {
                value,
                ..outcome.clone()
            };
            answer(Answer::Sealed(early, outcome));
        }
        done.extend(add.done.map(|tx| (value, tx)));
    }
    debug_assert_eq!(
        own_value, outcome.shard.value,
        "the kept deltas do not add up to the new shard's value"
    );
    sealed.push((outcome, done));
    sealed.last().map(|(outcome, _)| outcome)
}

/// This node's shard of `cell`, a zero one if it has none yet.
fn own_shard(cell: &Cell, counter_id: u64) -> Shard {
    cell.shard(counter_id).copied().unwrap_or(Shard {
        counter_id,
        clock: 0,
        value: 0,
    })
}

/// Installs `own`, its value already moved by the adds, as the next
/// version of this node's shard (clock + 1); answers the adds' outcome.
fn put_next_version(cell: &mut Cell, mut own: Shard, combined: u32) -> AddOutcome {
    own.clock += 1;
    cell.put_own(own);
    cell.check_invariants();
    AddOutcome {
        epoch: cell.epoch(),
        shard: own,
        value: cell.value(),
        combined,
    }
}

/// How long the syncer leaves work to a runtime that writes group commits
/// as it parks ([`commit_on_park`]), and how long it sleeps at a time while
/// it watches for such work: the most such work waits when that runtime
/// stays busy.
const WATCH: Duration = Duration::from_micros(500);
/// How often the syncer looks for work left longer than [`WATCH`] by a
/// runtime that does not park, if nothing wakes it sooner: a busy runtime
/// that adds work wakes it itself once older work is overdue, so this only
/// bounds the wait of work left behind by a runtime that then runs no add.
const WATCH_POLL: Duration = Duration::from_millis(5);
/// Polls in a row that saw no group commit, after which the syncer sleeps
/// until it is woken.
const WATCHES_MAX: u32 = 20;
/// The longest fsync after which a runtime still writes group commits as
/// it parks. Its tasks wait while it writes, so on a slower disk (one fsync
/// over this) the syncer writes every group commit, until one of its fsyncs
/// is fast again.
const PARK_SYNC_MAX: Duration = Duration::from_millis(1);

/// The commit log and what its writer keeps between group commits. Whoever
/// holds it writes the next group commit: the syncer, or a runtime thread
/// about to park.
pub(crate) struct Committer {
    log: LogWriter,
    /// Memtable generation up to which log segments are removed.
    removed_gen: u64,
    /// The last group commit's records buffer, kept allocated.
    spare: Vec<u8>,
    /// How long the last fsync took.
    last_sync: Duration,
    /// The log is closed: nothing more is written.
    closed: bool,
}

impl Committer {
    pub(crate) fn new(log: LogWriter, window: Duration) -> Self {
        Committer {
            log,
            removed_gen: 0,
            spare: Vec::new(),
            last_sync: window,
            closed: false,
        }
    }
}

/// A runtime thread's part in group commit: called as the runtime is about
/// to park, it writes the open group commit itself when no other thread is
/// writing, and answers the waiters (its own tasks) without waking anyone.
/// Work its own tasks add then wakes no thread either (see
/// [`Outbox::wake_for`]). For a replica's apply this saves two hand-offs
/// between threads: to the syncer, and back to the runtime.
pub(crate) fn commit_on_park(inner: &Inner) {
    if inner.opts.sync != SyncMode::Batch {
        return;
    }
    COMMITS_ON_PARK.with(|c| c.set(std::ptr::from_ref(inner) as usize));
    if !inner.fast_syncs.load(Relaxed) {
        return;
    }
    let Some(mut c) = inner.committer.try_lock() else {
        // The syncer is writing: it takes what is left here next, at once.
        let mut out = inner.outbox.lock();
        out.act_now |= out.has_work();
        return;
    };
    let out = inner.outbox.lock();
    if c.closed || !out.has_work() {
        return;
    }
    write_group(inner, &mut c, out, true, true);
}

/// Runs the syncer until the sealer has closed and everything is written.
pub(crate) fn run_syncer(inner: &Inner) {
    let periodic = match inner.opts.sync {
        SyncMode::Batch => None,
        SyncMode::Periodic { interval_ms } => Some(Duration::from_millis(interval_ms.max(1))),
    };
    let mut next_sync = Instant::now() + periodic.unwrap_or_default();
    let window = Duration::from_micros(inner.opts.group_commit_window_us);
    // A runtime writes group commits as it parks: watch for work it leaves.
    let park_commits = inner.opts.park_commit.is_some();
    // As of this thread's last group commit.
    let mut removed_gen = 0;
    let mut last_sync = window;
    // Waiters the last fsync released: as many are expected back for the
    // next.
    let mut released = 0;
    // Windows to skip, and how many to skip after the next one that fails.
    let (mut skip, mut backoff) = (0, 1);
    // Watches in a row that saw no group commit, and the last one seen.
    let mut watches = WATCHES_MAX;
    let mut seen_batch = 0;
    loop {
        let mut out = inner.outbox.lock();
        if periodic.is_none() && released > 0 && !out.closed {
            if skip > 0 {
                skip -= 1;
            } else {
                let deadline = Instant::now() + window.min(last_sync);
                while out.waiters < released && !out.closed {
                    out.wake_at = Some(released);
                    if inner.outbox_cv.wait_until(&mut out, deadline).timed_out() {
                        break;
                    }
                }
                if out.waiters * 2 < released {
                    skip = backoff;
                    backoff = (backoff * 2).min(WINDOW_SKIP_MAX);
                } else {
                    backoff = 1;
                }
            }
        }
        loop {
            let idle = !out.has_work() && !out.closed && out.flushed_gen <= removed_gen;
            // Work left for a runtime that parks soon is its to write.
            let left = out
                .deferred_at
                .map(|at| at + WATCH)
                .filter(|&due| !idle && !out.act_now && !out.closed && Instant::now() < due);
            if idle {
                if out.batch != seen_batch {
                    seen_batch = out.batch;
                    watches = 0;
                }
            } else if left.is_none() {
                break;
            }
            out.wake_at = Some(0);
            if periodic.is_some() {
                if inner.outbox_cv.wait_until(&mut out, next_sync).timed_out() {
                    break;
                }
            } else if let Some(due) = left {
                inner.outbox_cv.wait_until(&mut out, due);
            } else if park_commits && watches < WATCHES_MAX {
                out.watching = true;
                if inner.outbox_cv.wait_for(&mut out, WATCH_POLL).timed_out() {
                    watches += 1;
                }
            } else {
                out.watching = false;
                inner.outbox_cv.wait(&mut out);
            }
        }
        out.wake_at = None;
        out.watching = park_commits && periodic.is_none();
        drop(out);
        if let Some(seam) = &inner.opts.panic_sync
            && seam.load(Relaxed)
        {
            panic!("injected syncer panic");
        }

        let mut c = inner.committer.lock();
        let out = inner.outbox.lock();
        let closing = out.closed;
        let sync = periodic.is_none_or(|p| {
            let now = Instant::now();
            let due = now >= next_sync || closing;
            if due {
                next_sync = now + p;
            }
            due
        });
        released = write_group(inner, &mut c, out, sync, false);
        let drained = {
            let out = inner.outbox.lock();
            seen_batch = out.batch;
            !out.has_work()
        };
        watches = 0;
        removed_gen = c.removed_gen;
        last_sync = c.last_sync;
        if closing && drained {
            if !inner.poisoned.load(Acquire)
                && let Err(e) = c.log.close()
            {
                // Harmless: replay reads the zeros left as the log's end.
                tracing::warn!(error = %e, "could not trim the commit log at close");
            }
            c.closed = true;
            return;
        }
    }
}

/// After an engine thread died (see `spawn` in `engine`), with the engine
/// poisoned: closes the queue and the outbox, so that nothing more waits
/// in them, and answers every waiter there or pending on a cell with the
/// poison error. The dead thread may be the one that would have answered
/// them. A commit thread still alive then finds nothing to do and ends.
/// Records not written yet are dropped: a poisoned engine writes nothing.
pub(crate) fn fail_waiters(inner: &Inner) {
    let why = inner.poison.lock().clone().unwrap_or_default();
    let err = || Error::Poisoned(why.clone());
    let mut answers = Vec::new();
    {
        let mut q = inner.queue.lock();
        q.closed = true;
        q.records.clear();
        // Their adds are answered from the cells, below.
        q.adds.clear();
        answers.extend(q.acks.drain(..).map(|ack| Answer::Ack(ack, Err(err()))));
    }
    inner.queue_cv.notify_all();
    // After the queue closed: an add that finds no add pending on its cell
    // then fails to queue its key, and one that finds adds pending joins
    // them before this sweep reaches its cell (a live sealer may take them
    // first; it answers them with the poison error too).
    inner.cache.drain_pending(|add| {
        answers.extend(add.done.map(|done| Answer::Add(done, Err(err()))));
    });
    let (acks, sealed) = {
        let mut out = inner.outbox.lock();
        out.closed = true;
        out.records.clear();
        out.batched_adds = 0;
        out.waiters = 0;
        (
            std::mem::take(&mut out.acks),
            std::mem::take(&mut out.sealed),
        )
    };
    inner.outbox_cv.notify_all();
    inner.relay.deliver(&mut answers);
    complete(inner, &Err(err()), acks, sealed, 0, false, false);
}

/// Writes one group commit, with the committer held: everything in the
/// outbox, in one `write` and (if `sync`) one fsync; then answers its
/// waiters, directly when `direct` (this thread runs their runtime), and
/// keeps the log's size in check. Returns how many waiters it released.
fn write_group(
    inner: &Inner,
    c: &mut Committer,
    mut out: MutexGuard<'_, Outbox>,
    sync: bool,
    direct: bool,
) -> usize {
    let batch = out.batch;
    out.batch += 1;
    out.deferred_at = None;
    out.act_now = false;
    let records = std::mem::replace(&mut out.records, std::mem::take(&mut c.spare));
    let gen_max = std::mem::take(&mut out.gen_max);
    let acks = std::mem::take(&mut out.acks);
    let sealed = std::mem::take(&mut out.sealed);
    let batched_adds = std::mem::take(&mut out.batched_adds);
    let released = std::mem::take(&mut out.waiters);
    let flushed_gen = out.flushed_gen;
    drop(out);

    let written = if inner.poisoned.load(Acquire) {
        Err(inner.poison_error())
    } else {
        c.log.append(&records, gen_max).and_then(|()| {
            if sync && c.log.unsynced() {
                let started = Instant::now();
                let synced = c.log.sync();
                c.last_sync = started.elapsed();
                inner
                    .fast_syncs
                    .store(c.last_sync <= PARK_SYNC_MAX, Relaxed);
                synced
            } else {
                Ok(())
            }
        })
    };
    match &written {
        Ok(()) => inner.durable_batch.store(batch, Relaxed),
        Err(e) => inner.poison(e),
    }
    let counted_sync = inner.opts.sync == SyncMode::Batch;
    complete(
        inner,
        &written,
        acks,
        sealed,
        batched_adds,
        counted_sync,
        direct,
    );
    c.spare = records;
    c.spare.clear();

    if flushed_gen > c.removed_gen {
        match c.log.remove_flushed(flushed_gen) {
            Ok(()) => c.removed_gen = flushed_gen,
            Err(e) => tracing::warn!(error = %e, "could not remove flushed log segments"),
        }
    }
    inner.log_segments.store(c.log.segment_count(), Relaxed);
    let log_max = inner
        .opts
        .log_bytes_max
        .max(2 * inner.opts.segment_bytes_max);
    if c.log.live_bytes() > log_max && inner.versions.current().frozen.is_empty() {
        // Few cells, many records: flush them so old segments can go.
        inner.versions.freeze();
        inner.request_flush();
    }
    released
}

/// Answers every waiter of one write.
fn complete(
    inner: &Inner,
    written: &Result<()>,
    acks: Vec<oneshot::Sender<Result<()>>>,
    sealed: Vec<Sealed>,
    batched_adds: u64,
    counted_sync: bool,
    direct: bool,
) {
    // A batch's adds may reach the log in an earlier write than its ack:
    // they count when their records are durable.
    if written.is_ok() && !(acks.is_empty() && sealed.is_empty() && batched_adds == 0) {
        let m = &inner.metrics;
        m.syncs.fetch_add(u64::from(counted_sync), Relaxed);
        m.park_syncs
            .fetch_add(u64::from(counted_sync && direct), Relaxed);
        let combined: u64 = sealed.iter().map(|(_, w)| w.len() as u64).sum();
        m.add_records
            .fetch_add(sealed.len() as u64 + batched_adds, Relaxed);
        m.adds.fetch_add(combined + batched_adds, Relaxed);
    }
    let result = |r: &Result<()>| r.as_ref().map(|_| ()).map_err(|_| inner.poison_error());
    let mut answers = Vec::with_capacity(acks.len() + sealed.len());
    for ack in acks {
        answers.push(Answer::Ack(ack, result(written)));
    }
    for (outcome, waiters) in sealed {
        for (value, w) in waiters {
            let outcome = AddOutcome {
                value,
                ..outcome.clone()
            };
            answers.push(Answer::Add(w, result(written).map(|()| outcome)));
        }
    }
    if direct {
        answers.into_iter().for_each(Answer::send);
    } else {
        inner.relay.deliver(&mut answers);
    }
}
