//! Messages on the wire, and the one bincode configuration that encodes them.
//!
//! Both protocols carry the same building blocks: a key is a partition and a
//! column, a cell is an epoch and shards. The epoch, the shard and the
//! changes are the shared data of `tally-model`, sent as they are; a key
//! and a cell have their own wire forms here, untrusted until the node
//! checks them into the engine's (`net` knows nothing of storage).
//!
//! - Peers talk QUIC: one bidirectional stream per batch; the request side is
//!   a bincode `Vec<PeerRequest>`, the answer a `Vec<PeerResponse>` of the
//!   same length and order.
//! - Clients talk TCP: frames of `len: u32 LE | bincode body`, a
//!   [`ClientRequest`] each way carrying a request id, so many requests can be
//!   in flight on one connection and answered out of order.
//!
//! Nothing decoded here is trusted: bincode checks each declared length
//! against a limit before it allocates, and [`decode`] sets that limit by
//! the size of the input ([`CLAIM_BYTES_PER_BYTE`] per byte, at most
//! [`MESSAGE_BYTES_MAX`]), so a few bytes cannot make it allocate megabytes;
//! a message followed by trailing bytes is rejected.

use bincode::de::{Decoder, read::Reader};
use bincode::enc::Encoder;
use bincode::error::EncodeError;
use bincode::{Decode, Encode};
use smallvec::SmallVec;

use crate::once::OpId;
use crate::version::{FEATURES_MAX, NAME_BYTES_MAX};

pub use crate::error::{ErrorKind, Outcome, WireError};
pub use crate::limits::*;
pub use tally_model::paxos::VALUE_BYTES_MAX as STRING_BYTES_MAX;
pub use tally_model::paxos::{
    Accepted, Acceptor, Ballot, Promise, REGISTERS_BYTES_MAX, Register, Registers,
};
pub use tally_model::{Change, Changed, Epoch, Expiry, Presence, Shard, Stamp, Ttl, When};

/// The one bincode configuration for everything Tally puts on the wire.
pub type WireConfig = bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Varint,
    bincode::config::Limit<MESSAGE_BYTES_MAX>,
>;

/// The configuration value: varints, little endian, a size limit.
pub const fn config() -> WireConfig {
    bincode::config::standard().with_limit::<MESSAGE_BYTES_MAX>()
}

/// Why bytes did not decode.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Not a valid message (bad tag, length over the limit, truncated...).
    #[error("malformed message: {0}")]
    Malformed(#[from] bincode::error::DecodeError),
    /// A valid message followed by bytes that belong to nothing.
    #[error("{extra} trailing bytes after a {used}-byte message")]
    Trailing {
        /// Bytes consumed by the message.
        used: usize,
        /// Bytes left over.
        extra: usize,
    },
}

/// Encodes a message with the wire configuration.
pub fn encode<T: Encode>(msg: &T) -> Vec<u8> {
    bincode::encode_to_vec(msg, config()).expect("encoding into a Vec cannot fail")
}

/// Appends an encoded message to `buf`.
pub fn encode_into<T: Encode>(msg: &T, buf: &mut Vec<u8>) {
    bincode::encode_into_std_write(msg, buf, config()).expect("encoding into a Vec cannot fail");
}

/// Most bytes of memory a decode may claim per byte it decodes.
///
/// bincode checks every declared length against the bytes claimed so far
/// before it allocates, and a container claims `size_of` of all its items
/// up front. Every item that travels in a container is at most this big in
/// memory (checked below) and takes at least one byte on the wire, so a
/// real message claims less than this many bytes per byte; a length that
/// claims more than the message could hold is refused before anything is
/// allocated for it, whatever [`MESSAGE_BYTES_MAX`] allows.
pub const CLAIM_BYTES_PER_BYTE: usize = 256;

const _: () = assert!(
    size_of::<PeerRequest>() <= CLAIM_BYTES_PER_BYTE
        && size_of::<PeerResponse>() <= CLAIM_BYTES_PER_BYTE
        && size_of::<(Vec<u8>, WireCell)>() <= CLAIM_BYTES_PER_BYTE
        && size_of::<NodeStatus>() <= CLAIM_BYTES_PER_BYTE
        && size_of::<Shard>() <= CLAIM_BYTES_PER_BYTE
        // The largest tier below is the message limit itself.
        && (64 << 10) * CLAIM_BYTES_PER_BYTE == MESSAGE_BYTES_MAX
);

/// Decodes exactly one message from `bytes`: trailing bytes are an error.
/// It may claim at most [`CLAIM_BYTES_PER_BYTE`] per byte of `bytes` (in
/// three tiers, as bincode's limit is a type parameter), and never more
/// than [`MESSAGE_BYTES_MAX`].
pub fn decode<T: Decode<()>>(bytes: &[u8]) -> Result<T, DecodeError> {
    const SMALL: usize = 256;
    const MEDIUM: usize = 4 << 10;
    let (msg, used) = match bytes.len() {
        n if n <= SMALL => bincode::decode_from_slice(
            bytes,
            config().with_limit::<{ SMALL * CLAIM_BYTES_PER_BYTE }>(),
        )?,
        n if n <= MEDIUM => bincode::decode_from_slice(
            bytes,
            config().with_limit::<{ MEDIUM * CLAIM_BYTES_PER_BYTE }>(),
        )?,
        _ => bincode::decode_from_slice(bytes, config())?,
    };
    if used != bytes.len() {
        return Err(DecodeError::Trailing {
            used,
            extra: bytes.len() - used,
        });
    }
    Ok(msg)
}

/// A counter's address: a partition, which decides placement, and a column.
///
/// Both parts live in one buffer, inline up to [`WireKey::INLINE_BYTES`]
/// together, so building, sending and receiving a common key allocates
/// nothing. On the wire it is the partition, then the column, each a
/// length-prefixed byte string (what two bincode `Vec<u8>`s are).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct WireKey {
    bytes: SmallVec<[u8; WireKey::INLINE_BYTES]>,
    /// Where the partition ends in `bytes`.
    split: usize,
}

impl WireKey {
    /// Longest key (both parts) held without an allocation.
    pub const INLINE_BYTES: usize = 48;

    /// A key from its parts. Sizes are checked where keys are used
    /// (partition at most 1 KiB, column at most 256 B), not here.
    pub fn new(partition: &[u8], column: &[u8]) -> WireKey {
        let mut bytes = SmallVec::with_capacity(partition.len() + column.len());
        bytes.extend_from_slice(partition);
        bytes.extend_from_slice(column);
        WireKey {
            bytes,
            split: partition.len(),
        }
    }

    /// Decides placement.
    pub fn partition(&self) -> &[u8] {
        &self.bytes[..self.split]
    }

    /// Empty for a plain counter.
    pub fn column(&self) -> &[u8] {
        &self.bytes[self.split..]
    }
}

impl std::fmt::Debug for WireKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireKey")
            .field("partition", &self.partition())
            .field("column", &self.column())
            .finish()
    }
}

impl Encode for WireKey {
    fn encode<E: Encoder>(&self, encoder: &mut E) -> Result<(), EncodeError> {
        self.partition().encode(encoder)?;
        self.column().encode(encoder)
    }
}

impl<Context> Decode<Context> for WireKey {
    fn decode<D: Decoder<Context = Context>>(
        decoder: &mut D,
    ) -> Result<Self, bincode::error::DecodeError> {
        let mut bytes = SmallVec::new();
        decode_bytes_into(decoder, &mut bytes)?;
        let split = bytes.len();
        decode_bytes_into(decoder, &mut bytes)?;
        Ok(WireKey { bytes, split })
    }
}
bincode::impl_borrow_decode!(WireKey);

/// Appends a length-prefixed byte string (a bincode `Vec<u8>`) to `out`,
/// its length checked against the decode limit before anything grows. It
/// grows by [`BYTES_CHUNK`] at most as the bytes are read, so a length
/// that claims more than the input holds fails once the input runs out,
/// having allocated about what there was.
fn decode_bytes_into<D: Decoder, const N: usize>(
    decoder: &mut D,
    out: &mut SmallVec<[u8; N]>,
) -> Result<(), bincode::error::DecodeError> {
    /// Keys are at most 1 KiB and 256 B: one chunk each.
    const BYTES_CHUNK: usize = 4 << 10;
    let len = decode_len(decoder)?;
    decoder.claim_container_read::<u8>(len)?;
    let mut left = len;
    while left > 0 {
        let start = out.len();
        let n = left.min(BYTES_CHUNK);
        out.resize(start + n, 0);
        decoder.reader().read(&mut out[start..])?;
        left -= n;
    }
    Ok(())
}

