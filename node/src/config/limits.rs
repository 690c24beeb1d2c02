//! What a node gives its clients: connections, file descriptors, memory
//! and time. The `[cluster.limits]` table of `cluster.toml` (every key
//! optional) sets them for every node.
//!
//! # File descriptors
//!
//! The engine needs a file descriptor at any moment: a new commit-log
//! segment, an SSTable, a directory to fsync. Failing there poisons it (it
//! cannot tell whether a write is durable), so clients must never take the
//! last ones. At start the node raises its soft `RLIMIT_NOFILE` to the
//! hard limit (as Redis and ScyllaDB do), counts what it has open, and
//! keeps `fd_reserve` free for the engine: client connections (both
//! listeners together) are capped at what is left, and at `clients_max`
//! (Redis' `maxclients`). One over the cap is accepted only to be refused
//! and closed (see `accept`).
//!
//! # Memory and time per connection
//!
//! - Replies a client does not take pile up: past `output_soft_bytes`
//!   the connection stops reading requests until the client takes them
//!   (backpressure); replies left untaken for `output_timeout_ms`, or more
//!   than `output_hard_bytes` of them, close it (Redis'
//!   `client-output-buffer-limit`).
//! - A request whose first bytes arrived must be complete within
//!   `request_timeout_ms`, or the connection is closed: a client cannot
//!   hold a buffer and a connection by trickling a request.
//! - Where the node has users, a connection must log in within
//!   `login_timeout_ms` of its accept, however busy it keeps, or it is
//!   closed; and connections not logged in hold at most half the client
//!   slots ([`anonymous_max`]), so a flood of them leaves room for
//!   clients that log in.
//! - A connection that sends nothing for `idle_timeout_ms` is closed,
//!   even with answers still to come (set it above the write and read
//!   timeouts); 0, the default, never closes one (Redis' `timeout 0`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The `[cluster.limits]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Most client connections (native and RESP together) a node holds.
    pub clients_max: usize,
    /// File descriptors kept free for the engine, whatever clients do.
    pub fd_reserve: usize,
    /// A request must be complete this long after its first byte.
    pub request_timeout_ms: u64,
    /// A connection without a request this long is closed; 0 is never.
    pub idle_timeout_ms: u64,
    /// A connection not logged in this long after its accept is closed
    /// (where the node has users).
    pub login_timeout_ms: u64,
    /// Unsent replies past which a connection stops reading requests.
    pub output_soft_bytes: usize,
    /// Unsent replies past which a connection is closed.
    pub output_hard_bytes: usize,
    /// Replies the client leaves untaken this long close its connection.
    pub output_timeout_ms: u64,
    /// Most one queued transaction (`MULTI`) may hold: its arguments'
    /// allocations and their arrays.
    pub multi_bytes_max: usize,
    /// Most the open transactions of a node may hold together.
    pub multi_node_bytes_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            clients_max: 10_000,
            fd_reserve: 64,
            request_timeout_ms: 10_000,
            idle_timeout_ms: 0,
            login_timeout_ms: 10_000,
            output_soft_bytes: 1 << 20,
            output_hard_bytes: 64 << 20,
            output_timeout_ms: 60_000,
            multi_bytes_max: 16 << 20,
            multi_node_bytes_max: 256 << 20,
        }
    }
}

impl Limits {
    /// Checks the table; an error names the key (under `cluster.limits.`).
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.clients_max == 0 {
            return Err(("clients_max", "must be > 0".into()));
        }
        for (name, ms) in [
            ("request_timeout_ms", self.request_timeout_ms),
            ("output_timeout_ms", self.output_timeout_ms),
            ("login_timeout_ms", self.login_timeout_ms),
        ] {
            if ms == 0 {
                return Err((name, "must be > 0".into()));
            }
        }
        if self.output_soft_bytes == 0 || self.output_soft_bytes > self.output_hard_bytes {
            return Err((
                "output_soft_bytes",
                format!(
                    "{} is not between 1 and output_hard_bytes ({})",
                    self.output_soft_bytes, self.output_hard_bytes
                ),
            ));
        }
        if self.multi_bytes_max == 0 || self.multi_bytes_max > self.multi_node_bytes_max {
            return Err((
                "multi_bytes_max",
                format!(
                    "{} is not between 1 and multi_node_bytes_max ({})",
                    self.multi_bytes_max, self.multi_node_bytes_max
                ),
            ));
        }
        Ok(())
    }

    /// [`Limits::request_timeout_ms`] as a duration.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    /// [`Limits::idle_timeout_ms`] as a duration; `None` for never.
    pub fn idle_timeout(&self) -> Option<Duration> {
        (self.idle_timeout_ms > 0).then(|| Duration::from_millis(self.idle_timeout_ms))
    }

    /// [`Limits::login_timeout_ms`] as a duration.
    pub fn login_timeout(&self) -> Duration {
        Duration::from_millis(self.login_timeout_ms)
    }

    /// What a connection closed at its login deadline is told.
    pub fn login_timeout_words(&self) -> String {
        let ms = self.login_timeout_ms;
        let within = match ms % 1000 {
            0 => format!("{} s", ms / 1000),
            _ => format!("{ms} ms"),
        };
        format!("a connection must log in within {within}: closing it")
    }

    /// [`Limits::output_timeout_ms`] as a duration.
    pub fn output_timeout(&self) -> Duration {
        Duration::from_millis(self.output_timeout_ms)
    }
}

