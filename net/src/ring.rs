//! Data placement: which nodes hold a partition.
//!
//! # Tokens
//!
//! A partition key is hashed to a signed 64-bit *token* with Cassandra's
//! Murmur3Partitioner ([`murmur3_token`]). Using Cassandra's exact function,
//! quirks included, means a token computed here matches the one any
//! Cassandra or Scylla driver computes, so token-aware tooling and the
//! published vectors (see `tests/ring_vectors.rs`) apply unchanged. The quirk
//! that matters: Cassandra's `hash3_x64_128` reads the 1..15 tail bytes as
//! Java *signed* bytes, so a tail byte >= 0x80 is sign-extended before it is
//! shifted into place. That is why most MurmurHash3 crates disagree with
//! Cassandra on keys whose length is not a multiple of 16.
//!
//! # Virtual nodes
//!
//! Each node owns `vnodes` points on the token circle, at
//! `murmur3_token("{id}#{i}")`. Many small ranges per node instead of one
//! large one even out the load (a node's share of the circle tends to
//! `1/n` as vnodes grow) and spread a dead node's ranges over all survivors
//! instead of dumping them on one neighbour.
//!
//! # Replicas
//!
//! A partition lives on the first vnode whose token is `>=` the partition's
//! token (wrapping past the largest token back to the smallest): that vnode's
//! node is the *primary owner*. Walking on clockwise, the next vnodes that
//! belong to nodes not yet chosen supply the other replicas, until there are
//! `replication_factor` *distinct* nodes (or every node, if there are fewer).
//! Skipping repeated nodes matters: with vnodes, the next few points often
//! belong to the same node, and two copies on one machine are no protection.
//!
//! # Why deterministic from the config
//!
//! The ring is a pure function of the node ids (in config order), the vnode
//! count and the replication factor. Every node reads the same
//! `cluster.toml`, so every node computes the same ring with no gossip, no
//! token assignment protocol and no window in which two nodes disagree about
//! ownership. The price is that membership changes mean a config change and
//! a restart, which is the model Tally chooses.

use std::ops::Deref;

/// The partition token of `key`, exactly as Cassandra's Murmur3Partitioner
/// computes it.
///
/// The empty key maps to `i64::MIN` (Cassandra's `MINIMUM` token, which no
/// real key may have); any other key whose hash is `i64::MIN` is normalized
/// to `i64::MAX`.
pub fn murmur3_token(key: &[u8]) -> i64 {
    if key.is_empty() {
        return i64::MIN;
    }
    let (h1, _) = murmur3_x64_128_cassandra(key, 0);
    if h1 == i64::MIN { i64::MAX } else { h1 }
}

/// The first bytes of a CQL table's stored partition: a byte no client
/// partition begins with (`0xFF`, reserved), then one no Redis database
/// uses (those are 0 to 15).
pub const TABLE_MARK: [u8; 2] = [0xFF, 0xC0];
/// The first bytes of a stored partition of a CQL table kept in token
/// order: after its prefix comes the partition's token
/// ([`token_bytes`]), then its key, so a table's partitions sort by
/// token, as Cassandra lists them, and a token range is a key range.
pub const TOKEN_TABLE_MARK: [u8; 2] = [0xFF, 0xC1];
/// Bytes of a CQL table's prefix: its mark and six bytes naming the
/// table (its id and how often it was truncated).
pub const TABLE_PREFIX_BYTES: usize = 8;
/// Bytes of a token in a stored partition of [`TOKEN_TABLE_MARK`].
pub const TOKEN_BYTES: usize = 8;

/// A token as stored, so that bytes sort as tokens do: big-endian, its
/// sign bit flipped.
pub fn token_bytes(token: i64) -> [u8; TOKEN_BYTES] {
    (token ^ i64::MIN).to_be_bytes()
}

/// The token [`token_bytes`] stored.
pub fn token_of_bytes(bytes: [u8; TOKEN_BYTES]) -> i64 {
    i64::from_be_bytes(bytes) ^ i64::MIN
}

/// Whether `partition` is a CQL table's (either mark).
pub fn is_table_partition(partition: &[u8]) -> bool {
    partition.starts_with(&TABLE_MARK) || partition.starts_with(&TOKEN_TABLE_MARK)
}