/// A container's length, as bincode writes it.
fn decode_len<D: Decoder>(decoder: &mut D) -> Result<usize, bincode::error::DecodeError> {
    let len = u64::decode(decoder)?;
    usize::try_from(len).map_err(|_| bincode::error::DecodeError::OutsideUsizeRange(len))
}

/// A cell's shards: inline up to three, like the engine's.
pub type WireShards = SmallVec<[Shard; 3]>;

/// A counter cell: the shards of one epoch. On the wire: the epoch, then
/// the shards as a bincode `Vec<Shard>`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WireCell {
    /// The epoch the shards belong to.
    pub epoch: Epoch,
    /// At most one per counter id.
    pub shards: WireShards,
    /// A list key's elements (see [`crate::list`]), at most
    /// [`crate::list::LIST_BYTES_MAX`] bytes (checked where it is used).
    pub list: Option<Box<[Vec<u8>]>>,
}

impl Encode for WireCell {
    fn encode<E: Encoder>(&self, encoder: &mut E) -> Result<(), EncodeError> {
        self.epoch.encode(encoder)?;
        self.shards.as_slice().encode(encoder)?;
        self.list.encode(encoder)
    }
}

impl<Context> Decode<Context> for WireCell {
    fn decode<D: Decoder<Context = Context>>(
        decoder: &mut D,
    ) -> Result<Self, bincode::error::DecodeError> {
        let epoch = Epoch::decode(decoder)?;
        let len = decode_len(decoder)?;
        decoder.claim_container_read::<Shard>(len)?;
        // Grown as shards decode: the length is not trusted for capacity.
        let mut shards = WireShards::new();
        for _ in 0..len {
            // As bincode's own Vec decode does: the claim above already
            // counted these bytes, and decoding a shard counts them again.
            decoder.unclaim_bytes_read(std::mem::size_of::<Shard>());
            shards.push(Shard::decode(decoder)?);
        }
        let list = Option::<Box<[Vec<u8>]>>::decode(decoder)?;
        Ok(WireCell {
            epoch,
            shards,
            list,
        })
    }
}
bincode::impl_borrow_decode!(WireCell);

/// How many replicas must answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Decode)]
pub enum Consistency {
    /// One replica.
    One,
    /// A majority of the replicas.
    #[default]
    Quorum,
    /// Every replica.
    All,
    /// A majority, and a read answers only once a majority holds what it
    /// answers (its read repair made first), so that no later read goes
    /// back: reads of counters that are linearizable with the writes a
    /// majority acknowledged. A coordinator's own level: it travels on the
    /// wire as `Quorum` (see the `Encode` below), so older nodes read it,
    /// and a peer that serves part of a request serves it at `Quorum`.
    Serial,
}

/// As the derived encoding of the first three levels (the variant's index,
/// a `u32`), with `Serial` written as `Quorum`.
impl Encode for Consistency {
    fn encode<E: Encoder>(&self, encoder: &mut E) -> Result<(), EncodeError> {
        let index: u32 = match self {
            Consistency::One => 0,
            Consistency::Quorum | Consistency::Serial => 1,
            Consistency::All => 2,
        };
        index.encode(encoder)
    }
}

impl Consistency {
    /// Replicas needed out of `rf`.
    pub fn required(self, rf: usize) -> usize {
        match self {
            Consistency::One => 1.min(rf),
            Consistency::Quorum | Consistency::Serial => rf / 2 + 1,
            Consistency::All => rf,
        }
    }
}

impl std::str::FromStr for Consistency {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "one" => Ok(Consistency::One),
            "quorum" => Ok(Consistency::Quorum),
            "all" => Ok(Consistency::All),
            "serial" => Ok(Consistency::Serial),
            _ => Err(format!(
                "unknown consistency level {s:?} (one, quorum, all, serial)"
            )),
        }
    }
}

impl std::fmt::Display for Consistency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Consistency::One => "ONE",
            Consistency::Quorum => "QUORUM",
            Consistency::All => "ALL",
            Consistency::Serial => "SERIAL",
        })
    }
}

