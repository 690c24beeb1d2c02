//! The commands of a golden script, each run against the script's one
//! simulated cluster. What a node answers (a value, an error) is output;
//! a command the script gets wrong (a typo, a node that does not exist)
//! stops the script with its line.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use clap::ValueEnum;
use tally_net::Outcome;
use tally_net::once::{OpId, applier};
use tally_net::ring::Ring;
use tally_net::wire::{
    ClientOp, ClientReply, ClusterStatus, Deadline, NodeState, StringCondition, When, WireError,
    WireKey, WireRepaired,
};
use tally_node::Node;
use tokio::task::JoinHandle;

use super::parse::Command;
use super::words::{self, Words};
use crate::broken::Broken;
use crate::cluster::{Cluster, Hooks, Shape};
use crate::net::{Faults, Net};
use crate::topology;
use crate::world::SimWorld;

/// How long a command waits for a node's answer before it prints that
/// none came (a node's own timeouts answer well before).
const ANSWER_WAIT: Duration = Duration::from_secs(60);

/// Client ids `applier` tries.
const APPLIER_TRIES: u32 = 100_000;

/// How long `stabilize` waits for the nodes to agree on who is up, to
/// deliver their hints and to enable their features.
const STABILIZE_MAX: Duration = Duration::from_secs(60);

/// One script's cluster, once its `cluster` command made it.
pub struct Session {
    hooks: Hooks,
    cluster: Option<(Arc<Cluster>, Arc<Net>)>,
    /// Commands `spawn` runs in the background, with their lines, until
    /// `wait` prints what they printed.
    background: Vec<(String, JoinHandle<Result<Vec<String>>>)>,
}

impl Session {
    /// A session with no cluster yet; its nodes' park hooks go in `hooks`.
    pub fn new(hooks: Hooks) -> Session {
        Session {
            hooks,
            cluster: None,
            background: Vec::new(),
        }
    }

    /// Runs `command`; answers what it printed. `time COMMAND` runs the
    /// command and prints how much simulated time it took; `spawn
    /// COMMAND` runs it in the background, and `wait` waits for every
    /// command spawned and prints what each printed.
    pub async fn run(&mut self, command: &Command) -> Result<Vec<String>> {
        match command.name.as_str() {
            "time" => {}
            "spawn" => return self.spawn(command),
            "wait" => return self.wait().await,
            _ => return self.run_one(command).await,
        }
        let inner = inner(command)?;
        let started = tally_world::Instant::now();
        let mut out = Box::pin(self.run_one(&inner)).await?;
        out.push(format!("took {:?}", started.elapsed()));
        Ok(out)
    }

    /// `spawn COMMAND`: runs it in the background; prints nothing.
    fn spawn(&mut self, command: &Command) -> Result<Vec<String>> {
        let inner = inner(command)?;
        let Some((cluster, net)) = self.cluster.clone() else {
            bail!("no cluster yet (`cluster nodes=3` first)");
        };
        let line = inner.text.clone();
        // In the local set, where RESP connections run (see `MemoryDoors`).
        let task = tokio::task::spawn_local(async move {
            let mut w = Words::of(&inner);
            let out = run(&cluster, &net, &inner.name, &mut w).await?;
            w.done()?;
            Ok(out)
        });
        self.background.push((line, task));
        Ok(Vec::new())
    }

    /// `wait`: waits for every command spawned; prints each one's line
    /// and what it printed, in the order they were spawned.
    async fn wait(&mut self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for (line, task) in std::mem::take(&mut self.background) {
            let printed = task.await.map_err(|e| anyhow!("{line}: {e}"))??;
            out.push(format!("{line}: {}", printed.join("; ")));
        }
        Ok(out)
    }

    async fn run_one(&mut self, command: &Command) -> Result<Vec<String>> {
        let mut w = Words::of(command);
        let out = match (command.name.as_str(), &self.cluster) {
            ("cluster", None) => self.start(&mut w).await?,
            ("cluster", Some(_)) => bail!("a script has one cluster"),
            (_, None) => bail!("no cluster yet (`cluster nodes=3` first)"),
            (name, Some((cluster, net))) => {
                let (cluster, net) = (cluster.clone(), net.clone());
                run(&cluster, &net, name, &mut w).await?
            }
        };
        w.done()?;
        Ok(out)
    }

