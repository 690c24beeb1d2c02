//! A native connection's answers on their way out, and the bytes they hold.
//!
//! Answers come from many tasks at once: the write path's frames for adds
//! (small, and at most one per in-flight slot) on one channel, every other
//! answer (a row can be megabytes) on another, counted by an
//! [`OutputGauge`] from the moment it is queued until it is written. The
//! connection's reader asks the gauge before it reads each request
//! ([`OutputGauge::wait_below`]): above the soft bound it waits for the
//! client to take its answers (backpressure), and gives up on a client
//! that takes none for the output timeout or lets more than the hard bound
//! pile up.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tally_world::Instant;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, mpsc};

/// Counted answer bytes queued or being written.
#[derive(Debug, Default)]
pub(crate) struct OutputGauge {
    pending: AtomicUsize,
    /// Set when the writer stops: nothing more will go out.
    closed: AtomicBool,
    changed: Notify,
}

/// What the reader may do next, from [`OutputGauge::wait_below`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pressure {
    /// At or below the soft bound: read on.
    Below,
    /// Above the soft bound for the whole timeout.
    Stuck,
    /// Above the hard bound, or the writer has stopped.
    Over,
}

impl OutputGauge {
    /// Counts `bytes` queued for the writer.
    pub(crate) fn add(&self, bytes: usize) {
        self.pending.fetch_add(bytes, Ordering::AcqRel);
        self.changed.notify_waiters();
    }

    /// Counts `bytes` written (or dropped with a failed write).
    fn release(&self, bytes: usize) {
        self.pending.fetch_sub(bytes, Ordering::AcqRel);
        self.changed.notify_waiters();
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.changed.notify_waiters();
    }

    /// Waits until at most `soft` bytes are pending, at most `timeout`;
    /// answers at once when more than `hard` are, or the writer stopped.
    pub(crate) async fn wait_below(&self, soft: usize, hard: usize, timeout: Duration) -> Pressure {
        let deadline = Instant::now() + timeout;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the check, so no change in between is missed.
            changed.as_mut().enable();
            let pending = self.pending.load(Ordering::Acquire);
            match pressure(pending, self.closed.load(Ordering::Acquire), soft, hard) {
                Pressure::Stuck => {}
                p => return p,
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Pressure::Stuck;
            }
        }
    }

    /// Resolves once the writer has stopped.
    pub(crate) async fn closed(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.closed.load(Ordering::Acquire) {
                return;
            }
            changed.await;
        }
    }
}

/// The rule of [`OutputGauge::wait_below`], without the waiting: `Stuck`
/// here means "above soft, wait".
fn pressure(pending: usize, closed: bool, soft: usize, hard: usize) -> Pressure {
    if closed || pending > hard {
        Pressure::Over
    } else if pending <= soft {
        Pressure::Below
    } else {
        Pressure::Stuck
    }
}

