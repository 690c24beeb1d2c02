//! How long and how much a node hints for one peer (`[cluster.hints]`), and
//! what happens past either: Cassandra's `max_hint_window`, plus a size cap.
//!
//! A peer's hints come in *episodes*: one starts with the first hint while
//! none is pending for the peer, and ends when the last pending one is
//! delivered. An episode that lasts longer than `window_ms`, or whose
//! records would pass `bytes_max`, *overflows*:
//! - its pending hints are dropped (the peer is further behind than hints
//!   are for), and the peer is marked as **needing repair**, durably, until
//!   a repair of it that began after the first hint was dropped completes;
//! - while the peer stays unreachable, new hints for it are dropped too
//!   (counted): a node away longer than the window is repaired, not hinted.
//!   Once it is seen up again, the next hint starts a new episode (as it
//!   does after the hinting node restarts: refusing is not kept on disk,
//!   the repair flag is).
//!
//! Dropping hints loses no acknowledged add: an add is acknowledged only
//! once its level's replicas hold it, and a hint only says which replica
//! is behind. It costs convergence: the peer catches up by read repair
//! (reads at `QUORUM` or `ALL` that reach it) or by `tally repair`.
//!
//! Every decision is a pure function here; `hints` keeps the state and the
//! files.
//!
//! # State file format (version 1)
//!
//! ```text
//! hints/<node id>.state   magic "TALLYHST" | version u32 LE | since_ms u64 LE
//!                         | repair_due_ms u64 LE | crc32 u32 LE (of everything before)
//! ```
//!
//! `since_ms` is when the pending episode began, `repair_due_ms` when hints
//! were first dropped since the peer's last repair (0: none). Written to a
//! temporary file, fsync'd and renamed into place when it changes; a
//! missing file is "no episode, no repair needed". A damaged one is read as
//! needing repair: a hint may have been dropped.

pub use crate::config::hints::{BYTES_MAX_DEFAULT, HintLimits, WINDOW_MS_DEFAULT};

/// Why an episode overflowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// It began more than `window_ms` ago.
    Window,
    /// Its records passed `bytes_max`.
    Bytes,
}

impl std::fmt::Display for Overflow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Overflow::Window => "its hints are older than the hint window",
            Overflow::Bytes => "its hints passed the size limit",
        })
    }
}

/// Whether an episode that began at `since_ms` (none: `None`) with
/// `bytes` of pending records has overflowed at `now_ms`.
pub fn overflow(
    limits: &HintLimits,
    since_ms: Option<u64>,
    bytes: u64,
    now_ms: u64,
) -> Option<Overflow> {
    if bytes > limits.bytes_max {
        return Some(Overflow::Bytes);
    }
    match since_ms {
        Some(since) if now_ms.saturating_sub(since) > limits.window_ms => Some(Overflow::Window),
        _ => None,
    }
}

/// A peer's durable hint state (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct State {
    /// When the pending episode began.
    pub since_ms: Option<u64>,
    /// A repair of the peer is due: hints were dropped from then on.
    pub repair_due_ms: Option<u64>,
}

impl State {
    /// Hints for the peer were dropped at `now_ms`.
    pub fn dropped(&mut self, now_ms: u64) {
        self.since_ms = None;
        self.repair_due_ms.get_or_insert(now_ms.max(1));
    }

    /// A repair of the peer that began at `started_ms` completed: no
    /// repair is due if every dropped hint was dropped before it began.
    /// Answers whether that changed anything.
    pub fn repaired(&mut self, started_ms: u64) -> bool {
        let done = self.repair_due_ms.is_some_and(|due| due <= started_ms);
        if done {
            self.repair_due_ms = None;
        }
        done
    }
}

const MAGIC: &[u8; 8] = b"TALLYHST";
const VERSION: u32 = 1;
const STATE_BYTES: usize = 8 + 4 + 8 + 8 + 4;

/// The bytes of `state`.
pub fn encode(state: &State) -> Vec<u8> {
    let mut out = Vec::with_capacity(STATE_BYTES);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&state.since_ms.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&state.repair_due_ms.unwrap_or(0).to_le_bytes());
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The state in `bytes`, or why they are not one.
pub fn decode(bytes: &[u8]) -> Result<State, &'static str> {
    if bytes.len() != STATE_BYTES || &bytes[..8] != MAGIC {
        return Err("not a hint state file");
    }
    let (body, crc) = bytes.split_at(STATE_BYTES - 4);
    if crc32fast::hash(body).to_le_bytes()[..] != *crc {
        return Err("hint state checksum mismatch");
    }
    let mut word = [0u8; 4];
    word.copy_from_slice(&body[8..12]);
    if u32::from_le_bytes(word) != VERSION {
        return Err("unsupported hint state version");
    }
    let ms = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&body[at..at + 8]);
        Some(u64::from_le_bytes(b)).filter(|&ms| ms != 0)
    };
    Ok(State {
        since_ms: ms(12),
        repair_due_ms: ms(20),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    const LIMITS: HintLimits = HintLimits {
        window_ms: 1000,
        bytes_max: 10_000,
    };

    #[test]
    fn an_episode_overflows_past_its_window_or_its_bytes() {
        let cases = [
            // (since, bytes, now, expected)
            (None, 0, 5_000, None),
            (None, 10_001, 5_000, Some(Overflow::Bytes)),
            (Some(1_000), 10_000, 2_000, None),
            (Some(1_000), 10_000, 2_001, Some(Overflow::Window)),
            (Some(1_000), 20_000, 1_500, Some(Overflow::Bytes)),
            // A clock that stepped back is no overflow.
            (Some(5_000), 0, 1_000, None),
        ];
        for (since, bytes, now, expected) in cases {
            assert_eq!(
                overflow(&LIMITS, since, bytes, now),
                expected,
                "since {since:?}, {bytes} bytes, now {now}"
            );
        }
    }

    #[test]
    fn a_repair_clears_only_what_was_dropped_before_it_began() {
        let mut s = State::default();
        s.dropped(1_000);
        s.dropped(2_000);
        assert_eq!(s.repair_due_ms, Some(1_000), "the first drop counts");
        assert!(!s.repaired(999), "began before the first drop");
        assert_eq!(s.repair_due_ms, Some(1_000));
        assert!(s.repaired(1_000));
        assert_eq!(s.repair_due_ms, None);
        assert!(!s.repaired(5_000), "nothing was due");
    }

    #[test]
    fn limits_refuse_a_zero_window_and_a_cap_below_one_record() {
        assert!(HintLimits::default().validate().is_ok());
        let zero = HintLimits {
            window_ms: 0,
            ..HintLimits::default()
        };
        assert_eq!(zero.validate().unwrap_err().0, "window_ms");
        let tiny = HintLimits {
            bytes_max: 100,
            ..HintLimits::default()
        };
        assert_eq!(tiny.validate().unwrap_err().0, "bytes_max");
    }

    #[test]
    fn the_state_round_trips_and_damage_is_refused() {
        for state in [
            State::default(),
            State {
                since_ms: Some(1_764_000_000_000),
                repair_due_ms: Some(1_763_000_000_000),
            },
        ] {
            assert_eq!(decode(&encode(&state)).unwrap(), state);
        }
        let mut bytes = encode(&State {
            since_ms: Some(7),
            repair_due_ms: None,
        });
        bytes[13] ^= 1;
        assert_eq!(decode(&bytes).unwrap_err(), "hint state checksum mismatch");
        assert!(decode(&bytes[..10]).is_err());
        assert!(decode(b"TALLYRET\x01\0\0\0").is_err());
    }
}
