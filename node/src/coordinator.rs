//! The coordinator: what any node does with a client's request.
//!
//! Write path (`add`): find the partition's replicas on the ring; fail fast
//! with `Unavailable` if fewer are up than the consistency level needs. The
//! leader is this node when it is a replica (it is always live to itself),
//! else the first live replica in ring order, which gets the add forwarded.
//! The leader does the engine's locked read-modify-write of its own shard
//! and sends the resulting shard state to the other replicas, which merge
//! it, while its own fsync runs. The answer goes back once `required`
//! copies are durable, whichever they are: the leader's record counts as
//! one, each replica that acknowledged as another. Replicas that are down
//! or do not answer get a hint (see `hints`), so they converge later.
//!
//! Read path (`get`, `get_row`): ask `required` live replicas, this node
//! first when it is one; a replica that fails is replaced by the next live
//! one. The cells are merged and summed. Any replica whose cell differs from
//! the merge is sent the merged cell (read repair), after the answer.
//!
//! Reset: the leader first reads at the consistency level and merges what
//! it learns, so its epoch is at least the newest one a quorum knows; then
//! the engine moves the cell to the next epoch with no shards, and that
//! empty cell is replicated like a shard.
//!
//! Errors say what happened to the data: `Unavailable` and `Invalid` mean
//! nothing was applied; `Timeout` means the add may or may not have been.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use tally_engine::{AddOutcome, Cell, Key};
use tally_net::peer::PeerError;
use tally_net::wire::{
    Consistency, ErrorKind, PeerRequest, PeerResponse, ROW_COLUMNS_MAX, WireError, WireKey,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::adds::{QueuedAdd, Reply};
use crate::convert::{self, engine_error, wire_cell, wire_key};
use crate::node::Node;
use crate::ring::Replicas;

/// Columns one row read repairs on one replica.
const ROW_REPAIRS_MAX: usize = 256;
/// Leader attempts when resets keep overtaking an add.
const STALE_RETRIES_MAX: u32 = 3;

/// One replica's answer to a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Ack,
    Stale(u64),
    Failed,
}

/// Why replication fell short of the consistency level.
#[derive(Debug, Clone)]
pub(crate) enum Replication {
    /// Replicas are at this newer epoch: the leader missed a reset.
    Stale(u64),
    /// Too few acknowledgements in time, or an error.
    Failed(WireError),
    /// The leader's own write failed, and the replicas alone did not make
    /// up the consistency level.
    Local(WireError),
}

/// Where a write goes.
pub(crate) enum Route {
    /// This node leads; the partition's replicas.
    Lead(Replicas),
    /// Forward to these live replicas, in turn.
    Forward(Vec<usize>),
}

/// A partition's row as replicas return it: column → cell.
type Row = BTreeMap<Vec<u8>, Cell>;

impl Node {
    /// Coordinates an add; answers the value the leader sees after it.
    /// The add joins the node's next batch (see `adds`).
    pub async fn add(
        self: &Arc<Self>,
        key: &WireKey,
        delta: i64,
        cl: Consistency,
    ) -> Result<i64, WireError> {
        let key = convert::key(key)?;
        self.queued_add(key, delta, cl, false).await
    }

    /// Queues an add for the next batch and waits for its answer.
    async fn queued_add(
        &self,
        key: Key,
        delta: i64,
        cl: Consistency,
        lead_only: bool,
    ) -> Result<i64, WireError> {
        let (tx, rx) = oneshot::channel();
        self.add_queue.push(QueuedAdd {
            key,
            delta,
            cl,
            lead_only,
            reply: Reply::Task(tx),
        });
        // Unanswered: the node stopped, perhaps after the batch was made.
        // Not `Unavailable`, which promises nothing was applied.
        rx.await.unwrap_or_else(|_| {
            Err(WireError::new(
                ErrorKind::Storage,
                "the node is shutting down; the add may or may not have been applied",
            ))
        })
    }