/// Writes the answers of both channels to `wr`, coalescing whatever is
/// queued into one write, until both close; then shuts `wr` down. A write
/// the client does not take within `timeout`, or that fails, stops it
/// (and closes the gauge, which stops the reader).
pub(crate) async fn write_answers<W: AsyncWrite + Unpin>(
    mut wr: W,
    mut adds: mpsc::Receiver<Vec<u8>>,
    mut others: mpsc::Receiver<Vec<u8>>,
    gauge: std::sync::Arc<OutputGauge>,
    timeout: Duration,
) {
    let mut out = Vec::new();
    let (mut adds_open, mut others_open) = (true, true);
    while adds_open || others_open {
        out.clear();
        let mut counted = 0;
        tokio::select! {
            f = adds.recv(), if adds_open => match f {
                Some(f) => out.extend_from_slice(&f),
                None => adds_open = false,
            },
            f = others.recv(), if others_open => match f {
                Some(f) => {
                    counted += f.len();
                    out.extend_from_slice(&f);
                }
                None => others_open = false,
            },
        }
        if out.is_empty() {
            continue;
        }
        // Let the tasks that are ready run first: answers released by one
        // fsync then go out in one `send` instead of one each.
        tokio::task::yield_now().await;
        while let Ok(f) = adds.try_recv() {
            out.extend_from_slice(&f);
        }
        while let Ok(f) = others.try_recv() {
            counted += f.len();
            out.extend_from_slice(&f);
        }
        // The flush matters under TLS: records may wait in the session.
        let write = async {
            wr.write_all(&out).await?;
            wr.flush().await
        };
        let wrote = tokio::time::timeout(timeout, write).await;
        gauge.release(counted);
        if !matches!(wrote, Ok(Ok(()))) {
            gauge.close();
            return;
        }
    }
    gauge.close();
    let _ = tokio::time::timeout(timeout, wr.shutdown()).await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use std::sync::Arc;

    #[test]
    fn pressure_rule() {
        let table = [
            // pending, closed -> with soft 10, hard 100
            (0, false, Pressure::Below),
            (10, false, Pressure::Below),
            (11, false, Pressure::Stuck),
            (100, false, Pressure::Stuck),
            (101, false, Pressure::Over),
            (0, true, Pressure::Over),
        ];
        for (pending, closed, want) in table {
            assert_eq!(
                pressure(pending, closed, 10, 100),
                want,
                "{pending} {closed}"
            );
        }
    }

    #[tokio::test]
    async fn a_reader_waits_for_the_client_and_gives_up_in_time() {
        let gauge = Arc::new(OutputGauge::default());
        gauge.add(50);
        let started = Instant::now();
        let short = Duration::from_millis(100);
        assert_eq!(gauge.wait_below(10, 100, short).await, Pressure::Stuck);
        assert!(started.elapsed() >= short);
        let g = gauge.clone();
        let release = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            g.release(45);
        });
        let minute = Duration::from_secs(60);
        assert_eq!(gauge.wait_below(10, 100, minute).await, Pressure::Below);
        release.await.unwrap();
        gauge.add(200);
        assert_eq!(gauge.wait_below(10, 100, minute).await, Pressure::Over);
    }

    #[tokio::test]
    async fn answers_of_both_channels_go_out_and_are_uncounted() {
        let (adds_tx, adds) = mpsc::channel(8);
        let (others_tx, others) = mpsc::channel(8);
        let gauge = Arc::new(OutputGauge::default());
        let (client, server) = tokio::io::duplex(1 << 16);
        let writer = tokio::spawn(write_answers(
            server,
            adds,
            others,
            gauge.clone(),
            Duration::from_secs(5),
        ));
        gauge.add(3);
        others_tx.send(b"row".to_vec()).await.unwrap();
        adds_tx.send(b"add".to_vec()).await.unwrap();
        drop((adds_tx, others_tx));
        writer.await.unwrap();
        let mut got = Vec::new();
        let mut client = client;
        tokio::io::AsyncReadExt::read_to_end(&mut client, &mut got)
            .await
            .unwrap();
        got.sort_unstable();
        let mut want = b"rowadd".to_vec();
        want.sort_unstable();
        assert_eq!(got, want);
        assert_eq!(gauge.pending.load(Ordering::Acquire), 0);
        gauge.closed().await;
    }

    #[tokio::test]
    async fn a_client_that_takes_nothing_stops_the_writer() {
        let (_adds_tx, adds) = mpsc::channel(8);
        let (others_tx, others) = mpsc::channel(8);
        let gauge = Arc::new(OutputGauge::default());
        // A pipe of 16 bytes nobody reads.
        let (_client, server) = tokio::io::duplex(16);
        let writer = tokio::spawn(write_answers(
            server,
            adds,
            others,
            gauge.clone(),
            Duration::from_millis(100),
        ));
        gauge.add(64);
        others_tx.send(vec![7; 64]).await.unwrap();
        gauge.closed().await;
        writer.await.unwrap();
        assert_eq!(
            gauge.wait_below(10, 100, Duration::from_secs(1)).await,
            Pressure::Over
        );
    }
}