    /// Stops the cluster's nodes cleanly.
    pub fn close(self) -> Result<()> {
        match self.cluster {
            Some((cluster, _)) => cluster.close(),
            None => Ok(()),
        }
    }

    /// `cluster nodes=N [rf=R] [spares=S] [seed=X] [broken=BUILD]
    /// [setting=value ...]`: starts the members; any other option is a
    /// `cluster.toml` setting.
    async fn start(&mut self, w: &mut Words) -> Result<Vec<String>> {
        let nodes = w.option_or("nodes", 3)?;
        let shape = Shape {
            nodes,
            replication_factor: w.option_or("rf", nodes.min(3))?,
            spares: w.option_or("spares", 0)?,
            broken: w.option("broken").map(|b| broken(&b)).transpose()?,
            cql_faults: false,
            settings: BTreeMap::new(),
        };
        let seed = w.option_or("seed", 1)?;
        let shape = Shape {
            settings: w.rest(),
            ..shape
        };
        SimWorld::begin(seed);
        let failure_timeout = Duration::from_secs(1);
        let net = Net::new(
            shape.nodes + shape.spares,
            seed,
            Faults::none(),
            failure_timeout * 5,
            failure_timeout,
        );
        let cluster = Cluster::new(&shape, net.clone(), &self.hooks)?;
        for i in cluster.membership().members {
            cluster.start(i).await?;
        }
        self.cluster = Some((cluster, net));
        Ok(Vec::new())
    }
}

/// The command `time` or `spawn` runs: the words after it.
fn inner(command: &Command) -> Result<Command> {
    let Some((name, args)) = command.args.split_first() else {
        bail!("{} what?", command.name);
    };
    let text = command
        .text
        .split_once(' ')
        .map_or("", |(_, rest)| rest.trim());
    Ok(Command {
        name: name.clone(),
        args: args.to_vec(),
        text: text.to_string(),
        ..command.clone()
    })
}

/// Runs command `name` on the cluster.
async fn run(cluster: &Cluster, net: &Net, name: &str, w: &mut Words) -> Result<Vec<String>> {
    let nodes = cluster.len();
    let line = match name {
        "add" | "read" | "reset" => counters(cluster, name, w).await?,
        "set" | "get" | "del" => string(cluster, name, w).await?,
        "uadd" | "ucount" | "ureset" | "expire" => unique(cluster, name, w).await?,
        "repair" | "join" | "decommission" | "remove" | "cleanup" => ring(cluster, name, w).await?,
        "status" => return status(cluster, w.node(nodes)?).await,
        "ring" => ring_held(cluster, w.node(nodes)?),
        "applier" => {
            let key = w.next("a key")?;
            applied_by(cluster, key.as_bytes(), w.node(nodes)?)?
        }
        "stabilize" => return Ok(stabilize(cluster).await.err().into_iter().collect()),
        "resp" => {
            let n = w.node(nodes)?;
            super::resp::command(cluster, n, &w.rest_words(), ANSWER_WAIT).await
        }
        "cql" => return super::cql::command(cluster, w, ANSWER_WAIT).await,
        _ => {
            fault(cluster, net, name, w).await?;
            return Ok(Vec::new());
        }
    };
    Ok(vec![line])
}

