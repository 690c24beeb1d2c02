//! What a peer may ask of this node: authorization, after the transport's
//! authentication.
//!
//! The transport hands every batch over with the index of the node whose
//! certificate the connection presented (`tally_net::identity`): messages
//! carry no sender field, so none can claim to come from another node, and
//! a certificate of the CA that names no other node never gets this far.
//! [`authorize`] then checks each request against what that node could
//! honestly send, before anything is applied.
//!
//! # What is checked, and why it is sound
//!
//! - **Wrapping.** A cell whose epoch or any clock is within 2^32 of
//!   `u64::MAX` is refused (`tally_net::bounds`): no honest node gets
//!   there, and merging one would make the next `+ 1` wrap.
//! - **Placement.** An `Apply` is only for a key this node is a replica
//!   of. Replication, hints and read repair only ever send a cell to the
//!   key's replicas, and the ring is the same on every node (one config),
//!   so anything else is a node writing where it has no business. (Once
//!   rings are versioned, a pending replica of the key counts as one.)
//! - **This node's own shard.** Only the owner of a `counter_id` makes new
//!   versions of its shard, and this node makes each version in its own
//!   engine (memory first, then its log) before it sends it anywhere; a
//!   node that loses its data or stops
//!   uncleanly comes back under a new id. So every version of this node's
//!   shard that exists elsewhere also exists here. An incoming cell with a
//!   shard of this node's `counter_id` is refused when it is in an epoch
//!   this node never reached, or in this node's epoch with a clock beyond
//!   this node's, or with this node's clock and another value. In an older
//!   epoch it is harmless: the merge discards it.
//!
//! - **Tails of ids** (`ApplyTail`, see `tally_engine::ids::tail`): a tail
//!   is never of this node's own incarnation, and stays within its bounds;
//!   the retired incarnations a node asks about in `LearnTails` and
//!   `ForgetTails` are never this node's own.
//! - **Agreement.** `Prepare`, `Propose`, `Commit`, `ReadAgreed` and
//!   `MergeAgreed` (another replica's Paxos states, when ranges move)
//!   name partitions this node replicates, natural or pending, with
//!   ballots far from wrapping and registers within their limits;
//!   `AgreedIn` (a page of this node's states) names at most
//!   `REPAIR_RANGES_MAX` ranges, as a repair's requests do. A member
//!   could send a merge of states no one accepted: the same trust as a
//!   forged commit, which a member has. Whose incarnation a tail
//!   names is not checked, for the reason third-party shards are not (below):
//!   the cell it rides with may hold no shard of its applier at all (a
//!   retry's whole cell after a reset).
//!
//! # What is not checked, and why
//!
//! - **Shards of a third node's `counter_id`.** A node relays other
//!   nodes' shards all the time (read repair merges every replica's
//!   answer and sends the result; a hint carries the whole cell), at
//!   whatever clock their owner reached. Only the owner knows its current
//!   clock, and it may be down when a hint or repair is delivered; asking
//!   it would make every repair wait on it. Learning the counter ids of
//!   live nodes (in heartbeats, say) would add nothing: a shard of a live
//!   node's id can legitimately arrive from anyone, and shards of retired
//!   incarnations are legitimately everywhere. So a node that holds a
//!   valid certificate can still forge third-party shards; this is the
//!   trust a cluster member has, and revoking it means re-keying the
//!   cluster without that node's certificate.
//! - **Reads and forwarded leader requests** need no more than membership:
//!   a read answers what this node holds, and a forwarded add or reset is
//!   refused by `lead_here` unless this node is a live replica of the key.

use tally_engine::TAIL_OPS_MAX;
use tally_net::bounds::{self, NearWrap};
use tally_net::wire::{
    AGREED_STATES_MAX, Acceptor, ErrorKind, IDS_BLOCK_BYTES_MAX, PeerRequest, REPAIR_RANGES_MAX,
    WireCell, WireError, WireKey, WireTail,
};

/// This node's own shard of one cell, as far as [`authorize`] needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Own {
    /// The cell's epoch here, `(n, origin)`.
    pub(crate) epoch: (u64, u64),
    /// This node's shard in that epoch, `(clock, value)`, if it has one.
    pub(crate) shard: Option<(u64, i64)>,
}