    /// Coordinates an add one by one, routed already (see `adds` for when).
    pub(crate) async fn add_routed(
        self: &Arc<Self>,
        key: &Key,
        delta: i64,
        cl: Consistency,
        route: Route,
    ) -> Result<i64, WireError> {
        match route {
            Route::Lead(replicas) => self.lead_add_on(key, delta, cl, &replicas).await,
            Route::Forward(live) => {
                let req = PeerRequest::LeaderAdd {
                    key: wire_key(key),
                    delta,
                    cl,
                };
                match self.forward(&live, req).await? {
                    PeerResponse::Added(v) => Ok(v),
                    other => Err(unexpected(&other)),
                }
            }
        }
    }

    /// Resets a counter to zero at `cl`.
    pub async fn reset(self: &Arc<Self>, key: &WireKey, cl: Consistency) -> Result<(), WireError> {
        let k = convert::key(key)?;
        match self.route(&k, cl, "reset")? {
            Route::Lead(replicas) => self.lead_reset_on(&k, cl, &replicas).await,
            Route::Forward(live) => {
                let req = PeerRequest::LeaderReset {
                    key: key.clone(),
                    cl,
                };
                match self.forward(&live, req).await? {
                    PeerResponse::Reset => Ok(()),
                    other => Err(unexpected(&other)),
                }
            }
        }
    }

    /// Who leads a write: this node when it is a replica, else the live
    /// replicas in turn. Fails fast when `cl` cannot be met.
    pub(crate) fn route(&self, key: &Key, cl: Consistency, what: &str) -> Result<Route, WireError> {
        let replicas = self.replicas(key.partition());
        self.check_available(&replicas, cl, what)?;
        Ok(if replicas.contains(&self.me) {
            Route::Lead(replicas)
        } else {
            Route::Forward(self.live(&replicas))
        })
    }

    /// Sends a leader request to the first live replica that takes it.
    /// A replica that could not be reached never saw the request, so the
    /// next one may lead instead; any later failure has an unknown outcome.
    async fn forward(&self, live: &[usize], req: PeerRequest) -> Result<PeerResponse, WireError> {
        let mut last = None;
        for &leader in live {
            match self
                .transport()
                // The leader has write_timeout for its replication: leave it
                // room to answer with its own verdict.
                .call(
                    leader,
                    req.clone(),
                    self.write_timeout + self.write_timeout / 2,
                )
                .await
            {
                Ok(PeerResponse::Error(e)) => return Err(e),
                Ok(resp) => return Ok(resp),
                Err(e @ PeerError::Unreachable { .. }) => last = Some(e),
                Err(e) => {
                    return Err(WireError::new(
                        ErrorKind::Timeout,
                        format!("{e}; the leader may or may not have applied it"),
                    ));
                }
            }
        }
        Err(WireError::new(
            ErrorKind::Unavailable,
            format!(
                "no replica could lead: {}",
                last.map_or_else(|| "none live".into(), |e| e.to_string())
            ),
        ))
    }

    /// The leader's add for a coordinator that forwarded it: joins the
    /// next batch, which checks availability with this node's own view.
    pub async fn lead_add(&self, key: Key, delta: i64, cl: Consistency) -> Result<i64, WireError> {
        self.queued_add(key, delta, cl, true).await
    }

    /// The route of an add a peer forwarded here: this node leads, if `cl`
    /// can be met.
    pub(crate) fn lead_route(&self, key: &Key, cl: Consistency) -> Result<Route, WireError> {
        let replicas = self.replicas(key.partition());
        self.check_available(&replicas, cl, "add")?;
        Ok(Route::Lead(replicas))
    }

