//! Running a topology change, storing and spreading rings.
//!
//! A change runs on one node, its coordinator (the joiner itself, or the
//! node `tally decommission` / `tally removenode` reached):
//!
//! 1. it learns the newest ring its peers hold, and refuses the change if
//!    another one is in progress (`Topology::begin`);
//! 2. every participant stores the ring with the change begun, in config
//!    order, before it counts: a participant that already holds another
//!    ring of that version refuses it (two changes begun at once: the
//!    first node in config order decides which one wins, and the loser
//!    stops there);
//! 3. the ranges that gain a replica are synced into it from every current
//!    replica, by the repair machinery (`repair::run::sync`), while every
//!    write also goes to it; a leaving node leads no writes meanwhile
//!    (unless no other replica can: `placement::State::Leaving`), and
//!    delivers its hints before the ring switches;
//! 4. the ring switches over: every participant stores it with
//!    `switching` set, from when on adds with ids whose applier the change
//!    moves are refused (not applied: the client retries the same id), and
//!    then every participant hands the ids it applied to every other, so
//!    that the next applier answers a retry of an add the last one applied
//!    (exactly once across ring changes);
//! 5. every participant stores the ring with the change done.
//!
//! Every step can be run again: a change that stopped half way (its
//! coordinator died, a participant was down) is resumed by starting it
//! again, on any node. Nodes also learn newer rings by themselves: each
//! heartbeat answer carries the peer's ring version, and a node that sees a
//! newer one fetches it ([`start`]).

use std::sync::{Arc, Weak};
use std::time::Duration;

use anyhow::Result;
use tally_net::wire::{ErrorKind, NodeState, PeerRequest, PeerResponse, WireError, WireRepaired};
use tokio::task::JoinSet;
use tracing::{info, warn};

use super::steps::{Run, Step};
use super::{Change, Refused, Topology, store};
use crate::cluster::ctx::{Ctx, Placed};
use crate::cluster::faults::Fault;
use crate::cluster::membership::Unaccepted;
use crate::config::Config;

/// How long a peer may take to answer for its ring or store one.
const RING_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a change waits for its participants to be seen up.
const READY_WAIT: Duration = Duration::from_secs(5);
/// How long a leaving node waits for its hints to be delivered.
const HINTS_DRAIN_WAIT: Duration = Duration::from_secs(60);
/// How long a node may take to hand its ids to every other.
const HAND_OVER_TIMEOUT: Duration = Duration::from_secs(120);

/// The ring a node starts with: the one it stored, or the seed of its
/// configuration. A configuration may name more nodes than the stored
/// ring (nodes added to the file since): they are absent.
pub(crate) fn initial(config: &Config, me: usize) -> Result<Topology> {
    let dir = &config.nodes[me].data_dir;
    let seed = Topology::seed(&config.nodes.iter().map(|n| n.join).collect::<Vec<_>>());
    let Some(mut stored) = store::load(dir)? else {
        return Ok(seed);
    };
    if stored.states.len() > seed.states.len() {
        anyhow::bail!(
            "the ring stored in {} names {} nodes, and the configuration only {}: \
             a node of the ring is missing from the configuration",
            dir.display(),
            stored.states.len(),
            seed.states.len()
        );
    }
    stored.states.resize(seed.states.len(), NodeState::Absent);
    Ok(stored)
}

/// Switches to `theirs`, a ring a peer holds (it announced it), if it is
/// newer than this node's. One this node cannot store leaves it behind
/// its peers: it says so, and leads and answers nothing until it stores
/// it (see `Ctx::ring_unstored`); `start` tries again.
fn catch_up(ctx: &Arc<Ctx>, theirs: &Topology) -> Result<bool, String> {
    adopt(ctx, theirs).map_err(|e| {
        if let Adopting::Unstored(why) = &e {
            ctx.set_ring_unstored(Some(format!(
                "it could not store ring version {}: {why}",
                theirs.version
            )));
        }
        e.to_string()
    })
}

/// Why a node did not switch to a ring.
pub(crate) enum Adopting {
    /// It does not take it (see `Topology::accepts`).
    Unaccepted(Unaccepted),
    /// It could not be stored (this node's disk).
    Unstored(String),
}