/// The token a stored partition is placed by: [`murmur3_token`] of the
/// partition, except that a CQL table's partition is placed by its
/// partition key alone, after the table's prefix, exactly as Cassandra
/// places it (a partition of [`TOKEN_TABLE_MARK`] carries that token:
/// it is read). Token-aware CQL drivers hash the partition key they
/// bind, so they send each statement to a replica of its partition.
pub fn partition_token(partition: &[u8]) -> i64 {
    let stored_token = |p: &[u8]| {
        let bytes = p.get(TABLE_PREFIX_BYTES..TABLE_PREFIX_BYTES + TOKEN_BYTES)?;
        Some(token_of_bytes(bytes.try_into().ok()?))
    };
    match partition.get(..TABLE_MARK.len()) {
        Some(m) if m == TABLE_MARK && partition.len() >= TABLE_PREFIX_BYTES => {
            murmur3_token(&partition[TABLE_PREFIX_BYTES..])
        }
        Some(m) if m == TOKEN_TABLE_MARK => match stored_token(partition) {
            Some(t) => t,
            None => murmur3_token(partition),
        },
        _ => murmur3_token(partition),
    }
}

/// MurmurHash3_x64_128 as Cassandra's `MurmurHash.hash3_x64_128` computes
/// it: `(h1, h2)`, with tail bytes sign-extended as Java bytes.
pub fn murmur3_x64_128_cassandra(key: &[u8], seed: u64) -> (i64, i64) {
    const C1: u64 = 0x87c3_7b91_1142_53d5;
    const C2: u64 = 0x4cf5_ad43_2745_937f;

    let mix_k1 = |k1: u64| k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
    let mix_k2 = |k2: u64| k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1);

    let mut h1 = seed;
    let mut h2 = seed;
    let mut blocks = key.chunks_exact(16);
    for block in &mut blocks {
        // Whole blocks are read as unsigned little-endian longs (Java masks
        // them with 0xff); only the tail has the signed-byte quirk.
        let (lo, hi) = block.split_at(8);
        let k1 = u64::from_le_bytes(lo.try_into().expect("split_at(8) of 16 bytes"));
        let k2 = u64::from_le_bytes(hi.try_into().expect("split_at(8) of 16 bytes"));

        h1 ^= mix_k1(k1);
        h1 = h1
            .rotate_left(27)
            .wrapping_add(h2)
            .wrapping_mul(5)
            .wrapping_add(0x52dc_e729);
        h2 ^= mix_k2(k2);
        h2 = h2
            .rotate_left(31)
            .wrapping_add(h1)
            .wrapping_mul(5)
            .wrapping_add(0x3849_5ab5);
    }

    let tail = blocks.remainder();
    // `(long) key.get(i)` in Java: the byte is signed, so 0x80..=0xff become
    // negative longs whose high bits are all ones before the shift.
    let signed = |i: usize| tail[i] as i8 as i64 as u64;
    let mut k1 = 0u64;
    let mut k2 = 0u64;
    for i in (8..tail.len()).rev() {
        k2 ^= signed(i) << ((i - 8) * 8);
    }
    if tail.len() > 8 {
        h2 ^= mix_k2(k2);
    }
    for i in (0..tail.len().min(8)).rev() {
        k1 ^= signed(i) << (i * 8);
    }
    if !tail.is_empty() {
        h1 ^= mix_k1(k1);
    }

    // Java's `length` is an int; keys here are far below 2 GiB.
    let len = key.len() as u64;
    h1 ^= len;
    h2 ^= len;
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    h1 = fmix64(h1);
    h2 = fmix64(h2);
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    (h1 as i64, h2 as i64)
}

fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

/// The tokens `(start, end]`, wrapping past `i64::MAX` when `start >= end`;
/// the whole ring when they are equal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenRange {
    /// Exclusive.
    pub start: i64,
    /// Inclusive.
    pub end: i64,
}

impl TokenRange {
    /// How many tokens it holds (2^64 for the whole ring).
    fn width(self) -> u128 {
        match self.end.wrapping_sub(self.start) as u64 {
            0 => 1 << 64,
            w => u128::from(w),
        }
    }

    /// Where `token` lies in the range, from 1 (just after `start`) to
    /// `width` (at `end`); `None` outside it.
    fn offset(self, token: i64) -> Option<u128> {
        let width = self.width();
        let offset = match token.wrapping_sub(self.start) as u64 {
            // `start` itself: outside, but for the whole ring, whose end it is.
            0 if self.start == self.end => width,
            0 => return None,
            o => u128::from(o),
        };
        (offset <= width).then_some(offset)
    }

