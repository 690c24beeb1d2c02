//! The switches that break a node on purpose, for the chaos checker's
//! broken builds and the tests that act while a change is in progress:
//! set only with the `fault-injection` feature (`Node::inject_*`); without
//! it every switch reads off, at no cost. A leaf beside `ctx`, so that
//! every role asks `ctx.faults`.

#[cfg(feature = "fault-injection")]
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// What a switch breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// A replica never tells a leader that a deadline it did not know has
    /// passed (`Ctx::outdates`).
    IgnoreDeadlines = 0,
    /// Repairs this node runs count the cells they would send, and send
    /// none.
    IdleRepair = 1,
    /// Topology changes this node runs skip the sync.
    SkipSync = 2,
    /// Flushes this node runs are stored by it alone.
    FlushLocally = 3,
    /// A flush asked while this node runs another answers at once.
    FlushJoinRunning = 4,
    /// Script interpreters made from now on leave their libraries and
    /// globals writable (`resp::lua::sandbox`).
    UnsealedScripts = 5,
    /// Agreed changes this node proposes skip the prepare: they read the
    /// state a quorum holds (no promise asked) and propose from it.
    SkipPrepare = 6,
    /// This node answers a prepare with its promise before storing it; the
    /// promise reaches its Paxos state [`PROMISE_LAG`] later, as if it had
    /// answered, crashed before the write and come back.
    PromiseLate = 7,
    /// Agreed reads this node runs answer the value a quorum knows
    /// committed, without finishing a newer one in flight.
    ReadSkipsInFlight = 8,
    /// Scripts this node runs as one agreed change apply what they did
    /// even when the key changed since they read it.
    ScriptSkipsCompare = 9,
    /// Syncs this node runs (ring changes, a replace) leave agreed state
    /// behind: the new replicas start without it.
    SkipAgreedHandoff = 10,
    /// Proposals at first ballots this node makes count as regular ones:
    /// decided once a quorum accepted, and a prepare reads the highest
    /// first ballot a quorum reports as the value in flight.
    FirstBallotAsRegular = 11,
    /// The CQL port ignores an add's operation id (`tally-op-id`): the
    /// add is applied as one without, so a retry counts again.
    CqlIgnoresIds = 12,
    /// A CQL lightweight transaction judges its condition on the cells it
    /// read before its round, not on what the partition's agreed state
    /// holds: two transactions that read before either decided both hold.
    CqlLwtSkipsAgreedRead = 13,
    /// A replica takes the deleted ranges of CQL tables a leader sends it
    /// as nothing (answering as if it merged them): only their leader
    /// keeps them, and the other replicas go on serving what they deleted.
    CqlDropsDeletes = 14,
    /// This node never replays the batch log's entries it holds: a logged
    /// batch whose coordinator stopped half way stays half applied.
    BatchLogSkipsReplay = 15,
    /// Slices this node reads trust the longest answer, not the shortest
    /// full one (`cluster::slice::exact_until`): past where a replica
    /// stopped short, the merge lacks what only that replica holds.
    SliceTrustsLongest = 16,
}

/// How long a late promise (`Fault::PromiseLate`) takes to be stored.
pub(crate) const PROMISE_LAG: std::time::Duration = std::time::Duration::from_secs(1);

/// One node's switches, all off at first.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    #[cfg(feature = "fault-injection")]
    on: [AtomicBool; 17],
    /// Test seam: a topology change this node runs waits this long (ms)
    /// between beginning and its first sync (a change resumed from a
    /// switching ring has none, and does not wait).
    #[cfg(feature = "fault-injection")]
    sync_delay_ms: AtomicU64,
    /// Test seam: a proposer of this node waits this long (ms) after a
    /// change is decided before it tells the replicas it was.
    #[cfg(feature = "fault-injection")]
    commit_delay_ms: AtomicU64,
    /// Test seam: the CQL port closes the connection instead of answering
    /// every this many statements that change counters (0: never).
    #[cfg(feature = "fault-injection")]
    cql_drop_every: AtomicU64,
    /// Statements that change counters answered on the CQL port so far.
    #[cfg(feature = "fault-injection")]
    cql_writes: AtomicU64,
    /// Test seam: every this many logged batches this node coordinates
    /// stop after their log entry and first partition, as if it crashed
    /// there (0: never).
    #[cfg(feature = "fault-injection")]
    batch_crash_every: AtomicU64,
    /// Logged batches coordinated here so far.
    #[cfg(feature = "fault-injection")]
    logged_batches: AtomicU64,
}