impl Adopting {
    /// The refusal of a peer's `Adopt`: nothing switched here; the change
    /// that sent it may try again unless the ring does not fit this node.
    fn refusal(&self, node: &str, version: u64) -> WireError {
        let kind = match self {
            Adopting::Unaccepted(Unaccepted::Misfit(_)) => ErrorKind::Invalid,
            Adopting::Unaccepted(Unaccepted::Lost(_)) | Adopting::Unstored(_) => {
                ErrorKind::Unavailable
            }
        };
        WireError::not_applied(
            kind,
            format!("{node} refused ring version {version}: {self}"),
        )
    }
}

impl std::fmt::Display for Adopting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Adopting::Unaccepted(why) => why.fmt(f),
            Adopting::Unstored(why) => f.write_str(why),
        }
    }
}

/// Stores `theirs` and switches to it, if it is newer than this node's
/// ring; answers whether it did.
pub(crate) fn adopt(ctx: &Arc<Ctx>, theirs: &Topology) -> Result<bool, Adopting> {
    let _one = ctx.changes().adopting();
    let mine = ctx.topology();
    if !mine.accepts(theirs).map_err(Adopting::Unaccepted)? {
        return Ok(false);
    }
    store::save(&ctx.config().nodes[ctx.me()].data_dir, theirs)
        .map_err(|e| Adopting::Unstored(format!("{e:#}")))?;
    ctx.set_ring_unstored(None);
    // Known before any cell of a new generation can arrive (see `fold`).
    ctx.engine().merger().install(theirs.engine_folds());
    let mut placed = Placed::new(theirs.clone(), ctx.config());
    placed.previous = Some(ctx.ring());
    {
        // Adds with ids that passed the fence before are in the ledger
        // once this is taken (see `fences`).
        let _fence = theirs.switching.then(|| ctx.fences().close_ids());
        ctx.switch_to(placed);
    }
    ctx.set_leaving(theirs.leaving());
    if theirs.flushes != mine.flushes {
        super::collect::collect(ctx);
    }
    for (n, (&was, &now)) in mine.states.iter().zip(&theirs.states).enumerate() {
        if was != now {
            info!(version = theirs.version, node = %ctx.name(n), from = ?was, to = ?now, "ring changed");
        }
        if now == NodeState::Left
            && n != ctx.me()
            && let Err(e) = ctx.hints().forget(n)
        {
            warn!(peer = %ctx.name(n), error = %e, "could not drop the hints of a node that left");
        }
    }
    Ok(true)
}

/// Answers a peer's `GetTopology`, `Adopt`, `HandOverIds` or `TakeIds`.
pub(crate) async fn serve(ctx: &Arc<Ctx>, req: PeerRequest) -> PeerResponse {
    match req {
        PeerRequest::GetTopology => PeerResponse::Topology(ctx.topology().to_wire()),
        PeerRequest::Adopt { topology } => match adopt(ctx, &Topology::from_wire(&topology)) {
            Ok(_) => {
                if topology.switching {
                    // Admissions of members whose applier moves that began
                    // before the ring are done once this is taken (see
                    // `write::unique::lead`).
                    ctx.fences().wait_admissions().await;
                }
                PeerResponse::Applied
            }
            Err(why) => PeerResponse::Error(why.refusal(ctx.name(ctx.me()), topology.version)),
        },
        req @ (PeerRequest::HandOverIds { .. } | PeerRequest::TakeIds { .. }) => {
            Box::pin(serve_hand_over(ctx, req)).await
        }
        other => PeerResponse::Error(WireError::new(
            ErrorKind::Internal,
            format!("not a ring request: {other:?}"),
        )),
    }
}

/// Asks every peer for its ring (within a second) and switches to the
/// newest; what a node does before it serves.
pub(crate) async fn learn(ctx: &Arc<Ctx>) {
    let mut asked = JoinSet::new();
    for n in (0..ctx.config().nodes.len()).filter(|&n| n != ctx.me()) {
        let ctx = ctx.clone();
        asked.spawn(async move {
            let t = ctx.transport();
            match t
                .call(n, PeerRequest::GetTopology, Duration::from_secs(1))
                .await
            {
                Ok(PeerResponse::Topology(w)) => Some(Topology::from_wire(&w)),
                _ => None,
            }
        });
    }
    let mut newest: Option<Topology> = None;
    while let Some(answer) = asked.join_next().await {
        if let Ok(Some(t)) = answer
            && newest.as_ref().is_none_or(|n| t.version > n.version)
        {
            newest = Some(t);
        }
    }
    if let Some(t) = newest
        && let Err(why) = catch_up(ctx, &t)
    {
        warn!(version = t.version, reason = %why, "did not take a peer's ring");
    }
}