    /// Whether `token` is in the range.
    pub fn contains(self, token: i64) -> bool {
        self.offset(token).is_some()
    }

    /// The tokens both ranges hold, as ranges (none, one, or two when
    /// both wrap past `i64::MAX` or one is the whole ring).
    pub fn intersect(self, other: TokenRange) -> Vec<TokenRange> {
        let mut out = Vec::new();
        for (a1, b1) in self.pieces() {
            for (a2, b2) in other.pieces() {
                let (a, b) = (a1.max(a2), b1.min(b2));
                if a < b {
                    out.push(TokenRange {
                        start: from_linear(a.wrapping_sub(1) & LINEAR_MASK),
                        end: from_linear(b - 1),
                    });
                }
            }
        }
        out
    }

    /// Whether every token of `other` is in this range.
    pub fn covers(self, other: TokenRange) -> bool {
        let mine = self.pieces();
        // Pieces split only at the wrap, so a piece of `other` in this
        // range lies within one of its pieces.
        other
            .pieces()
            .iter()
            .filter(|&&(a, b)| a < b)
            .all(|&(a, b)| mine.iter().any(|&(x, y)| x <= a && b <= y))
    }

    /// The range as half-open intervals `[a, b)` of the tokens counted
    /// from `i64::MIN` (0) up to `i64::MAX` (2^64 - 1), without wrapping.
    fn pieces(self) -> Vec<(u128, u128)> {
        const END: u128 = 1 << 64;
        let (s, e) = (linear(self.start) + 1, linear(self.end) + 1);
        match s.cmp(&e) {
            std::cmp::Ordering::Less => vec![(s, e)],
            std::cmp::Ordering::Equal => vec![(0, END)],
            std::cmp::Ordering::Greater => vec![(s, END), (0, e)],
        }
    }

    /// Which of `slices` equal parts of the range holds `token` (0 is the
    /// part after `start`); `None` outside the range.
    pub fn slice_of(self, token: i64, slices: u32) -> Option<u32> {
        let offset = self.offset(token)?;
        let slice = (offset - 1) * u128::from(slices.max(1)) / self.width();
        Some(u32::try_from(slice).expect("below slices"))
    }
}

/// Tokens counted from `i64::MIN`, as `TokenRange::pieces` uses them.
const LINEAR_MASK: u128 = (1 << 64) - 1;

fn linear(token: i64) -> u128 {
    u128::from(token.wrapping_sub(i64::MIN) as u64)
}

fn from_linear(u: u128) -> i64 {
    (u as u64 as i64).wrapping_add(i64::MIN)
}

/// The nodes (indices into the config's node list) that hold a partition,
/// primary owner first, and while the ring changes, the *pending* ones that
/// will hold it after the change.
///
/// It dereferences to the natural replicas alone: reads, leaders and
/// operation-id appliers are chosen among them. Writes also go to the
/// pending ones ([`Replicas::all`]), and need one more answer for each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replicas {
    nodes: std::sync::Arc<[usize]>,
    natural: usize,
}

impl Replicas {
    /// `natural` replicas, primary first, then `pending` ones (none of
    /// them natural).
    pub fn new(natural: &[usize], pending: &[usize]) -> Replicas {
        debug_assert!(pending.iter().all(|p| !natural.contains(p)));
        let nodes: Vec<usize> = natural.iter().chain(pending).copied().collect();
        Replicas {
            nodes: nodes.into(),
            natural: natural.len(),
        }
    }

    /// The primary owner: the node of the first vnode at or after the token.
    pub fn primary(&self) -> usize {
        self.nodes[0]
    }

    /// The replicas that will hold the partition once the ring change in
    /// progress is done, and do not now.
    pub fn pending(&self) -> &[usize] {
        &self.nodes[self.natural..]
    }

    /// The natural replicas, then the pending ones: every node a write goes to.
    pub fn all(&self) -> &[usize] {
        &self.nodes
    }
}

impl Deref for Replicas {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        &self.nodes[..self.natural]
    }
}