/// `add NODE KEYS DELTA [cl=LEVEL] [id=CLIENT:SEQ]` (a run of keys
/// takes a run of ids from SEQ), `read NODE KEYS
/// [cl=LEVEL]`, `reset NODE KEYS [cl=LEVEL]`, one key after another.
async fn counters(cluster: &Cluster, name: &str, w: &mut Words) -> Result<String> {
    let n = w.node(cluster.len())?;
    let word = w.next("a key, or keys k{0..30}")?;
    let keys = words::keys(&word)?;
    let delta: i64 = match name {
        "add" => w.number("a delta")?,
        _ => 0,
    };
    let cl = w.level()?;
    let id = match name {
        "add" => w.option("id").map(|id| op_id(&id)).transpose()?,
        _ => None,
    };
    let mut answers = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        // A run of keys takes a run of ids: `id=c:1` is c:1, c:2, ...
        let id = match &id {
            Some(id) => Some(OpId {
                seq: id
                    .seq
                    .checked_add(i as u64)
                    .ok_or_else(|| anyhow!("id={id}: the run of ids overflows"))?,
                ..id.clone()
            }),
            None => None,
        };
        let key = key(k);
        let answer = ask(cluster, n, |node| async move {
            match (name, id) {
                ("read", _) => node.get(&key, cl).await.map(|v| v.to_string()),
                ("reset", _) => node.reset(&key, cl).await.map(|()| "ok".to_string()),
                (_, Some(id)) => node
                    .add_once(&key, delta, &id, cl)
                    .await
                    .map(|v| v.to_string()),
                (_, None) => node.add(&key, delta, cl).await.map(|v| v.to_string()),
            }
        });
        answers.push(answer.await);
    }
    Ok(words::per_key(&word, &answers))
}

/// The commands that print nothing: `kill NODE` (the process),
/// `powercut NODE` (the machine: its disk keeps what it fsync'd), `stall
/// NODE`, `wipe NODE`, `start NODE`, `pause NODE` and `resume NODE` (as
/// SIGSTOP and SIGCONT), `cut`, `isolate`, `heal`, `sleep DURATION`,
/// `hold-push VALUE DURATION` (every node up holds a list push of VALUE
/// it leads that long between reading the list and changing it, as a
/// leader paused there would).
async fn fault(cluster: &Cluster, net: &Net, name: &str, w: &mut Words) -> Result<()> {
    let nodes = cluster.len();
    match name {
        "kill" => cluster.crash(w.node(nodes)?),
        "powercut" => cluster.power_cut(w.node(nodes)?)?,
        "stall" => cluster.stall(w.node(nodes)?, true),
        "wipe" => cluster.wipe(w.node(nodes)?)?,
        "start" => {
            let n = w.node(nodes)?;
            match cluster.is_up(n) {
                true => bail!("start: n{} is up", n + 1),
                false => cluster.start(n).await?,
            }
        }
        "pause" => cluster.pause(w.node(nodes)?, true),
        "resume" => cluster.pause(w.node(nodes)?, false),
        "hold-push" => {
            let value = w.next("a value")?.into_bytes();
            let hold = words::duration(&w.next("a duration")?)?;
            for n in (0..nodes).filter_map(|n| cluster.node(n)) {
                n.inject_hold_list_push(value.clone(), hold);
            }
        }
        "cut" | "isolate" => cut(cluster, net, name, w)?,
        "heal" => net.heal(),
        "sleep" => tokio::time::sleep(words::duration(&w.next("a duration")?)?).await,
        _ => bail!("no command {name:?}"),
    }
    Ok(())
}

/// `uadd NODE SET MEMBERS [cl=LEVEL]` (members `m1,m2` or a run
/// `m{0..30}`): prints how many were new. `ucount NODE SET [cl=LEVEL]`.
/// `ureset NODE SET [cl=LEVEL]`: prints whether the set had members.
/// `expire NODE KEY DURATION [cl=LEVEL]`: a deadline that far from now
/// on the node's clock; prints whether the key had something to expire.
async fn unique(cluster: &Cluster, name: &str, w: &mut Words) -> Result<String> {
    let n = w.node(cluster.len())?;
    let set = w.next("a key")?.into_bytes();
    let members: Vec<Vec<u8>> = match name {
        "uadd" => members(&w.next("members (m1,m2 or m{0..30})")?)?,
        _ => Vec::new(),
    };
    let after = match name {
        "expire" => words::duration(&w.next("a duration")?)?,
        _ => Duration::ZERO,
    };
    let cl = w.level()?;
    Ok(ask(cluster, n, |node| async move {
        match name {
            "uadd" => node
                .unique_add(&set, &members, cl)
                .await
                .map(|new| new.iter().filter(|n| **n).count().to_string()),
            "ucount" => node.unique_count(&set, cl).await.map(|c| c.to_string()),
            "ureset" => node.unique_reset(&set, cl).await.map(|had| had.to_string()),
            _ => {
                let at_ms = tally_world::wall_ms() + after.as_millis() as u64;
                let had = node.expire(&set, (at_ms, When::Always), cl).await?;
                Ok(had.to_string())
            }
        }
    })
    .await)
}