    /// The leader's add, one by one: local read-modify-write, then
    /// replication to `replicas` (already checked against `cl`). Fault
    /// injection has been asked already (see `adds`).
    async fn lead_add_on(
        self: &Arc<Self>,
        key: &Key,
        delta: i64,
        cl: Consistency,
        replicas: &[usize],
    ) -> Result<i64, WireError> {
        for attempt in 1..=STALE_RETRIES_MAX {
            // The shard goes to the replicas while this node's fsync runs;
            // the add is acknowledged once `cl` durable copies exist, this
            // node's counting as one (see `Engine::leader_add_staged` for
            // why sending first is safe).
            let (outcome, durable) = self
                .engine
                .leader_add_staged(key, delta)
                .await
                .map_err(|e| engine_error(&e))?;
            match self
                .replicate_outcome(key, &outcome, replicas, cl, durable.wait())
                .await
            {
                Ok(()) => return Ok(outcome.value),
                Err(Replication::Failed(e)) => return Err(e),
                Err(Replication::Local(e)) => {
                    return Err(WireError::new(
                        ErrorKind::Storage,
                        format!(
                            "{}; the shard may already be on other replicas, so the add may or may not have been applied",
                            e.message
                        ),
                    ));
                }
                // This node missed a reset that the replicas have seen. The
                // add just made is in the old epoch, which every replica
                // discards: catch up and make it again in the new one.
                Err(Replication::Stale(epoch)) if attempt < STALE_RETRIES_MAX => {
                    debug!(
                        epoch,
                        "leader was behind a reset; adding again in the new epoch"
                    );
                    self.engine
                        .apply(key, &Cell::from_parts(epoch, []))
                        .await
                        .map_err(|e| engine_error(&e))?;
                }
                Err(Replication::Stale(epoch)) => {
                    return Err(WireError::new(
                        ErrorKind::Timeout,
                        format!(
                            "resets kept overtaking the add (now at epoch {epoch}); it may or may not have been applied"
                        ),
                    ));
                }
            }
        }
        unreachable!("the last attempt returns")
    }