impl<'a> IntoIterator for &'a Replicas {
    type Item = &'a usize;
    type IntoIter = std::slice::Iter<'a, usize>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// The token ring: every node's vnode tokens, sorted, plus the replication
/// factor.
///
/// # Invariants
///
/// - `vnodes` is sorted strictly ascending by `(token, node)`.
/// - every node index in `0..nodes` appears exactly `vnodes_per_node` times.
/// - `nodes >= 1`, `vnodes_per_node >= 1`, `1 <= replicas_per_partition <= nodes`.
#[derive(Debug, Clone)]
pub struct Ring {
    /// `(token, node index)`, sorted; ties on token go to the lower index.
    vnodes: Vec<(i64, usize)>,
    /// The replicas of the range ending at each vnode, in `vnodes` order:
    /// computed once, so that a lookup is a binary search and no allocation.
    placements: Vec<Replicas>,
    nodes: usize,
    vnodes_per_node: usize,
    /// `min(replication_factor, nodes)`.
    replicas_per_partition: usize,
}

impl Ring {
    /// Builds the ring for `node_ids` (in config order: the index of an id
    /// is its node index) with `vnodes_per_node` tokens each.
    ///
    /// # Panics
    ///
    /// If there are no nodes, or `vnodes_per_node` or `replication_factor`
    /// is zero: the config validation rules these out, so reaching here with
    /// them is a caller bug.
    pub fn new(node_ids: &[String], vnodes_per_node: usize, replication_factor: usize) -> Ring {
        let members = vec![true; node_ids.len()];
        Ring::with_members(node_ids, &members, vnodes_per_node, replication_factor)
    }

    /// The ring of the nodes of `node_ids` whose `members` entry is true;
    /// node indices stay those of `node_ids`, so that a node keeps its index
    /// as the membership changes.
    ///
    /// # Panics
    ///
    /// As [`Ring::new`], and if no node is a member.
    pub fn with_members(
        node_ids: &[String],
        members: &[bool],
        vnodes_per_node: usize,
        replication_factor: usize,
    ) -> Ring {
        assert!(!node_ids.is_empty(), "a ring needs at least one node");
        assert_eq!(node_ids.len(), members.len(), "one membership per node");
        let count = members.iter().filter(|&&m| m).count();
        assert!(count >= 1, "a ring needs at least one member");
        assert!(vnodes_per_node >= 1, "vnodes_per_node must be >= 1, got 0");
        assert!(
            replication_factor >= 1,
            "replication_factor must be >= 1, got 0"
        );

        let mut vnodes: Vec<(i64, usize)> = node_ids
            .iter()
            .enumerate()
            .filter(|&(node, _)| members[node])
            .flat_map(|(node, id)| {
                (0..vnodes_per_node)
                    .map(move |i| (murmur3_token(format!("{id}#{i}").as_bytes()), node))
            })
            .collect();
        vnodes.sort_unstable();
        let mut ring = Ring {
            vnodes,
            placements: Vec::new(),
            nodes: node_ids.len(),
            vnodes_per_node,
            replicas_per_partition: replication_factor.min(count),
        };
        ring.placements = (0..ring.vnodes.len()).map(|v| ring.walk(v)).collect();
        ring.check_invariants();
        ring
    }

    /// The ring while this one changes into `next`: every token of both,
    /// each range replicated by its replicas here, with those of `next`
    /// that are not among them as pending replicas (see [`Replicas`]).
    pub fn during(&self, next: &Ring) -> Ring {
        let mut vnodes: Vec<(i64, usize)> =
            self.vnodes.iter().chain(&next.vnodes).copied().collect();
        vnodes.sort_unstable();
        // A token both rings have is one range end.
        vnodes.dedup_by_key(|v| v.0);
        let placements = vnodes
            .iter()
            .map(|&(token, _)| {
                let now = self.replicas_for_token(token);
                let then = next.replicas_for_token(token);
                let pending: Vec<usize> =
                    then.iter().copied().filter(|n| !now.contains(n)).collect();
                Replicas::new(&now, &pending)
            })
            .collect();
        Ring {
            vnodes,
            placements,
            nodes: self.nodes,
            vnodes_per_node: self.vnodes_per_node,
            replicas_per_partition: self.replicas_per_partition,
        }
    }

    /// The tokens of `node`, ascending (none for a node not a member).
    pub fn tokens_of(&self, node: usize) -> Vec<i64> {
        self.vnodes
            .iter()
            .filter(|&&(_, n)| n == node)
            .map(|&(t, _)| t)
            .collect()
    }