/// Members written `m1,m2` or as a run `m{0..30}`.
fn members(word: &str) -> Result<Vec<Vec<u8>>> {
    let names = match word.contains('{') {
        true => words::keys(word)?,
        false => word.split(',').map(str::to_string).collect(),
    };
    Ok(names.into_iter().map(String::into_bytes).collect())
}

/// `set NODE KEY VALUE [if=absent|present|VALUE]`, `get NODE KEY`, `del
/// NODE KEY`: an agreed string.
async fn string(cluster: &Cluster, name: &str, w: &mut Words) -> Result<String> {
    let n = w.node(cluster.len())?;
    let key = w.next("a key")?.into_bytes();
    if name == "get" {
        return Ok(ask(cluster, n, |node| async move {
            let s = node.string(&key).await?;
            Ok(s.map_or("(nil)".to_string(), |s| show(&s.value)))
        })
        .await);
    }
    let value = match name {
        "set" => Some(w.next("a value")?.into_bytes()),
        _ => None,
    };
    let condition = match w.option("if").as_deref() {
        None => StringCondition::Always,
        Some("absent") => StringCondition::Absent,
        Some("present") => StringCondition::Present,
        Some(v) => StringCondition::Equals(v.as_bytes().to_vec()),
    };
    Ok(ask(cluster, n, |node| async move {
        let swapped = node
            .swap_string(key, value, condition, Deadline::Never)
            .await?;
        let before = swapped
            .before
            .map_or("(nil)".to_string(), |s| show(&s.value));
        Ok(match swapped.applied {
            true => format!("applied (was {before})"),
            false => format!("not applied (is {before})"),
        })
    })
    .await)
}

/// `cut A B [oneway]`, `isolate NODE [oneway]`: links cut both ways, or
/// only from the first node.
fn cut(cluster: &Cluster, net: &Net, name: &str, w: &mut Words) -> Result<()> {
    let nodes = cluster.len();
    let a = w.node(nodes)?;
    let others: Vec<usize> = match name {
        "cut" => vec![w.node(nodes)?],
        _ => (0..nodes).filter(|&b| b != a).collect(),
    };
    let both = match w.next_maybe().as_deref() {
        None => true,
        Some("oneway") => false,
        Some(other) => bail!("{name}: {other:?} is not `oneway`"),
    };
    net.cut_off(a, others, both);
    Ok(())
}

/// Ring changes and repairs: `repair NODE [range=START:END]`, `join NODE`, `decommission
/// NODE`, `remove NODE via=NODE`, `cleanup NODE`.
async fn ring(cluster: &Cluster, name: &str, w: &mut Words) -> Result<String> {
    let n = w.node(cluster.len())?;
    let id = cluster.id(n).to_string();
    Ok(match name {
        "join" => topology::join(cluster, n)
            .await
            .err()
            .unwrap_or("ok".into()),
        "decommission" => topology::decommission(cluster, n)
            .await
            .err()
            .unwrap_or("ok".into()),
        "remove" => {
            let via = words::node(&w.option("via").unwrap_or_default(), cluster.len())
                .map_err(|e| anyhow!("remove: via={e}"))?;
            let op = ClientOp::RemoveNode { node: id };
            ask(cluster, via, |node| async move {
                node.execute(op).await.map(|_| "ok")
            })
            .await
        }
        "repair" => {
            let range = w.option("range").map(|r| words::range(&r)).transpose()?;
            let op = ClientOp::Repair { range };
            ask(cluster, n, |node| async move {
                match node.execute(op).await? {
                    ClientReply::Repaired(r) => Ok(repaired(&r)),
                    other => Ok(format!("{other:?}")),
                }
            })
            .await
        }
        _ => {
            ask(cluster, n, |node| async move {
                match node.execute(ClientOp::Cleanup).await? {
                    ClientReply::Cleaned(c) => Ok(format!("kept {} dropped {}", c.kept, c.dropped)),
                    other => Ok(format!("{other:?}")),
                }
            })
            .await
        }
    })
}

