//! The CQL work the chaos run and the simulation share: workers that
//! count, write rows, send logged batches and take leases through the
//! nodes' CQL ports, and the checks that judge what they did.
//!
//! A worker reaches a node through a [`Dial`]: a TCP address in the
//! chaos run ([`Addrs`]), a pipe in memory in the simulation. Their
//! clocks are the world's ([`tally_world`]): the simulation's when it
//! runs them.
//!
//! - [`counters`]: adds with and without operation ids, judged exactly.
//! - [`rows`] (with [`row_reads`]): last-write-wins rows and range
//!   deletes, and paged reads of them.
//! - [`batches`]: logged batches, all or nothing.
//! - [`leases`]: lightweight transactions on leases, linearizable.

use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;

use tally_net::cql::{CqlClient, CqlError};
use tally_net::ring::Ring;

pub mod batches;
pub mod counters;
pub mod leases;
pub mod row_reads;
pub mod rows;

/// A connection being made.
pub type Dialing<'a> = Pin<Box<dyn Future<Output = Result<CqlClient, CqlError>> + Send + 'a>>;

/// How a worker reaches the nodes' CQL ports.
pub trait Dial: Send + Sync {
    /// How many nodes there are to pick from.
    fn nodes(&self) -> usize;

    /// A new connection to node `n` (below [`Dial::nodes`]) alone.
    fn dial(&self, n: usize) -> Dialing<'_>;

    /// How long a worker waits before each statement (none: as fast as
    /// the nodes answer).
    fn think(&self) -> Duration {
        Duration::ZERO
    }
}

/// The nodes' CQL addresses, by node.
pub struct Addrs(pub Vec<SocketAddr>);

impl Dial for Addrs {
    fn nodes(&self) -> usize {
        self.0.len()
    }

    fn dial(&self, n: usize) -> Dialing<'_> {
        let addr = self.0[n];
        Box::pin(async move {
            CqlClient::connect(&[addr], Ring::new(&["n".to_string()], 1, 1), None).await
        })
    }
}

/// Makes the keyspace `chaos` (replication factor `rf`) and `table` (its
/// `CREATE TABLE IF NOT EXISTS`) through the first node that answers;
/// retries for 30 s while the cluster enables what the table needs.
pub async fn make_table(dial: &dyn Dial, rf: usize, table: &str) -> Result<(), String> {
    let keyspace = format!(
        "CREATE KEYSPACE IF NOT EXISTS chaos WITH replication = \
         {{'class': 'SimpleStrategy', 'replication_factor': {rf}}}"
    );
    let deadline = tally_world::Instant::now() + Duration::from_secs(30);
    let mut last = String::new();
    while tally_world::Instant::now() < deadline {
        for n in 0..dial.nodes() {
            let Ok(c) = dial.dial(n).await else {
                continue;
            };
            match (c.query(&keyspace).await, c.query(table).await) {
                (Ok(()), Ok(())) => return Ok(()),
                (Err(e), _) | (_, Err(e)) => last = e.to_string(),
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(format!("{table}: {last}"))
}

/// Waits the think time of `dial`'s workers, if they have one.
pub(crate) async fn think(dial: &dyn Dial) {
    let think = dial.think();
    if !think.is_zero() {
        tokio::time::sleep(think).await;
    }
}

/// Whether a send's failure means its connection is of no more use: it
/// was lost, or its node restarted and forgot the prepared statements.
pub(crate) fn reconnect(done: &Result<Vec<u8>, CqlError>) -> bool {
    matches!(
        done,
        Err(CqlError::Closed(_)) | Err(CqlError::Server { code: 0x2500, .. })
    )
}

/// An `int`'s bytes.
pub(crate) fn be(i: i32) -> Vec<u8> {
    i.to_be_bytes().to_vec()
}
