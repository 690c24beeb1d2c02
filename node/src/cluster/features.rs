//! Cluster features: what every member's build must understand before
//! any node uses it (ScyllaDB's gossip features are the model).
//!
//! A feature is anything that changes what peers or disks must understand:
//! a new peer message kind, a file format, a kind of cell. Each build knows
//! its features ([`KNOWN`]) and announces them in every heartbeat of peer
//! protocol 3, with the features it has enabled. A node enables a feature
//! once every member of its ring is up and has announced it ([`to_enable`]:
//! a member that is down blocks it, as it may come back on another build;
//! remove a member that is gone for good), or once a
//! peer says it has enabled it (that peer saw every member with it), and
//! records that durably, for good: `<data_dir>/features`. Until then the
//! node writes only what the previous build reads, so an upgrade stopped
//! half way can go back.
//!
//! Once a feature is enabled, a build that lacks it cannot take part: a
//! build of the previous peer protocol is refused at the handshake
//! ([`Features::oldest_peer`]), a newer one that lacks it has its
//! heartbeats refused ([`Features::admits`]), and a node whose own data
//! directory records a feature its build lacks does not start.
//!
//! | feature | peer protocol | what it changes |
//! |---|---|---|
//! | `leaving-notice` | 3 | a node that stops cleanly sends `Leaving`, and its peers count it down at once |
//! | `agreement` | 4 | linearizable registers: `Prepare`, `Propose`, `Commit`, `ReadAgreed`, and cells with an agreed part on disk |
//! | `agreed-handoff` | 5 | agreed state moves with its ranges: `AgreedIn`, `MergeAgreed` |
//! | `cql-tables` | 7 | the cells of CQL counter tables, each partition placed by its partition key alone (`tally_net::ring::partition_token`), as token-aware drivers place it; `ScanTable` |
//! | `cql-regular-tables` | 8 | CQL regular tables: schemas of non-counter columns in the agreed catalog, and their last-write-wins cells, written through `LeaderCells` |
//! | `cql-batch-log` | 9 | CQL logged batches of several partitions go through the batch log (`cluster::batchlog`): its entries, which every node replays when their coordinator did not finish |
//! | `cql-token-order` | 9 | CQL tables made in token order: each stored partition carries its token (`tally_net::ring::TOKEN_TABLE_MARK`), and the catalog says which tables do |
//! | `row-slices` | 10 | reads of a partition too wide for one answer, slice by slice: `ReadSlice` |
//! | `list-asked-at` | 11 | a list change forwarded to its leader carries when its coordinator was asked, which the change's stamp does not pass: `LeaderListAt` |
//! | `first-ballots` | 4 | a proposal at a first ballot, without a prepare, which an acceptor takes only while it holds nothing (an older one would take it over a value accepted at another first ballot) |
//!
//! Each feature needs the peer protocol that brought its messages
//! ([`protocol_of`]); once it is enabled, peers of an older protocol are
//! refused. A later change that adds a peer message or a format adds a
//! feature here, and a protocol version in `tally_net::version`.
//!
//! # File format (version 1)
//!
//! ```text
//! magic "TALLYFTR" | format u32 LE | count u32 LE | (len u16 LE | name) * count
//!     | crc32 u32 LE (of everything before)
//! ```
//!
//! Written as the ring is: a new file, fsync'd, renamed, the directory
//! fsync'd. No file: nothing enabled yet. A damaged one stops the node.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use parking_lot::RwLock;
use tally_net::version::{FEATURES_MAX, NAME_BYTES_MAX, PEER_NEWEST, PEER_OLDEST};
use tally_net::wire::{NodeState, WireBuild};

use crate::cluster::ctx::Ctx;
use crate::cluster::hints::file::{read_small, replace};

/// A node that stops cleanly tells its peers (`PeerRequest::Leaving`).
pub const LEAVING_NOTICE: &str = "leaving-notice";

/// Linearizable registers through agreement (`cluster::agree`).
pub const AGREEMENT: &str = "agreement";

/// Agreed state moves with its ranges (`cluster::agree::handoff`).
pub const AGREED_HANDOFF: &str = "agreed-handoff";