    /// The number of nodes in the ring.
    pub fn node_count(&self) -> usize {
        self.nodes
    }

    /// The number of replicas each partition gets: `min(rf, nodes)`.
    pub fn replicas_per_partition(&self) -> usize {
        self.replicas_per_partition
    }

    /// The replicas of `partition` (the primary owner first).
    pub fn replicas(&self, partition: &[u8]) -> Replicas {
        self.replicas_for_token(partition_token(partition))
    }

    /// The replicas of the range holding `token` (the primary owner first).
    pub fn replicas_for_token(&self, token: i64) -> Replicas {
        let start = self.vnodes.partition_point(|&(t, _)| t < token);
        self.placements[start % self.vnodes.len()].clone()
    }

    /// The first `replicas_per_partition` distinct nodes on the ring from
    /// vnode `start` on.
    fn walk(&self, start: usize) -> Replicas {
        let mut chosen = Vec::with_capacity(self.replicas_per_partition);
        // One lap is enough: every node has at least one vnode on it.
        for k in 0..self.vnodes.len() {
            let (_, node) = self.vnodes[(start + k) % self.vnodes.len()];
            if !chosen.contains(&node) {
                chosen.push(node);
                if chosen.len() == self.replicas_per_partition {
                    break;
                }
            }
        }
        debug_assert_eq!(
            chosen.len(),
            self.replicas_per_partition,
            "ring walk came up short"
        );
        Replicas::new(&chosen, &[])
    }

    /// Every vnode's token range with its replicas, in token order: the
    /// ranges are disjoint and cover the ring.
    pub fn ranges(&self) -> Vec<(TokenRange, Replicas)> {
        let last = self.vnodes.len() - 1;
        self.vnodes
            .iter()
            .enumerate()
            .filter_map(|(i, &(end, _))| {
                let start = self.vnodes[if i == 0 { last } else { i - 1 }].0;
                // A token shared by two vnodes leaves the second nothing.
                (start != end || self.vnodes.len() == 1)
                    .then(|| (TokenRange { start, end }, self.placements[i].clone()))
            })
            .collect()
    }

    /// Each node's share of the token space as primary owner; sums to 1.
    pub fn ownership(&self) -> Vec<f64> {
        const SPACE: f64 = 18_446_744_073_709_551_616.0; // 2^64 tokens
        let mut owned = vec![0u128; self.nodes];
        let last = self.vnodes.len() - 1;
        for (i, &(token, node)) in self.vnodes.iter().enumerate() {
            // vnode i owns (previous token, token]; the first one also owns
            // the wrap-around, i.e. everything outside (first, last].
            let len = if i == 0 {
                (1u128 << 64) - (i128::from(self.vnodes[last].0) - i128::from(token)) as u128
            } else {
                (i128::from(token) - i128::from(self.vnodes[i - 1].0)) as u128
            };
            owned[node] += len;
        }
        owned.into_iter().map(|len| len as f64 / SPACE).collect()
    }

