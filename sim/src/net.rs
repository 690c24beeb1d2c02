//! The simulated network under every node's peer transport: batches go
//! from task to task in one process, each after a delay the run's seed
//! draws, and the run's faults lose them, cut links, or deliver a batch
//! that may be repeated twice.
//!
//! It models what QUIC gives the transport, and its failures:
//! - a batch and its answer each take a one-way delay; batches on the
//!   same channel overtake each other (each is a stream of its own);
//! - a cut link (a partition) delivers nothing: a batch on it waits for
//!   the connection's idle timeout and fails, as a dead connection does;
//! - a lost batch, or a lost answer, closes its channel: the transport
//!   sees a connection that failed, as when a peer restarts, and dials
//!   again. A lost answer means the batch ran: the outcome is unknown;
//! - a node that crashed answers nothing, and a channel to its earlier
//!   run fails as a reset connection does;
//! - a batch whose every request may be sent twice is sometimes delivered
//!   twice (what a retry after a lost answer does);
//! - a paused node (a process stopped, as by SIGSTOP, or a long GC pause)
//!   takes and sends nothing while paused, and loses nothing: batches to
//!   and from it wait, and go on when it resumes, as QUIC retransmits
//!   them, unless it stays paused past the idle timeout (then they fail,
//!   as a dead connection does). Its requests may thus reach it long
//!   after their senders gave up on them. Its own tasks keep running: a
//!   model of the pause its peers see, not of its frozen clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tally_net::peer::network::Dialled;
use tally_net::peer::{BoxFuture, Channel, Inbound, Network, Want};
use tally_net::wire::{self, PeerRequest};

use crate::trace;
use crate::world::{Stream, stream};

/// How often the network fails, and how slow it is.
#[derive(Debug, Clone, Copy)]
pub struct Faults {
    /// Chance that a batch, or its answer, is lost.
    pub lose: f64,
    /// Chance that a batch that may be repeated is delivered twice.
    pub repeat: f64,
    /// Shortest one-way delay.
    pub delay_min: Duration,
    /// Longest one-way delay.
    pub delay_max: Duration,
}

impl Faults {
    /// A network that fails nowhere and takes a fixed delay.
    pub fn none() -> Faults {
        Faults {
            lose: 0.0,
            repeat: 0.0,
            delay_min: Duration::from_micros(200),
            delay_max: Duration::from_micros(200),
        }
    }

    /// A network that fails nowhere, its delays those of a busy LAN: a
    /// batch may overtake another, and a replica hear of a change later
    /// than its peers.
    pub fn calm() -> Faults {
        Faults {
            delay_min: Duration::from_micros(100),
            delay_max: Duration::from_millis(3),
            ..Faults::none()
        }
    }
}

/// One node as the network knows it.
#[derive(Default)]
struct Host {
    /// What answers it; `None` while it is down.
    inbound: Option<Arc<Inbound>>,
    /// Its run: a channel to an earlier run fails.
    run: u64,
}

struct State {
    hosts: Vec<Host>,
    /// `cut[a][b]`: nothing goes from `a` to `b`.
    cut: Vec<Vec<bool>>,
    /// `paused[a]`: nothing goes to or from `a` until it resumes.
    paused: Vec<bool>,
    faults: Faults,
    rng: SmallRng,
    next_channel: usize,
}

/// The network of one run, shared by every node.
pub struct Net {
    state: Mutex<State>,
    /// How long a connection that hears nothing lives (QUIC's idle timeout).
    idle: Duration,
    /// How long a dial waits for a handshake.
    dial_timeout: Duration,
    /// Woken when a paused node resumes.
    resumed: tokio::sync::Notify,
}

/// What happens to one batch.
struct Fate {
    there: Duration,
    back: Duration,
    lost: bool,
    answer_lost: bool,
    repeat: bool,
}

impl Net {
    /// A network of `nodes` hosts, none up yet, its choices drawn from
    /// `seed`; `idle` is how long a batch over a cut link waits to fail,
    /// `dial_timeout` how long a dial to a host that does not answer.
    pub fn new(
        nodes: usize,
        seed: u64,
        faults: Faults,
        idle: Duration,
        dial_timeout: Duration,
    ) -> Arc<Net> {
        Arc::new(Net {
            state: Mutex::new(State {
                hosts: (0..nodes).map(|_| Host::default()).collect(),
                cut: vec![vec![false; nodes]; nodes],
                paused: vec![false; nodes],
                faults,
                rng: SmallRng::seed_from_u64(stream(seed, Stream::Net)),
                next_channel: 1,
            }),
            idle,
            dial_timeout,
            resumed: tokio::sync::Notify::new(),
        })
    }

    /// Node `node` is up, answering through `inbound`: a new run.
    pub fn up(&self, node: usize, inbound: Arc<Inbound>) {
        let mut s = self.state.lock();
        let host = &mut s.hosts[node];
        host.inbound = Some(inbound);
        host.run += 1;
    }

