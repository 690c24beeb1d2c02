//! The proposer's shell: runs a change's ballots ([`Round`]) over the
//! network and this node's engine, and retries when outbid.
//!
//! Each attempt takes a ballot from the node's hybrid clock (later than any
//! ballot this node has made or been refused with), prepares it on every
//! participant at once (this node's engine among them), and once a quorum
//! promised, asks [`plan`] what to propose, then proposes on every
//! participant at once. A change's first attempt on a partition that looks
//! new ([`skips_prepare`]) proposes at a first ballot instead, without the
//! prepare: one round trip where it was right, one more where it was not
//! (then the next attempt prepares at once). A decided value is committed
//! everywhere without waiting. Outbid, at the prepare or after it proposed, it waits a random
//! backoff that doubles with each attempt and tries again,
//! [`ATTEMPTS_MAX`] times at most. Every proposed state records its round
//! (`history`), so a retry reads whether another proposer finished an
//! earlier attempt's value: then that attempt answers, and the change is
//! not made twice.
//!
//! What a failure says: nothing was applied while no attempt proposed
//! anything; after one did, the outcome is unknown (a later proposer may
//! still finish that value), unless a later attempt read it decided or
//! superseded.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::task::Poll;
use std::time::Duration;

use parking_lot::Mutex;
use tally_engine::now_ms;
use tally_net::encoded::Encoded;
use tally_net::peer::Answers;
use tally_net::wire::{
    Accepted, Acceptor, Ballot, ErrorKind, PeerRequest, PeerResponse, Promise, Registers, WireError,
};
use tokio::sync::oneshot;
use tracing::debug;

use super::history::Rounds;
use super::queue::{Answer, Change, Hints, Queues, Running, Waiting, apply_all, changes_nothing};
use super::round::{
    ATTEMPTS_MAX, Attempt, Plan, Round, Verdict, needs_proposal, plan, skips_prepare,
};
use crate::base::convert::engine_error;
use crate::cluster::ctx::Ctx;
use crate::cluster::faults::Fault;

/// The first backoff after being outbid, in ms; it doubles per attempt.
const BACKOFF_MS: u64 = 2;
/// The longest backoff, in ms.
const BACKOFF_MAX_MS: u64 = 200;
/// The longest backoff of a change that has proposed, in ms.
const PROPOSED_BACKOFF_MAX_MS: u64 = 10;
/// How long a proposal at a first ballot waits for every participant
/// before a prepare follows it (at most the write timeout): one slow
/// replica costs a fresh change this, not the write timeout.
const FIRST_WAIT: Duration = Duration::from_millis(50);

/// This node's proposer: its hybrid clock of ballots.
pub(crate) struct Proposer {
    /// The latest ballot this node made or was refused with.
    seen: Mutex<Ballot>,
    /// The key of this node's first ballots' nonces and backoffs: random.
    jitter: u64,
    /// The changes waiting for their partition's next round.
    queues: Queues,
    /// What this node last saw each partition hold.
    hints: Hints,
    /// Whether the cluster has enabled first ballots (`features`).
    first_ballots: AtomicBool,
    /// First ballots made: what makes each one's nonce new.
    firsts: AtomicU64,
}

impl Default for Proposer {
    fn default() -> Self {
        Proposer {
            seen: Mutex::default(),
            jitter: tally_world::random_u64(),
            queues: Queues::default(),
            hints: Hints::default(),
            first_ballots: AtomicBool::default(),
            firsts: AtomicU64::default(),
        }
    }
}

impl Proposer {
    /// A ballot of this node (`proposer`, its counter_id) later than every
    /// one it has seen.
    fn next_ballot(&self, proposer: u64) -> Ballot {
        let mut seen = self.seen.lock();
        *seen = Ballot::next(now_ms(), *seen, proposer);
        *seen
    }

    /// A first ballot that no attempt of any proposer has had: its nonce
    /// a keyed hash (random per process) of a count.
    fn first_ballot(&self) -> Ballot {
        let n = self.firsts.fetch_add(1, Relaxed);
        Ballot::first(xxhash_rust::xxh3::xxh3_64_with_seed(
            &n.to_le_bytes(),
            self.jitter,
        ))
    }