/// A request from one node to another.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum PeerRequest {
    /// Heartbeat; carries the cluster name so two clusters sharing a CA by
    /// mistake do not mix.
    Ping {
        /// The sender's cluster.
        cluster: String,
    },
    /// Merge this state (replication, hints, read repair). Idempotent.
    Apply {
        /// The counter.
        key: WireKey,
        /// State to merge.
        cell: WireCell,
    },
    /// The replica's cell for a key.
    Read {
        /// The counter.
        key: WireKey,
    },
    /// Every cell of a partition.
    ReadRow {
        /// The partition.
        partition: Vec<u8>,
    },
    /// Be the leader for this add and replicate it at `cl`.
    LeaderAdd {
        /// The counter.
        key: WireKey,
        /// The amount.
        delta: i64,
        /// Replicas that must hold it before the answer.
        cl: Consistency,
    },
    /// Reset this counter and replicate the reset at `cl`.
    LeaderReset {
        /// The counter.
        key: WireKey,
        /// Replicas that must hold it before the answer.
        cl: Consistency,
    },
    /// Admit these members of a unique counter (this node is their
    /// applier) and replicate them at `cl`; answered `Admitted`.
    LeaderAdmit {
        /// The unique counter.
        partition: Vec<u8>,
        /// The members, each at most [`MEMBER_BYTES_MAX`] bytes.
        members: Vec<Vec<u8>>,
        /// Replicas that must hold them before the answer.
        cl: Consistency,
    },
    /// Apply this add with an operation id (this node is its applier, see
    /// [`crate::once`]) and replicate it at `cl`; answered `Added`.
    LeaderAddOnce {
        /// The counter.
        key: WireKey,
        /// The amount.
        delta: i64,
        /// The operation id.
        id: OpId,
        /// Replicas that must hold it before the answer.
        cl: Consistency,
    },
    /// `Apply`, with the ids the sender's shard in the cell applied that
    /// it may still lose: kept until its watermark passes them.
    ApplyTail {
        /// The counter.
        key: WireKey,
        /// State to merge.
        cell: WireCell,
        /// The ids (boxed: the largest request stays small).
        tail: Box<WireTail>,
    },
    /// The sender restarted uncleanly: fence its `retired` incarnations and
    /// answer their tails held here, from the `from`-th key on; answered
    /// `Tails`.
    LearnTails {
        /// The sender's retired incarnations.
        retired: Vec<u64>,
        /// Keys already answered.
        from: u64,
    },
    /// The sender learned the tails of its `retired` incarnations from
    /// every replica: forget them; answered `Applied`.
    ForgetTails {
        /// The sender's retired incarnations.
        retired: Vec<u64>,
    },
    /// Make this change (SET, EXPIRE, DEL) as the counter's leader and
    /// replicate it at `cl`; answered `Changed`.
    LeaderChange {
        /// The counter.
        key: WireKey,
        /// The change.
        change: Change,
        /// It answers the value before (refused on a list).
        reads: bool,
        /// Replicas that must hold it before the answer.
        cl: Consistency,
    },
    /// Repair: for each of `segments` equal token slices of each range,
    /// the wrapping sum of the digests of the cells whose partition's token
    /// falls in it; answered `Digests` (range-major). At most
    /// [`REPAIR_RANGES_MAX`] ranges and [`REPAIR_SEGMENTS_MAX`] slices in all.
    RepairDigests {
        /// The token ranges.
        ranges: Vec<WireRange>,
        /// Slices per range.
        segments: u32,
    },
    /// Repair: the key and cell digest of each cell in the `wanted`
    /// slices (runs `(first, count)` of indices as in `Digests`), in key
    /// order from after `after`, at most `limit` (≤ [`REPAIR_LEAVES_MAX`]);
    /// answered `Leaves`.
    RepairLeaves {
        /// The token ranges.
        ranges: Vec<WireRange>,
        /// Slices per range.
        segments: u32,
        /// The slices wanted: ascending, disjoint runs `(first, count)`.
        wanted: Vec<(u32, u32)>,
        /// Where the last page ended.
        after: Option<WireKey>,
        /// Leaves per page, at most.
        limit: u32,
    },
    /// A repair of `node` that began at `started_ms` finished: hints for it
    /// dropped before then need no repair any more; answered `Applied`.
    Repaired {
        /// The repaired node's id.
        node: String,
        /// When the repair began, in ms since the Unix epoch.
        started_ms: u64,
    },
    /// The receiver's ring; answered `Topology`.
    GetTopology,
    /// Store this ring durably and use it, if it is newer than the
    /// receiver's; answered `Applied`, or an error when the receiver holds
    /// another ring of the same or a newer version.
    Adopt {
        /// The ring.
        topology: WireTopology,
    },
    /// Send every operation id this node remembers to each of `to` (node
    /// indices) with `TakeIds`; answered `Applied` once all took them.
    HandOverIds {
        /// The nodes to send them to.
        to: Vec<u32>,
    },
    /// Remember these operation ids as applied (another applier's, handed
    /// over in a ring change); at most [`IDS_BLOCK_BYTES_MAX`] bytes;
    /// answered `Applied`.
    TakeIds {
        /// Encoded ids (the engine's format).
        block: Vec<u8>,
    },
    /// The receiver's counter_id and every counter_id whose shards it may
    /// hold, after a cleanup if `cleanup` (the data of ranges it no longer
    /// replicates dropped, but its own shards); answered `Survey`.
    Survey {
        /// Clean up first.
        cleanup: bool,
    },
    /// Fold every cell the receiver holds by its ring's active fold
    /// generation; answered `Folded`.
    Fold,
    /// A page of the live keys of `scan` whose partition's token falls in
    /// `ranges` (at most [`REPAIR_RANGES_MAX`]); answered `Keys`.
    ScanKeys {
        /// Which keys, from where.
        scan: WireScan,
        /// The token ranges.
        ranges: Vec<WireRange>,
    },
    /// The Lua script of this sha1, if the receiver has it; answered
    /// `Script`.
    Script {
        /// The script's sha1, in hex.
        sha: String,
    },
    /// Empty the receiver's cache of scripts; answered `Applied`.
    FlushScripts,
    /// Make this change of a list as its leader and replicate it at `cl`;
    /// answered `Listed`.
    LeaderList {
        /// The list.
        key: WireKey,
        /// The change.
        change: crate::list::ListChange,
        /// Replicas that must hold it before the answer.
        cl: Consistency,
    },
    /// Give this partition's key (its counter, else every live column of
    /// its hash, else its unique counter's count) the deadline `at_ms` (0:
    /// none, `PERSIST`) if `only` allows, as the row's leader, and
    /// replicate the cells changed at `cl`; answered `Changed` (`before`
    /// is `None`).
    LeaderExpireRow {
        /// The partition.
        partition: Vec<u8>,
        /// The deadline, ms since the Unix epoch (0: none).
        at_ms: u64,
        /// Redis' `NX`, `XX`, `GT`, `LT`.
        only: When,
        /// Replicas that must hold it before the answer.
        cl: Consistency,
    },
    /// Heartbeat of peer protocol 3 (`crate::version`): `Ping`, and what
    /// the sender's build is. Answered `Hello`.
    Hello {
        /// The sender's cluster.
        cluster: String,
        /// The sender's build and cluster features.
        build: WireBuild,
    },
    /// The sender stops (a clean shutdown): count it down now rather than
    /// after the failure timeout. Answered `Applied`. Peer protocol 3.
    Leaving,
    /// Agreement (peer protocol 4): promise `ballot` for the partition's
    /// registers unless a later ballot was promised, durably; answered
    /// `Promise` (see `tally_model::paxos`).
    Prepare {
        /// The partition.
        partition: Vec<u8>,
        /// The proposer's ballot.
        ballot: Ballot,
    },
    /// Agreement: accept this proposal unless a later ballot was
    /// promised, durably; answered `Proposed`. Peer protocol 4.
    Propose {
        /// The partition.
        partition: Vec<u8>,
        /// The ballot and the partition's next registers.
        proposal: Accepted,
    },
    /// Agreement: this value was decided; keep it if it is later than
    /// the one the receiver knows. Answered `Applied`. Peer protocol 4.
    Commit {
        /// The partition.
        partition: Vec<u8>,
        /// The decided ballot and registers.
        decided: Accepted,
    },
    /// Agreement: the receiver's Paxos state of the partition, changing
    /// nothing (a read); answered `Agreed`. Peer protocol 4.
    ReadAgreed {
        /// The partition.
        partition: Vec<u8>,
    },
    /// Agreement: a page of the receiver's Paxos states of the partitions
    /// whose tokens are in `ranges` (at most [`REPAIR_RANGES_MAX`]), in
    /// key order after partition `after`; answered `AgreedStates`. How
    /// agreed state moves with a range to a new replica. Peer protocol 5.
    AgreedIn {
        /// The token ranges.
        ranges: Vec<WireRange>,
        /// The partition the page begins after (`None`: the first).
        after: Option<Vec<u8>>,
    },
    /// Agreement: merge these Paxos states (at most [`AGREED_STATES_MAX`])
    /// into the receiver's, each part the later, durably; answered
    /// `Applied`. Peer protocol 5.
    MergeAgreed {
        /// Partitions and their states.
        states: Vec<(Vec<u8>, Acceptor)>,
    },
    /// A page of the live partitions of the CQL table whose partitions
    /// begin with `table` ([`crate::ring::TABLE_PREFIX_BYTES`] bytes),
    /// in `ranges`, as `ScanKeys` pages a database (`scan.db` is 0; its
    /// prefix is one of the partition key); answered `Keys`. Peer
    /// protocol 7.
    ScanTable {
        /// The table's prefix.
        table: Vec<u8>,
        /// Which keys, from where.
        scan: WireScan,
        /// The token ranges.
        ranges: Vec<WireRange>,
    },
    /// Lead a write of whole cells of `partition` (a CQL regular table's
    /// last-write-wins columns, at most [`LEADER_CELLS_MAX`], each merged
    /// by its own epoch) at `cl`; answered `Applied`. Peer protocol 8.
    LeaderCells {
        /// Their partition.
        partition: Vec<u8>,
        /// Each cell's column and state.
        cells: Vec<(Vec<u8>, WireCell)>,
        /// The level the leader answers at.
        cl: Consistency,
    },
    /// The receiver's cells of `partition`'s columns from `start`
    /// (inclusive) to `end` (exclusive; `None`: the partition's end), the
    /// first `limit` of them (at most [`ROW_COLUMNS_MAX`]); answered
    /// `Row`, which holds the whole range if it holds fewer than `limit`.
    /// How a partition too wide for `ReadRow` is read. Peer protocol 10.
    ReadSlice {
        /// The partition.
        partition: Vec<u8>,
        /// The first column.
        start: Vec<u8>,
        /// The first column past the range.
        end: Option<Vec<u8>>,
        /// Most cells answered.
        limit: u32,
    },
    /// `LeaderList`, with the time its coordinator was asked for it: the
    /// leader stamps the change no later than that, so that a request
    /// delivered late (its coordinator gave up on it, its client pushed
    /// on through another leader) loses to the changes asked for after
    /// it. Peer protocol 11.
    LeaderListAt {
        /// The list.
        key: WireKey,
        /// The change.
        change: crate::list::ListChange,
        /// Replicas that must hold it before the answer.
        cl: Consistency,
        /// When its coordinator was asked (its wall clock, ms since the
        /// Unix epoch).
        asked_ms: u64,
    },
}

/// The most cells one `LeaderCells` carries: each at most a list's
/// bytes, so that the message stays far within `MESSAGE_BYTES_MAX`.
pub const LEADER_CELLS_MAX: usize = 256;

const _: () =
    assert!(LEADER_CELLS_MAX * (crate::list::LIST_BYTES_MAX + 2 * 1024) <= MESSAGE_BYTES_MAX);