/// Proposals at first ballots (`tally_model::paxos`, `agree::propose`).
pub const FIRST_BALLOTS: &str = "first-ballots";

/// CQL counter tables' cells, placed by their partition key
/// (`tally_net::ring::partition_token`): a build without the rule would
/// place, repair and clean them up elsewhere.
pub const CQL_TABLES: &str = "cql-tables";

/// CQL regular tables: their schemas (which an older build's catalog
/// refuses) and their last-write-wins cells, written through
/// `PeerRequest::LeaderCells`.
pub const CQL_REGULAR_TABLES: &str = "cql-regular-tables";

/// CQL tables made in token order (`tally_net::ring::TOKEN_TABLE_MARK`):
/// an older build would place their partitions elsewhere, and refuses
/// their schemas.
pub const CQL_TOKEN_ORDER: &str = "cql-token-order";

/// CQL logged batches through the batch log (`cluster::batchlog`): an
/// older build would hold a batch's entry but never replay it.
pub const CQL_BATCH_LOG: &str = "cql-batch-log";

/// Reads of a partition's columns slice by slice (`PeerRequest::ReadSlice`):
/// an older build cannot answer them.
pub const ROW_SLICES: &str = "row-slices";

/// List changes forwarded with the time their coordinator was asked
/// (`PeerRequest::LeaderListAt`): an older build cannot read them.
pub const LIST_ASKED_AT: &str = "list-asked-at";

/// The cluster features this build has.
pub const KNOWN: &[&str] = &[
    LEAVING_NOTICE,
    AGREEMENT,
    AGREED_HANDOFF,
    FIRST_BALLOTS,
    CQL_TABLES,
    CQL_REGULAR_TABLES,
    CQL_TOKEN_ORDER,
    CQL_BATCH_LOG,
    ROW_SLICES,
    LIST_ASKED_AT,
];

/// The peer protocol a feature needs: the one that brought its messages.
pub(crate) fn protocol_of(feature: &str) -> u16 {
    match feature {
        AGREEMENT | FIRST_BALLOTS => 4,
        AGREED_HANDOFF => 5,
        CQL_TABLES => 7,
        CQL_REGULAR_TABLES => 8,
        CQL_TOKEN_ORDER | CQL_BATCH_LOG => 9,
        ROW_SLICES => 10,
        LIST_ASKED_AT => 11,
        _ => 3,
    }
}

/// The oldest peer protocol a node with `enabled` features speaks: the
/// newest any of them needs, else the oldest this build speaks.
fn oldest_for(enabled: &BTreeSet<String>) -> u16 {
    enabled
        .iter()
        .map(|f| protocol_of(f))
        .max()
        .unwrap_or(PEER_OLDEST)
        .clamp(PEER_OLDEST, PEER_NEWEST)
}

/// This build's version: the package's, and the commit it was built from.
pub const BUILD: &str = env!("TALLY_BUILD");

const MAGIC: &[u8; 8] = b"TALLYFTR";
const FORMAT: u32 = 1;

/// The features a node should enable now: those this build knows and has
/// not enabled that every member announced (`members`: each member's last
/// announced build, `None` when not heard), or that a member has enabled.
pub(crate) fn to_enable(enabled: &BTreeSet<String>, members: &[Option<&WireBuild>]) -> Vec<String> {
    let everyone_has = |f: &str| {
        !members.is_empty()
            && members
                .iter()
                .all(|m| m.is_some_and(|b| b.features.iter().any(|x| x == f)))
    };
    let someone_enabled = |f: &str| {
        members
            .iter()
            .flatten()
            .any(|b| b.enabled.iter().any(|x| x == f))
    };
    KNOWN
        .iter()
        .filter(|f| !enabled.contains(**f))
        .filter(|f| everyone_has(f) || someone_enabled(f))
        .map(|f| f.to_string())
        .collect()
}

/// Of `enabled`, the features this build lacks.
pub(crate) fn lacking<'a>(enabled: impl IntoIterator<Item = &'a String>) -> Vec<&'a str> {
    enabled
        .into_iter()
        .map(String::as_str)
        .filter(|f| !KNOWN.contains(f))
        .collect()
}