    /// Lets changes propose at first ballots: once the cluster has enabled
    /// them, every acceptor knows to take one only while it holds nothing.
    pub(crate) fn enable_first_ballots(&self) {
        self.first_ballots.store(true, Relaxed);
    }

    fn saw(&self, ballot: Ballot) {
        let mut seen = self.seen.lock();
        *seen = (*seen).max(ballot);
    }

    /// The backoff before attempt `attempt` (from 2): random, up to a
    /// bound that doubles per attempt. A change that has `proposed` backs
    /// off briefly (at most [`PROPOSED_BACKOFF_MAX_MS`]): it must read
    /// whether its value took effect before `history::WINDOW` rounds of
    /// other nodes go by, or its outcome is unknown.
    fn backoff(&self, attempt: u32, proposed: bool) -> Duration {
        let bound = (BACKOFF_MS << attempt.min(16)).min(BACKOFF_MAX_MS);
        let bound = match proposed {
            true => bound.min(PROPOSED_BACKOFF_MAX_MS),
            false => bound,
        };
        let r = self.jitter ^ tally_world::random_u64() ^ u64::from(attempt);
        Duration::from_millis(r % bound + 1)
    }

    /// Makes `change` to `partition`'s registers, linearizably: `change`
    /// gets the registers decided so far (those live at the wall clock's
    /// reading it is given) and that reading, and answers the next
    /// registers and what to tell the client (or an error, which changes
    /// nothing). It may run more than once (once per attempt); the answer
    /// of the attempt that took effect is returned.
    ///
    /// The change waits for the partition's next round on this node, which
    /// makes it with every other change that waited (see `queue`).
    pub(crate) async fn agree(
        self: &Arc<Self>,
        ctx: &Arc<Ctx>,
        partition: &[u8],
        change: Change,
    ) -> Result<Answer, WireError> {
        let (reply, answer) = oneshot::channel();
        if self.queues.push(partition, Waiting { change, reply }) {
            let (me, ctx, partition) = (self.clone(), ctx.clone(), partition.to_vec());
            tokio::spawn(async move { me.run(&ctx, &partition).await });
        }
        answer.await.unwrap_or_else(|_| {
            Err(WireError::unknown(
                ErrorKind::Internal,
                "the partition's round stopped before it answered",
            ))
        })
    }

    /// The runner of `partition`'s rounds on this node: one batch of
    /// waiting changes per round, until none waits.
    async fn run(&self, ctx: &Arc<Ctx>, partition: &[u8]) {
        let _running = Running {
            queues: &self.queues,
            partition,
        };
        while let Some(mut batch) = self.queues.take(partition) {
            if let Some(answers) = self.read_only(ctx, partition, &mut batch).await {
                for (w, answer) in batch.into_iter().zip(answers) {
                    let _ = w.reply.send(answer);
                }
                continue;
            }
            let mut last = None;
            let answers = self
                .round(ctx, partition, |registers, now| {
                    let (next, answers) = apply_all(&mut batch, registers, now);
                    last = Some(next.clone());
                    Ok((next, answers))
                })
                .await;
            if let (Ok(_), Some(last)) = (&answers, last) {
                self.hints.saw(partition, last);
            }
            match answers {
                Ok(answers) => {
                    for (w, answer) in batch.into_iter().zip(answers) {
                        let _ = w.reply.send(answer);
                    }
                }
                Err(e) => {
                    for w in batch {
                        let _ = w.reply.send(Err(e.clone()));
                    }
                }
            }
        }
    }

    /// What this node last saw `partition` hold (a hint).
    pub(crate) fn last_seen(&self, partition: &[u8]) -> Option<Registers> {
        self.hints.get(partition)
    }

    /// Answers `batch` from a read, without a round, when this node last
    /// saw the partition in a state the batch would not change and a
    /// quorum shows it still is, nothing in flight: a change that changes
    /// nothing is a read (many clients polling a held lock then take no
    /// ballots from its holder). `None`: a round must make it.
    async fn read_only(
        &self,
        ctx: &Arc<Ctx>,
        partition: &[u8],
        batch: &mut [Waiting],
    ) -> Option<Vec<Result<Answer, WireError>>> {
        let now = now_ms();
        let hint = self.hints.get(partition)?;
        if !changes_nothing(batch, &hint, now) {
            return None;
        }
        let live = settled(ctx, partition).await.ok()??;
        let (next, answers) = apply_all(batch, &live, now);
        self.hints.saw(partition, live.clone());
        (next == live).then_some(answers)
    }