/// The most Paxos states one `AgreedIn` page or `MergeAgreed` carries.
pub const AGREED_STATES_MAX: usize = 1024;

impl PeerRequest {
    /// The first peer protocol that knows this request (`crate::version`):
    /// a connection of an older one never carries it.
    pub fn since(&self) -> u16 {
        match self {
            PeerRequest::Hello { .. } | PeerRequest::Leaving => 3,
            PeerRequest::Prepare { .. }
            | PeerRequest::Propose { .. }
            | PeerRequest::Commit { .. }
            | PeerRequest::ReadAgreed { .. } => 4,
            PeerRequest::AgreedIn { .. } | PeerRequest::MergeAgreed { .. } => 5,
            PeerRequest::ScanTable { .. } => 7,
            PeerRequest::LeaderCells { .. } => 8,
            PeerRequest::ReadSlice { .. } => 10,
            PeerRequest::LeaderListAt { .. } => 11,
            _ => 2,
        }
    }
}

/// A node's build, as it announces it to its peers (bounded: see
/// [`WireBuild::check`]).
#[derive(Debug, Clone, PartialEq, Eq, Default, Encode, Decode)]
pub struct WireBuild {
    /// The build's version, e.g. `0.1.0+1a2b3c4d5e6f`.
    pub version: String,
    /// The cluster features the build has.
    pub features: Vec<String>,
    /// The cluster features the node has enabled, for good.
    pub enabled: Vec<String>,
}

impl WireBuild {
    /// Whether it is within bounds: at most [`FEATURES_MAX`] features of
    /// each list, each name (and the version) at most [`NAME_BYTES_MAX`]
    /// bytes.
    pub fn check(&self) -> Result<(), String> {
        if self.features.len() > FEATURES_MAX || self.enabled.len() > FEATURES_MAX {
            return Err(format!("more than {FEATURES_MAX} cluster features"));
        }
        let names = std::iter::once(&self.version)
            .chain(&self.features)
            .chain(&self.enabled);
        match names.map(String::len).find(|&n| n > NAME_BYTES_MAX) {
            Some(n) => Err(format!("a name of {n} bytes, over {NAME_BYTES_MAX}")),
            None => Ok(()),
        }
    }
}

/// Most keys one page of a scan holds.
pub const SCAN_KEYS_MAX: usize = 10_000;
/// Most databases (Redis' `SELECT 0..15`).
pub const DATABASES: u8 = 16;

/// One page of a scan: which keys, from where.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct WireScan {
    /// The database, below [`DATABASES`] (0 for the native protocol).
    pub db: u8,
    /// Only partitions that begin with this.
    pub prefix: Vec<u8>,
    /// Where the last page ended (a key as stored, from `WireKeys::more`);
    /// from the first key when `None`.
    pub after: Option<WireKey>,
    /// Keys per page, at most: 1 to [`SCAN_KEYS_MAX`].
    pub limit: u32,
}

/// What a live key of a scan holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Encode, Decode)]
pub enum WireKind {
    /// A counter of the partition's empty column (a Redis string).
    Counter,
    /// Counters of other columns (a Redis hash).
    Row,
    /// A unique counter (a Redis set).
    Unique,
    /// A list of the partition's empty column (a Redis list).
    List,
    /// A sorted set (a register of the partition's agreed state). Peer
    /// protocol 6 and client protocol 4: a side of an older one is never
    /// sent it ([`WireKeys::without_sorted_sets`]).
    SortedSet,
}

/// One live key of a scan.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Encode, Decode)]
pub struct WireScanned {
    /// The partition, as the client names it.
    pub partition: Vec<u8>,
    /// The first column found of that kind: with the partition, where
    /// in key order it was found.
    pub column: Vec<u8>,
    /// What it holds (a partition holding two kinds is listed for each).
    pub kind: WireKind,
}

/// A page of a scan: live keys in key order, and where to go on from.
#[derive(Debug, Clone, PartialEq, Eq, Default, Encode, Decode)]
pub struct WireKeys {
    /// The keys, at most the page's limit.
    pub keys: Vec<WireScanned>,
    /// The key to go on after (as stored), if the scan is not over.
    pub more: Option<WireKey>,
}

impl WireKeys {
    /// The page as a side that does not know [`WireKind::SortedSet`]
    /// reads it: without the sorted sets (a shorter page; where to go on
    /// from is unchanged).
    pub fn without_sorted_sets(mut self) -> WireKeys {
        self.keys.retain(|k| k.kind != WireKind::SortedSet);
        self
    }
}

/// Most bytes of ids one `TakeIds` carries.
pub const IDS_BLOCK_BYTES_MAX: usize = 1 << 20;

/// Most nodes a cluster's ring may name.
pub const TOPOLOGY_NODES_MAX: usize = 1024;

/// Where a node stands in the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Encode, Decode)]
pub enum NodeState {
    /// Named by the configuration, never a member yet.
    #[default]
    Absent,
    /// Becoming a member: a pending replica of its ranges.
    Joining,
    /// A member.
    Normal,
    /// Leaving the ring (decommission): still a replica, its ranges
    /// streaming to their next owners.
    Leaving,
    /// Being removed while down (removenode): its ranges re-replicated
    /// among the others.
    Removing,
    /// Left the ring; its counter ids are retired.
    Left,
}

/// A version of the ring: every configured node's state, in config order.
#[derive(Debug, Clone, PartialEq, Eq, Default, Encode, Decode)]
pub struct WireTopology {
    /// Grows by one with every change.
    pub version: u64,
    /// Per configured node (at most [`TOPOLOGY_NODES_MAX`]).
    pub states: Vec<NodeState>,
    /// The change in progress is switching over: adds with ids whose
    /// applier it moves are refused while appliers hand their ids over.
    pub switching: bool,
    /// The retired counter_ids of each fold generation, oldest first (at
    /// most [`FOLD_IDS_MAX`] in all).
    pub folds: Vec<Vec<u64>>,
    /// The generation cells fold up to; a later one is agreed, not used yet.
    pub folds_active: u32,
    /// Each database's flush generation (at most [`DATABASES`]).
    pub flushes: Vec<u32>,
}

/// Most retired counter_ids the fold generations of a ring name in all.
pub const FOLD_IDS_MAX: usize = 1 << 16;

/// Most token ranges one repair request names.
pub const REPAIR_RANGES_MAX: usize = 4096;
/// Most token slices one repair request covers (8 MiB of digests).
pub const REPAIR_SEGMENTS_MAX: usize = 1 << 20;
/// Most leaves one `Leaves` answer holds.
pub const REPAIR_LEAVES_MAX: usize = 10_000;

/// The token range `(start, end]`, wrapping past `i64::MAX` when
/// `start >= end` (the whole ring when they are equal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub struct WireRange {
    /// Exclusive.
    pub start: i64,
    /// Inclusive.
    pub end: i64,
}

/// What one repair did, for `tally repair`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Encode, Decode)]
pub struct WireRepaired {
    /// The node whose ranges were repaired.
    pub node: String,
    /// Token ranges compared.
    pub ranges: u64,
    /// Token slices compared, and how many differed between replicas.
    pub segments: u64,
    /// Token slices that differed.
    pub segments_differing: u64,
    /// Cells whose digests were compared (in differing slices).
    pub keys_compared: u64,
    /// Keys that differed between replicas.
    pub keys_differing: u64,
    /// Cells sent to a replica that was behind.
    pub cells_moved: u64,
    /// Bytes of those cells, as encoded on the wire.
    pub bytes_moved: u64,
    /// How long it took.
    pub millis: u64,
    /// It resumed where an unfinished repair stopped.
    pub resumed: bool,
}

/// One add with an id as its applier sealed it (see the engine's
/// `ids::tail`): what a replica keeps until the applier made it durable.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct WireTailOp {
    /// The applier's group commit that holds it.
    pub batch: u64,
    /// The operation id.
    pub id: OpId,
    /// Its delta.
    pub delta: i64,
    /// The value it produced.
    pub value: i64,
    /// The epoch it was applied in.
    pub epoch: u64,
    /// When it was applied (wall-clock ms).
    pub at_ms: u64,
}