/// Whether a node in `state` is a member whose build counts.
pub(crate) fn counts(state: NodeState) -> bool {
    matches!(
        state,
        NodeState::Joining | NodeState::Normal | NodeState::Leaving
    )
}

/// This node's enabled features, durable in its data directory.
pub(crate) struct Features {
    path: PathBuf,
    enabled: RwLock<BTreeSet<String>>,
    /// The oldest peer protocol they allow ([`oldest_for`]): asked for
    /// every peer stream, without the lock.
    oldest: AtomicU16,
}

impl Features {
    /// The features recorded in `data_dir`; an error when the file is
    /// damaged or records a feature this build lacks.
    pub(crate) fn open(data_dir: &Path) -> Result<Features> {
        let path = data_dir.join("features");
        let enabled = match read_small(&path)? {
            None => BTreeSet::new(),
            Some(bytes) => decode(&bytes).map_err(|why| {
                anyhow::anyhow!(
                    "{} is damaged ({why}); the node cannot know its features",
                    path.display()
                )
            })?,
        };
        let lacks = lacking(&enabled);
        if !lacks.is_empty() {
            bail!(
                "this node's data ({}) records cluster features {lacks:?} enabled, which build {BUILD} lacks: \
                 start it with a build that has them (downgrading past an enabled feature is not possible)",
                path.display()
            );
        }
        Ok(Features {
            path,
            oldest: AtomicU16::new(oldest_for(&enabled)),
            enabled: RwLock::new(enabled),
        })
    }

    /// Whether `feature` is enabled.
    pub(crate) fn has(&self, feature: &str) -> bool {
        self.enabled.read().contains(feature)
    }

    /// The enabled features, by name.
    pub(crate) fn enabled(&self) -> Vec<String> {
        self.enabled.read().iter().cloned().collect()
    }

    /// Enables `features` for good: stored durably before anyone sees them.
    pub(crate) fn enable(&self, features: &[String]) -> Result<()> {
        let mut enabled = self.enabled.write();
        let mut after = enabled.clone();
        after.extend(features.iter().cloned());
        if after == *enabled {
            return Ok(());
        }
        replace(&self.path, &encode(&after))
            .with_context(|| format!("store the cluster features in {}", self.path.display()))?;
        self.oldest.store(oldest_for(&after), Ordering::Release);
        *enabled = after;
        Ok(())
    }

    /// What this node announces.
    pub(crate) fn build(&self) -> WireBuild {
        WireBuild {
            version: BUILD.to_string(),
            features: KNOWN.iter().map(|f| f.to_string()).collect(),
            enabled: self.enabled(),
        }
    }

    /// The oldest peer protocol this node speaks: the oldest this build
    /// does until a feature is enabled, then the one its enabled features
    /// need (a build of an older one cannot have them).
    pub(crate) fn oldest_peer(&self) -> u16 {
        self.oldest.load(Ordering::Acquire)
    }

    /// Whether a peer announcing `build` may take part: not when it lacks
    /// a feature enabled here.
    pub(crate) fn admits(&self, build: &WireBuild) -> Result<(), String> {
        let enabled = self.enabled.read();
        let missing: Vec<&String> = enabled
            .iter()
            .filter(|f| !build.features.contains(f))
            .collect();
        match missing.is_empty() {
            true => Ok(()),
            false => Err(format!(
                "this cluster has enabled features {missing:?}, which build {} lacks: upgrade it",
                build.version
            )),
        }
    }
}

/// Enables what every member has, once a heartbeat interval, for as long
/// as the node lives.
pub(crate) fn start(ctx: Weak<Ctx>, features: Arc<Features>) {
    tokio::spawn(async move {
        loop {
            let interval = {
                let Some(ctx) = ctx.upgrade() else { return };
                if let Err(e) = enable_agreed(&ctx, &features) {
                    tracing::error!(error = %format!("{e:#}"), "could not enable cluster features");
                }
                Duration::from_millis(ctx.config().cluster.heartbeat_interval_ms)
            };
            tokio::time::sleep(interval).await;
        }
    });
}