    /// One change (of a batch) made through as many ballots as it takes.
    async fn round<R>(
        &self,
        ctx: &Arc<Ctx>,
        partition: &[u8],
        mut change: impl FnMut(&Registers, u64) -> Result<(Registers, R), WireError>,
    ) -> Result<R, WireError> {
        // Each attempt that proposed: its ballot and round, and what it
        // answers.
        let mut ours: Vec<Attempt> = Vec::new();
        let mut answers: Vec<Result<R, WireError>> = Vec::new();
        // Whether to back off first: not before the first attempt, nor
        // after a first ballot (refused for what was held, not contended).
        let mut backoff = false;
        for attempt in 1..=ATTEMPTS_MAX {
            if backoff {
                tokio::time::sleep(self.backoff(attempt, !ours.is_empty())).await;
            }
            backoff = true;
            let first = skips_prepare(
                attempt,
                self.first_ballots.load(Relaxed),
                self.hints.has(partition),
                || new_here(ctx, partition),
            );
            let ballot = match first {
                true => self.first_ballot(),
                false => self.next_ballot(ctx.engine().counter_id()),
            };
            let mut round = Round::new(ballot, &ctx.replicas(partition));
            if ctx.faults().has(Fault::FirstBallotAsRegular) {
                round = round.naive(&ctx.replicas(partition));
            }
            let read = match first {
                true => round.skip_prepare(),
                false => match ask(ctx, &mut round, prepare(ctx, partition, ballot), None).await {
                    Verdict::Read(read) => read,
                    Verdict::Outbid { seen } => {
                        self.saw(seen);
                        continue;
                    }
                    other => return Err(failed(&other, !ours.is_empty())),
                },
            };
            commit_to(ctx, partition, &read.committed, &read.behind);
            let (value, answer) = match plan(&read, &ours) {
                Plan::Done(i) => return answers.swap_remove(i),
                Plan::Finish(i, value) => (value.clone(), i),
                Plan::Unknown => return Err(forgotten()),
                Plan::Apply(current) => {
                    // The change sees live registers only; what expired is
                    // dropped for good by the next decided state.
                    let now = now_ms();
                    let mut live = current.clone();
                    live.drop_expired(now);
                    let (mut next, answer) = match change(&live, now) {
                        Ok((next, r)) => (next, Ok(r)),
                        Err(e) => (current.clone(), Err(e)),
                    };
                    if !needs_proposal(&read, &next, !ours.is_empty()) {
                        // A first ballot read nothing: a change that
                        // changes nothing has it wrong, or must read.
                        if first {
                            backoff = false;
                            continue;
                        }
                        return answer;
                    }
                    let rounds = Rounds::of(current).next(ballot);
                    rounds.stamp(&mut next);
                    ours.push(Attempt {
                        ballot,
                        seq: rounds.seq,
                    });
                    answers.push(answer);
                    (next, answers.len() - 1)
                }
            };
            let proposal = round.propose(value);
            let propose = PeerRequest::Propose {
                partition: partition.to_vec(),
                proposal: proposal.clone(),
            };
            let wait = first.then_some(FIRST_WAIT);
            match ask(ctx, &mut round, propose, wait).await {
                Verdict::Decided(decided) => {
                    commit_decided(ctx, partition, decided);
                    return answers.swap_remove(answer);
                }
                // Outbid after proposing: a later proposer may have found
                // this value in flight and finished it; the next attempt
                // reads whether it did (`plan`). So it does where a first
                // ballot missed a participant, at once.
                Verdict::Outbid { seen } => {
                    self.saw(seen);
                    backoff = !first;
                }
                _ if first => backoff = false,
                other => return Err(failed(&other, true)),
            }
        }
        Err(contended(!ours.is_empty()))
    }