/// The ids that travel with a shard of applier incarnation `counter_id`.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct WireTail {
    /// The applier incarnation whose shard in the cell holds the adds.
    pub counter_id: u64,
    /// The applier's last durable group commit when it sent them.
    pub durable: u64,
    /// The adds not durable there yet (at most the engine's `TAIL_OPS_MAX`).
    pub ops: Vec<WireTailOp>,
}

/// A key's part of a tail, with the cell as the answering replica holds it.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct WireLearned {
    /// The counter.
    pub key: WireKey,
    /// The replica's cell for it.
    pub cell: WireCell,
    /// The adds of the asked incarnations to it.
    pub ops: Vec<WireTailOp>,
}

/// Most keys in one `Tails` answer; the asker comes back for the rest.
pub const LEARNED_KEYS_MAX: usize = 1024;
/// Most ids in one `Tails` answer (unless one key alone has more), about
/// 4 MiB encoded, far below [`MESSAGE_BYTES_MAX`].
pub const LEARNED_OPS_MAX: usize = 64 * 1024;

/// The answer to a [`PeerRequest`], in the same position of the batch.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum PeerResponse {
    /// Answer to `Ping` from a node that can take writes, with the version
    /// of its ring.
    Pong {
        /// The answering node's ring version.
        ring: u64,
    },
    /// The state was merged and is durable.
    Applied,
    /// Answer to `Read`.
    Cell(WireCell),
    /// Answer to `ReadRow`, in column order.
    Row(Vec<(Vec<u8>, WireCell)>),
    /// Answer to `LeaderAdd`: the value the leader now sees.
    Added(i64),
    /// Answer to `LeaderReset`.
    Reset,
    /// The request failed.
    Error(WireError),
    /// Answer to `Apply`: merged, but this replica is at a newer epoch (it
    /// saw a reset the sender missed), so the sent shards were discarded.
    Stale {
        /// The replica's epoch for the key.
        epoch: Epoch,
    },
    /// Answer to `Ping` from a node that is up but cannot take writes (its
    /// engine is poisoned): peers choose another replica to lead. Last, so
    /// that the other answers keep their encoding.
    PongNotWritable {
        /// Why, for people (at most [`REASON_BYTES_MAX`]).
        why: String,
        /// The answering node's ring version.
        ring: u64,
    },
    /// Answer to `LeaderAdmit`: per member, whether it was new.
    Admitted(Vec<bool>),
    /// Answer to `LearnTails`: at most [`LEARNED_KEYS_MAX`] keys; `more`
    /// when the asker must come back for the rest.
    Tails {
        /// The keys' tails.
        learned: Vec<WireLearned>,
        /// Whether keys are left.
        more: bool,
    },
    /// Answer to `LeaderChange`.
    Changed(Changed),
    /// Answer to `RepairDigests`.
    Digests(Vec<u64>),
    /// Answer to `RepairLeaves`: keys and cell digests in key order, and
    /// the key to ask again after when the page was full.
    Leaves {
        /// The leaves.
        leaves: Vec<(WireKey, u64)>,
        /// Where to go on from, if there is more.
        more: Option<WireKey>,
    },
    /// Answer to `GetTopology`.
    Topology(WireTopology),
    /// Answer to `Survey`.
    Survey {
        /// The answering node's counter_id (its incarnation now).
        counter_id: u64,
        /// The counter_ids whose shards it may hold (at most
        /// [`FOLD_IDS_MAX`]).
        held: Vec<u64>,
    },
    /// Answer to `Fold`.
    Folded(WireFoldedNode),
    /// Answer to `ScanKeys`.
    Keys(WireKeys),
    /// Answer to `Script`.
    Script(Option<Vec<u8>>),
    /// Answer to `LeaderList`.
    Listed(crate::list::ListReply),
    /// Answer to `Hello`: `Pong` or `PongNotWritable`, and the answering
    /// node's build.
    Hello {
        /// The answering node's ring version.
        ring: u64,
        /// Why it takes no writes (at most [`REASON_BYTES_MAX`]); `None`
        /// when it can.
        not_writable: Option<String>,
        /// Its build and cluster features.
        build: WireBuild,
    },
    /// Answer to `Prepare`.
    Promise(Promise),
    /// Answer to `Propose`: `None` when accepted, else the later ballot
    /// the receiver promised.
    Proposed(Option<Ballot>),
    /// Answer to `ReadAgreed`.
    Agreed(Acceptor),
    /// Answer to `AgreedIn`: a page of states (at most
    /// [`AGREED_STATES_MAX`]), and the partition to ask after for the
    /// next one (`None`: the last page).
    AgreedStates {
        /// Partitions and their states, in key order.
        states: Vec<(Vec<u8>, Acceptor)>,
        /// Where the next page begins after.
        more: Option<Vec<u8>>,
    },
}

/// What one node holds after a fold.
#[derive(Debug, Clone, PartialEq, Eq, Default, Encode, Decode)]
pub struct WireFoldedNode {
    /// The node.
    pub node: String,
    /// Cells it holds.
    pub cells: u64,
    /// Shards of its widest cell.
    pub widest: u64,
    /// Bytes of its SSTables.
    pub table_bytes: u64,
    /// Retired incarnations of the active generations it still holds
    /// shards of (0 but for cells whose base would overflow).
    pub retired_held: u64,
}

/// What `tally fold` did.
#[derive(Debug, Clone, PartialEq, Eq, Default, Encode, Decode)]
pub struct WireFolded {
    /// The fold generation it agreed (0: nothing to fold, none agreed).
    pub generation: u32,
    /// The retired counter_ids it folded.
    pub retired: Vec<u64>,
    /// The full repair before it.
    pub repaired: WireRepaired,
    /// Every member after it.
    pub nodes: Vec<WireFoldedNode>,
}

/// Longest reason a node gives for not taking writes.
pub const REASON_BYTES_MAX: usize = 1024;

/// `why`, cut to at most [`REASON_BYTES_MAX`] bytes at a character boundary.
pub fn bounded_reason(why: &str) -> String {
    let mut end = why.len().min(REASON_BYTES_MAX);
    while !why.is_char_boundary(end) {
        end -= 1;
    }
    why[..end].to_string()
}