/// Whether every member up now (this node included) has enabled
/// `feature`, as far as their last heartbeats said: a feature that changes
/// what every node must read (a kind of value) is used only then, so that
/// no member still reads as the previous build does. A member that is down
/// does not hold it back; once back, it enables the feature on hearing any
/// peer has ([`to_enable`]).
pub(crate) fn enabled_by_all_up(ctx: &Ctx, features: &Features, feature: &str) -> bool {
    if !features.has(feature) {
        return false;
    }
    let Some(transport) = ctx.started_transport() else {
        return false;
    };
    (0..ctx.config().nodes.len())
        .filter(|&i| i != ctx.me() && counts(ctx.node_state(i)))
        .filter(|&i| transport.is_up(i))
        .all(|i| transport.has_enabled(i, feature) == Some(true))
}

/// Whether this node knows that no member has enabled `feature`, so that
/// nothing was written under it: it has not, and every other member is
/// up and its last heartbeat said it has not (see [`unused_by_all`]).
pub(crate) fn known_unused(ctx: &Ctx, features: &Features, feature: &str) -> bool {
    let Some(transport) = ctx.started_transport() else {
        return false;
    };
    let others = (0..ctx.config().nodes.len())
        .filter(|&i| i != ctx.me() && counts(ctx.node_state(i)))
        .map(|i| {
            let has = transport.has_enabled(i, feature);
            heard(transport.is_up(i), has, transport.protocol(i))
        });
    unused_by_all(features.has(feature), others)
}

/// The first peer protocol whose heartbeats carry a build's features.
const ANNOUNCES_FEATURES: u16 = 3;

/// What a member said of a feature, as [`unused_by_all`] takes it: up,
/// `has` as its last announced build says, over peer `protocol`. A build
/// older than the heartbeats that announce features (a rolling upgrade's
/// previous one) has enabled none; a newer one not heard yet may have.
fn heard(up: bool, has: Option<bool>, protocol: u16) -> Option<bool> {
    match (up, has) {
        (false, _) => None,
        (true, Some(has)) => Some(has),
        (true, None) => (protocol < ANNOUNCES_FEATURES).then_some(false),
    }
}

/// The rule of [`known_unused`]: `mine` whether this node has enabled the
/// feature, `others` what each other member said (`None`: not heard, or
/// down). Only a node that heard every member say no knows it; one that
/// has not heard them all (a node just started, a member down) cannot
/// tell that nothing was written under the feature.
pub(crate) fn unused_by_all(mine: bool, mut others: impl Iterator<Item = Option<bool>>) -> bool {
    !mine && others.all(|has| has == Some(false))
}

/// One look at the members' builds (see [`to_enable`]).
fn enable_agreed(ctx: &Ctx, features: &Features) -> Result<()> {
    let Some(transport) = ctx.started_transport() else {
        return Ok(());
    };
    let me = features.build();
    // Only what members up now say: one down may come back on another build.
    let heard: Vec<Option<WireBuild>> = (0..ctx.config().nodes.len())
        .map(|i| match i == ctx.me() {
            true => Some(me.clone()),
            false => transport.build_of(i).filter(|_| transport.is_up(i)),
        })
        .collect();
    let topology = ctx.topology();
    let members: Vec<Option<&WireBuild>> = topology
        .to_wire()
        .states
        .iter()
        .zip(&heard)
        .filter(|(s, _)| counts(**s))
        .map(|(_, b)| b.as_ref())
        .collect();
    let new = to_enable(&features.enabled.read(), &members);
    if new.is_empty() {
        return Ok(());
    }
    features.enable(&new)?;
    tracing::info!(features = ?new, "enabled cluster features: every member's build has them");
    Ok(())
}