    /// The registers of `partition` decided so far (those live now),
    /// linearizably: a quorum's newest committed state when none of them
    /// holds a newer accepted value, in one read that writes nothing; else
    /// a round that finishes that value first. A value a quorum accepted
    /// is seen by every quorum, committed or in flight, so nothing decided
    /// before the read began is missed.
    pub(crate) async fn read(
        self: &Arc<Self>,
        ctx: &Arc<Ctx>,
        partition: &[u8],
    ) -> Result<Registers, WireError> {
        if let Some(value) = settled(ctx, partition).await? {
            return Ok(value);
        }
        let finish: Change = Box::new(|live, _| Ok((live.clone(), Box::new(live.clone()))));
        let answer = self.agree(ctx, partition, finish).await?;
        answer.downcast::<Registers>().map(|r| *r).map_err(|_| {
            WireError::new(ErrorKind::Internal, "a read's round answered no registers")
        })
    }
}

/// The prepare of `ballot` (a read instead, in the broken build of
/// `Fault::SkipPrepare`).
fn prepare(ctx: &Ctx, partition: &[u8], ballot: Ballot) -> PeerRequest {
    match ctx.faults().has(Fault::SkipPrepare) {
        false => PeerRequest::Prepare {
            partition: partition.to_vec(),
            ballot,
        },
        true => PeerRequest::ReadAgreed {
            partition: partition.to_vec(),
        },
    }
}

/// Whether this node is a natural replica of `partition` whose engine
/// holds none of its Paxos state, and no replica of it is pending: what
/// makes the partition look new. While the ring moves it, no first
/// ballot: a pending replica holds nothing until the handoff brings the
/// others' state, and a first ballot it took would race that handoff.
fn new_here(ctx: &Ctx, partition: &[u8]) -> bool {
    let replicas = ctx.replicas(partition);
    replicas.contains(&ctx.me())
        && replicas.pending().is_empty()
        && ctx
            .engine()
            .agreed(partition)
            .is_ok_and(|a| a == Acceptor::default())
}

/// The registers of `partition` a quorum holds, live now, when none of
/// them holds a newer value in flight (one read that writes nothing);
/// `None` when one does, which a round must finish first.
async fn settled(ctx: &Arc<Ctx>, partition: &[u8]) -> Result<Option<Registers>, WireError> {
    let mut round = Round::new(Ballot::ZERO, &ctx.replicas(partition));
    if ctx.faults().has(Fault::FirstBallotAsRegular) {
        round = round.naive(&ctx.replicas(partition));
    }
    let req = PeerRequest::ReadAgreed {
        partition: partition.to_vec(),
    };
    let mut value = match ask(ctx, &mut round, req, None).await {
        Verdict::Read(read) if !read.in_flight => {
            commit_to(ctx, partition, &read.committed, &read.behind);
            read.current.value
        }
        Verdict::Read(read) if ctx.faults().has(Fault::ReadSkipsInFlight) => read.committed.value,
        Verdict::Read(_) => return Ok(None),
        other => return Err(failed(&other, false)),
    };
    value.drop_expired(now_ms());
    Ok(Some(value))
}

/// Sends `req` (a prepare or a proposal) to every participant of `round`,
/// this node's engine included, and feeds their answers to the round until
/// it has a verdict or the write timeout passes (or `wait`, if shorter). The request is encoded
/// once for every peer, and the answers are awaited here, in this task:
/// an agreement round is on the path of every agreed change, and a task
/// per participant cost more than the waiting.
async fn ask(
    ctx: &Arc<Ctx>,
    round: &mut Round,
    req: PeerRequest,
    wait: Option<Duration>,
) -> Verdict {
    let encoded = Encoded::new(std::slice::from_ref(&req));
    let mut remotes: Vec<(usize, Answers)> = Vec::new();
    let mut here = false;
    for r in round.participants() {
        if r == ctx.me() {
            here = true;
        } else if !ctx.is_up(r) {
            round.on_failed(r);
        } else {
            match ctx.transport().submit_encoded(r, encoded.clone()) {
                Ok(rx) => remotes.push((r, rx)),
                Err(_) => round.on_failed(r),
            }
        }
    }
    // Dropped with the round's verdict: answers after it are not needed.
    let me = ctx.me();
    let mut local = std::pin::pin!(async move {
        match here {
            true => super::serve(ctx, req)
                .await
                .inspect_err(|e| debug!(error = %e, "agreement here"))
                .ok(),
            false => std::future::pending().await,
        }
    });
    let mut local_done = !here;
    let timeout = wait.map_or(ctx.write_timeout(), |w| w.min(ctx.write_timeout()));
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    while round.verdict().is_none() {
        if local_done && remotes.is_empty() {
            round.on_timeout();
            break;
        }
        let next = std::future::poll_fn(|cx| {
            if !local_done && let Poll::Ready(answer) = local.as_mut().poll(cx) {
                local_done = true;
                return Poll::Ready(Some((me, answer)));
            }
            for i in 0..remotes.len() {
                if let Poll::Ready(a) = Pin::new(&mut remotes[i].1).poll(cx) {
                    let (r, _) = remotes.swap_remove(i);
                    let answer = a.ok().and_then(Result::ok).and_then(|mut a| a.pop());
                    return Poll::Ready(Some((r, answer)));
                }
            }
            match deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            }
        })
        .await;
        match next {
            Some((r, answer)) => feed(round, r, answer),
            None => round.on_timeout(),
        }
    }
    round.verdict().cloned().unwrap_or(Verdict::Unavailable {
        answered: 0,
        required: 1,
    })
}