    /// Replicates the shard version of an add. Adds the engine combined into
    /// one version share one replication: the first to arrive sends it, the
    /// others wait for its result, so a hot counter costs one message per
    /// read-modify-write instead of one per add.
    ///
    /// `local` resolves once this node's record of the version is durable.
    /// The adds of one version share one record, so the sender's stands for
    /// them all.
    async fn replicate_outcome(
        self: &Arc<Self>,
        key: &Key,
        outcome: &AddOutcome,
        replicas: &[usize],
        cl: Consistency,
        local: impl Future<Output = tally_engine::Result<()>>,
    ) -> Result<(), Replication> {
        if outcome.combined <= 1 {
            return self
                .replicate(key, &outcome.replica_cell(), replicas, cl, local)
                .await;
        }
        let id = (key.clone(), outcome.epoch, outcome.shard.clock, cl);
        let (mut rx, sender) = {
            let mut shared = self.shared_replications.lock();
            match shared.get(&id) {
                Some(rx) => (rx.clone(), None),
                None => {
                    let (tx, rx) = watch::channel(None);
                    shared.insert(id.clone(), rx.clone());
                    (rx, Some(tx))
                }
            }
        };
        if let Some(tx) = sender {
            let result = self
                .replicate(key, &outcome.replica_cell(), replicas, cl, local)
                .await;
            self.shared_replications.lock().remove(&id);
            let _ = tx.send(Some(result.clone()));
            return result;
        }
        let shared = rx
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|result| result.clone());
        match shared {
            Some(result) => result,
            // The sender's task is gone: send it ourselves.
            None => {
                self.replicate(key, &outcome.replica_cell(), replicas, cl, local)
                    .await
            }
        }
    }

    /// The leader's reset for a coordinator that forwarded it.
    pub async fn lead_reset(self: &Arc<Self>, key: &Key, cl: Consistency) -> Result<(), WireError> {
        let replicas = self.replicas(key.partition());
        self.check_available(&replicas, cl, "reset")?;
        self.lead_reset_on(key, cl, &replicas).await
    }

    /// The leader's reset: catch up to the newest epoch, reset, replicate.
    async fn lead_reset_on(
        self: &Arc<Self>,
        key: &Key,
        cl: Consistency,
        replicas: &[usize],
    ) -> Result<(), WireError> {
        let (merged, _) = self.read_key(key, replicas, cl).await?;
        self.engine
            .apply(key, &merged)
            .await
            .map_err(|e| engine_error(&e))?;
        let epoch = self.engine.reset(key).await.map_err(|e| engine_error(&e))?;
        // `reset` returned once the new epoch was durable here.
        let local = std::future::ready(Ok(()));
        match self
            .replicate(key, &Cell::from_parts(epoch, []), replicas, cl, local)
            .await
        {
            // A newer reset overtook this one: the counter is reset either way.
            Ok(()) | Err(Replication::Stale(_)) => Ok(()),
            Err(Replication::Failed(e) | Replication::Local(e)) => Err(e),
        }
    }

    /// Sends `cell` to every other replica; returns once `cl` is met by
    /// durable copies: the replicas' acknowledgements, and this node's own
    /// once `local` resolves. Any `cl` of them will do: at QUORUM of three,
    /// two replicas that answer before this node's fsync ends make the
    /// write as durable as this node and one of them would (a node that
    /// crashes before its fsync comes back under a new counter id, and the
    /// replicas keep the old one's shard). Replicas that miss the cell get
    /// a hint. A replica at a newer epoch answers `Stale`: it does not
    /// count, and if `cl` is not met the error carries the newest such
    /// epoch. Replicas get `write_timeout`; `local` is always waited for.
    async fn replicate(
        self: &Arc<Self>,
        key: &Key,
        cell: &Cell,
        replicas: &[usize],
        cl: Consistency,
        local: impl Future<Output = tally_engine::Result<()>>,
    ) -> Result<(), Replication> {
        let required = cl.required(replicas.len());
        let deadline = Instant::now() + self.write_timeout;
        let (tx, mut rx) = mpsc::channel(replicas.len());
        let wire = (wire_key(key), wire_cell(cell));
        for &r in replicas.iter().filter(|&&r| r != self.me) {
            if !self.transport().is_up(r) {
                self.hint(r, key);
                continue;
            }
            let node = self.clone();
            let tx = tx.clone();
            let (wkey, wcell) = wire.clone();
            let key = key.clone();
            tokio::spawn(async move {
                let req = PeerRequest::Apply {
                    key: wkey,
                    cell: wcell,
                };
                let answer = match node.transport().call(r, req, node.write_timeout).await {
                    Ok(PeerResponse::Applied) => Answer::Ack,
                    // Ahead of us: it needs nothing from this epoch.
                    Ok(PeerResponse::Stale { epoch }) => Answer::Stale(epoch),
                    Ok(other) => {
                        warn!(replica = r, answer = ?other, "replica refused a shard");
                        Answer::Failed
                    }
                    Err(e) => {
                        debug!(replica = r, error = %e, "replication failed");
                        Answer::Failed
                    }
                };
                if answer == Answer::Failed {
                    node.hint(r, &key);
                }
                let _ = tx.send(answer).await;
            });
        }
        drop(tx);
        tokio::pin!(local);
        // This node's write: `None` while its fsync runs.
        let mut mine: Option<Result<(), WireError>> = None;
        let mut acks = 0;
        let mut newer_epoch = None;
        let mut replicas_done = false;
        let met = |mine: &Option<Result<(), WireError>>, acks: usize| {
            acks + usize::from(matches!(mine, Some(Ok(())))) >= required
        };
        loop {
            let settled = replicas_done && mine.is_some();
            if settled || met(&mine, acks) {
                break;
            }
            tokio::select! {
                done = &mut local, if mine.is_none() => {
                    mine = Some(done.map_err(|e| engine_error(&e)));
                }
                answer = rx.recv(), if !replicas_done => match answer {
                    Some(Answer::Ack) => acks += 1,
                    Some(Answer::Stale(e)) => newer_epoch = newer_epoch.max(Some(e)),
                    Some(Answer::Failed) => {}
                    None => replicas_done = true,
                },
                () = tokio::time::sleep_until(deadline), if !replicas_done => {
                    replicas_done = true;
                }
            }
        }
        if met(&mine, acks) {
            return Ok(());
        }
        if let Some(Err(e)) = mine {
            return Err(Replication::Local(e));
        }
        if let Some(epoch) = newer_epoch {
            return Err(Replication::Stale(epoch));
        }
        Err(Replication::Failed(WireError::new(
            ErrorKind::Timeout,
            format!(
                "{} of {required} copies acknowledged within {} ms at {cl}; the write is durable on the leader and will reach the others, but may not be visible at {cl} yet",
                acks + 1,
                self.write_timeout.as_millis()
            ),
        )))
    }

    /// Reads a counter at `cl`.
    pub async fn get(self: &Arc<Self>, key: &WireKey, cl: Consistency) -> Result<i64, WireError> {
        Ok(self.get_cell(key, cl).await?.value())
    }

    /// Reads a counter's merged cell at `cl` (no shards: never written, or
    /// reset and not written since).
    pub async fn get_cell(
        self: &Arc<Self>,
        key: &WireKey,
        cl: Consistency,
    ) -> Result<Cell, WireError> {
        let k = convert::key(key)?;
        let replicas = self.replicas(k.partition());
        let (merged, _) = self.read_key(&k, &replicas, cl).await?;
        Ok(merged)
    }

    /// Reads and merges one key from `required` replicas, then repairs the
    /// ones that were behind.
    async fn read_key(
        self: &Arc<Self>,
        key: &Key,
        replicas: &[usize],
        cl: Consistency,
    ) -> Result<(Cell, usize), WireError> {
        let wkey = wire_key(key);
        let answers = self
            .gather(
                replicas,
                cl,
                PeerRequest::Read { key: wkey },
                |node| node.engine.get(key).map_err(|e| engine_error(&e)),
                |resp| match resp {
                    PeerResponse::Cell(c) => Some(convert::cell(&c)),
                    _ => None,
                },
            )
            .await?;
        let mut merged = Cell::new();
        for (_, c) in &answers {
            merged.merge(c);
        }
        let n = answers.len();
        for (r, c) in answers {
            if c != merged {
                self.repair(r, key.clone(), merged.clone());
            }
        }
        Ok((merged, n))
    }

    /// Reads every column of a partition at `cl`.
    pub async fn get_row(
        self: &Arc<Self>,
        partition: &[u8],
        cl: Consistency,
    ) -> Result<Vec<(Vec<u8>, i64)>, WireError> {
        let start = Key::new(partition, b"").map_err(|e| engine_error(&e))?;
        let replicas = self.replicas(start.partition());
        let answers = self
            .gather(
                &replicas,
                cl,
                PeerRequest::ReadRow {
                    partition: partition.to_vec(),
                },
                |node| {
                    let row = node
                        .engine
                        .get_row(partition)
                        .map_err(|e| engine_error(&e))?;
                    Ok(row
                        .into_iter()
                        .map(|(k, c)| (k.column().to_vec(), c))
                        .collect::<Row>())
                },
                |resp| match resp {
                    PeerResponse::Row(cols) => Some(
                        cols.iter()
                            .map(|(col, c)| (col.clone(), convert::cell(c)))
                            .collect::<Row>(),
                    ),
                    _ => None,
                },
            )
            .await?;
        let mut merged = Row::new();
        for (_, row) in &answers {
            for (col, c) in row {
                merged.entry(col.clone()).or_default().merge(c);
            }
        }
        if merged.len() > ROW_COLUMNS_MAX {
            return Err(crate::node::row_too_long(merged.len()));
        }
        // Repair the columns a replica is behind on, a bounded number per
        // read so that a replica far behind does not flood the peer queue;
        // later reads and hints do the rest.
        for (r, row) in answers {
            let behind = merged.iter().filter(|&(col, c)| row.get(col) != Some(c));
            for (col, c) in behind.take(ROW_REPAIRS_MAX) {
                if let Ok(key) = Key::new(partition, col) {
                    self.repair(r, key, c.clone());
                }
            }
        }
        // A column that was reset and not written since has no shards: it is
        // gone, as a deleted Redis hash field is.
        Ok(merged
            .into_iter()
            .filter(|(_, c)| !c.shards().is_empty())
            .map(|(col, c)| (col, c.value()))
            .collect())
    }

    /// Asks `required` live replicas (this node first), replacing any that
    /// fail with the next live one, until `required` have answered.
    async fn gather<T: Send + 'static>(
        self: &Arc<Self>,
        replicas: &[usize],
        cl: Consistency,
        req: PeerRequest,
        local: impl Fn(&Node) -> Result<T, WireError>,
        parse: fn(PeerResponse) -> Option<T>,
    ) -> Result<Vec<(usize, T)>, WireError> {
        self.check_available(replicas, cl, "read")?;
        let live = self.live(replicas);
        let required = cl.required(replicas.len());
        let deadline = Instant::now() + self.read_timeout;
        let (tx, mut rx) = mpsc::channel::<(usize, Result<T, String>)>(live.len());
        let mut got = Vec::with_capacity(required);
        let mut failures = Vec::new();
        let mut next = 0;
        let mut in_flight = 0;
        while got.len() < required {
            while got.len() + in_flight < required && next < live.len() {
                let r = live[next];
                next += 1;
                if r == self.me {
                    match local(self) {
                        Ok(t) => got.push((r, t)),
                        Err(e) => failures.push(format!("{}: {e}", self.config.nodes[r].id)),
                    }
                    continue;
                }
                in_flight += 1;
                let node = self.clone();
                let tx = tx.clone();
                let req = req.clone();
                tokio::spawn(async move {
                    let answer = match node.transport().call(r, req, node.read_timeout).await {
                        Ok(PeerResponse::Error(e)) => Err(e.to_string()),
                        Ok(resp) => parse(resp).ok_or_else(|| "unexpected answer".to_string()),
                        Err(e) => Err(e.to_string()),
                    };
                    let _ = tx.send((r, answer)).await;
                });
            }
            if got.len() >= required || in_flight == 0 {
                break;
            }
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some((r, Ok(t)))) => {
                    in_flight -= 1;
                    got.push((r, t));
                }
                Ok(Some((r, Err(e)))) => {
                    in_flight -= 1;
                    failures.push(format!("{}: {e}", self.config.nodes[r].id));
                }
                Ok(None) => break,
                Err(_) => {
                    failures.push(format!(
                        "{in_flight} replicas silent for {} ms",
                        self.read_timeout.as_millis()
                    ));
                    break;
                }
            }
        }
        if got.len() >= required {
            return Ok(got);
        }
        Err(WireError::new(
            ErrorKind::Timeout,
            format!(
                "read at {cl}: {} of {required} replicas answered ({})",
                got.len(),
                failures.join("; ")
            ),
        ))
    }

    /// Sends the merged cell to a replica that was behind, in the background.
    fn repair(self: &Arc<Self>, replica: usize, key: Key, cell: Cell) {
        let node = self.clone();
        tokio::spawn(async move {
            if replica == node.me {
                if let Err(e) = node.engine.apply(&key, &cell).await {
                    warn!(error = %e, "local read repair failed");
                }
                return;
            }
            let req = PeerRequest::Apply {
                key: wire_key(&key),
                cell: wire_cell(&cell),
            };
            match node
                .transport()
                .call(replica, req, node.write_timeout)
                .await
            {
                Ok(PeerResponse::Applied | PeerResponse::Stale { .. }) => {}
                // A hint is delivered from this node's own cell: only a
                // replica holds the merged state it stands for.
                _ if node.replicas(key.partition()).contains(&node.me) => node.hint(replica, &key),
                _ => {}
            }
        });
    }

    /// `Unavailable` when fewer replicas are live than `cl` needs. Counts
    /// without allocating: every add asks.
    fn check_available(
        &self,
        replicas: &[usize],
        cl: Consistency,
        what: &str,
    ) -> Result<(), WireError> {
        let required = cl.required(replicas.len());
        let is_live = |r: usize| r == self.me || self.transport().is_up(r);
        let live = replicas.iter().filter(|&&r| is_live(r)).count();
        if live >= required {
            return Ok(());
        }
        let down: Vec<&str> = replicas
            .iter()
            .filter(|&&r| !is_live(r))
            .map(|&r| self.config.nodes[r].id.as_str())
            .collect();
        Err(WireError::new(
            ErrorKind::Unavailable,
            format!(
                "{what} at {cl} needs {required} of {} replicas, {live} live ({} down); nothing was applied",
                replicas.len(),
                down.join(", ")
            ),
        ))
    }

    /// The live replicas, this node first: it is always live to itself and
    /// costs no hop.
    fn live(&self, replicas: &[usize]) -> Vec<usize> {
        let mut live: Vec<usize> = replicas.iter().copied().filter(|&r| r == self.me).collect();
        live.extend(
            replicas
                .iter()
                .copied()
                .filter(|&r| r != self.me && self.transport().is_up(r)),
        );
        live
    }
}

fn unexpected(resp: &PeerResponse) -> WireError {
    WireError::new(
        ErrorKind::Internal,
        format!("unexpected answer from the leader: {resp:?}"),
    )
}