/// `applier KEY NODE`: a client id whose adds to KEY node NODE applies,
/// on the ring of the members now.
fn applied_by(cluster: &Cluster, partition: &[u8], n: usize) -> Result<String> {
    let c = &cluster.config().cluster;
    let members = cluster.membership().members;
    let is_member: Vec<bool> = (0..cluster.len()).map(|i| members.contains(&i)).collect();
    let ids = cluster.config().node_ids();
    let ring = Ring::with_members(&ids, &is_member, c.vnodes, c.replication_factor);
    let replicas = ring.replicas(partition);
    if !replicas.contains(&n) {
        bail!("applier: n{} is no replica of {:?}", n + 1, show(partition));
    }
    (0u32..APPLIER_TRIES)
        .map(|i| format!("app-{i}"))
        .find(|client| applier(&replicas, client.as_bytes()) == n)
        .ok_or_else(|| anyhow!("applier: no client id of {APPLIER_TRIES} is n{}'s", n + 1))
}

/// A broken build, by its `tally-sim --broken` name.
fn broken(name: &str) -> Result<Broken> {
    Broken::from_str(name, true).map_err(|e| anyhow!("broken={name}: {e}"))
}

/// A repair's summary, without its timing.
fn repaired(r: &WireRepaired) -> String {
    format!(
        "keys compared {} differing {}, cells moved {}{}",
        r.keys_compared,
        r.keys_differing,
        r.cells_moved,
        if r.resumed { ", resumed" } else { "" }
    )
}

/// `status NODE`: each node as NODE sees it (up or down, its place in
/// the ring), and the hints NODE holds.
async fn status(cluster: &Cluster, n: usize) -> Result<Vec<String>> {
    let Some(node) = cluster.node(n) else {
        return Ok(vec![format!("error: n{} is down", n + 1)]);
    };
    let status = cluster_status(&node).await?;
    Ok(status
        .nodes
        .iter()
        .enumerate()
        .map(|(i, peer)| {
            let state = format!("{:?}", node.ring_state(i)).to_lowercase();
            let mut line = format!("{} {} {state}", peer.id, updown(peer.up));
            if let Some(h) = status.stats.hints.iter().find(|h| h.node == peer.id) {
                line.push_str(&format!(", hints {} dropped {}", h.pending, h.dropped));
                if h.needs_repair {
                    line.push_str(", needs repair");
                }
            }
            line
        })
        .collect())
}

/// `ring NODE`: the ring NODE holds, as `version V[ switching]: n1
/// STATE ...` (the nodes not absent).
fn ring_held(cluster: &Cluster, n: usize) -> String {
    let Some(node) = cluster.node(n) else {
        return format!("error: n{} is down", n + 1);
    };
    let ring = node.topology();
    let states: Vec<String> = (ring.states.iter().enumerate())
        .filter(|(_, s)| **s != NodeState::Absent)
        .map(|(i, s)| format!("{} {}", cluster.id(i), format!("{s:?}").to_lowercase()))
        .collect();
    let switching = if ring.switching { " switching" } else { "" };
    format!("version {}{switching}: {}", ring.version, states.join(", "))
}

async fn cluster_status(node: &Node) -> Result<ClusterStatus> {
    match node.execute(ClientOp::Status).await {
        Ok(ClientReply::Status(s)) => Ok(s),
        Ok(other) => bail!("status answered {other:?}"),
        Err(e) => bail!("status: {e}"),
    }
}