fn encode(enabled: &BTreeSet<String>) -> Vec<u8> {
    let mut b = MAGIC.to_vec();
    b.extend_from_slice(&FORMAT.to_le_bytes());
    b.extend_from_slice(&(enabled.len() as u32).to_le_bytes());
    for name in enabled {
        b.extend_from_slice(&(name.len() as u16).to_le_bytes());
        b.extend_from_slice(name.as_bytes());
    }
    let crc = crc32fast::hash(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

fn decode(bytes: &[u8]) -> Result<BTreeSet<String>, String> {
    let body_len = bytes.len().checked_sub(4).ok_or("too short")?;
    let (body, crc) = bytes.split_at(body_len);
    if crc32fast::hash(body).to_le_bytes() != crc {
        return Err("checksum mismatch".into());
    }
    let rest = body.strip_prefix(MAGIC).ok_or("not a features file")?;
    let (format, rest) = take_u32(rest)?;
    if format != FORMAT {
        return Err(format!("format {format}, not {FORMAT}"));
    }
    let (count, mut rest) = take_u32(rest)?;
    if count as usize > FEATURES_MAX {
        return Err(format!("{count} features"));
    }
    let mut names = BTreeSet::new();
    for _ in 0..count {
        let (len, tail) = rest.split_at_checked(2).ok_or("truncated")?;
        let len = u16::from_le_bytes([len[0], len[1]]) as usize;
        if len > NAME_BYTES_MAX {
            return Err(format!("a name of {len} bytes"));
        }
        let (name, tail) = tail.split_at_checked(len).ok_or("truncated")?;
        names.insert(String::from_utf8(name.to_vec()).map_err(|_| "a name not UTF-8")?);
        rest = tail;
    }
    match rest.is_empty() {
        true => Ok(names),
        false => Err("trailing bytes".into()),
    }
}

fn take_u32(b: &[u8]) -> Result<(u32, &[u8]), String> {
    let (n, rest) = b.split_at_checked(4).ok_or("truncated")?;
    Ok((u32::from_le_bytes([n[0], n[1], n[2], n[3]]), rest))
}

#[cfg(test)]
mod tests {

    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn only_a_node_that_heard_every_member_say_no_knows_a_feature_unused() {
        assert!(unused_by_all(false, [Some(false), Some(false)].into_iter()));
        assert!(!unused_by_all(true, [Some(false), Some(false)].into_iter()));
        assert!(!unused_by_all(false, [Some(false), Some(true)].into_iter()));
        // A member not heard yet (a node just started) or down: it may
        // have written under the feature.
        assert!(!unused_by_all(false, [Some(false), None].into_iter()));
        assert!(!unused_by_all(false, [None, None].into_iter()));
    }

    #[test]
    fn a_member_of_the_previous_build_has_no_features_and_one_not_heard_may() {
        assert_eq!(heard(true, Some(true), 10), Some(true));
        assert_eq!(heard(true, Some(false), 10), Some(false));
        // Speaks protocol 2: its heartbeats announce nothing, it has nothing.
        assert_eq!(heard(true, None, 2), Some(false));
        // Answered the first heartbeat (a `Ping`) only: not heard yet.
        assert_eq!(heard(true, None, 10), None);
        assert_eq!(heard(false, Some(false), 10), None);
    }

    fn build(features: &[&str], enabled: &[&str]) -> WireBuild {
        WireBuild {
            version: "v".into(),
            features: features.iter().map(|f| f.to_string()).collect(),
            enabled: enabled.iter().map(|f| f.to_string()).collect(),
        }
    }

    #[test]
    fn a_feature_is_enabled_once_every_member_announced_it() {
        let none = BTreeSet::new();
        let new = build(KNOWN, &[]);
        let old = build(&[], &[]);
        // One member not heard, or of a build without it: not yet.
        assert!(to_enable(&none, &[Some(&new), None, Some(&new)]).is_empty());
        assert!(to_enable(&none, &[Some(&new), Some(&old), Some(&new)]).is_empty());
        assert!(to_enable(&none, &[]).is_empty());
        // Every member: now.
        let mut all = to_enable(&none, &[Some(&new), Some(&new), Some(&new)]);
        all.sort();
        assert_eq!(
            all,
            vec![
                AGREED_HANDOFF.to_string(),
                AGREEMENT.to_string(),
                CQL_BATCH_LOG.to_string(),
                CQL_REGULAR_TABLES.to_string(),
                CQL_TABLES.to_string(),
                CQL_TOKEN_ORDER.to_string(),
                FIRST_BALLOTS.to_string(),
                LEAVING_NOTICE.to_string(),
                LIST_ASKED_AT.to_string(),
                ROW_SLICES.to_string()
            ]
        );
        // Enabled already: nothing more.
        let done: BTreeSet<String> = KNOWN.iter().map(|f| f.to_string()).collect();
        assert!(to_enable(&done, &[Some(&new), Some(&new)]).is_empty());
        // A member of the previous build has only the older one.
        let previous = build(&[LEAVING_NOTICE], &[]);
        assert_eq!(
            to_enable(&none, &[Some(&new), Some(&previous)]),
            vec![LEAVING_NOTICE.to_string()]
        );
    }

    #[test]
    fn a_feature_a_member_enabled_is_enabled_and_an_unknown_one_is_not() {
        let none = BTreeSet::new();
        let enabler = build(KNOWN, &[LEAVING_NOTICE, "from-the-future"]);
        // The member that enabled it saw every member with it.
        assert_eq!(
            to_enable(&none, &[None, Some(&enabler)]),
            vec![LEAVING_NOTICE.to_string()]
        );
        let enabled = ["from-the-future".to_string(), LEAVING_NOTICE.to_string()];
        assert_eq!(lacking(&enabled), vec!["from-the-future"]);
    }

    #[test]
    fn a_build_without_an_enabled_feature_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let f = Features::open(dir.path()).unwrap();
        assert_eq!(f.oldest_peer(), PEER_OLDEST);
        assert_eq!(f.admits(&build(&[], &[])), Ok(()));
        f.enable(&[LEAVING_NOTICE.to_string()]).unwrap();
        // Peers of protocol 3 (the build before agreement) still take part.
        assert_eq!(f.oldest_peer(), 3);
        let e = f.admits(&build(&["other"], &[])).unwrap_err();
        assert!(
            e.contains("leaving-notice") && e.contains("build v lacks"),
            "{e}"
        );
        assert_eq!(f.admits(&build(KNOWN, &[])), Ok(()));
        assert_eq!(f.admits(&build(&[LEAVING_NOTICE], &[])), Ok(()));
        f.enable(&[AGREEMENT.to_string()]).unwrap();
        assert_eq!(f.oldest_peer(), 4);
        assert!(f.admits(&build(&[LEAVING_NOTICE], &[])).is_err());
        // After a restart too.
        assert_eq!(Features::open(dir.path()).unwrap().oldest_peer(), 4);
        f.enable(&[AGREED_HANDOFF.to_string()]).unwrap();
        // Protocol 6 brought no feature (sorted sets in scans, sent only
        // to peers that speak it): peers of 5 still take part.
        assert_eq!(f.oldest_peer(), 5);
        assert!(f.admits(&build(&[LEAVING_NOTICE, AGREEMENT], &[])).is_err());
    }

    #[test]
    fn enabled_features_survive_a_restart_and_damage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        Features::open(dir.path())
            .unwrap()
            .enable(&[LEAVING_NOTICE.to_string()])
            .unwrap();
        let f = Features::open(dir.path()).unwrap();
        assert!(f.has(LEAVING_NOTICE));
        assert_eq!(f.build().enabled, vec![LEAVING_NOTICE.to_string()]);
        let bytes = tally_world::fs::read(dir.path().join("features")).unwrap();
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x20;
            assert!(decode(&bad).is_err(), "flipped byte {i}");
        }
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
        tally_world::fs::write(dir.path().join("features"), b"junk").unwrap();
        let e = Features::open(dir.path()).err().unwrap().to_string();
        assert!(e.contains("is damaged"), "{e}");
    }

    #[test]
    fn a_node_whose_data_has_a_feature_its_build_lacks_does_not_start() {
        let dir = tempfile::tempdir().unwrap();
        let future: BTreeSet<String> = ["from-the-future".to_string()].into();
        tally_world::fs::write(dir.path().join("features"), encode(&future)).unwrap();
        let e = Features::open(dir.path()).err().unwrap().to_string();
        assert!(
            e.contains("[\"from-the-future\"]") && e.contains("lacks"),
            "{e}"
        );
    }
}