    /// Asserts the `# Invariants` (debug builds only).
    fn check_invariants(&self) {
        if cfg!(debug_assertions) {
            assert!(self.nodes >= 1 && self.vnodes_per_node >= 1);
            assert!((1..=self.nodes).contains(&self.replicas_per_partition));
            for pair in self.vnodes.windows(2) {
                assert!(
                    pair[0] < pair[1],
                    "vnodes out of order: {:?} !< {:?}",
                    pair[0],
                    pair[1]
                );
            }
            let mut count = vec![0usize; self.nodes];
            for &(_, node) in &self.vnodes {
                assert!(
                    node < self.nodes,
                    "vnode of node {node} in a ring of {}",
                    self.nodes
                );
                count[node] += 1;
            }
            assert!(
                count.iter().all(|&c| c == 0 || c == self.vnodes_per_node),
                "vnode counts {count:?}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cql_partition_is_placed_by_its_key_alone() {
        let key = b"\x00\x00\x00\x05";
        let mut stored = TABLE_MARK.to_vec();
        stored.extend_from_slice(&[1, 2, 3, 4, 5, 6]);
        stored.extend_from_slice(key);
        assert_eq!(partition_token(&stored), murmur3_token(key));
        // An empty partition key is Cassandra's minimum token.
        assert_eq!(partition_token(&stored[..TABLE_PREFIX_BYTES]), i64::MIN);
        // Anything else is placed as it is: a Redis database's partition,
        // a short one, a client's.
        for p in [&b"\xff\x03\x00\x00\x00\x00k"[..], b"\xff\xc0\x01", b"key"] {
            assert_eq!(partition_token(p), murmur3_token(p), "{p:?}");
        }
    }

    #[test]
    fn a_token_ordered_partition_carries_its_token_and_sorts_by_it() {
        let stored = |key: &[u8]| {
            let mut p = TOKEN_TABLE_MARK.to_vec();
            p.extend_from_slice(&[1, 2, 3, 4, 5, 6]);
            p.extend_from_slice(&token_bytes(murmur3_token(key)));
            p.extend_from_slice(key);
            p
        };
        let keys: Vec<Vec<u8>> = (0..200u32).map(|i| i.to_be_bytes().to_vec()).collect();
        for k in &keys {
            assert_eq!(partition_token(&stored(k)), murmur3_token(k));
        }
        let mut by_bytes: Vec<Vec<u8>> = keys.iter().map(|k| stored(k)).collect();
        by_bytes.sort();
        let tokens: Vec<i64> = by_bytes.iter().map(|p| partition_token(p)).collect();
        assert!(tokens.is_sorted(), "bytes sort as tokens");
        for t in [i64::MIN, -1, 0, 1, i64::MAX] {
            assert_eq!(token_of_bytes(token_bytes(t)), t);
        }
        assert!(token_bytes(-1) < token_bytes(0) && token_bytes(i64::MIN) == [0; 8]);
        // Too short to hold a token: placed as it is.
        assert_eq!(
            partition_token(b"\xff\xc1\x01"),
            murmur3_token(b"\xff\xc1\x01")
        );
        assert!(is_table_partition(&stored(b"k")) && !is_table_partition(b"\xff\x03k"));
    }

    #[test]
    fn ranges_cover_the_ring_once_and_agree_with_lookups() {
        let ids: Vec<String> = ["n1", "n2", "n3"].iter().map(|s| s.to_string()).collect();
        let ring = Ring::new(&ids, 16, 3);
        let ranges = ring.ranges();
        assert_eq!(ranges.len(), 48);
        let width: u128 = ranges.iter().map(|(r, _)| r.width()).sum();
        assert_eq!(width, 1 << 64, "the ranges cover the ring exactly once");
        for partition in (0..2000).map(|i| format!("key:{i}")) {
            let token = murmur3_token(partition.as_bytes());
            let holding: Vec<_> = ranges.iter().filter(|(r, _)| r.contains(token)).collect();
            assert_eq!(holding.len(), 1, "{partition}");
            assert_eq!(
                holding[0].1,
                ring.replicas(partition.as_bytes()),
                "{partition}"
            );
        }
    }

    #[test]
    fn each_member_has_its_vnodes_tokens_and_a_non_member_none() {
        let ids: Vec<String> = (1..=4).map(|i| format!("n{i}")).collect();
        let ring = Ring::with_members(&ids, &[true, true, true, false], 16, 3);
        let mut all: Vec<i64> = Vec::new();
        for n in 0..3 {
            let tokens = ring.tokens_of(n);
            assert_eq!(tokens.len(), 16);
            assert!(tokens.windows(2).all(|w| w[0] < w[1]), "ascending");
            assert!(tokens.contains(&murmur3_token(format!("n{}#0", n + 1).as_bytes())));
            all.extend(tokens);
        }
        assert!(ring.tokens_of(3).is_empty());
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 48, "no token shared");
    }

    #[test]
    fn members_keep_their_indices_and_a_change_adds_pending_replicas() {
        let ids: Vec<String> = (1..=4).map(|i| format!("n{i}")).collect();
        let three = Ring::with_members(&ids, &[true, true, true, false], 16, 3);
        let four = Ring::new(&ids, 16, 3);
        let during = three.during(&four);
        let mut gained = 0;
        for partition in (0..2000).map(|i| format!("key:{i}")) {
            let p = partition.as_bytes();
            let (now, then, mid) = (three.replicas(p), four.replicas(p), during.replicas(p));
            assert!(!now.contains(&3), "n4 is no member yet");
            assert_eq!(*mid, *now, "the natural replicas are today's");
            let pending: Vec<usize> = then.iter().copied().filter(|n| !now.contains(n)).collect();
            assert_eq!(mid.pending(), &pending[..], "{partition}");
            assert_eq!(mid.all().len(), now.len() + pending.len());
            gained += usize::from(!pending.is_empty());
        }
        // n4 takes about a quarter of the partitions as a replica.
        assert!((300..1300).contains(&gained), "{gained}");
        let width: u128 = during.ranges().iter().map(|(r, _)| r.width()).sum();
        assert_eq!(width, 1 << 64, "the ranges of a change cover the ring once");
        for (range, replicas) in during.ranges() {
            let (now, then) = (
                three.replicas_for_token(range.end),
                four.replicas_for_token(range.end),
            );
            assert_eq!(*replicas, *now);
            assert!(replicas.pending().iter().all(|p| then.contains(p)));
        }
    }

    #[test]
    fn a_range_covers_exactly_the_ranges_within_it() {
        let r = |start, end| TokenRange { start, end };
        let (min, max) = (i64::MIN, i64::MAX);
        let whole = r(7, 7);
        let cases = [
            (r(0, 100), r(0, 100), true),
            (r(0, 100), r(10, 90), true),
            // Token 0 is outside.
            (r(0, 100), r(-1, 100), false),
            (r(0, 100), r(0, 101), false),
            (r(90, -90), r(max - 5, min + 5), true),
            (r(90, -90), r(100, 200), true),
            (r(90, -90), r(-100, -91), true),
            (r(90, -90), r(0, 100), false),
            (r(max - 5, min + 5), r(90, -90), false),
            (whole, r(90, -90), true),
            (whole, r(min, min), true),
            // `min` itself is outside.
            (r(min, max), r(min, min), false),
            (r(min, 0), r(max, 0), false),
            (r(max, 0), r(min, 0), true),
            (r(max, 0), r(max, min + 1), true),
            (r(min, 0), r(0, min), false),
            (r(-3, 2), whole, false),
        ];
        for (a, b, want) in cases {
            assert_eq!(a.covers(b), want, "{a:?} covers {b:?}");
            assert!(a.covers(a), "{a:?} covers itself");
        }
    }

    #[test]
    fn intersections_hold_exactly_the_tokens_both_ranges_hold() {
        let r = |start, end| TokenRange { start, end };
        let (min, max) = (i64::MIN, i64::MAX);
        let cases = [
            r(0, 100),
            r(50, 150),
            r(90, -90),
            r(max - 5, min + 5),
            r(7, 7),
            r(min, max),
            r(max, min),
            r(-3, 2),
        ];
        let probes: Vec<i64> = [
            min,
            min + 1,
            min + 5,
            min + 6,
            -91,
            -90,
            -89,
            -3,
            -2,
            0,
            1,
            2,
            7,
            8,
        ]
        .into_iter()
        .chain([
            49,
            50,
            51,
            89,
            90,
            91,
            100,
            101,
            150,
            151,
            max - 5,
            max - 4,
            max,
        ])
        .collect();
        for a in cases {
            for b in cases {
                let both = a.intersect(b);
                for &t in &probes {
                    let want = a.contains(t) && b.contains(t);
                    let got = both.iter().filter(|p| p.contains(t)).count();
                    assert_eq!(got, usize::from(want), "{a:?} ∩ {b:?} at {t}: {both:?}");
                }
            }
        }
        assert_eq!(r(0, 100).intersect(r(50, 150)), vec![r(50, 100)]);
        assert_eq!(r(0, 100).intersect(r(100, 200)), vec![]);
    }

    #[test]
    fn a_range_splits_into_equal_slices_wrapping_or_not() {
        let r = TokenRange { start: 0, end: 100 };
        let cases = [
            (1, Some(0)),
            (25, Some(0)),
            (26, Some(1)),
            (100, Some(3)),
            (0, None),
            (101, None),
            (-5, None),
        ];
        for (token, slice) in cases {
            assert_eq!(r.slice_of(token, 4), slice, "token {token}");
        }
        let wrap = TokenRange {
            start: i64::MAX - 9,
            end: i64::MIN + 9,
        };
        assert_eq!(
            wrap.width(),
            19,
            "9 tokens up to i64::MAX, 10 from i64::MIN"
        );
        assert_eq!(wrap.slice_of(i64::MAX, 2), Some(0));
        assert_eq!(wrap.slice_of(i64::MIN, 2), Some(0));
        assert_eq!(wrap.slice_of(i64::MIN + 1, 2), Some(1));
        assert_eq!(wrap.slice_of(i64::MIN + 9, 2), Some(1));
        assert_eq!(wrap.slice_of(0, 2), None);
        let all = TokenRange { start: 7, end: 7 };
        for token in [i64::MIN, -1, 0, 7, 8, i64::MAX] {
            assert!(all.contains(token), "{token}");
            assert!(all.slice_of(token, 1024).is_some_and(|s| s < 1024));
        }
        assert_eq!(all.slice_of(8, 2), Some(0));
        assert_eq!(all.slice_of(7, 2), Some(1), "start is the whole ring's end");
    }

    use super::*;
    use proptest::prelude::*;

    fn ids(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("n{i}")).collect()
    }

