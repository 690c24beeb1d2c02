//! Scripts in the chaos run: the RESP workers send some of their adds and
//! reads as `EVAL`s (each worker logged in as a user of its own in a
//! secure run), judged with every other operation, while a hostile user's
//! scripts try, all run long, to plant code in the interpreters the
//! others' scripts run in: redefine `redis.call`, overwrite library
//! functions and globals. A sealed node refuses every one of them; a node
//! that let one through would answer the others' adds without making them,
//! which the checker sees (`--unsafe-unsealed-scripts` shows it does).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use super::secure;
use crate::resp_work::{PLANTS, eval};

/// The hostile user: sends the [`PLANTS`] through the nodes until told to
/// stop. Answers how many it sent and how many were not refused.
pub(crate) async fn hostile(
    addrs: Vec<SocketAddr>,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> (usize, usize) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let (mut sent, mut taken) = (0, 0);
    while !stop.load(Ordering::Acquire) {
        let addr = addrs[rng.random_range(0..addrs.len())];
        let plant = PLANTS[rng.random_range(0..PLANTS.len())];
        let line = async {
            let mut conn = secure::resp_as(addr, secure::HOSTILE).await?;
            conn.get_mut()
                .write_all(eval(plant, "hostile", None).as_bytes())
                .await?;
            let mut line = String::new();
            conn.read_line(&mut line).await?;
            Ok::<_, std::io::Error>(line)
        };
        let answer = tokio::time::timeout(Duration::from_secs(5), line).await;
        // An empty line is a connection closed before an answer (a node
        // killed under it): no answer either way.
        if let Ok(Ok(line)) = answer
            && !line.is_empty()
        {
            sent += 1;
            // An error (the table is read-only) is what a sealed node says.
            taken += usize::from(!line.starts_with('-'));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (sent, taken)
}