    /// Node `node` is down: nothing reaches it, and its channels fail.
    pub fn down(&self, node: usize) {
        let mut s = self.state.lock();
        let host = &mut s.hosts[node];
        host.inbound = None;
        host.run += 1;
    }

    /// Cuts the links from `a` to each of `others`, and back if `both`.
    pub fn cut_off(&self, a: usize, others: impl IntoIterator<Item = usize>, both: bool) {
        let mut s = self.state.lock();
        for b in others {
            s.cut[a][b] = true;
            s.cut[b][a] |= both;
        }
    }

    /// Heals every cut.
    pub fn heal(&self) {
        for row in &mut self.state.lock().cut {
            row.fill(false);
        }
    }

    /// Pauses node `node` (`on`), or resumes it: see the module docs.
    pub fn pause(&self, node: usize, on: bool) {
        self.state.lock().paused[node] = on;
        if !on {
            self.resumed.notify_waiters();
        }
    }

    /// Whether node `node` is paused.
    pub fn is_paused(&self, node: usize) -> bool {
        self.state.lock().paused[node]
    }

    /// Waits until neither `a` nor `b` is paused, at most `limit`;
    /// whether they then are not.
    async fn unpaused(&self, a: usize, b: usize, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            // Made before the look, so that a resume in between wakes it.
            let resumed = self.resumed.notified();
            let paused = {
                let s = self.state.lock();
                s.paused[a] || s.paused[b]
            };
            if !paused {
                return true;
            }
            if tokio::time::timeout_at(deadline, resumed).await.is_err() {
                return false;
            }
        }
    }

    /// Sets how often the network fails.
    pub fn set_faults(&self, faults: Faults) {
        self.state.lock().faults = faults;
    }

    /// The network as node `me` sees it.
    pub fn of(self: &Arc<Self>, me: usize) -> Arc<SimNetwork> {
        let nodes = self.state.lock().hosts.len();
        let run = self.state.lock().hosts[me].run;
        Arc::new(SimNetwork {
            me,
            run,
            net: self.clone(),
            channels: Mutex::new(vec![None; nodes]),
            closed: AtomicBool::new(false),
        })
    }

    fn run_of(&self, node: usize) -> u64 {
        self.state.lock().hosts[node].run
    }

    /// What answers `node` in its run `run`, if it is up, and the link
    /// from `from` (in its run `from_run`) to it is not cut.
    fn reach(&self, from: usize, from_run: u64, node: usize, run: u64) -> Option<Arc<Inbound>> {
        let s = self.state.lock();
        if s.cut[from][node] || s.hosts[from].run != from_run || s.hosts[node].run != run {
            return None;
        }
        s.hosts[node].inbound.clone()
    }

    fn cut(&self, a: usize, b: usize) -> bool {
        self.state.lock().cut[a][b]
    }

    fn delay(s: &mut State) -> Duration {
        let (lo, hi) = (s.faults.delay_min, s.faults.delay_max);
        if hi <= lo {
            return lo;
        }
        s.rng.random_range(lo..=hi)
    }

    fn fate(&self) -> Fate {
        let mut s = self.state.lock();
        let there = Net::delay(&mut s);
        let back = Net::delay(&mut s);
        let Faults { lose, repeat, .. } = s.faults;
        let lost = s.rng.random_bool(lose);
        let answer_lost = s.rng.random_bool(lose);
        let repeat = s.rng.random_bool(repeat);
        Fate {
            there,
            back,
            lost,
            answer_lost,
            repeat,
        }
    }

    fn channel_id(&self) -> usize {
        let mut s = self.state.lock();
        s.next_channel += 1;
        s.next_channel
    }
}

/// One node's side of the network: what its transport runs on.
pub struct SimNetwork {
    me: usize,
    /// The run of this node the network belongs to.
    run: u64,
    net: Arc<Net>,
    channels: Mutex<Vec<Option<Arc<SimChannel>>>>,
    closed: AtomicBool,
}

impl SimNetwork {
    fn cached(&self, to: usize, want: Want) -> Option<Arc<SimChannel>> {
        let channels = self.channels.lock();
        let c = channels.get(to)?.as_ref()?;
        let serves = !c.0.closed.load(Ordering::Acquire)
            && match want {
                Want::Any => true,
                Want::Not(failed) => c.0.id != failed,
                Want::Fresh => false,
            };
        serves.then(|| c.clone())
    }

    async fn dial(&self, to: usize, want: Want) -> Result<Arc<dyn Channel>, String> {
        if let Some(c) = self.cached(to, want) {
            return Ok(c);
        }
        if self.closed.load(Ordering::Acquire) {
            return Err("the network is closed".into());
        }
        let fate = self.net.fate();
        tokio::time::sleep(fate.there + fate.back).await;
        if !self.net.unpaused(self.me, to, self.net.dial_timeout).await {
            trace!("n{} dials n{}: paused", self.me + 1, to + 1);
            return Err(format!("n{} does not answer", to + 1));
        }
        let run = self.net.run_of(to);
        if self.net.reach(self.me, self.run, to, run).is_none() || self.net.cut(to, self.me) {
            trace!("n{} dials n{}: no answer", self.me + 1, to + 1);
            let waited = fate.there + fate.back;
            tokio::time::sleep(self.net.dial_timeout.saturating_sub(waited)).await;
            return Err(format!("n{} does not answer", to + 1));
        }
        let c = Arc::new(SimChannel(Arc::new(Link {
            id: self.net.channel_id(),
            from: self.me,
            from_run: self.run,
            to,
            run,
            net: self.net.clone(),
            closed: AtomicBool::new(false),
        })));
        trace!("n{} dials n{}: channel {}", self.me + 1, to + 1, c.0.id);
        self.channels.lock()[to] = Some(c.clone());
        Ok(c)
    }
}

