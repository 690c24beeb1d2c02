//! `tally decommission` and `tally removenode`: taking a node out of the
//! ring (see `tally_node::cluster::topology`), each waiting for the change to end
//! and printing the ring after it; `tally cleanup` once it changed; and
//! `tally fold`, which folds retired incarnations' shards into the bases.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::json;
use tally_net::Client;
use tally_net::wire::{ClientOp, ClientReply, WireCleaned, WireFolded, WireTopology};
use tally_node::config::{Config, NodeConfig};

use super::{Cli, human};

/// How long a change may take (it syncs every range that moves).
const CHANGE_TIMEOUT: Duration = Duration::from_secs(3600);

/// `tally decommission --node N`: N streams its ranges away and leaves.
pub(crate) async fn decommission(cli: &Cli) -> Result<()> {
    let Some(id) = &cli.node else {
        bail!("name the node to decommission: tally decommission --node ID");
    };
    let config = Config::load(&cli.config)?;
    let addr = config.node(id)?.1.client;
    let op = ClientOp::Decommission { node: id.clone() };
    let ring = call(addr, op)
        .await
        .with_context(|| format!("decommission of {id} failed"))?;
    print(cli, &config, &format!("{id} left the ring"), &ring);
    Ok(())
}

/// `tally removenode ID`: the first other node that answers re-replicates
/// the dead node's ranges and takes it out of the ring.
pub(crate) async fn removenode(cli: &Cli, id: &str) -> Result<()> {
    let config = Config::load(&cli.config)?;
    config.node(id)?;
    let mut last = None;
    for n in config.nodes.iter().filter(|n| n.id != id) {
        let op = ClientOp::RemoveNode {
            node: id.to_string(),
        };
        match crate::secure::dial(n.client, Duration::from_secs(2)).await {
            Ok(_) => {
                let ring = call(n.client, op)
                    .await
                    .with_context(|| format!("removenode of {id} (run by {}) failed", n.id))?;
                print(cli, &config, &format!("{id} removed from the ring"), &ring);
                return Ok(());
            }
            Err(e) => last = Some(e),
        }
    }
    match last {
        Some(e) => Err(e).context("no other node answers"),
        None => bail!("the configuration names no other node"),
    }
}

/// `tally fold`: run by the node `--node` names, or the first that answers.
pub(crate) async fn fold(cli: &Cli) -> Result<()> {
    let config = Config::load(&cli.config)?;
    let nodes: Vec<_> = match &cli.node {
        Some(id) => vec![config.node(id)?.1.clone()],
        None => config.nodes.clone(),
    };
    let mut last = None;
    for n in nodes {
        let client = match crate::secure::dial(n.client, CHANGE_TIMEOUT).await {
            Ok(c) => c,
            Err(e) => {
                last = Some(anyhow::Error::from(e).context(format!("connect to {}", n.id)));
                continue;
            }
        };
        let done = match client.call(ClientOp::Fold).await {
            Ok(ClientReply::Folded(f)) => f,
            Ok(other) => bail!("fold (run by {}): unexpected answer {other:?}", n.id),
            Err(e) => return Err(e).with_context(|| format!("fold (run by {}) failed", n.id)),
        };
        print_folded(cli, &done);
        return Ok(());
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("the configuration names no node")))
        .context("no node answers")
}

fn print_folded(cli: &Cli, f: &WireFolded) {
    if cli.json {
        let nodes: Vec<_> = f
            .nodes
            .iter()
            .map(|n| {
                json!({
                    "node": n.node, "cells": n.cells, "widest": n.widest,
                    "table_bytes": n.table_bytes, "retired_held": n.retired_held,
                })
            })
            .collect();
        println!(
            "{}",
            json!({
                "generation": f.generation, "retired": f.retired.len(),
                "repair_cells_moved": f.repaired.cells_moved,
                "repair_bytes_moved": f.repaired.bytes_moved, "nodes": nodes,
            })
        );
        return;
    }
    if f.generation == 0 {
        println!("nothing to fold: no retired incarnation holds shards");
    } else {
        println!(
            "fold generation {}: {} retired incarnations folded into the bases \
             (the repair before it moved {} cells, {})",
            f.generation,
            f.retired.len(),
            f.repaired.cells_moved,
            human(f.repaired.bytes_moved)
        );
    }
    for n in &f.nodes {
        println!(
            "  {:<8} {} cells, widest {} shards, tables {}{}",
            n.node,
            n.cells,
            n.widest,
            human(n.table_bytes),
            if n.retired_held > 0 {
                format!(
                    "; {} retired incarnations left unfolded (a base would overflow)",
                    n.retired_held
                )
            } else {
                String::new()
            }
        );
    }
}

/// The nodes a per-node command goes to: the one `--node` names, or every
/// node of the first ring, in the config's order.
pub(crate) fn each_node(cli: &Cli) -> Result<Vec<NodeConfig>> {
    let config = Config::load(&cli.config)?;
    Ok(match &cli.node {
        Some(id) => vec![config.node(id)?.1.clone()],
        None => config.nodes.into_iter().filter(|n| !n.join).collect(),
    })
}

/// A connection to `n` for a command that may take long.
pub(crate) async fn connect(n: &NodeConfig, what: &str, timeout: Duration) -> Result<Client> {
    crate::secure::dial(n.client, timeout)
        .await
        .with_context(|| format!("{what} on {}: connect to {}", n.id, n.client))
}

/// `tally cleanup`: the node `--node` names, or every node in turn.
pub(crate) async fn cleanup(cli: &Cli) -> Result<()> {
    let mut done = Vec::new();
    for n in each_node(cli)? {
        let client = connect(&n, "cleanup", CHANGE_TIMEOUT).await?;
        let c: WireCleaned = match client.call(ClientOp::Cleanup).await {
            Ok(ClientReply::Cleaned(c)) => c,
            Ok(other) => bail!("cleanup of {}: unexpected answer {other:?}", n.id),
            Err(e) => return Err(e).with_context(|| format!("cleanup of {} failed", n.id)),
        };
        if !cli.json {
            println!(
                "cleanup of {}: {} cells kept, {} dropped (own shards kept); tables {} -> {}",
                c.node,
                c.kept,
                c.dropped,
                human(c.bytes_before),
                human(c.bytes_after)
            );
        }
        done.push(json!({
            "node": c.node, "kept": c.kept, "dropped": c.dropped,
            "bytes_before": c.bytes_before, "bytes_after": c.bytes_after,
        }));
    }
    if cli.json {
        println!("{}", json!({ "cleaned": done }));
    }
    Ok(())
}

async fn call(addr: SocketAddr, op: ClientOp) -> Result<WireTopology> {
    let client = crate::secure::dial(addr, CHANGE_TIMEOUT)
        .await
        .with_context(|| format!("connect to {addr}"))?;
    match client.call(op).await? {
        ClientReply::Ring(t) => Ok(t),
        other => bail!("unexpected answer {other:?}"),
    }
}

fn print(cli: &Cli, config: &Config, what: &str, ring: &WireTopology) {
    let states: Vec<_> = config
        .nodes
        .iter()
        .zip(&ring.states)
        .map(|(n, s)| (n.id.clone(), format!("{s:?}").to_lowercase()))
        .collect();
    if cli.json {
        let nodes: serde_json::Map<_, _> = states.into_iter().map(|(n, s)| (n, json!(s))).collect();
        println!(
            "{}",
            json!({ "ring_version": ring.version, "nodes": nodes })
        );
    } else {
        println!("{what}; ring version {}:", ring.version);
        for (n, s) in states {
            println!("  {n:<8} {s}");
        }
    }
}
