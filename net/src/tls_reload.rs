//! Renewed certificates are taken up without a restart.
//!
//! Node certificates expire (a year after `tallyd certs` issues them); the
//! operator renews them on disk, and every node must start using the new
//! files without losing its connections. So the transport looks at its
//! three files (CA certificate, node certificate, node key) every
//! [`CHECK_INTERVAL`]. When they changed and then stayed the same for one
//! more look, it builds new TLS configurations from them and gives them to
//! quinn: the server configuration for connections accepted from now on,
//! the client configuration for connections dialled from now on.
//! Established connections keep the session they have; TLS checks
//! certificates only at the handshake.
//!
//! Waiting for the files to settle keeps a reload from catching a new
//! certificate next to the old key halfway through a renewal. Files that
//! do not make a valid configuration (a key that does not match, a key
//! others may read) are reported once, and the node keeps the
//! configuration it has until they change again.
//!
//! The decision is [`Watch::step`], a pure function of what the files look
//! like at each look.

use std::os::unix::fs::MetadataExt;
use std::time::{Duration, SystemTime};

use tracing::{info, warn};

use crate::tls::TlsFiles;

/// Time between two looks at the files.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// What one file looks like: enough to tell that it was replaced or
/// rewritten. `None` for a file that cannot be looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

/// The stamps of the CA certificate, the node certificate and the key.
pub type Stamps = [Option<Stamp>; 3];

/// The files' stamps now.
pub fn stamps(files: &TlsFiles) -> Stamps {
    [&files.ca_cert, &files.cert, &files.key].map(|path| {
        std::fs::metadata(path).ok().map(|m| Stamp {
            modified: m.modified().ok(),
            len: m.len(),
            inode: m.ino(),
        })
    })
}

/// When to reload.
///
/// # Invariants
///
/// `loaded` is what the last (attempted) load saw; `last` what the last
/// look saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    loaded: Stamps,
    last: Stamps,
}

impl Watch {
    /// A watch of files that looked like `loaded` when they were loaded.
    pub fn new(loaded: Stamps) -> Watch {
        Watch {
            loaded,
            last: loaded,
        }
    }

    /// Given the stamps of one look, whether to load the files now: they
    /// differ from the last load and are the same as at the previous look.
    /// Answering yes counts as the load, whatever its outcome.
    pub fn step(&mut self, now: Stamps) -> bool {
        let settled = now == self.last;
        self.last = now;
        if settled && now != self.loaded {
            self.loaded = now;
            return true;
        }
        false
    }
}

/// Every [`CHECK_INTERVAL`], asks `look` for the files' stamps (`None`:
/// whoever uses them is gone, stop) and calls `reload` once they changed
/// and settled ([`Watch::step`]); logs the outcome, naming `cert`. A
/// reload that fails keeps what was loaded before, as `reload` must.
pub async fn watch_files<E: std::fmt::Display>(
    mut w: Watch,
    mut look: impl FnMut() -> Option<Stamps>,
    mut reload: impl FnMut() -> Result<(), E>,
    cert: &str,
) {
    let mut tick = tokio::time::interval(CHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(now) = look() else { return };
        if !w.step(now) {
            continue;
        }
        match reload() {
            Ok(()) => info!(cert, "reloaded TLS certificates"),
            Err(e) => {
                warn!(cert, error = %e, "the changed TLS files do not load; keeping the previous ones")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(n: u64) -> Option<Stamp> {
        Some(Stamp {
            modified: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(n)),
            len: 100,
            inode: n,
        })
    }

    #[test]
    fn files_are_reloaded_once_they_changed_and_settled() {
        let a: Stamps = [stamp(1), stamp(2), stamp(3)];
        let b: Stamps = [stamp(1), stamp(5), stamp(3)];
        let c: Stamps = [stamp(1), stamp(5), stamp(6)];
        let mut w = Watch::new(a);
        let looks = [
            (a, false), // unchanged
            (b, false), // the certificate changed: wait a look
            (c, false), // then the key: wait again
            (c, true),  // settled: reload
            (c, false), // loaded already
            (a, false), // changed back: wait
            (a, true),
        ];
        for (i, (now, want)) in looks.into_iter().enumerate() {
            assert_eq!(w.step(now), want, "look {i}");
        }
    }

    #[test]
    fn a_file_that_vanishes_and_comes_back_the_same_is_not_reloaded() {
        let a: Stamps = [stamp(1), stamp(2), stamp(3)];
        let gone: Stamps = [stamp(1), None, stamp(3)];
        let mut w = Watch::new(a);
        assert!(!w.step(gone));
        assert!(!w.step(a));
        assert!(!w.step(a));
    }

    #[test]
    fn missing_files_that_settle_are_tried_once() {
        let a: Stamps = [stamp(1), stamp(2), stamp(3)];
        let gone: Stamps = [stamp(1), None, None];
        let mut w = Watch::new(a);
        assert!(!w.step(gone));
        assert!(w.step(gone), "tried, so the failure is reported once");
        assert!(!w.step(gone));
    }
}