/// Runs in the background: fetches the ring of any peer whose heartbeats
/// announce a newer one than this node's.
pub(crate) fn start(ctx: Weak<Ctx>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        loop {
            tick.tick().await;
            let Some(ctx) = ctx.upgrade() else { return };
            if ctx.transport().is_closed() {
                return;
            }
            let mine = ctx.topology().version;
            let ahead = (0..ctx.config().nodes.len())
                .filter(|&n| n != ctx.me() && ctx.is_up(n))
                .max_by_key(|&n| ctx.transport().ring_version(n))
                .filter(|&n| ctx.transport().ring_version(n) > mine);
            if let Some(n) = ahead {
                let t = ctx.transport();
                if let Ok(PeerResponse::Topology(w)) =
                    t.call(n, PeerRequest::GetTopology, RING_TIMEOUT).await
                    && let Err(why) = catch_up(&ctx, &Topology::from_wire(&w))
                {
                    warn!(peer = %ctx.name(n), reason = %why, "did not take a peer's ring");
                }
            }
        }
    });
}

/// Runs `change` to its end, from where it stopped if it was begun
/// before; answers the ring after it. One change at a time, cluster-wide.
/// The steps and their order are `steps::Run`'s; this does each.
pub(crate) async fn run(ctx: &Arc<Ctx>, change: Change) -> Result<Topology, WireError> {
    let Some(_one) = ctx.changes().try_change() else {
        return Err(invalid(format!(
            "{} is already running a topology change; one at a time",
            ctx.name(ctx.me())
        )));
    };
    learn(ctx).await;
    let rf = ctx.config().cluster.replication_factor;
    let now = ctx.topology();
    let mut run =
        Run::new(&now, change, rf, ctx.me()).map_err(|r| refused(ctx, &now, change, &r))?;
    // A node restarted a moment ago may not be seen up yet: wait a little.
    let deadline = tally_world::Instant::now() + READY_WAIT;
    while let Err(e) = ready(ctx, run.begun(), change) {
        if e.kind != ErrorKind::Unavailable || tally_world::Instant::now() >= deadline {
            return Err(e);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    loop {
        match run.step() {
            Step::Commit { from, to } => commit(ctx, &from, &to).await?,
            Step::Recommit(ring) => commit(ctx, &ring, &ring).await?,
            Step::Sync(ring) => {
                if !ring.switching {
                    ctx.faults().sync_delay().await;
                }
                if ctx.faults().has(Fault::SkipSync) {
                    // Fault injection: the new replicas start empty.
                    info!(version = ring.version, "sync skipped");
                } else {
                    info!(version = ring.version, node = %ctx.name(change.node()), "{}: syncing", change.verb());
                    let synced = sync(ctx, &ring).await?;
                    info!(version = ring.version, summary = ?synced, "synced");
                }
            }
            Step::DrainHints => drain_hints(ctx).await,
            Step::HandOver(ring) => hand_over_ids(ctx, &ring).await?,
            Step::Done(done) => {
                info!(version = done.version, node = %ctx.name(change.node()), "topology change done");
                return Ok(done);
            }
        }
        run.done();
    }
}

/// A leaving node delivers its hints before it leaves: a write it led
/// that a replica which stays missed would otherwise reach it only by
/// repair. Waits up to [`HINTS_DRAIN_WAIT`] (every member is up: handoff
/// delivers them), then leaves anyway, saying what is left.
async fn drain_hints(ctx: &Ctx) {
    let deadline = tally_world::Instant::now() + HINTS_DRAIN_WAIT;
    let pending = || -> usize {
        (0..ctx.config().nodes.len())
            .filter(|&n| n != ctx.me())
            .map(|n| ctx.hints().count(n))
            .sum()
    };
    loop {
        let left = pending();
        if left == 0 {
            return;
        }
        if tally_world::Instant::now() >= deadline {
            warn!(
                hints = left,
                "leaving with hints undelivered: repair the nodes they were for"
            );
            return;
        }
        info!(hints = left, "leaving: delivering this node's hints first");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Whether the nodes `change` needs are as it needs them: every
/// participant up (a ring counts once all of them stored it), and the
/// removed node down.
fn ready(ctx: &Ctx, begun: &Topology, change: Change) -> Result<(), WireError> {
    if let Change::Remove(n) = change
        && ctx.is_up(n)
    {
        return Err(invalid(format!(
            "{} is up: decommission it instead (removenode is for a node that is gone)",
            ctx.name(n)
        )));
    }
    if let Some(&down) = begun.participants().iter().find(|&&n| !ctx.is_up(n)) {
        return Err(WireError::not_applied(
            ErrorKind::Unavailable,
            format!(
                "cannot change the ring while {} is down: every member must store it \
                 (start it again, or removenode it)",
                ctx.name(down)
            ),
        ));
    }
    // The sync asks each participant's build whether it moves agreed
    // state: a node that joined a moment ago may not have told it yet.
    let transport = ctx.started_transport();
    let unknown = |n: usize| transport.as_ref().is_some_and(|t| t.build_of(n).is_none());
    if let Some(&n) = begun
        .participants()
        .iter()
        .find(|&&n| n != ctx.me() && unknown(n))
    {
        return Err(WireError::not_applied(
            ErrorKind::Unavailable,
            format!("the build of {} is not known yet", ctx.name(n)),
        ));
    }
    Ok(())
}

/// Has every node [`Topology::commit_order`] names store `next`, in
/// that order. The first member's refusal is as it answered (no member
/// stored `next`); a later one's outcome is unknown (the members before
/// it stored it, and it spreads from them).
pub(crate) async fn commit(
    ctx: &Arc<Ctx>,
    from: &Topology,
    next: &Topology,
) -> Result<(), WireError> {
    for (i, n) in from.commit_order(next).into_iter().enumerate() {
        let req = PeerRequest::Adopt {
            topology: next.to_wire(),
        };
        let what = format!("store ring version {}", next.version);
        ask(ctx, n, req, RING_TIMEOUT, &what)
            .await
            .map_err(|e| match i {
                // Refused by the first member: no member stored it.
                0 => e,
                // Stored by the members before this one: it spreads from them.
                _ => WireError::unknown(e.kind, e.message),
            })?;
    }
    Ok(())
}

/// Has every participant of `switching` hand the ids it applied to every
/// other: whoever applies a client's ids for a partition after the switch
/// then answers the retry of an add applied before it. Every participant
/// holds the ring `switching` already, so no add whose applier moves is
/// applied any more.
async fn hand_over_ids(ctx: &Arc<Ctx>, switching: &Topology) -> Result<(), WireError> {
    let nodes = switching.participants();
    for &n in &nodes {
        let to = nodes
            .iter()
            .filter(|&&t| t != n)
            .map(|&t| u32::try_from(t).expect("node indices are small"))
            .collect();
        let req = PeerRequest::HandOverIds { to };
        // A participant that restarted uncleanly hands over once it has
        // learned its lost ids (see `serve_hand_over`): a little wait.
        let deadline = tally_world::Instant::now() + READY_WAIT;
        loop {
            match ask(ctx, n, req.clone(), HAND_OVER_TIMEOUT, "hand over its ids").await {
                Err(e)
                    if e.kind == ErrorKind::Unavailable
                        && tally_world::Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                done => break done?,
            }
        }
    }
    Ok(())
}

/// Answers `HandOverIds` (sends this node's ids to each node asked) and
/// `TakeIds` (takes another's).
async fn serve_hand_over(ctx: &Arc<Ctx>, req: PeerRequest) -> PeerResponse {
    match req {
        PeerRequest::TakeIds { block } => match ctx.engine().ids_import(&block) {
            Ok(_) => PeerResponse::Applied,
            Err(e) => PeerResponse::Error(crate::base::convert::engine_error(&e)),
        },
        PeerRequest::HandOverIds { to } => {
            // Ids this node's lost runs applied, learned from the other
            // participants' tails, join its ledger as it learns them: a
            // ledger handed over before would miss them, and the new
            // applier would apply a retry of one again.
            let participants: Vec<usize> = to.iter().map(|&t| t as usize).collect();
            if !ctx
                .tails()
                .ready(&[participants.as_slice(), &[ctx.me()]].concat())
            {
                return PeerResponse::Error(crate::cluster::tails::not_ready(ctx));
            }
            let blocks = ctx.engine().ids_export();
            for t in to
                .into_iter()
                .map(|t| t as usize)
                .filter(|&t| t != ctx.me())
            {
                for block in &blocks {
                    let req = PeerRequest::TakeIds {
                        block: block.clone(),
                    };
                    if let Err(e) = ask(ctx, t, req, RING_TIMEOUT, "take the ids").await {
                        return PeerResponse::Error(e);
                    }
                }
            }
            PeerResponse::Applied
        }
        other => PeerResponse::Error(WireError::new(
            ErrorKind::Internal,
            format!("not a hand-over request: {other:?}"),
        )),
    }
}

/// Attempts at a request a change makes of a node that does not answer.
const ATTEMPTS: u32 = 5;

/// Has node `n` (this one, or a peer) do `req`, which answers `Applied`;
/// a peer that does not answer is asked again, up to [`ATTEMPTS`] times
/// (every request a change makes can be made twice). `what` says what
/// for the error.
async fn ask(
    ctx: &Arc<Ctx>,
    n: usize,
    req: PeerRequest,
    timeout: Duration,
    what: &str,
) -> Result<(), WireError> {
    let mut attempt = 1;
    let answer = loop {
        if n == ctx.me() {
            break Box::pin(serve(ctx, req)).await;
        }
        match ctx.transport().call(n, req.clone(), timeout).await {
            Ok(answer) => break answer,
            Err(e) if attempt >= ATTEMPTS => {
                return Err(WireError::unknown(
                    ErrorKind::Unavailable,
                    format!("{} did not {what}: {e}", ctx.name(n)),
                ));
            }
            Err(_) => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
            }
        }
    };
    match answer {
        PeerResponse::Applied => Ok(()),
        PeerResponse::Error(e) => Err(e),
        other => Err(WireError::new(
            ErrorKind::Internal,
            format!("{} answered {other:?} when asked to {what}", ctx.name(n)),
        )),
    }
}

/// Syncs every range that gains a replica in `begun` into it, from every
/// current replica of the range (but a removed one).
async fn sync(ctx: &Arc<Ctx>, begun: &Topology) -> Result<WireRepaired, WireError> {
    let c = &ctx.config().cluster;
    let ring = begun.ring(&ctx.config().node_ids(), c.vnodes, c.replication_factor);
    let gone = |n: usize| begun.states[n] == NodeState::Removing;
    let mut groups: std::collections::BTreeMap<Vec<usize>, Vec<_>> = Default::default();
    for (range, replicas) in ring.ranges() {
        if replicas.pending().is_empty() {
            continue;
        }
        let mut set: Vec<usize> = replicas
            .all()
            .iter()
            .copied()
            .filter(|&n| !gone(n))
            .collect();
        set.sort_unstable();
        groups.entry(set).or_default().push(range);
    }
    crate::cluster::repair::run::sync(ctx, groups).await
}

fn invalid(message: String) -> WireError {
    WireError::not_applied(ErrorKind::Invalid, message)
}

/// The error for a change `begin` refused.
fn refused(ctx: &Ctx, now: &Topology, change: Change, r: &Refused) -> WireError {
    let name = ctx.name(change.node());
    invalid(match r {
        Refused::Busy(busy) => format!(
            "a topology change is in progress: {} is {} (ring version {}); one at a time",
            ctx.name(busy.node()),
            busy.verb(),
            now.version
        ),
        Refused::NotAbsent(state) => {
            format!("{name} cannot join: it is {state:?} in the ring (a node id is never reused)")
        }
        Refused::NotAMember(state) => {
            format!("{name} is not a member of the ring (it is {state:?})")
        }
        Refused::TooFew { left, rf } => format!(
            "taking {name} out would leave {left} members, fewer than the replication factor {rf}"
        ),
        Refused::Folding(g) => folding(*g, now.version),
    })
}

/// Why nothing else may change while fold generation `g` is pending.
pub(crate) fn folding(g: u32, version: u64) -> String {
    format!(
        "fold generation {g} is agreed and not active yet (ring version {version}): \
         `tally fold` is running, or stopped half way (run it again)"
    )
}
