//! The `flush` fault: a `FLUSHALL` through a member's RESP port, which the
//! checker sees as a reset of every key at once (a reset at ALL: once it is
//! answered, every member reads the new, empty generation). Every other
//! one is two `FLUSHALL`s at once through the same member, which it runs
//! together after the one running (`flush_queue`): each must still reset
//! every key after it was asked.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tally_net::Consistency;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use crate::checker::{Kind, Op, Outcome};

/// How long a flush may take to answer.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(30);

/// The history's first process number for flushes (each flush sent at
/// once with another has one of its own).
pub(crate) const PROCESS: usize = 1 << 20;

/// Flushes every database through node `node` (at `addr`), `at_once`
/// times at once; answers the resets of keys `0..keys` they make, as the
/// checker reads them.
pub(crate) fn flushes(
    addr: SocketAddr,
    node: usize,
    at_once: usize,
    keys: usize,
    started: Instant,
) -> Vec<Op> {
    std::thread::scope(|s| {
        let each: Vec<_> = (0..at_once)
            .map(|i| s.spawn(move || flush(addr, PROCESS + i, node, keys, started)))
            .collect();
        each.into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })
}

/// One `FLUSHALL`, as the resets of history process `process`.
fn flush(addr: SocketAddr, process: usize, node: usize, keys: usize, started: Instant) -> Vec<Op> {
    let invoke_ns = since(started);
    let outcome = match flushall(addr) {
        Ok(line) if line == "+OK" => Outcome::Ok(0),
        // Refused before any member stored it.
        Ok(line) if line.starts_with("-ERR cannot flush") => Outcome::Fail,
        Ok(_) | Err(_) => Outcome::Unknown,
    };
    let complete_ns = since(started);
    (0..keys)
        .map(|key| Op {
            process,
            key,
            kind: Kind::Reset,
            cl: Consistency::All,
            node,
            invoke_ns,
            complete_ns,
            outcome,
        })
        .collect()
}

fn since(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Sends `FLUSHALL` (on a connection secured as the run is); answers the
/// reply's line.
fn flushall(addr: SocketAddr) -> std::io::Result<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let ask = async {
            let mut conn = super::secure::resp(addr).await?;
            conn.get_mut()
                .write_all(b"*1\r\n$8\r\nFLUSHALL\r\n")
                .await?;
            conn.get_mut().flush().await?;
            let mut line = String::new();
            conn.read_line(&mut line).await?;
            Ok(line.trim_end().to_string())
        };
        tokio::time::timeout(FLUSH_TIMEOUT, ask)
            .await
            .map_err(|_| std::io::Error::other("no answer to FLUSHALL"))?
    })
}
