//! `tally snapshot`: take, list or clear every node's snapshots (or the
//! one `--node` names), one node after another.

use anyhow::{Context, Result, bail};
use serde_json::json;
use tally_net::wire::{ClientOp, ClientReply, WireSnapshotOp, WireSnapshots};

use super::{Cli, human};

/// How long one node may take (a snapshot flushes its memtables first).
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// What `tally snapshot` was asked: `--list`, `--clear [--tag T]`, or a
/// snapshot tagged `--tag` (now's Unix time in ms without one).
pub(crate) fn op(tag: Option<String>, list: bool, clear: bool) -> Result<WireSnapshotOp> {
    Ok(match (list, clear) {
        (true, true) => bail!("--list and --clear do not go together"),
        (true, false) if tag.is_some() => bail!("--list lists every snapshot: no --tag"),
        (true, false) => WireSnapshotOp::List,
        (false, true) => WireSnapshotOp::Clear { tag },
        (false, false) => WireSnapshotOp::Take {
            tag: tag.unwrap_or_else(|| {
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
                now.map_or(0, |d| d.as_millis()).to_string()
            }),
        },
    })
}

pub(crate) async fn run(cli: &Cli, op: WireSnapshotOp) -> Result<()> {
    let mut done = Vec::new();
    for n in super::ring::each_node(cli)? {
        let client = super::ring::connect(&n, "snapshot", TIMEOUT).await?;
        let s: WireSnapshots = match client.call(ClientOp::Snapshot(op.clone())).await {
            Ok(ClientReply::Snapshots(s)) => s,
            Ok(other) => bail!("snapshot on {}: unexpected answer {other:?}", n.id),
            Err(e) => return Err(e).with_context(|| format!("snapshot on {} failed", n.id)),
        };
        if !cli.json {
            print(&op, &s);
        }
        done.push(json!({
            "node": s.node,
            "dir": s.dir,
            "snapshots": s.snapshots.iter().map(|x| json!({
                "tag": x.tag, "files": x.files, "bytes": x.bytes,
            })).collect::<Vec<_>>(),
        }));
    }
    if cli.json {
        println!("{}", json!({ "nodes": done }));
    }
    Ok(())
}

fn print(op: &WireSnapshotOp, s: &WireSnapshots) {
    match op {
        WireSnapshotOp::Take { tag } => {
            let taken = s.snapshots.iter().find(|x| &x.tag == tag);
            let (files, bytes) = taken.map_or((0, 0), |x| (x.files, x.bytes));
            println!(
                "{}: snapshot {tag}: {files} files, {} in {}/{tag}",
                s.node,
                human(bytes),
                s.dir
            );
        }
        WireSnapshotOp::Clear { .. } => {
            println!("{}: cleared; {} snapshots left", s.node, s.snapshots.len());
        }
        WireSnapshotOp::List => {
            if s.snapshots.is_empty() {
                println!("{}: no snapshots", s.node);
            }
            for x in &s.snapshots {
                println!(
                    "{}: {}  {} files, {}  ({}/{})",
                    s.node,
                    x.tag,
                    x.files,
                    human(x.bytes),
                    s.dir,
                    x.tag
                );
            }
        }
    }
}
