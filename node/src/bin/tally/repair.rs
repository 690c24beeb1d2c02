//! `tally repair`: the ranges of one node (`--node`), or of every node in
//! turn, compared across their replicas and brought to the same cells
//! (see `tally_node::cluster::repair`). Each node's repair prints when it starts
//! and what it moved, like `nodetool repair`.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::json;
use tally_net::wire::{ClientOp, ClientReply, WireRange, WireRepaired};
use tally_node::config::Config;

use super::{Cli, human};

/// How long one node's repair may take.
const REPAIR_TIMEOUT: Duration = Duration::from_secs(3600);

/// `START:END` as a token range.
pub(crate) fn parse_range(s: &str) -> Result<WireRange, String> {
    let bad = || format!("{s:?} is not START:END (two signed 64-bit tokens)");
    let (a, b) = s.split_once(':').ok_or_else(bad)?;
    Ok(WireRange {
        start: a.trim().parse().map_err(|_| bad())?,
        end: b.trim().parse().map_err(|_| bad())?,
    })
}

/// Repairs the nodes the command line names (their tokens in `range`, if
/// given); stops at the first failure.
pub(crate) async fn run(cli: &Cli, range: Option<WireRange>) -> Result<()> {
    let nodes: Vec<(String, SocketAddr)> = match cli.addr {
        Some(addr) => vec![(addr.to_string(), addr)],
        None => {
            let config = Config::load(&cli.config)?;
            match &cli.node {
                Some(id) => vec![(id.clone(), config.node(id)?.1.client)],
                None => config
                    .nodes
                    .iter()
                    .map(|n| (n.id.clone(), n.client))
                    .collect(),
            }
        }
    };
    let timeout = REPAIR_TIMEOUT.max(Duration::from_millis(cli.timeout_ms));
    let mut done = Vec::new();
    for (id, addr) in nodes {
        if !cli.json {
            println!("repair of {id} started");
        }
        let client = crate::secure::dial(addr, timeout)
            .await
            .with_context(|| format!("repair of {id}: connect to {addr}"))?;
        let call = client.call(ClientOp::Repair { range });
        let answer = if cli.json {
            call.await
        } else {
            with_progress(call, addr).await
        };
        let repaired = match answer {
            Ok(ClientReply::Repaired(r)) => r,
            Ok(other) => bail!("repair of {id}: unexpected answer {other:?}"),
            Err(e) => return Err(e).with_context(|| format!("repair of {id} failed")),
        };
        if !cli.json {
            println!("{}", summary(&repaired));
        }
        done.push(repaired);
    }
    if cli.json {
        let nodes: Vec<_> = done
            .iter()
            .map(|r| {
                json!({
                    "node": r.node, "ranges": r.ranges, "slices": r.segments,
                    "slices_differing": r.segments_differing, "keys_compared": r.keys_compared,
                    "keys_differing": r.keys_differing, "cells_moved": r.cells_moved,
                    "bytes_moved": r.bytes_moved, "ms": r.millis, "resumed": r.resumed,
                })
            })
            .collect();
        println!("{}", json!({ "repaired": nodes }));
    }
    Ok(())
}

/// Awaits `call`, printing the node's progress (from its status, on a
/// connection of its own) every second it changed.
async fn with_progress<F: std::future::Future>(call: F, addr: SocketAddr) -> F::Output {
    let mut call = std::pin::pin!(call);
    let mut tick = tokio::time::interval(PROGRESS_EVERY);
    tick.tick().await;
    let mut last = None;
    loop {
        tokio::select! {
            answer = &mut call => return answer,
            _ = tick.tick() => {
                let Ok(status) = crate::secure::dial(addr, PROGRESS_EVERY).await else {
                    continue;
                };
                let Ok(s) = status.status().await else { continue };
                // Nothing to say until the digests are compared.
                if let Some(r) = s.stats.repairing
                    && r.segments > 0
                    && last.as_ref() != Some(&r)
                {
                    println!(
                        "repair of {}: {} of {} token slices differ, {} keys compared, {} differ, {} cells moved",
                        r.node, r.segments_differing, r.segments, r.keys_compared, r.keys_differing, r.cells_moved
                    );
                    last = Some(r);
                }
            }
        }
    }
}

/// How often `tally repair` prints progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// One node's repair, in one line.
fn summary(r: &WireRepaired) -> String {
    format!(
        "repair of {}{} finished in {:.1} s: {} ranges, {} of {} token slices differed, {} keys compared, {} differed, {} cells moved ({})",
        r.node,
        if r.resumed {
            " (resumed where the last one stopped)"
        } else {
            ""
        },
        r.millis as f64 / 1000.0,
        r.ranges,
        r.segments_differing,
        r.segments,
        r.keys_compared,
        r.keys_differing,
        r.cells_moved,
        human(r.bytes_moved)
    )
}