/// What [`authorize`] needs to know about this node.
pub(crate) trait Local {
    /// This node's index.
    fn me(&self) -> usize;
    /// How many nodes the cluster has.
    fn nodes(&self) -> usize;
    /// This node incarnation's counter id.
    fn counter_id(&self) -> u64;
    /// Whether this node is a replica of `partition`.
    fn is_replica(&self, partition: &[u8]) -> bool;
    /// This node's cell of `key`, reduced to its own shard.
    fn own(&self, key: &WireKey) -> Result<Own, String>;
    /// Whether `partition` is of a flushed database's old generation,
    /// which nothing reads or writes any more.
    fn flushed(&self, partition: &[u8]) -> bool;
}

/// Why a peer's request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    /// The sender is not another node of the cluster.
    #[error("node #{from} is not a peer of this node")]
    NotAPeer {
        /// Its index.
        from: usize,
    },
    /// A clock or epoch about to wrap.
    #[error("{0}")]
    NearWrap(#[from] NearWrap),
    /// A cell for a key this node does not hold.
    #[error("this node is not a replica of the key")]
    NotAReplica,
    /// A version of this node's own shard that this node never made.
    #[error(
        "a shard of this node's own counter id {counter_id:x} at epoch {epoch} clock {clock}, \
         which this node never made (it is at epoch {ours_epoch}, clock {ours_clock:?})"
    )]
    ForgedOwnShard {
        /// This node's counter id.
        counter_id: u64,
        /// The incoming cell's epoch.
        epoch: u64,
        /// The incoming shard's clock.
        clock: u64,
        /// This node's epoch of the cell.
        ours_epoch: u64,
        /// This node's own shard's clock, if it has one in that epoch.
        ours_clock: Option<u64>,
    },
    /// This node's own cell could not be read to check the request.
    #[error("cannot read this node's cell to check it: {0}")]
    Unchecked(String),
    /// A tail of ids that no honest applier sends.
    #[error("a tail of ids {0}")]
    BadTail(&'static str),
    /// A hand-over of ids (a ring change) that no honest node sends.
    #[error("a hand-over of ids {0}")]
    BadHandOver(&'static str),
    /// A list that no honest leader makes: empty, or over the limit.
    #[error("a list of {bytes} bytes, empty or over the limit")]
    BadList {
        /// Its bytes, encoded.
        bytes: usize,
    },
    /// Registers that no honest proposer makes.
    #[error("registers {0}")]
    BadRegisters(String),
    /// Agreed states that no honest replica sends, or asks for.
    #[error("agreed states {0}")]
    BadAgreed(&'static str),
    /// A write of cells that no correct leader asks for.
    #[error("a write of cells {0}")]
    BadCells(&'static str),
}

impl Refusal {
    /// The error the peer gets: nothing was applied.
    pub(crate) fn wire_error(&self) -> WireError {
        let kind = match self {
            Refusal::Unchecked(_) => ErrorKind::Storage,
            _ => ErrorKind::Invalid,
        };
        WireError::not_applied(kind, format!("refused: {self}"))
    }
}

/// Whether node `from` may make request `req` of this node.
pub(crate) fn authorize(from: usize, req: &PeerRequest, local: &impl Local) -> Result<(), Refusal> {
    if from == local.me() || from >= local.nodes() {
        return Err(Refusal::NotAPeer { from });
    }
    match req {
        PeerRequest::Apply { key, cell } => authorize_apply(key, cell, local),
        PeerRequest::LeaderCells {
            partition, cells, ..
        } => authorize_cells(partition, cells, local),
        PeerRequest::ApplyTail { key, cell, tail } => {
            authorize_tail(tail, local)?;
            authorize_apply(key, cell, local)
        }
        PeerRequest::LearnTails { retired, .. } | PeerRequest::ForgetTails { retired } => {
            if retired.len() > RETIRED_MAX {
                return Err(Refusal::BadTail("request names too many incarnations"));
            }
            if retired.contains(&local.counter_id()) {
                return Err(Refusal::BadTail(
                    "request names this node's own incarnation",
                ));
            }
            Ok(())
        }
        PeerRequest::Ping { .. }
        | PeerRequest::Hello { .. }
        | PeerRequest::Leaving
        | PeerRequest::Read { .. }
        | PeerRequest::ReadRow { .. }
        | PeerRequest::ReadSlice { .. }
        | PeerRequest::LeaderAdd { .. }
        | PeerRequest::LeaderAddOnce { .. }
        | PeerRequest::LeaderAdmit { .. }
        | PeerRequest::LeaderReset { .. }
        | PeerRequest::LeaderChange { .. }
        | PeerRequest::LeaderList { .. }
        | PeerRequest::LeaderListAt { .. }
        | PeerRequest::LeaderExpireRow { .. }
        | PeerRequest::RepairDigests { .. }
        | PeerRequest::RepairLeaves { .. }
        | PeerRequest::Repaired { .. }
        | PeerRequest::GetTopology
        | PeerRequest::Adopt { .. }
        | PeerRequest::Survey { .. }
        | PeerRequest::ScanKeys { .. }
        | PeerRequest::ScanTable { .. }
        | PeerRequest::Script { .. }
        | PeerRequest::FlushScripts
        | PeerRequest::Fold => Ok(()),
        PeerRequest::TakeIds { block } if block.len() > IDS_BLOCK_BYTES_MAX => {
            Err(Refusal::BadHandOver("over the size limit"))
        }
        PeerRequest::HandOverIds { to } if to.iter().any(|&t| t as usize >= local.nodes()) => {
            Err(Refusal::BadHandOver("to a node that does not exist"))
        }
        PeerRequest::TakeIds { .. } | PeerRequest::HandOverIds { .. } => Ok(()),
        PeerRequest::Prepare { partition, ballot } => {
            bounds::check_ballot(*ballot)?;
            authorize_partition(partition, local)
        }
        PeerRequest::Propose {
            partition,
            proposal: value,
        }
        | PeerRequest::Commit {
            partition,
            decided: value,
        } => {
            bounds::check_ballot(value.ballot)?;
            value.value.check().map_err(Refusal::BadRegisters)?;
            authorize_partition(partition, local)
        }
        PeerRequest::ReadAgreed { partition } => authorize_partition(partition, local),
        PeerRequest::AgreedIn { ranges, .. } if ranges.len() > REPAIR_RANGES_MAX => {
            Err(Refusal::BadAgreed("asked of too many ranges"))
        }
        PeerRequest::AgreedIn { .. } => Ok(()),
        PeerRequest::MergeAgreed { states } => authorize_states(states, local),
    }
}

/// An agreement message names a partition this node replicates (natural
/// or pending): an acceptor of any other would count in no quorum, and
/// keep state nothing cleans up.
fn authorize_partition(partition: &[u8], local: &impl Local) -> Result<(), Refusal> {
    match local.is_replica(partition) {
        true => Ok(()),
        false => Err(Refusal::NotAReplica),
    }
}

/// Paxos states another replica sends this one (a range it gains): at
/// most `AGREED_STATES_MAX`, each of a partition this node replicates,
/// its ballots far from wrapping and its registers within the limits.
fn authorize_states(states: &[(Vec<u8>, Acceptor)], local: &impl Local) -> Result<(), Refusal> {
    if states.len() > AGREED_STATES_MAX {
        return Err(Refusal::BadAgreed("over the most one message carries"));
    }
    for (partition, state) in states {
        bounds::check_acceptor(state)?;
        state.check().map_err(Refusal::BadRegisters)?;
        authorize_partition(partition, local)?;
    }
    Ok(())
}

/// Most retired incarnations one request may name.
const RETIRED_MAX: usize = 1024;

fn authorize_tail(tail: &WireTail, local: &impl Local) -> Result<(), Refusal> {
    if tail.counter_id == local.counter_id() {
        return Err(Refusal::BadTail("of this node's own incarnation"));
    }
    if tail.ops.len() > TAIL_OPS_MAX {
        return Err(Refusal::BadTail("of too many ids"));
    }
    if tail.ops.iter().any(|op| op.id.check().is_err()) {
        return Err(Refusal::BadTail("with an operation id out of bounds"));
    }
    Ok(())
}

/// Cells a peer asks this node to lead (`LeaderCells`): at most
/// `LEADER_CELLS_MAX`, of a partition this node replicates, each within
/// the bounds of a cell and without shards (a last-write-wins cell has
/// none, so none can forge this node's).
fn authorize_cells(
    partition: &[u8],
    cells: &[(Vec<u8>, WireCell)],
    local: &impl Local,
) -> Result<(), Refusal> {
    if cells.is_empty() || cells.len() > tally_net::wire::LEADER_CELLS_MAX {
        return Err(Refusal::BadCells(
            "none, or over the most one message carries",
        ));
    }
    for (_, cell) in cells {
        bounds::check_cell(cell)?;
        check_list(cell)?;
        if !cell.shards.is_empty() {
            return Err(Refusal::BadCells("with shards"));
        }
    }
    match local.is_replica(partition) {
        true => Ok(()),
        false => Err(Refusal::NotAReplica),
    }
}

/// A cell's list, if any, is not empty and within its limit.
fn check_list(cell: &WireCell) -> Result<(), Refusal> {
    if let Some(list) = &cell.list {
        let bytes = tally_engine::cell::list::encoded_len(list);
        if list.is_empty() || bytes > tally_net::list::LIST_BYTES_MAX {
            return Err(Refusal::BadList { bytes });
        }
    }
    Ok(())
}

fn authorize_apply(key: &WireKey, cell: &WireCell, local: &impl Local) -> Result<(), Refusal> {
    bounds::check_cell(cell)?;
    check_list(cell)?;
    if !local.is_replica(key.partition()) {
        return Err(Refusal::NotAReplica);
    }
    let me = local.counter_id();
    let Some(theirs) = cell.shards.iter().find(|s| s.counter_id == me) else {
        return Ok(());
    };
    // A flushed generation's cell is garbage this node may have dropped
    // already, its own shards too (`topology::flush`): it is taken as it
    // comes, and dropped again by the next cleanup.
    if local.flushed(key.partition()) {
        return Ok(());
    }
    let ours = local.own(key).map_err(Refusal::Unchecked)?;
    let epoch = (cell.epoch.n, cell.epoch.origin);
    if own_shard_possible(epoch, (theirs.clock, theirs.value), ours) {
        return Ok(());
    }
    Err(Refusal::ForgedOwnShard {
        counter_id: me,
        epoch: cell.epoch.n,
        clock: theirs.clock,
        ours_epoch: ours.epoch.0,
        ours_clock: ours.shard.map(|(clock, _)| clock),
    })
}

/// Whether a version `(clock, value)` of this node's own shard in epoch
/// `epoch` can exist, given this node's cell: only if this node made it,
/// so it holds that version or a newer one.
pub(crate) fn own_shard_possible(epoch: (u64, u64), (clock, value): (u64, i64), ours: Own) -> bool {
    if epoch < ours.epoch {
        return true;
    }
    if epoch > ours.epoch {
        return false;
    }
    match ours.shard {
        None => false,
        Some((c, v)) => clock < c || (clock == c && value == v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_net::wire::Shard;

    const ME: u64 = 0xAAAA;
    const OTHER: u64 = 0xBBBB;

    /// Node 1 of 3, a replica of every partition but `elsewhere`, holding
    /// epoch 4 with its own shard at clock 10, value 100.
    struct Fake {
        own: Result<Own, String>,
    }
    impl Local for Fake {
        fn me(&self) -> usize {
            1
        }
        fn nodes(&self) -> usize {
            3
        }
        fn counter_id(&self) -> u64 {
            ME
        }
        fn is_replica(&self, partition: &[u8]) -> bool {
            partition != b"elsewhere"
        }
        fn own(&self, _: &WireKey) -> Result<Own, String> {
            self.own.clone()
        }
        fn flushed(&self, partition: &[u8]) -> bool {
            partition == b"flushed"
        }
    }

    fn local() -> Fake {
        Fake {
            own: Ok(Own {
                epoch: (4, 0),
                shard: Some((10, 100)),
            }),
        }
    }

    fn apply(partition: &[u8], epoch: u64, shards: &[(u64, u64, i64)]) -> PeerRequest {
        PeerRequest::Apply {
            key: WireKey::new(partition, b""),
            cell: WireCell {
                list: None,
                epoch: tally_net::wire::Epoch::at(epoch),
                shards: shards
                    .iter()
                    .map(|&(counter_id, clock, value)| Shard {
                        counter_id,
                        clock,
                        value,
                    })
                    .collect(),
            },
        }
    }

    fn forged(epoch: u64, clock: u64, ours_clock: Option<u64>) -> Result<(), Refusal> {
        Err(Refusal::ForgedOwnShard {
            counter_id: ME,
            epoch,
            clock,
            ours_epoch: 4,
            ours_clock,
        })
    }

    #[test]
    fn only_other_nodes_of_the_cluster_are_peers() {
        let read = PeerRequest::Read {
            key: WireKey::new(b"k", b""),
        };
        assert_eq!(authorize(0, &read, &local()), Ok(()));
        assert_eq!(authorize(2, &read, &local()), Ok(()));
        assert_eq!(
            authorize(1, &read, &local()),
            Err(Refusal::NotAPeer { from: 1 })
        );
        assert_eq!(
            authorize(3, &read, &local()),
            Err(Refusal::NotAPeer { from: 3 })
        );
    }

    #[test]
    fn a_list_no_leader_makes_is_refused() {
        let with = |list: Vec<Vec<u8>>| {
            let PeerRequest::Apply { key, mut cell } = apply(b"k", 4, &[]) else {
                unreachable!()
            };
            cell.list = Some(list.into());
            PeerRequest::Apply { key, cell }
        };
        assert_eq!(authorize(0, &with(vec![b"a".to_vec()]), &local()), Ok(()));
        assert_eq!(
            authorize(0, &with(Vec::new()), &local()),
            Err(Refusal::BadList { bytes: 0 })
        );
        let over = vec![vec![7u8; 1000]; 29];
        assert_eq!(
            authorize(0, &with(over), &local()),
            Err(Refusal::BadList { bytes: 29 * 1002 })
        );
    }

    #[test]
    fn shards_of_this_nodes_counter_id_must_be_versions_it_made() {
        let l = local();
        let cases = [
            // Older or equal versions of its own shard: repairs.
            (apply(b"k", 4, &[(ME, 10, 100)]), Ok(())),
            (apply(b"k", 4, &[(ME, 3, 7), (OTHER, 99, 1)]), Ok(())),
            // Any version in an older epoch: discarded by the merge anyway.
            (apply(b"k", 2, &[(ME, 1_000, 7)]), Ok(())),
            // Newer than this node's own: only this node makes those.
            (apply(b"k", 4, &[(ME, 11, 101)]), forged(4, 11, Some(10))),
            (
                apply(b"k", 4, &[(OTHER, 1, 1), (ME, 1_000, 1)]),
                forged(4, 1_000, Some(10)),
            ),
            // The same version with another value.
            (
                apply(b"k", 4, &[(ME, 10, 1_000_000)]),
                forged(4, 10, Some(10)),
            ),
            // An epoch this node never reached.
            (apply(b"k", 5, &[(ME, 1, 1)]), forged(5, 1, Some(10))),
            // Shards of other ids are not this check's business.
            (apply(b"k", 9, &[(OTHER, 1_000, 5)]), Ok(())),
            // Nor a flushed generation's garbage, which this node may have
            // dropped its own shards of.
            (apply(b"flushed", 4, &[(ME, 11, 101)]), Ok(())),
        ];
        for (req, want) in cases {
            assert_eq!(authorize(0, &req, &l), want, "{req:?}");
        }
    }

    #[test]
    fn no_own_shard_here_means_none_can_come_from_elsewhere() {
        let l = Fake {
            own: Ok(Own {
                epoch: (4, 0),
                shard: None,
            }),
        };
        assert_eq!(
            authorize(0, &apply(b"k", 4, &[(ME, 1, 1)]), &l),
            Err(Refusal::ForgedOwnShard {
                counter_id: ME,
                epoch: 4,
                clock: 1,
                ours_epoch: 4,
                ours_clock: None
            })
        );
        assert_eq!(authorize(0, &apply(b"k", 3, &[(ME, 1, 1)]), &l), Ok(()));
        assert_eq!(authorize(0, &apply(b"k", 4, &[(OTHER, 1, 1)]), &l), Ok(()));
    }

    #[test]
    fn an_unreadable_own_cell_refuses_only_cells_with_an_own_shard() {
        let l = Fake {
            own: Err("disk on fire".into()),
        };
        let err = authorize(0, &apply(b"k", 4, &[(ME, 1, 1)]), &l).unwrap_err();
        assert_eq!(err, Refusal::Unchecked("disk on fire".into()));
        assert_eq!(err.wire_error().kind, ErrorKind::Storage);
        assert_eq!(authorize(0, &apply(b"k", 4, &[(OTHER, 1, 1)]), &l), Ok(()));
    }

    #[test]
    fn cells_near_wrapping_or_for_other_replicas_are_refused() {
        let l = local();
        let floor = bounds::WRAP_FLOOR;
        assert_eq!(
            authorize(0, &apply(b"k", 0, &[(OTHER, floor, 1)]), &l),
            Err(Refusal::NearWrap(NearWrap {
                what: "clock",
                value: floor
            }))
        );
        assert_eq!(
            authorize(2, &apply(b"k", u64::MAX, &[]), &l),
            Err(Refusal::NearWrap(NearWrap {
                what: "epoch",
                value: u64::MAX
            }))
        );
        assert_eq!(
            authorize(0, &apply(b"elsewhere", 0, &[(OTHER, 1, 1)]), &l),
            Err(Refusal::NotAReplica)
        );
        let e = Refusal::NotAReplica.wire_error();
        assert_eq!(
            (e.kind, e.outcome),
            (ErrorKind::Invalid, tally_net::Outcome::NotApplied)
        );
    }

    #[test]
    fn tails_of_this_node_or_out_of_bounds_are_refused() {
        use tally_net::once::OpId;
        use tally_net::wire::{WireTail, WireTailOp};
        let l = local();
        let op = |client: &[u8], seq| WireTailOp {
            batch: 1,
            id: OpId {
                client: client.to_vec(),
                seq,
            },
            delta: 1,
            value: 1,
            epoch: 4,
            at_ms: 1,
        };
        let tail_req = |counter_id, ops: Vec<WireTailOp>| {
            let PeerRequest::Apply { key, cell } = apply(b"k", 4, &[(OTHER, 1, 1)]) else {
                unreachable!()
            };
            PeerRequest::ApplyTail {
                key,
                cell,
                tail: Box::new(WireTail {
                    counter_id,
                    durable: 0,
                    ops,
                }),
            }
        };
        assert_eq!(
            authorize(0, &tail_req(OTHER, vec![op(b"c", 1)]), &l),
            Ok(())
        );
        let refused = |r: &PeerRequest| matches!(authorize(0, r, &l), Err(Refusal::BadTail(_)));
        assert!(refused(&tail_req(ME, vec![op(b"c", 1)])), "this node's own");
        assert!(
            refused(&tail_req(OTHER, vec![op(b"", 1)])),
            "an empty client id"
        );
        assert!(
            refused(&tail_req(OTHER, vec![op(b"c", u64::MAX)])),
            "seq out of range"
        );
        let many = vec![op(b"c", 1); TAIL_OPS_MAX + 1];
        assert!(refused(&tail_req(OTHER, many)));
        // The cell is checked as any other.
        let mut far = tail_req(OTHER, vec![]);
        if let PeerRequest::ApplyTail { key, .. } = &mut far {
            *key = WireKey::new(b"elsewhere", b"");
        }
        assert_eq!(authorize(0, &far, &l), Err(Refusal::NotAReplica));
        for ask in [
            PeerRequest::LearnTails {
                retired: vec![ME],
                from: 0,
            },
            PeerRequest::ForgetTails {
                retired: vec![OTHER, ME],
            },
        ] {
            assert!(refused(&ask), "{ask:?}");
        }
        let ok = PeerRequest::LearnTails {
            retired: vec![OTHER],
            from: 0,
        };
        assert_eq!(authorize(2, &ok, &l), Ok(()));
    }
}