/// How many client connections a node may hold: what the file limit
/// leaves after the descriptors open at start and the engine's reserve,
/// less one for accepting a connection only to refuse it; at most `cap`
/// (`clients_max`).
pub fn clients_max(files_limit: u64, files_open: usize, reserve: usize, cap: usize) -> usize {
    let taken = (files_open as u64)
        .saturating_add(reserve as u64)
        .saturating_add(1);
    let room = usize::try_from(files_limit.saturating_sub(taken)).unwrap_or(usize::MAX);
    room.min(cap)
}

/// How many of a node's `clients` slots connections that have not logged
/// in may hold at once: half, and at least one.
pub fn anonymous_max(clients: usize) -> usize {
    (clients / 2).max(1)
}

/// The soft file limit before and after raising it to the hard limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilesLimit {
    /// The soft limit the process started with.
    pub was: u64,
    /// The soft limit now.
    pub now: u64,
}

/// Turns transparent huge pages off for this process (Linux; elsewhere,
/// and where the kernel refuses, nothing), as Redis advises for itself.
/// The allocator asks for huge pages on its regions, and the first touch
/// of each costs a fault that zeroes 2 MiB while the node's one event
/// loop waits: a node whose memory grows (new keys) stalled that way
/// about 30 times a second, and served a sixth fewer agreed changes of
/// new keys (`benches/scripts/set-nx.sh`); pipelined counter adds over a
/// stable set of keys lose about 5% of the TLB's help.
pub fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl(2) with PR_SET_THP_DISABLE takes plain integers
        // and touches no memory of ours.
        #[expect(unsafe_code, reason = "prctl(2) has no safe std wrapper")]
        let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit. An unlimited hard
/// limit (which Linux does not allow for files) counts as `u64::MAX`.
pub fn raise_files_limit() -> std::io::Result<FilesLimit> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let got = getrlimit(Resource::Nofile);
    let was = got.current.unwrap_or(u64::MAX);
    if got.current == got.maximum {
        return Ok(FilesLimit { was, now: was });
    }
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: got.maximum,
            maximum: got.maximum,
        },
    )?;
    let now = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    Ok(FilesLimit { was, now })
}

/// File descriptors this process has open now.
pub fn files_open() -> std::io::Result<usize> {
    // The directory handle that read_dir holds counts itself: take it off.
    Ok(tally_world::fs::read_dir("/proc/self/fd")?
        .count()
        .saturating_sub(1))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn clients_get_what_the_engine_does_not_need() {
        let table = [
            // limit, open, reserve, clients_max -> clients
            (1024, 40, 64, 10_000, 919),
            (1024, 40, 64, 100, 100),
            (1_048_576, 40, 64, 10_000, 10_000),
            // Nothing left: no clients, never an underflow.
            (100, 40, 64, 10_000, 0),
            (0, 0, 0, 10, 0),
            (u64::MAX, usize::MAX, usize::MAX, 5, 0),
            (u64::MAX, 3, 64, usize::MAX, usize::MAX - 68),
        ];
        for (limit, open, reserve, max, want) in table {
            assert_eq!(
                clients_max(limit, open, reserve, max),
                want,
                "{limit} {open} {reserve} {max}"
            );
        }
    }

    #[test]
    fn the_files_limit_is_raised_to_the_hard_limit() {
        let raised = raise_files_limit().unwrap();
        let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum;
        assert_eq!(raised.now, hard.unwrap_or(u64::MAX));
        assert!(raised.now >= raised.was);
        let open = files_open().unwrap();
        assert!(open >= 3, "stdin, stdout and stderr at least: {open}");
    }

    #[test]
    fn limits_are_checked() {
        assert_eq!(Limits::default().validate(), Ok(()));
        let bad = [
            Limits {
                clients_max: 0,
                ..Limits::default()
            },
            Limits {
                request_timeout_ms: 0,
                ..Limits::default()
            },
            Limits {
                output_timeout_ms: 0,
                ..Limits::default()
            },
            Limits {
                login_timeout_ms: 0,
                ..Limits::default()
            },
            Limits {
                output_soft_bytes: 0,
                ..Limits::default()
            },
            Limits {
                output_hard_bytes: 1000,
                ..Limits::default()
            },
            Limits {
                multi_bytes_max: 0,
                ..Limits::default()
            },
            Limits {
                multi_node_bytes_max: 1 << 20,
                ..Limits::default()
            },
        ];
        let fields: Vec<&str> = bad.iter().map(|l| l.validate().unwrap_err().0).collect();
        assert_eq!(
            fields,
            [
                "clients_max",
                "request_timeout_ms",
                "output_timeout_ms",
                "login_timeout_ms",
                "output_soft_bytes",
                "output_soft_bytes",
                "multi_bytes_max",
                "multi_bytes_max"
            ]
        );
        assert_eq!(Limits::default().idle_timeout(), None);
        let words = Limits::default().login_timeout_words();
        assert!(words.contains("log in within 10 s"), "{words}");
        let quick = Limits {
            login_timeout_ms: 1500,
            ..Limits::default()
        };
        assert!(quick.login_timeout_words().contains("within 1500 ms"));
    }

    #[test]
    fn clients_not_logged_in_get_half_the_slots() {
        let got: Vec<usize> = [0, 1, 2, 3, 8, 10_000].map(anonymous_max).to_vec();
        assert_eq!(got, [1, 1, 1, 1, 4, 5_000]);
    }
}