/// What a client asks for.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum ClientOp {
    /// Liveness check.
    Ping,
    /// Add `delta` to a counter; answers the value the leader sees.
    Add {
        /// The counter.
        key: WireKey,
        /// The amount (may be negative).
        delta: i64,
        /// Consistency level.
        cl: Consistency,
    },
    /// Read a counter.
    Get {
        /// The counter.
        key: WireKey,
        /// Consistency level.
        cl: Consistency,
    },
    /// Read every column of a partition.
    GetRow {
        /// The partition.
        partition: Vec<u8>,
        /// Consistency level.
        cl: Consistency,
    },
    /// Reset a counter to zero.
    Reset {
        /// The counter.
        key: WireKey,
        /// Consistency level.
        cl: Consistency,
    },
    /// This node's view of the cluster.
    Status,
    /// Add members to a unique counter (each counted once, ever, until a
    /// reset); answers how many were new.
    UniqueAdd {
        /// The unique counter.
        partition: Vec<u8>,
        /// The members, each at most [`MEMBER_BYTES_MAX`] bytes.
        members: Vec<Vec<u8>>,
        /// Consistency level.
        cl: Consistency,
    },
    /// A unique counter's count: its number of distinct members.
    UniqueCount {
        /// The unique counter.
        partition: Vec<u8>,
        /// Consistency level.
        cl: Consistency,
    },
    /// Whether each member is in a unique counter; answered `Flags`.
    UniqueContains {
        /// The unique counter.
        partition: Vec<u8>,
        /// The members.
        members: Vec<Vec<u8>>,
        /// Consistency level.
        cl: Consistency,
    },
    /// Add `delta` at most once for the operation id `id` (see
    /// [`crate::once`]); answers the value the add produced, also to a retry.
    AddOnce {
        /// The counter.
        key: WireKey,
        /// The amount (may be negative).
        delta: i64,
        /// The operation id.
        id: OpId,
        /// Consistency level.
        cl: Consistency,
    },
    /// Change a counter's epoch (SET, EXPIRE, DEL); answered `Changed`.
    Change {
        /// The counter.
        key: WireKey,
        /// The change.
        change: Change,
        /// Consistency level.
        cl: Consistency,
    },
    /// A counter's whole state (value, deadline); answered `Cell`.
    GetCell {
        /// The counter.
        key: WireKey,
        /// Consistency level.
        cl: Consistency,
    },
    /// Repair the ranges the answering node replicates: compare every
    /// replica's cells by digests of token slices, and merge the cells that
    /// differ into every replica; answered `Repaired`. With a range, only
    /// the tokens of those ranges in it.
    Repair {
        /// The tokens to repair, if not all of the node's.
        range: Option<WireRange>,
    },
    /// Take `node` (up) out of the ring: its ranges stream to their next
    /// owners, then it leaves; answered `Ring` with the ring after.
    Decommission {
        /// The leaving node's id.
        node: String,
    },
    /// Take `node` (down for good) out of the ring: the others
    /// re-replicate its ranges among themselves; answered `Ring`.
    RemoveNode {
        /// The removed node's id.
        node: String,
    },
    /// Drop the data the answering node no longer replicates, but its own
    /// shards; answered `Cleaned`.
    Cleanup,
    /// Fold the shards of retired incarnations into cells' bases, cluster
    /// wide, after a full repair; answered `Folded`.
    Fold,
    /// A page of the live keys of the cluster, each token range read from
    /// as many replicas as `cl` asks; answered `Keys`.
    Scan {
        /// Which keys, from where.
        scan: WireScan,
        /// Replicas read per range.
        cl: Consistency,
    },
    /// Take, list or clear the answering node's snapshots; answered
    /// `Snapshots` (the node's snapshots after).
    Snapshot(WireSnapshotOp),
    /// Log the connection in as `user` (each at most
    /// [`CREDENTIAL_BYTES_MAX`] bytes); answered `Done`, or `Denied` after a
    /// delay. Where the node has users, nothing else is served before it.
    Auth {
        /// The user's name.
        user: String,
        /// The password, in the clear: use TLS where the network is not trusted.
        password: String,
    },
    /// The client protocol versions the client speaks (at most
    /// [`CLIENT_VERSIONS_MAX`]): the connection's first request, answered
    /// `Hello`; a node that shares none answers why and closes. Without
    /// it, a connection speaks version 1 (`crate::version`).
    Hello {
        /// The versions.
        versions: Vec<u16>,
    },
    /// Each node's build and peer protocol, and the cluster's features;
    /// answered `Versions`. Client protocol 2.
    Versions,
    /// A key's string, read linearizably (through agreement); answered
    /// `String`. Client protocol 3.
    GetString {
        /// The key (a partition).
        key: Vec<u8>,
    },
    /// Change a key's string through agreement if `condition` holds of
    /// the string before (compare-and-set, leases); answered `Swapped`.
    /// Client protocol 3.
    SetString {
        /// The key (a partition).
        key: Vec<u8>,
        /// The new value, at most [`STRING_BYTES_MAX`] bytes; `None`
        /// deletes the string.
        value: Option<Vec<u8>>,
        /// What the string before must be.
        condition: StringCondition,
        /// The new value's deadline.
        deadline: Deadline,
    },
    /// Run the request `op` (a [`ClientOp`], encoded) at SERIAL: every
    /// level in it is read as [`Consistency::Serial`], which travels as
    /// `Quorum` (see `crate::serial`). Client protocol 4.
    Serial {
        /// The request, encoded.
        op: Vec<u8>,
    },
}

/// What a key's string must be for `ClientOp::SetString` to change it.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum StringCondition {
    /// Anything, or nothing.
    Always,
    /// No string (set-if-absent; a lease's first acquire).
    Absent,
    /// Some string.
    Present,
    /// This string (compare-and-set; a lease's renew and release).
    Equals(Vec<u8>),
    /// No string, or this one (a lease acquired again by its holder).
    AbsentOrEquals(Vec<u8>),
}

impl StringCondition {
    /// Whether it holds of `before` (`None`: no live string).
    pub fn holds(&self, before: Option<&[u8]>) -> bool {
        match self {
            StringCondition::Always => true,
            StringCondition::Absent => before.is_none(),
            StringCondition::Present => before.is_some(),
            StringCondition::Equals(v) => before == Some(v.as_slice()),
            StringCondition::AbsentOrEquals(v) => before.is_none_or(|b| b == v.as_slice()),
        }
    }
}

/// A new value's deadline, as a client asks for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub enum Deadline {
    /// None.
    Never,
    /// The one the value before had (`KEEPTTL`).
    Keep,
    /// This one, ms since the Unix epoch (`PXAT`).
    At(u64),
    /// This many ms after the node takes the change (`PX`): the nodes'
    /// clock, not the client's.
    After(u64),
}

impl Deadline {
    /// The deadline as a node keeps it, taking the change at `now_ms`.
    pub fn at(self, now_ms: u64) -> Ttl {
        match self {
            Deadline::Never => Ttl::Clear,
            Deadline::Keep => Ttl::Keep,
            Deadline::At(at) => Ttl::At(at),
            Deadline::After(ms) => Ttl::At(now_ms.saturating_add(ms)),
        }
    }
}

/// A key's string and its deadline.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct WireString {
    /// The bytes.
    pub value: Vec<u8>,
    /// Its deadline, ms since the Unix epoch (0: none).
    pub at_ms: u64,
}

/// What `ClientOp::SetString` did.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct WireSwapped {
    /// Whether the condition held and the change was made.
    pub applied: bool,
    /// The string before (also when not applied: who holds a lease).
    pub before: Option<WireString>,
}

/// The most versions a client's `Hello` may name.
pub const CLIENT_VERSIONS_MAX: usize = 64;

/// What `ClientOp::Versions` answers: the builds of a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default, Encode, Decode)]
pub struct WireVersions {
    /// The answering node's id.
    pub node: String,
    /// Every node of the configuration, in its order.
    pub nodes: Vec<WireNodeVersion>,
    /// The cluster features the answering node has enabled.
    pub enabled: Vec<String>,
}

/// One node's build, as the answering node knows it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Encode, Decode)]
pub struct WireNodeVersion {
    /// Node id.
    pub id: String,
    /// Its build and features, as it last announced them (`None`: not
    /// heard since the answering node started, or a build that does not
    /// announce itself).
    pub build: Option<WireBuild>,
    /// The peer protocol the answering node speaks with it (0: not
    /// connected; for the answering node, the newest it speaks).
    pub protocol: u16,
}

/// The most bytes of a user name or a password the nodes take.
pub const CREDENTIAL_BYTES_MAX: usize = 1024;

/// What a cleanup did, for `tally cleanup`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Encode, Decode)]
pub struct WireCleaned {
    /// The node cleaned up.
    pub node: String,
    /// Cells it replicates, kept.
    pub kept: u64,
    /// Cells of keys it no longer replicates, dropped (but its own shards).
    pub dropped: u64,
    /// SSTable bytes before and after.
    pub bytes_before: u64,
    /// SSTable bytes after.
    pub bytes_after: u64,
}

/// What to do with a node's snapshots.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum WireSnapshotOp {
    /// Flush, and hard-link the node's SSTables into `snapshots/<tag>`.
    Take {
        /// The snapshot's name: `[A-Za-z0-9._-]`, at most 64 bytes.
        tag: String,
    },
    /// Only list them.
    List,
    /// Delete the one tagged so, or every one.
    Clear {
        /// The snapshot to delete; `None`: all of them.
        tag: Option<String>,
    },
}

/// One node's snapshots.
#[derive(Debug, Clone, PartialEq, Eq, Default, Encode, Decode)]
pub struct WireSnapshots {
    /// The node.
    pub node: String,
    /// Its data directory's `snapshots` directory, where they are.
    pub dir: String,
    /// Each snapshot, by tag.
    pub snapshots: Vec<WireSnapshot>,
}

/// One snapshot of one node.
#[derive(Debug, Clone, PartialEq, Eq, Default, Encode, Decode)]
pub struct WireSnapshot {
    /// Its tag.
    pub tag: String,
    /// Files in it.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// A client request frame.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct ClientRequest {
    /// Chosen by the client; echoed in the response.
    pub id: u64,
    /// The operation.
    pub op: ClientOp,
}