    /// The definition, without binary search: order vnodes by clockwise
    /// distance from the token, then take distinct nodes.
    fn brute_force(ring: &Ring, token: i64) -> Vec<usize> {
        let mut by_distance: Vec<(u64, usize)> = ring
            .vnodes
            .iter()
            .map(|&(t, node)| ((t as u64).wrapping_sub(token as u64), node))
            .collect();
        by_distance.sort_unstable();
        let mut out = Vec::new();
        for (_, node) in by_distance {
            if !out.contains(&node) && out.len() < ring.replicas_per_partition {
                out.push(node);
            }
        }
        out
    }

    #[test]
    fn replicas_are_distinct_sized_and_deterministic() {
        for (n, rf) in [(1, 1), (1, 3), (3, 2), (5, 3), (5, 9)] {
            let ring = Ring::new(&ids(n), 16, rf);
            let again = Ring::new(&ids(n), 16, rf);
            for k in 0..500u32 {
                let key = k.to_le_bytes();
                let r = ring.replicas(&key);
                assert_eq!(r.len(), rf.min(n));
                let mut sorted = r.to_vec();
                sorted.sort_unstable();
                sorted.dedup();
                assert_eq!(sorted.len(), r.len(), "duplicate replica in {r:?}");
                assert_eq!(r, again.replicas(&key));
            }
        }
    }

