//! Exactly-once adds under chaos: workers give every add an operation id
//! and send it as [`crate::exact_sender`] does, over client connections.
//!
//! Every logical add is recorded once ([`IdAdd`]) with its final outcome
//! and what its duplicates answered, and judged exactly after healing by
//! [`crate::checker::exact`]: every node's value at ALL must equal the sum
//! of the distinct acknowledged ids. Retries keep going after the faults
//! end (the cluster is healed by then), for a while (`conns`); an add that
//! never knew is reported as a harness failure.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tally_net::once::OpId;
use tally_net::wire::{ErrorKind, WireError};
use tally_net::{ClientError, Consistency};

use super::conns::Conns;
use crate::checker::exact::{ExactLog, ExactReport, IdAdd, check_exact};
use crate::exact_sender::{Nodes, Sender};

/// Exact key `i`'s name.
pub(crate) fn exact_key(i: usize) -> Vec<u8> {
    format!("chaos-exact-{i}").into_bytes()
}

/// One worker, client id `chaos-exact-<seed>`: adds to `keys` exact keys
/// until `stop`, each until it knows.
pub(crate) async fn worker(
    addrs: Vec<SocketAddr>,
    keys: usize,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> ExactLog {
    let mut sender = Sender::new(Conns::new(addrs, stop), seed);
    let client = format!("chaos-exact-{seed:x}").into_bytes();
    let mut log = ExactLog::default();
    let mut seq = 0u64;
    while !sender.nodes.stopped() {
        seq += 1;
        let id = OpId::new(client.clone(), seq).expect("a short client id and a seq from 1");
        let add = sender.next(id, keys);
        log.adds.push(sender.add(add).await);
    }
    log
}

impl Nodes for Conns {
    fn count(&self) -> usize {
        Conns::count(self)
    }

    async fn ready(&mut self, node: usize) {
        Conns::ready(self, node).await
    }

    async fn send(
        &self,
        node: usize,
        add: &IdAdd,
        cl: Consistency,
    ) -> Option<Result<i64, WireError>> {
        let client = self.conn(node)?;
        let key = exact_key(add.key);
        let sent = client.add_once(&key, b"", add.delta, &add.id, cl).await;
        Some(sent.map_err(wire_error))
    }

    fn stopped(&self) -> bool {
        Conns::stopped(self)
    }

    fn give_up(&mut self) -> bool {
        Conns::give_up(self)
    }

    async fn backoff(&self) {
        Conns::backoff(self).await
    }
}

/// A client's error as the node's: its own, or (no answer, a lost
/// connection) one whose outcome is unknown.
fn wire_error(e: ClientError) -> WireError {
    match e {
        ClientError::Server(e) => e,
        other => WireError::unknown(ErrorKind::Timeout, other.to_string()),
    }
}

/// Reads every exact key at ALL through every node and judges them.
pub(crate) async fn check(addrs: &[SocketAddr], log: &ExactLog, keys: usize) -> ExactReport {
    let mut finals = Vec::new();
    let mut unread = Vec::new();
    for (node, addr) in addrs.iter().enumerate() {
        for key in 0..keys {
            match read_all(*addr, key).await {
                Ok(v) => finals.push((node, key, v)),
                Err(e) => unread.push(format!("exact key {key} via n{}: {e}", node + 1)),
            }
        }
    }
    let mut report = check_exact(&log.adds, keys, &finals);
    report.violations.extend(unread);
    report
}

/// Reads exact key `key` at ALL through `addr`, retrying a while.
async fn read_all(addr: SocketAddr, key: usize) -> Result<i64, String> {
    let c = super::secure::dial(addr, tally_net::client::DEFAULT_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    let mut tries = 0;
    loop {
        match c.get(&exact_key(key), b"", Consistency::All).await {
            Ok(v) => return Ok(v),
            Err(e) if tries >= 20 => return Err(format!("final read: {e}")),
            Err(_) => tries += 1,
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use crate::exact_sender::classify;

    use super::*;

    #[test]
    fn a_lost_connection_is_retried_and_a_server_error_judged() {
        let closed = wire_error(ClientError::Closed("reset".into()));
        assert_eq!(classify(&Err(closed)), None);
        let conflict = WireError::not_applied(ErrorKind::IdConflict, "no");
        let known = classify(&Err(wire_error(ClientError::Server(conflict))));
        assert!(matches!(
            known,
            Some(crate::checker::exact::Ended::Refused(_))
        ));
    }
}