/// One node as another node sees it.
#[derive(Debug, Clone, PartialEq, Encode, Decode)]
pub struct NodeStatus {
    /// Node id from the config.
    pub id: String,
    /// Client protocol address.
    pub client_addr: String,
    /// Whether heartbeats reach it (always true for the answering node).
    pub up: bool,
    /// Why it takes no writes (its engine is poisoned), as its heartbeats
    /// last said; `None` when it can write, or when it is down.
    pub not_writable: Option<String>,
    /// Share of the ring it is the primary owner of.
    pub ownership: f64,
}

/// The answering node's own numbers.
#[derive(Debug, Clone, PartialEq, Eq, Default, Encode, Decode)]
pub struct NodeStats {
    /// Cells in SSTables and memtables (a counter in several counts more than once).
    pub cells: u64,
    /// Bytes of commit log on disk.
    pub log_bytes: u64,
    /// Bytes of SSTables on disk.
    pub table_bytes: u64,
    /// Keys with hints waiting for other nodes.
    pub hints_pending: u64,
    /// Adds this node led since it started.
    pub adds_led: u64,
    /// This node's counter id (its incarnation's shard id).
    pub counter_id: u64,
    /// Per peer: the hints this node holds for it.
    pub hints: Vec<PeerHints>,
    /// The repair this node is running, as far as it got.
    pub repairing: Option<WireRepaired>,
    /// The ring as this node knows it.
    pub ring: WireTopology,
}

/// The hints one node holds for one peer.
#[derive(Debug, Clone, PartialEq, Eq, Default, Encode, Decode)]
pub struct PeerHints {
    /// The peer's id.
    pub node: String,
    /// Keys pending for it.
    pub pending: u64,
    /// Hints for it dropped since the holder started (past the hint window
    /// or size limit).
    pub dropped: u64,
    /// When its pending hints began, in ms since the Unix epoch (0: none).
    pub since_ms: u64,
    /// Hints for it were dropped: it needs a repair.
    pub needs_repair: bool,
}

/// One node's view of the cluster: enough for a client to compute the ring.
#[derive(Debug, Clone, PartialEq, Encode, Decode)]
pub struct ClusterStatus {
    /// Cluster name.
    pub cluster: String,
    /// The answering node's id.
    pub node: String,
    /// Replicas per partition.
    pub replication_factor: u32,
    /// Virtual nodes per node.
    pub vnodes: u32,
    /// Every node of the cluster, in config (ring) order.
    pub nodes: Vec<NodeStatus>,
    /// The answering node's numbers.
    pub stats: NodeStats,
}

/// A successful answer.
#[derive(Debug, Clone, PartialEq, Encode, Decode)]
pub enum ClientReply {
    /// Answer to `Ping`.
    Pong,
    /// A counter value.
    Value(i64),
    /// A partition's columns and values, in column order.
    Row(Vec<(Vec<u8>, i64)>),
    /// Answer to `Reset`.
    Done,
    /// Answer to `Status`.
    Status(ClusterStatus),
    /// Per member asked, in order: whether it is in the unique counter.
    Flags(Vec<bool>),
    /// Answer to `Change`.
    Changed(Changed),
    /// Answer to `GetCell`: the merged cell as the replicas read hold it.
    Cell(WireCell),
    /// Answer to `Repair`.
    Repaired(WireRepaired),
    /// Answer to `Decommission` and `RemoveNode`: the ring after.
    Ring(WireTopology),
    /// Answer to `Cleanup`.
    Cleaned(WireCleaned),
    /// Answer to `Fold`.
    Folded(WireFolded),
    /// Answer to `Scan`.
    Keys(WireKeys),
    /// Answer to `Snapshot`.
    Snapshots(WireSnapshots),
    /// Answer to `Hello`.
    Hello {
        /// The client protocol version of the connection from now on.
        version: u16,
        /// The node's build.
        build: String,
    },
    /// Answer to `Versions`.
    Versions(WireVersions),
    /// Answer to `GetString`: the key's string, if it holds one.
    String(Option<WireString>),
    /// Answer to `SetString`.
    Swapped(WireSwapped),
}

/// A client response frame.
#[derive(Debug, Clone, PartialEq, Encode, Decode)]
pub struct ClientResponse {
    /// The request's id; 0 for an error about the connection itself.
    pub id: u64,
    /// The outcome.
    pub result: Result<ClientReply, WireError>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    /// The levels as they were encoded before `Serial` (derived).
    #[derive(Encode)]
    enum Levels {
        One,
        Quorum,
        All,
    }

    #[test]
    fn serial_travels_as_quorum_and_the_others_as_ever() {
        for (cl, old) in [
            (Consistency::One, Levels::One),
            (Consistency::Quorum, Levels::Quorum),
            (Consistency::All, Levels::All),
            (Consistency::Serial, Levels::Quorum),
        ] {
            assert_eq!(encode(&cl), encode(&old), "{cl}");
        }
        let back: Consistency = decode(&encode(&Consistency::Serial)).unwrap();
        assert_eq!(back, Consistency::Quorum);
        assert_eq!(Consistency::Serial.required(3), 2);
        assert_eq!("serial".parse::<Consistency>(), Ok(Consistency::Serial));
    }
    use proptest::prelude::*;

    #[test]
    fn only_protocol_3_carries_hello_and_leaving() {
        let hello = PeerRequest::Hello {
            cluster: "c".into(),
            build: WireBuild::default(),
        };
        assert_eq!(hello.since(), 3);
        assert_eq!(PeerRequest::Leaving.since(), 3);
        assert_eq!(
            PeerRequest::Ping {
                cluster: "c".into()
            }
            .since(),
            2
        );
        assert_eq!(PeerRequest::GetTopology.since(), 2);
    }

    #[test]
    fn only_protocol_11_carries_a_list_change_with_its_asked_time() {
        let change = crate::list::ListChange::Push {
            end: crate::list::End::Right,
            values: vec![b"v".to_vec()],
            only_existing: false,
        };
        let at = PeerRequest::LeaderListAt {
            key: WireKey::new(b"k", b""),
            change: change.clone(),
            cl: Consistency::Quorum,
            asked_ms: 1_700_000_000_123,
        };
        assert_eq!(at.since(), 11);
        assert_eq!(decode::<PeerRequest>(&encode(&at)).unwrap(), at);
        let plain = PeerRequest::LeaderList {
            key: WireKey::new(b"k", b""),
            change,
            cl: Consistency::Quorum,
        };
        assert_eq!(plain.since(), 2);
    }

    #[test]
    fn only_protocol_4_carries_agreement() {
        let partition = b"p".to_vec();
        let agreement = [
            PeerRequest::Prepare {
                partition: partition.clone(),
                ballot: Ballot::ZERO,
            },
            PeerRequest::Propose {
                partition: partition.clone(),
                proposal: Accepted::default(),
            },
            PeerRequest::Commit {
                partition: partition.clone(),
                decided: Accepted::default(),
            },
            PeerRequest::ReadAgreed { partition },
        ];
        for req in &agreement {
            assert_eq!(req.since(), 4, "{req:?}");
            let bytes = encode(req);
            assert_eq!(&decode::<PeerRequest>(&bytes).unwrap(), req);
        }
        let far = Ballot {
            ms: u64::MAX,
            seq: 0,
            proposer: 1,
        };
        let answer = PeerResponse::Proposed(Some(far));
        assert!(crate::bounds::check_answer(&answer).is_err());
        assert!(crate::bounds::check_answer(&PeerResponse::Proposed(None)).is_ok());
    }

    #[test]
    fn an_announced_build_is_bounded() {
        let ok = WireBuild {
            version: "0.1.0+abc".into(),
            features: vec!["leaving".into()],
            enabled: vec![],
        };
        assert_eq!(ok.check(), Ok(()));
        let long = WireBuild {
            enabled: vec!["x".repeat(NAME_BYTES_MAX + 1)],
            ..ok.clone()
        };
        assert!(long.check().is_err());
        let many = WireBuild {
            features: vec!["f".into(); FEATURES_MAX + 1],
            ..ok
        };
        assert!(many.check().is_err());
    }

