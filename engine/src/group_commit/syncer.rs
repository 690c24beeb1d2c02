//! The syncer: waits for work in the outbox, writes it as one group commit
//! with one fsync, answers its waiters, and keeps the log's size in check.
//!
//! The same [`GroupCommit::write_group`] serves a runtime that writes
//! group commits as it parks (see `park`).

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;
use tally_world::Instant;

use parking_lot::MutexGuard;

use crate::commitlog::LogWriter;
use crate::error::Result;
use crate::options::SyncMode;
use crate::outcome::AddOutcome;

use super::GroupCommit;
use super::outbox::{Ack, Group, Outbox, Sealed};
use super::park::{WATCH, WATCH_POLL, WATCHES_MAX};
use super::relay::Answer;
use super::window::{Next, Window};

/// The commit log and what its writer keeps between group commits. Whoever
/// holds it writes the next group commit: the syncer, or a runtime thread
/// about to park.
pub(super) struct Committer {
    log: LogWriter,
    /// Memtable generation up to which log segments are removed.
    removed_gen: u64,
    /// The last group commit's records buffer, kept allocated.
    spare: Vec<u8>,
    /// How long the last fsync took.
    last_sync: Duration,
    /// Records a write found no room for (see `space`), with the highest
    /// memtable generation among them: written ahead of the next group
    /// commit's, which they are in memory before.
    pub(super) retry: Vec<u8>,
    retry_gen: u64,
    /// The log is closed: nothing more is written.
    pub(super) closed: bool,
}

impl Committer {
    pub(super) fn new(log: LogWriter, window: Duration) -> Self {
        Committer {
            log,
            removed_gen: 0,
            spare: Vec::new(),
            last_sync: window,
            retry: Vec::new(),
            retry_gen: 0,
            closed: false,
        }
    }
}

/// What the syncer keeps between its group commits.
pub(super) struct Syncer {
    /// The fsync interval in periodic mode; `None` in batch mode.
    periodic: Option<Duration>,
    /// When the next periodic fsync is due.
    next_sync: Instant,
    /// The group-commit window policy (batch mode).
    window: Window,
    /// A runtime writes group commits as it parks: watch for work it leaves.
    park_commits: bool,
    /// As of this thread's last group commit.
    removed_gen: u64,
    /// Watches in a row that saw no group commit, and the last one seen.
    watches: u32,
    seen_batch: u64,
    /// When records the log had no room for are next tried again, in an
    /// engine without threads (the syncer's thread waits instead).
    next_retry: Instant,
}

/// How often records the disk had no room for are tried again.
const RETRY_EVERY: Duration = Duration::from_millis(100);

impl GroupCommit {
    /// What the syncer keeps, before its first group commit.
    pub(super) fn syncer(&self) -> Syncer {
        let periodic = match self.opts.sync {
            SyncMode::Batch => None,
            SyncMode::Periodic { interval_ms } => Some(Duration::from_millis(interval_ms.max(1))),
        };
        Syncer {
            periodic,
            next_sync: Instant::now() + periodic.unwrap_or_default(),
            window: Window::new(Duration::from_micros(self.opts.group_commit_window_us)),
            park_commits: self.opts.park_commit.is_some(),
            removed_gen: 0,
            watches: WATCHES_MAX,
            seen_batch: 0,
            next_retry: Instant::now(),
        }
    }

    /// The syncer's turn in an engine without threads (`Options::stepped`):
    /// one group commit, if there is work to write, a flush to trim the
    /// log after, or the close. Answers whether it wrote one. Records that
    /// found the log full are tried again with new work, or, as the
    /// syncer's thread does, every [`RETRY_EVERY`] without (new writes are
    /// refused meanwhile); while writes are stalled (the test seam),
    /// nothing is written.
    pub(super) fn step_syncer(&self, s: &mut Syncer) -> bool {
        if self.committer.lock().closed || self.writes_stalled() {
            return false;
        }
        let out = self.outbox.lock();
        let idle = !out.has_work() && !out.closed && out.flushed_gen <= s.removed_gen;
        drop(out);
        if idle {
            let now = Instant::now();
            if !self.space.log_full() || now < s.next_retry {
                return false;
            }
            s.next_retry = now + RETRY_EVERY;
        }
        self.sync_turn(s, true);
        true
    }

    /// Runs the syncer until the sealer has closed and everything is written.
    pub(crate) fn run_syncer(&self) {
        let mut s = self.syncer();
        loop {
            let mut out = self.outbox.lock();
            if s.periodic.is_none() && !out.closed {
                self.wait_for_window(&mut out, &mut s.window);
            }
            self.wait_for_work(&mut out, &mut s);
            out.wake_at = None;
            out.watching = s.park_commits && s.periodic.is_none();
            drop(out);
            if let Some(seam) = &self.opts.panic_sync
                && seam.load(Relaxed)
            {
                panic!("injected syncer panic");
            }
            if self.sync_turn(&mut s, false) {
                return;
            }
        }
    }