    #[test]
    fn three_nodes_rf3_every_partition_everywhere() {
        let ring = Ring::new(&ids(3), 16, 3);
        for k in 0..1000u32 {
            let mut r = ring.replicas(&k.to_be_bytes()).to_vec();
            r.sort_unstable();
            assert_eq!(r, vec![0, 1, 2]);
        }
    }

    #[test]
    fn wraps_past_the_largest_token() {
        let ring = Ring::new(&ids(3), 4, 1);
        let first = ring.vnodes[0].1;
        assert_eq!(ring.replicas_for_token(i64::MAX).primary(), first);
        assert_eq!(ring.replicas_for_token(i64::MIN).primary(), first);
        let (t, node) = ring.vnodes[5];
        assert_eq!(
            ring.replicas_for_token(t).primary(),
            node,
            "a vnode owns its own token"
        );
    }

    #[test]
    fn ownership_sums_to_one_and_is_balanced() {
        let single = Ring::new(&ids(1), 1, 1).ownership();
        assert_eq!(single, vec![1.0]);
        for n in [2, 3, 5] {
            let shares = Ring::new(&ids(n), 16, 3).ownership();
            let sum: f64 = shares.iter().sum();
            assert!((sum - 1.0).abs() < 1e-9, "shares {shares:?} sum to {sum}");
            let fair = 1.0 / n as f64;
            for share in &shares {
                assert!(
                    *share > fair * 0.5 && *share < fair * 1.6,
                    "unbalanced: {shares:?}"
                );
            }
        }
    }

    proptest! {
        #[test]
        fn replicas_match_brute_force(
            n in 1usize..7,
            vnodes in 1usize..24,
            rf in 1usize..5,
            keys in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..20),
        ) {
            let ring = Ring::new(&ids(n), vnodes, rf);
            for key in keys {
                // The placement rule's token: a key that begins as a CQL
                // table's partition does is placed by its partition key.
                let token = partition_token(&key);
                prop_assert_eq!(ring.replicas(&key).to_vec(), brute_force(&ring, token));
            }
        }
    }
}