    #[test]
    fn round_trip_and_trailing_bytes() {
        let req = PeerRequest::Apply {
            key: WireKey::new(b"p", b"c"),
            cell: WireCell {
                list: None,
                epoch: Epoch::at(3),
                shards: smallvec::smallvec![Shard {
                    counter_id: 7,
                    clock: 9,
                    value: -4,
                }],
            },
        };
        let mut bytes = encode(&vec![req.clone()]);
        assert_eq!(decode::<Vec<PeerRequest>>(&bytes).unwrap(), vec![req]);
        bytes.push(0);
        assert!(matches!(
            decode::<Vec<PeerRequest>>(&bytes),
            Err(DecodeError::Trailing { extra: 1, .. })
        ));
    }

    /// The layout of the derived `Vec` fields these types had, which the
    /// wire keeps.
    #[derive(Encode)]
    struct VecKey {
        partition: Vec<u8>,
        column: Vec<u8>,
    }

    #[derive(Encode)]
    struct VecCell {
        epoch: Epoch,
        shards: Vec<Shard>,
        list: Option<Vec<Vec<u8>>>,
    }

    #[test]
    fn keys_and_cells_keep_the_vec_layout() {
        let long = (vec![7u8; 300], vec![9u8; 200]);
        let parts: [(&[u8], &[u8]); 4] = [
            (b"", b""),
            (b"p", b""),
            (b"likes", b"2026-11-22"),
            (&long.0, &long.1),
        ];
        for (p, c) in parts {
            let key = WireKey::new(p, c);
            let old = VecKey {
                partition: p.to_vec(),
                column: c.to_vec(),
            };
            assert_eq!(encode(&key), encode(&old));
            let back: WireKey = decode(&encode(&key)).unwrap();
            assert_eq!((back.partition(), back.column()), (p, c));
        }
        let shards: Vec<Shard> = (0..5u64)
            .map(|i| Shard {
                counter_id: i << 60,
                clock: i * 3,
                value: -(i as i64),
            })
            .collect();
        for n in [0, 1, 3, 5] {
            let cell = WireCell {
                list: None,
                epoch: Epoch::at(4),
                shards: shards[..n].iter().copied().collect(),
            };
            let old = VecCell {
                epoch: Epoch::at(4),
                shards: shards[..n].to_vec(),
                list: None,
            };
            assert_eq!(encode(&cell), encode(&old));
            assert_eq!(decode::<WireCell>(&encode(&cell)).unwrap(), cell);
        }
        // A list's cell: its elements after the shards, as an option of a Vec.
        let elements = vec![b"1700000000.5".to_vec(), Vec::new()];
        let cell = WireCell {
            list: Some(elements.clone().into()),
            epoch: Epoch::at(4),
            shards: Default::default(),
        };
        let old = VecCell {
            epoch: Epoch::at(4),
            shards: Vec::new(),
            list: Some(elements),
        };
        assert_eq!(encode(&cell), encode(&old));
        assert_eq!(decode::<WireCell>(&encode(&cell)).unwrap(), cell);
    }

    #[test]
    fn a_huge_length_is_refused_before_allocating() {
        // A key's partition and a cell's shards claiming 2^40 items.
        let mut bytes = vec![253u8];
        bytes.extend_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(decode::<WireKey>(&bytes).is_err());
        let mut bytes = vec![0u8; 6]; // the epoch's six fields
        bytes.push(253);
        bytes.extend_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(decode::<WireCell>(&bytes).is_err());
        // A list claiming 2^40 elements.
        let mut bytes = vec![0u8; 8]; // the epoch, no shards
        bytes.push(1); // Some
        bytes.push(253);
        bytes.extend_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(decode::<WireCell>(&bytes).is_err());
        // A Vec<u8> claiming 2^40 bytes: varint tag 253 + u64 length.
        let mut bytes = vec![0u8, 253];
        bytes.extend_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(decode::<ClientRequest>(&bytes).is_err());
        let mut bytes = vec![253u8];
        bytes.extend_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(decode::<Vec<PeerRequest>>(&bytes).is_err());
    }

    #[test]
    fn reasons_are_bounded_at_a_character_boundary() {
        assert_eq!(bounded_reason("disk full"), "disk full");
        let long = "é".repeat(REASON_BYTES_MAX);
        let cut = bounded_reason(&long);
        assert_eq!(cut.len(), REASON_BYTES_MAX);
        let odd = format!("x{long}");
        assert_eq!(bounded_reason(&odd).len(), REASON_BYTES_MAX - 1);
        let pong = vec![PeerResponse::PongNotWritable {
            why: cut,
            ring: u64::MAX,
        }];
        assert_eq!(decode::<Vec<PeerResponse>>(&encode(&pong)).unwrap(), pong);
    }

    #[test]
    fn the_densest_real_messages_stay_under_the_claim_limit() {
        // Items of one or two bytes each, in every decode tier.
        for n in 0..=BATCH_MESSAGES_MAX {
            let pings = vec![
                PeerRequest::Ping {
                    cluster: String::new()
                };
                n
            ];
            assert_eq!(decode::<Vec<PeerRequest>>(&encode(&pings)).unwrap(), pings);
            let pongs = vec![PeerResponse::Pong { ring: 0 }; n];
            assert_eq!(decode::<Vec<PeerResponse>>(&encode(&pongs)).unwrap(), pongs);
        }
        for n in [0, 1, 85, 86, 1365, 1366, ROW_COLUMNS_MAX] {
            let row = PeerResponse::Row(vec![(Vec::new(), WireCell::default()); n]);
            let batch = vec![row];
            assert_eq!(decode::<Vec<PeerResponse>>(&encode(&batch)).unwrap(), batch);
            let resp = ClientResponse {
                id: 1,
                result: Ok(ClientReply::Row(vec![(Vec::new(), 0); n])),
            };
            assert_eq!(decode::<ClientResponse>(&encode(&resp)).unwrap(), resp);
        }
    }

    #[test]
    fn each_kind_implies_an_outcome() {
        let table = [
            (ErrorKind::Unavailable, Outcome::NotApplied),
            (ErrorKind::Overflow, Outcome::NotApplied),
            (ErrorKind::Invalid, Outcome::NotApplied),
            (ErrorKind::Timeout, Outcome::Unknown),
            (ErrorKind::Storage, Outcome::Unknown),
            (ErrorKind::Internal, Outcome::Unknown),
        ];
        for (kind, outcome) in table {
            assert_eq!(kind.default_outcome(), outcome, "{kind:?}");
            assert_eq!(WireError::new(kind, "m").outcome, outcome, "{kind:?}");
        }
    }

    #[test]
    fn errors_keep_their_outcome_on_the_wire() {
        let errors = [
            WireError::new(ErrorKind::Overflow, "o"),
            WireError::new(ErrorKind::Timeout, "t"),
            WireError::not_applied(ErrorKind::Storage, "poisoned before the write"),
            WireError::unknown(ErrorKind::Unavailable, "forward timed out"),
        ];
        let outcomes = errors.iter().map(|e| e.outcome).collect::<Vec<_>>();
        assert_eq!(
            outcomes,
            [
                Outcome::NotApplied,
                Outcome::Unknown,
                Outcome::NotApplied,
                Outcome::Unknown
            ]
        );
        for e in errors {
            assert_eq!(decode::<WireError>(&encode(&e)).unwrap(), e);
            let resp = ClientResponse {
                id: 9,
                result: Err(e.clone()),
            };
            assert_eq!(decode::<ClientResponse>(&encode(&resp)).unwrap(), resp);
            let batch = vec![PeerResponse::Error(e), PeerResponse::Applied];
            assert_eq!(decode::<Vec<PeerResponse>>(&encode(&batch)).unwrap(), batch);
        }
        // The outcome adds nothing to what people read.
        assert_eq!(
            WireError::unknown(ErrorKind::Unavailable, "2 of 3 replicas down").to_string(),
            "unavailable: 2 of 3 replicas down"
        );
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode::<Vec<PeerRequest>>(&bytes);
            let _ = decode::<Vec<PeerResponse>>(&bytes);
            let _ = decode::<ClientRequest>(&bytes);
            let _ = decode::<ClientResponse>(&bytes);
        }
    }
}