impl Network for SimNetwork {
    fn channel(&self, to: usize, want: Want) -> Dialled<'_> {
        Box::pin(self.dial(to, want))
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        for c in self.channels.lock().iter().flatten() {
            c.0.closed.store(true, Ordering::Release);
        }
    }

    fn told(&self) -> BoxFuture<()> {
        Box::pin(async {})
    }
}

/// A channel from one node's run to another's.
#[derive(Clone)]
struct SimChannel(Arc<Link>);

/// What a channel is: its ends and whether it is closed.
struct Link {
    id: usize,
    from: usize,
    from_run: u64,
    to: usize,
    run: u64,
    net: Arc<Net>,
    closed: AtomicBool,
}

impl Link {
    /// Fails the batch: the channel is dead from now on.
    fn fail(&self, why: &str) -> Result<Vec<u8>, String> {
        self.closed.store(true, Ordering::Release);
        trace!(
            "n{}->n{} channel {}: {why}",
            self.from + 1,
            self.to + 1,
            self.id
        );
        Err(format!("connection lost: {why}"))
    }

    async fn send(self: Arc<Self>, batch: bytes::Bytes) -> Result<Vec<u8>, String> {
        let fate = self.net.fate();
        tokio::time::sleep(fate.there).await;
        if !self.net.unpaused(self.from, self.to, self.net.idle).await {
            return self.fail("paused past the idle timeout");
        }
        if self.closed.load(Ordering::Acquire) {
            return self.fail("closed");
        }
        let Some(inbound) = self.net.reach(self.from, self.from_run, self.to, self.run) else {
            if self.net.cut(self.from, self.to) {
                tokio::time::sleep(self.net.idle).await;
                return self.fail("cut");
            }
            return self.fail("peer gone");
        };
        if fate.lost {
            return self.fail("batch lost");
        }
        let from = (self.from, self.to, self.id, batch.len());
        trace!(
            "n{}->n{} channel {}: {} bytes",
            from.0 + 1,
            from.1 + 1,
            from.2,
            from.3
        );
        // The peer answers on a task of its own, as QUIC's streams are
        // served: a sender that gives up does not cut its handler short.
        // A repeat (a retry's copy) runs beside it.
        let serve = |inbound: Arc<Inbound>, batch: bytes::Bytes, from: usize| {
            tokio::spawn(async move { inbound.answer(from, &batch).await })
        };
        let first = serve(inbound.clone(), batch.clone(), self.from);
        if fate.repeat && repeatable(&batch) {
            trace!(
                "n{}->n{} channel {}: repeated",
                from.0 + 1,
                from.1 + 1,
                from.2
            );
            drop(serve(inbound, batch, self.from));
        }
        let answer = match first.await {
            Ok(Ok(a)) => a,
            Ok(Err(bad)) => return self.fail(bad.why),
            Err(_) => return self.fail("the peer's handler panicked"),
        };
        if self.closed.load(Ordering::Acquire) {
            // A dead connection fails every stream on it.
            return self.fail("closed");
        }
        tokio::time::sleep(fate.back).await;
        if !self.net.unpaused(self.to, self.from, self.net.idle).await {
            return self.fail("paused past the idle timeout");
        }
        if fate.answer_lost {
            return self.fail("answer lost");
        }
        if self
            .net
            .reach(self.to, self.run, self.from, self.from_run)
            .is_none()
        {
            if self.net.cut(self.to, self.from) {
                tokio::time::sleep(self.net.idle).await;
            }
            return self.fail("answer undelivered");
        }
        Ok(answer)
    }
}

/// Whether every request of `batch` may be sent twice.
fn repeatable(batch: &[u8]) -> bool {
    wire::decode::<Vec<PeerRequest>>(batch)
        .is_ok_and(|reqs| reqs.iter().all(tally_net::encoded::idempotent))
}

impl Channel for SimChannel {
    fn id(&self) -> usize {
        self.0.id
    }

    fn protocol(&self) -> u16 {
        tally_net::version::PEER_NEWEST
    }

    fn is_closed(&self) -> bool {
        self.0.closed.load(Ordering::Acquire)
    }

    fn refuse(&self, why: &str) {
        let _ = self.0.fail(why);
    }

    fn exchange(&self, batch: bytes::Bytes) -> BoxFuture<Result<Vec<u8>, String>> {
        Box::pin(self.0.clone().send(batch))
    }
}