    /// The group-commit window, as [`Window`] decides: waits for the
    /// writers the last group commit released to come back, or skips.
    fn wait_for_window(&self, out: &mut MutexGuard<'_, Outbox>, window: &mut Window) {
        let Next::Wait { waiters, max } = window.next() else {
            return;
        };
        let deadline = Instant::now() + max;
        while out.waiters < waiters && !out.closed {
            out.wake_at = Some(waiters);
            if self
                .outbox_cv
                .wait_until(out, deadline.into_std())
                .timed_out()
            {
                break;
            }
        }
        window.came_back(out.waiters);
    }

    /// Sleeps until there is something to write: work (not left for a
    /// runtime that parks soon), a flush to trim the log after, the close,
    /// or a periodic fsync due.
    fn wait_for_work(&self, out: &mut MutexGuard<'_, Outbox>, s: &mut Syncer) {
        loop {
            let idle = !out.has_work() && !out.closed && out.flushed_gen <= s.removed_gen;
            if idle && self.space.log_full() {
                // Records (of any writer of group commits) wait for room:
                // try them again soon, with or without new work.
                out.wake_at = Some(0);
                if self.outbox_cv.wait_for(out, RETRY_EVERY).timed_out() {
                    return;
                }
                continue;
            }
            // Work left for a runtime that parks soon is its to write.
            let left = out
                .deferred_at
                .map(|at| at + WATCH)
                .filter(|&due| !idle && !out.act_now && !out.closed && Instant::now() < due);
            if idle {
                if out.batch != s.seen_batch {
                    s.seen_batch = out.batch;
                    s.watches = 0;
                }
            } else if left.is_none() {
                return;
            }
            out.wake_at = Some(0);
            if s.periodic.is_some() {
                if self
                    .outbox_cv
                    .wait_until(out, s.next_sync.into_std())
                    .timed_out()
                {
                    return;
                }
            } else if let Some(due) = left {
                self.outbox_cv.wait_until(out, due.into_std());
            } else if s.park_commits && s.watches < WATCHES_MAX {
                out.watching = true;
                if self.outbox_cv.wait_for(out, WATCH_POLL).timed_out() {
                    s.watches += 1;
                }
            } else {
                out.watching = false;
                self.outbox_cv.wait(out);
            }
        }
    }

    /// Writes one group commit (fsync'd unless a periodic fsync is not due
    /// yet), answering its waiters directly when `direct` (this thread runs
    /// their runtime); answers whether the syncer is done: closed and
    /// drained.
    fn sync_turn(&self, s: &mut Syncer, direct: bool) -> bool {
        let mut c = self.committer.lock();
        let out = self.outbox.lock();
        let closing = out.closed;
        let sync = s.periodic.is_none_or(|p| {
            let now = Instant::now();
            let due = now >= s.next_sync || closing;
            if due {
                s.next_sync = now + p;
            }
            due
        });
        let released = self.write_group(&mut c, out, sync, direct);
        let drained = {
            let out = self.outbox.lock();
            s.seen_batch = out.batch;
            !out.has_work()
        };
        s.watches = 0;
        s.removed_gen = c.removed_gen;
        s.window.released(released, c.last_sync);
        if !(closing && drained) {
            return false;
        }
        if !c.retry.is_empty() {
            // In memory only, maybe replicated: the next open must not take
            // this incarnation's id again (see `identity`).
            self.poison
                .set(|| "closed with records the disk had no room for".into());
        }
        if !self.poison.is_set()
            && let Err(e) = c.log.close()
        {
            // Harmless: replay reads the zeros left as the log's end.
            tracing::warn!(error = %e, "could not trim the commit log at close");
        }
        c.closed = true;
        true
    }