/// Waits until every node up sees the others as they are (up or down)
/// and holds no hint for a node up, and with every member up, until each
/// enabled the cluster features its build has; answers what is still off
/// after [`STABILIZE_MAX`].
async fn stabilize(cluster: &Cluster) -> Result<(), String> {
    let started = tally_world::Instant::now();
    loop {
        let Some(off) = unsettled(cluster).await else {
            return Ok(());
        };
        if started.elapsed() > STABILIZE_MAX {
            return Err(format!("error: not stable in {STABILIZE_MAX:?}: {off}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What keeps the cluster from being stable, if anything: a node that
/// sees another up or down wrongly, hints waiting for a node up, or,
/// with every member up, a feature not enabled yet.
async fn unsettled(cluster: &Cluster) -> Option<String> {
    let members = cluster.membership().members;
    let all_up = members.iter().all(|&i| cluster.is_up(i));
    for &i in &members {
        let Some(node) = cluster.node(i) else {
            continue;
        };
        let status = match cluster_status(&node).await {
            Ok(s) => s,
            Err(e) => return Some(format!("n{}: {e}", i + 1)),
        };
        if all_up && let Some(off) = not_enabled(&node, i).await {
            return Some(format!("n{} has not enabled feature {off}", i + 1));
        }
        for &j in members.iter().filter(|&&j| j != i) {
            let up = cluster.is_up(j);
            let peer = &status.nodes[j];
            if peer.up != up {
                return Some(format!("n{} sees {} {}", i + 1, peer.id, updown(peer.up)));
            }
            let hinted = status.stats.hints.iter().find(|h| h.node == peer.id);
            if up && hinted.is_some_and(|h| h.pending > 0) {
                return Some(format!("n{} holds hints for {}", i + 1, peer.id));
            }
        }
    }
    None
}

/// A cluster feature node `i`'s build has and it has not enabled yet.
async fn not_enabled(node: &Node, i: usize) -> Option<String> {
    let Ok(ClientReply::Versions(v)) = node.execute(ClientOp::Versions).await else {
        return Some("(it did not say which)".to_string());
    };
    let build = v.nodes.get(i)?.build.as_ref()?;
    build
        .features
        .iter()
        .find(|f| !v.enabled.contains(f))
        .cloned()
}

fn updown(up: bool) -> &'static str {
    match up {
        true => "up",
        false => "down",
    }
}

/// Asks node `n` through `call`, and prints its answer, its error, or
/// that it is down or did not answer.
async fn ask<T, F, Fut>(cluster: &Cluster, n: usize, call: F) -> String
where
    T: std::fmt::Display,
    F: FnOnce(Arc<Node>) -> Fut,
    Fut: Future<Output = Result<T, WireError>>,
{
    let Some(node) = cluster.node(n) else {
        return format!("error: n{} is down", n + 1);
    };
    match tokio::time::timeout(ANSWER_WAIT, call(node)).await {
        Ok(Ok(v)) => v.to_string(),
        Ok(Err(e)) => format!("error ({}): {e}", outcome(&e)),
        Err(_) => format!("error: no answer in {ANSWER_WAIT:?}"),
    }
}

/// Whether a failed request may have been applied, as a script prints it.
fn outcome(e: &WireError) -> &'static str {
    match e.outcome {
        Outcome::NotApplied => "not applied",
        Outcome::Unknown => "outcome unknown",
    }
}

/// The counter a script names `name`.
fn key(name: &str) -> WireKey {
    WireKey::new(name.as_bytes(), b"")
}

/// An operation id written `client:seq`, unchecked: the node checks it.
fn op_id(word: &str) -> Result<OpId> {
    let (client, seq) = word
        .rsplit_once(':')
        .ok_or_else(|| anyhow!("id={word}: write ids as CLIENT:SEQ"))?;
    let seq = seq
        .parse()
        .map_err(|_| anyhow!("id={word}: {seq:?} is not a number"))?;
    Ok(OpId {
        client: client.as_bytes().to_vec(),
        seq,
    })
}

/// Bytes as text, where they are.
fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
