//! `SCAN` cursors: where each scan a client began stands.
//!
//! Redis' cursor is a number, and a Tally scan goes on from a key (see
//! `scan`), so the node keeps the place each cursor it issued stands for
//! and answers its number. Every step issues a new cursor and keeps the
//! old one, so a client that sends a cursor again (a retry after a lost
//! answer) reads the same page again. A node keeps the last
//! [`CURSORS_MAX`] cursors it issued; an older one, or one it never
//! issued (another node's, or one from before a restart), is refused with
//! `ERR invalid cursor`: the client starts its scan again from 0. The
//! node's cursors are its RESP state's (`shared`).

use std::collections::{HashMap, VecDeque};

use tally_net::wire::WireKey;

/// Cursors a node keeps.
pub(crate) const CURSORS_MAX: usize = 100_000;

/// Where a scan stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Place {
    /// The database scanned.
    pub(crate) db: u8,
    /// The key (as stored) to go on after.
    pub(crate) after: WireKey,
    /// The partition listed last, which the next page may begin with.
    pub(crate) last: Option<Vec<u8>>,
}

/// The cursors issued, oldest first.
///
/// # Invariants
/// - `order` holds each key of `places` once, in the order issued.
/// - `places.len() <= max`.
#[derive(Debug)]
pub(crate) struct Cursors {
    places: HashMap<u64, Place>,
    order: VecDeque<u64>,
    next: u64,
    max: usize,
}

impl Cursors {
    /// Keeps at most `max` cursors; the first is numbered from `seed`.
    pub(crate) fn new(max: usize, seed: u64) -> Cursors {
        Cursors {
            places: HashMap::new(),
            order: VecDeque::new(),
            // Never 0: that cursor starts a scan, and ends one.
            next: seed.max(1),
            max,
        }
    }

    /// A new cursor for `place`, forgetting the oldest beyond the limit.
    pub(crate) fn issue(&mut self, place: Place) -> u64 {
        let id = self.next;
        self.next = self.next.checked_add(1).unwrap_or(1);
        if self.places.insert(id, place).is_none() {
            self.order.push_back(id);
        }
        while self.order.len() > self.max {
            if let Some(old) = self.order.pop_front() {
                self.places.remove(&old);
            }
        }
        id
    }

    /// The place of cursor `id`, if this node issued it and keeps it.
    pub(crate) fn place(&self, id: u64) -> Option<Place> {
        self.places.get(&id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(p: &str) -> Place {
        Place {
            db: 0,
            after: WireKey::new(p.as_bytes(), b""),
            last: None,
        }
    }

    #[test]
    fn cursors_name_their_places_until_too_many_newer_ones_were_issued() {
        let mut c = Cursors::new(3, 0);
        let a = c.issue(place("a"));
        assert_ne!(a, 0, "0 starts and ends a scan");
        let b = c.issue(place("b"));
        assert_eq!(c.place(a), Some(place("a")));
        assert_eq!(c.place(a), Some(place("a")), "a cursor may be sent again");
        let _ = (c.issue(place("c")), c.issue(place("d")));
        assert_eq!(c.place(a), None, "the oldest is forgotten");
        assert_eq!(c.place(b), Some(place("b")));
        assert_eq!(c.place(12345), None, "never issued");
    }

    #[test]
    fn numbers_wrap_past_the_end_without_issuing_0() {
        let mut c = Cursors::new(3, u64::MAX);
        assert_eq!(c.issue(place("a")), u64::MAX);
        assert_eq!(c.issue(place("b")), 1);
    }
}