    /// Writes one group commit, with the committer held: everything in the
    /// outbox, in one `write` and (if `sync`) one fsync; then answers its
    /// waiters, directly when `direct` (this thread runs their runtime), and
    /// keeps the log's size in check. Returns how many waiters it released.
    pub(super) fn write_group(
        &self,
        c: &mut Committer,
        mut out: MutexGuard<'_, Outbox>,
        sync: bool,
        direct: bool,
    ) -> usize {
        let group = out.take_group(std::mem::take(&mut c.spare));
        drop(out);
        let Group {
            batch,
            mut records,
            gen_max,
            acks,
            sealed,
            batched_adds,
            released,
            flushed_gen,
        } = group;

        let written = self.write_and_sync(c, &mut records, gen_max, sync);
        match &written {
            Ok(()) => {
                debug_assert!(
                    batch > self.durable_batch.load(Relaxed),
                    "group commit {batch} made durable after a later one"
                );
                self.durable_batch.store(batch, Relaxed);
            }
            Err(e) if e.is_log_out_of_space() => self.space.report("commit log write", e),
            Err(e) => self.poison_on(e),
        }
        let counted_sync = self.opts.sync == SyncMode::Batch;
        self.complete(&written, acks, sealed, batched_adds, counted_sync, direct);
        c.spare = records;
        c.spare.clear();
        self.trim_log(c, flushed_gen);
        released
    }

    /// Appends `records` to the log, behind any records an earlier write
    /// found no room for, and, if `sync` and anything is unsynced, fsyncs
    /// it; a poisoned engine writes nothing. Records that find no room
    /// are kept for the next try ([`Error::NoSpace`](crate::Error)).
    fn write_and_sync(
        &self,
        c: &mut Committer,
        records: &mut Vec<u8>,
        gen_max: u64,
        sync: bool,
    ) -> Result<()> {
        if self.poison.is_set() {
            return Err(self.poison.error());
        }
        if let Some(stall) = &self.opts.stall_writes {
            // Test seam: a disk that stops taking writes; the records stay
            // in memory, as if a kill came before their write.
            while stall.load(Relaxed) {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let appended = if c.retry.is_empty() {
            c.log.append(records, gen_max)
        } else {
            c.retry.extend_from_slice(records);
            c.retry_gen = c.retry_gen.max(gen_max);
            let appended = c.log.append(&mut c.retry, c.retry_gen);
            if appended.is_ok() {
                c.retry.clear();
                c.retry_gen = 0;
            }
            appended
        };
        match appended {
            Ok(()) => self.space.set_log_full(false),
            Err(e) if e.is_log_out_of_space() => {
                if c.retry.is_empty() {
                    c.retry.extend_from_slice(records);
                    c.retry_gen = gen_max;
                }
                self.space.set_log_full(true);
                return Err(e);
            }
            Err(e) => return Err(e),
        }
        if !(sync && c.log.unsynced()) {
            return Ok(());
        }
        let started = Instant::now();
        let synced = c.log.sync();
        c.last_sync = started.elapsed();
        let fast = c.last_sync <= Duration::from_micros(self.opts.park_sync_max_us);
        self.fast_syncs.store(fast, Relaxed);
        synced
    }

    /// After a group commit: removes the log segments whose memtables are
    /// all flushed (up to `flushed_gen`), and when the live log grows past
    /// its bound with nothing frozen, freezes the memtable and asks for a
    /// flush so old segments can go.
    fn trim_log(&self, c: &mut Committer, flushed_gen: u64) {
        if flushed_gen > c.removed_gen {
            match c.log.remove_flushed(flushed_gen) {
                Ok(()) => c.removed_gen = flushed_gen,
                Err(e) => tracing::warn!(error = %e, "could not remove flushed log segments"),
            }
        }
        self.log_segments.store(c.log.segment_count(), Relaxed);
        let log_max = self.opts.log_bytes_max.max(2 * self.opts.segment_bytes_max);
        if c.log.live_bytes() > log_max && self.versions.current().frozen.is_empty() {
            // Few cells, many records: flush them so old segments can go.
            self.versions.freeze();
            self.work.flush();
        }
    }

    /// Answers every waiter of one write.
    pub(super) fn complete(
        &self,
        written: &Result<()>,
        acks: Vec<Ack>,
        sealed: Vec<Sealed>,
        batched_adds: u64,
        counted_sync: bool,
        direct: bool,
    ) {
        // A batch's adds may reach the log in an earlier write than its ack:
        // they count when their records are durable.
        if written.is_ok() && !(acks.is_empty() && sealed.is_empty() && batched_adds == 0) {
            let m = &self.metrics;
            m.syncs.fetch_add(u64::from(counted_sync), Relaxed);
            m.park_syncs
                .fetch_add(u64::from(counted_sync && direct), Relaxed);
            let combined: u64 = sealed.iter().map(|(_, w)| w.len() as u64).sum();
            m.add_records
                .fetch_add(sealed.len() as u64 + batched_adds, Relaxed);
            m.adds.fetch_add(combined + batched_adds, Relaxed);
        }
        let result = |r: &Result<()>| {
            r.as_ref()
                .map(|_| ())
                .map_err(|e| e.no_space_again().unwrap_or_else(|| self.poison.error()))
        };
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
            self.relay.deliver(&mut answers);
        }
    }
}
