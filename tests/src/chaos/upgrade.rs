//! A rolling upgrade under the workload: every node starts on the old
//! build (`crate::old_build`, its `tallyd-faults`), and each `upgrade`
//! fault moves the next member still on it to this build, as an operator
//! does: a clean stop (SIGTERM), the binary replaced, a start on the same
//! data. A `kill` while some member is still on the old build restarts the
//! killed node on either build at random (a node that went back is a
//! downgrade half way, which must work while no feature is enabled). At
//! the end every member still on the old build is upgraded, and the run
//! waits until every member has enabled this build's cluster features.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use rand::Rng;
use rand::rngs::SmallRng;

use crate::Cluster;

/// How long a clean stop may take.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// The upgrade in progress.
#[derive(Debug)]
pub(super) struct Upgrade {
    /// The old build's `tallyd-faults`.
    old: PathBuf,
    /// Nodes moved to this build by a clean stop.
    pub(super) upgraded: usize,
    /// Killed nodes restarted on the old build.
    pub(super) downgraded: usize,
}

impl Upgrade {
    /// Sets every node of `cluster` (not started yet) to the old build in
    /// `dir`.
    pub(super) fn begin(cluster: &mut Cluster, dir: PathBuf) -> Upgrade {
        let old = dir.join("tallyd-faults");
        for i in 0..cluster.nodes.len() {
            cluster.set_daemon(i, Some(old.clone()));
        }
        Upgrade {
            old,
            upgraded: 0,
            downgraded: 0,
        }
    }

    fn on_old(&self, cluster: &Cluster, i: usize) -> bool {
        cluster.daemon(i) == self.old
    }

    /// The `upgrade` fault: the next member on the old build, stopped
    /// cleanly and started on this one.
    pub(super) fn step(&mut self, cluster: &mut Cluster, members: &[usize]) -> Result<()> {
        let Some(&i) = members.iter().find(|&&i| self.on_old(cluster, i)) else {
            return Ok(());
        };
        if cluster.is_running(i) {
            cluster.stop(i, STOP_TIMEOUT)?;
        }
        cluster.set_daemon(i, None);
        cluster.restart(i)?;
        self.upgraded += 1;
        Ok(())
    }

    /// Before a killed node restarts: while some member is on the old
    /// build, it restarts on either build.
    pub(super) fn either_build(
        &mut self,
        cluster: &mut Cluster,
        members: &[usize],
        i: usize,
        rng: &mut SmallRng,
    ) {
        if !members.iter().any(|&m| self.on_old(cluster, m)) {
            return;
        }
        if rng.random_bool(0.5) {
            if !self.on_old(cluster, i) {
                self.downgraded += 1;
            }
            cluster.set_daemon(i, Some(self.old.clone()));
        } else {
            cluster.set_daemon(i, None);
        }
    }

    /// Upgrades every member still on the old build, then waits until
    /// every member has enabled `features`.
    pub(super) fn finish(
        &mut self,
        cluster: &mut Cluster,
        members: &[usize],
        features: &[&str],
    ) -> Result<()> {
        while members.iter().any(|&m| self.on_old(cluster, m)) {
            self.step(cluster, members)?;
        }
        wait_enabled(cluster, members, features, Duration::from_secs(30))
    }
}

/// Waits until every member says it has enabled `features`.
pub(crate) fn wait_enabled(
    cluster: &Cluster,
    members: &[usize],
    features: &[&str],
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let rt = crate::runtime();
    loop {
        let mut missing = Vec::new();
        for &i in members {
            let enabled = rt.block_on(async {
                let c = cluster.client(i).await?;
                anyhow::Ok(c.versions().await?.enabled)
            });
            match enabled {
                Ok(e) if features.iter().all(|f| e.iter().any(|x| x == f)) => {}
                Ok(e) => missing.push(format!("{} has {e:?}", cluster.nodes[i].id)),
                Err(e) => missing.push(format!("{}: {e:#}", cluster.nodes[i].id)),
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "cluster features {features:?} not enabled on every member within {timeout:?}: {}",
                missing.join("; ")
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