/// One participant's answer, to the round.
fn feed(round: &mut Round, from: usize, answer: Option<PeerResponse>) {
    match answer {
        Some(PeerResponse::Promise(p)) => round.on_promise(from, p),
        Some(PeerResponse::Proposed(None)) => round.on_accepted(from),
        Some(PeerResponse::Proposed(Some(promised))) => round.on_rejected(from, promised),
        // A read's answer counts as a promise of nothing.
        Some(PeerResponse::Agreed(a)) => round.on_promise(
            from,
            Promise::Promised {
                accepted: a.accepted,
                committed: a.committed,
            },
        ),
        _ => round.on_failed(from),
    }
}

/// Tells every participant that `decided` was decided, without waiting
/// for them (after the test seam's delay, if one is set).
fn commit_decided(ctx: &Arc<Ctx>, partition: &[u8], decided: Accepted) {
    let all = ctx.replicas(partition).all().to_vec();
    let delay = ctx.faults().commit_delay();
    if delay.is_zero() {
        return commit_to(ctx, partition, &decided, &all);
    }
    let (ctx, partition) = (ctx.clone(), partition.to_vec());
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        commit_to(&ctx, &partition, &decided, &all);
    });
}

/// Tells `to` that `decided` was decided, without waiting for them.
fn commit_to(ctx: &Arc<Ctx>, partition: &[u8], decided: &Accepted, to: &[usize]) {
    if to.is_empty() || decided.ballot == Ballot::ZERO {
        return;
    }
    let req = Encoded::new(&[PeerRequest::Commit {
        partition: partition.to_vec(),
        decided: decided.clone(),
    }]);
    // Not waited for, here or there: the next prepare finishes a lost
    // commit.
    for &r in to {
        if r == ctx.me() {
            if let Err(e) = ctx.engine().commit_unwaited(partition, decided.clone()) {
                debug!(error = %engine_error(&e), "commit here failed");
            }
        } else if ctx.is_up(r) {
            let _ = ctx.transport().submit_detached(r, req.clone());
        }
    }
}

/// The error of a round that could not go on.
fn failed(verdict: &Verdict, proposed: bool) -> WireError {
    let (answered, required) = match verdict {
        Verdict::Unavailable { answered, required } => (*answered, *required),
        _ => (0, 0),
    };
    let what = format!(
        "agreement needs {required} of the partition's replicas and {answered} answered in time"
    );
    match proposed {
        false => WireError::new(
            ErrorKind::Unavailable,
            format!("{what}; nothing was changed"),
        ),
        true => WireError::unknown(
            ErrorKind::Timeout,
            format!("{what}; the change was proposed and may or may not take effect"),
        ),
    }
}

/// The error once an attempt's round left the partition's remembered
/// history (`history::WINDOW` rounds) before a retry could read it.
fn forgotten() -> WireError {
    WireError::unknown(
        ErrorKind::Timeout,
        "other changes of the key came through so fast that this change's outcome is unknown; \
         it may or may not take effect",
    )
}

/// The error once every attempt was outbid.
fn contended(proposed: bool) -> WireError {
    let what = format!("other proposers kept outbidding this change ({ATTEMPTS_MAX} attempts)");
    match proposed {
        false => WireError::not_applied(ErrorKind::Timeout, format!("{what}; nothing was changed")),
        true => WireError::unknown(
            ErrorKind::Timeout,
            format!("{what}; it may or may not take effect"),
        ),
    }
}
