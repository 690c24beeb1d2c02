//! The deliberately broken builds the simulation must catch: the chaos
//! harness's faults (`tallyd-faults`), injected into every node of a run
//! each time it starts, and a commit log that is not fsync'd (the
//! simulated disk's).

use tally_node::Node;

/// A broken build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Broken {
    /// Leaders acknowledge every 7th add without applying it.
    DropEvery,
    /// Adds with operation ids apply as new, every time.
    IgnoreIds,
    /// After an unclean restart a node applies ids at once, without
    /// learning the ids its last run applied from its peers.
    SkipTails,
    /// Agreed changes skip the prepare: they read a quorum's state and
    /// propose from it.
    SkipPrepare,
    /// Acceptors answer a prepare before its promise is stored (a
    /// second later).
    PromiseLate,
    /// Agreed reads answer the committed value without finishing a newer
    /// one in flight.
    ReadSkipsInFlight,
    /// Scripts of one key apply their result over whatever the key holds
    /// (a compare-and-set as a script compares nothing).
    ScriptSkipsCompare,
    /// Script interpreters are not sealed: a script may plant code that
    /// the scripts run after it on the same interpreter run.
    UnsealedScripts,
    /// List changes take the time they are made, not the time their
    /// leader read the list: a leader held up in between wins over the
    /// changes made meanwhile, which it never saw.
    ListStampWhenMade,
    /// Ring changes do not sync the ranges that move: the new replicas
    /// start empty.
    SkipSync,
    /// Ring changes leave agreed state behind.
    SkipAgreedHandoff,
    /// Adds ignore deadlines: no restart of an expired counter, no
    /// `Stale` for a deadline their leader missed.
    IgnoreDeadlines,
    /// An add (or an admission) restarts a counter whose deadline passed
    /// at once, without reading the replicas: a later deadline its leader
    /// missed is lost.
    RestartUnconfirmed,
    /// Repairs find what differs but send nothing.
    IdleRepair,
    /// Proposals at first ballots count as regular ones: a quorum decides
    /// one, and a prepare reads the highest first ballot reported.
    FirstBallotAsRegular,
    /// Merges ignore fold generations: a copy that still holds a retired
    /// shard meets one whose base has it, and the shard counts twice.
    MergeIgnoringFolds,
    /// A flush answers once its node stored it, before the other members
    /// (who learn it later, from its heartbeats).
    FlushLocally,
    /// A flush asked while its node runs another answers at once, as if
    /// the running one covered it.
    FlushJoinRunning,
    /// The CQL port applies adds with an operation id as adds without:
    /// a retry counts again.
    CqlIgnoreIds,
    /// Replicas take the deleted ranges of CQL tables a leader sends
    /// them as nothing.
    CqlDropDeletes,
    /// CQL lightweight transactions judge their conditions on the cells
    /// they read first, not on the agreed state.
    CqlLwtSkipsAgreedRead,
    /// No node replays the batch log: a logged batch whose coordinator
    /// stopped half way stays half applied.
    BatchLogSkipsReplay,
    /// Slices of a paged read merge up to the longest replica's answer,
    /// not the shortest full one.
    SliceTrustsLongest,
    /// The commit log's fsyncs do nothing: adds are acknowledged before
    /// they are durable (or the disk's cache lies), and a power cut loses
    /// them.
    LogNotSynced,
}

impl Broken {
    /// Breaks `node`, just opened.
    pub fn inject(self, node: &Node) {
        match self {
            Broken::DropEvery => node.inject_drop_every(7),
            Broken::IgnoreIds => node.inject_ignore_ids(),
            Broken::IgnoreDeadlines => node.inject_ignore_deadlines(),
            Broken::IdleRepair => node.inject_idle_repair(),
            Broken::SkipTails => node.inject_skip_tails(),
            Broken::SkipPrepare => node.inject_skip_prepare(),
            Broken::FirstBallotAsRegular => node.inject_first_ballot_as_regular(),
            Broken::PromiseLate => node.inject_promise_late(),
            Broken::ReadSkipsInFlight => node.inject_read_skips_in_flight(),
            Broken::ScriptSkipsCompare => node.inject_script_skips_compare(),
            Broken::UnsealedScripts => node.inject_unsealed_scripts(),
            Broken::ListStampWhenMade => node.inject_list_stamp_when_made(),
            Broken::SkipSync => node.inject_skip_sync(),
            Broken::SkipAgreedHandoff => node.inject_skip_agreed_handoff(),
            Broken::FlushLocally => node.inject_flush_locally(),
            Broken::FlushJoinRunning => node.inject_flush_join_running(),
            Broken::CqlIgnoreIds => node.inject_cql_ignore_ids(),
            Broken::CqlDropDeletes => node.inject_cql_drop_deletes(),
            Broken::CqlLwtSkipsAgreedRead => node.inject_cql_lwt_skips_agreed_read(),
            Broken::BatchLogSkipsReplay => node.inject_batch_log_skips_replay(),
            Broken::SliceTrustsLongest => node.inject_slice_trusts_longest(),
            // The disk's part: see `Broken::unsynced`.
            Broken::LogNotSynced => {}
            // The engine's, set as it opens (`Options`).
            Broken::MergeIgnoringFolds | Broken::RestartUnconfirmed => {}
        }
    }

    /// The files whose fsyncs this build skips, by extension.
    pub fn unsynced(self) -> Option<&'static str> {
        match self {
            Broken::LogNotSynced => Some("log"),
            _ => None,
        }
    }
}