impl Faults {
    /// FAULT INJECTION (`Fault::CqlDropsDeletes`): whether this node takes
    /// `key`'s cell as nothing when another node sends it, or a read or a
    /// repair merges it here: a cell a CQL delete made (a deleted range's,
    /// `0xFE...`, of a table's partition).
    pub(crate) fn drops_cql_delete(&self, key: &tally_engine::Key) -> bool {
        self.has(Fault::CqlDropsDeletes)
            && tally_net::ring::is_table_partition(key.partition())
            && key.column().first() == Some(&0xFE)
    }
}

impl Faults {
    /// Turns `fault` on, for good.
    #[cfg(feature = "fault-injection")]
    pub(crate) fn inject(&self, fault: Fault) {
        self.on[fault as usize].store(true, Relaxed);
    }

    /// Makes the topology changes this node runs wait `ms` before they sync.
    #[cfg(feature = "fault-injection")]
    pub(crate) fn set_sync_delay_ms(&self, ms: u64) {
        self.sync_delay_ms.store(ms, Relaxed);
    }

    /// Makes this node's proposers wait `ms` before they send a commit.
    #[cfg(feature = "fault-injection")]
    pub(crate) fn set_commit_delay_ms(&self, ms: u64) {
        self.commit_delay_ms.store(ms, Relaxed);
    }

    /// Makes the CQL port drop the connection instead of answering every
    /// `n`th statement that changes counters (applied, its answer lost).
    #[cfg(feature = "fault-injection")]
    pub(crate) fn set_cql_drop_every(&self, n: u64) {
        self.cql_drop_every.store(n, Relaxed);
    }

    /// Makes every `n`th logged batch this node coordinates stop after its
    /// log entry and first partition.
    #[cfg(feature = "fault-injection")]
    pub(crate) fn set_batch_crash_every(&self, n: u64) {
        self.batch_crash_every.store(n, Relaxed);
    }

    /// Whether this logged batch stops half way, as if its coordinator
    /// crashed (never, in a build without fault injection).
    pub(crate) fn crash_mid_batch(&self) -> bool {
        #[cfg(feature = "fault-injection")]
        {
            let every = self.batch_crash_every.load(Relaxed);
            every > 0 && self.logged_batches.fetch_add(1, Relaxed) % every == every - 1
        }
        #[cfg(not(feature = "fault-injection"))]
        {
            false
        }
    }

    /// Whether the CQL port drops this answer to a statement that changed
    /// counters (never, in a build without fault injection).
    pub(crate) fn drop_cql_answer(&self) -> bool {
        #[cfg(feature = "fault-injection")]
        {
            let every = self.cql_drop_every.load(Relaxed);
            every > 0 && self.cql_writes.fetch_add(1, Relaxed) % every == every - 1
        }
        #[cfg(not(feature = "fault-injection"))]
        {
            false
        }
    }

    /// How long this node's proposers hold a commit (zero, in a build
    /// without fault injection).
    #[inline]
    pub(crate) fn commit_delay(&self) -> std::time::Duration {
        #[cfg(feature = "fault-injection")]
        {
            std::time::Duration::from_millis(self.commit_delay_ms.load(Relaxed))
        }
        #[cfg(not(feature = "fault-injection"))]
        {
            std::time::Duration::ZERO
        }
    }

    /// Whether `fault` is on (never, in a build without fault injection).
    #[inline]
    pub(crate) fn has(&self, fault: Fault) -> bool {
        #[cfg(feature = "fault-injection")]
        {
            self.on[fault as usize].load(Relaxed)
        }
        #[cfg(not(feature = "fault-injection"))]
        {
            let _ = fault;
            false
        }
    }

    /// Waits as long as the test seam says before a change syncs.
    pub(crate) async fn sync_delay(&self) {
        #[cfg(feature = "fault-injection")]
        {
            let ms = self.sync_delay_ms.load(Relaxed);
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        }
    }
}

#[cfg(all(test, feature = "fault-injection"))]
mod tests {
    use super::*;

    #[test]
    fn each_switch_is_its_own() {
        let f = Faults::default();
        f.inject(Fault::SkipSync);
        assert!(f.has(Fault::SkipSync));
        for other in [
            Fault::IgnoreDeadlines,
            Fault::IdleRepair,
            Fault::FlushLocally,
            Fault::FlushJoinRunning,
            Fault::SkipPrepare,
            Fault::PromiseLate,
            Fault::ReadSkipsInFlight,
            Fault::FirstBallotAsRegular,
        ] {
            assert!(!f.has(other), "{other:?}");
        }
    }
}
