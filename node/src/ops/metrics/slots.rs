//! The metrics port's connections: at most [`CONNECTIONS_MAX`] at once,
//! shared fairly between client addresses, and never all held by clients
//! that are slow to ask.
//!
//! A connection is *reading* until its request head is in, then
//! *answering*. When every place is taken, the next connection is
//! accepted by closing one that has been reading for [`GRACE`] at least
//! ([`evict`]): the oldest of the address that holds the most. A flood
//! of slow clients then only pushes out its own (a scraper's request is
//! in within a moment of its connection), one address cannot keep
//! another's out, and the flood gets at most a place's worth of new
//! connections each [`GRACE`]. Until a place may be taken the port
//! accepts nothing ([`wait`]): new connections wait in the backlog.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tally_world::Instant;
use tokio::sync::{Notify, oneshot};

/// Connections served at once.
pub(crate) const CONNECTIONS_MAX: usize = 32;
/// How long a connection may read its request before a new one may take
/// its place.
pub(crate) const GRACE: Duration = Duration::from_millis(100);

/// When the port may accept another connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Now: a place is free, or one may be taken.
    Now,
    /// At this time, when one reading may be taken (or when a place frees).
    Until(Instant),
    /// When a place frees: every one is answering.
    Release,
}

/// When a port with `max` places, `answering` of them answering and the
/// others held by the connections `reading` (address, since when), may
/// accept another connection at `now`.
pub(crate) fn wait(
    max: usize,
    reading: &[(IpAddr, Instant)],
    answering: usize,
    now: Instant,
) -> Wait {
    if reading.len() + answering < max {
        return Wait::Now;
    }
    match reading.iter().map(|(_, since)| *since + GRACE).min() {
        None => Wait::Release,
        Some(t) if t <= now => Wait::Now,
        Some(t) => Wait::Until(t),
    }
}

/// Which of the connections `reading` (address, since when) to close to
/// make room at `now`: of those reading for [`GRACE`] at least, the oldest
/// of the address with the most (of two with as many, the one whose
/// oldest is older); `None` if none may be closed.
pub(crate) fn evict(reading: &[(IpAddr, Instant)], now: Instant) -> Option<usize> {
    let mut per_address: HashMap<IpAddr, (usize, usize)> = HashMap::new();
    for (i, (ip, since)) in reading.iter().enumerate() {
        if *since + GRACE > now {
            continue;
        }
        let e = per_address.entry(*ip).or_insert((0, i));
        e.0 += 1;
        if *since < reading[e.1].1 {
            e.1 = i;
        }
    }
    per_address
        .into_values()
        .max_by(|a, b| a.0.cmp(&b.0).then(reading[b.1].1.cmp(&reading[a.1].1)))
        .map(|(_, oldest)| oldest)
}

struct Reading {
    id: u64,
    ip: IpAddr,
    since: Instant,
    evict: oneshot::Sender<()>,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    reading: Vec<Reading>,
    answering: usize,
}

/// The port's places.
///
/// # Invariants
/// - `reading.len() + answering <= max`.
pub(crate) struct Slots {
    max: usize,
    inner: Mutex<Inner>,
    released: Notify,
}

/// One connection's place; given back when dropped.
pub(crate) struct Held {
    slots: Arc<Slots>,
    id: u64,
    answering: bool,
}

impl Slots {
    /// A port with `max` places.
    pub(crate) fn new(max: usize) -> Arc<Slots> {
        Arc::new(Slots {
            max,
            inner: Mutex::new(Inner::default()),
            released: Notify::new(),
        })
    }

    /// Returns once the port may accept another connection ([`wait`]).
    pub(crate) async fn room(&self) {
        loop {
            let now = Instant::now();
            let until = {
                let g = self.inner.lock();
                let reading: Vec<_> = g.reading.iter().map(|r| (r.ip, r.since)).collect();
                wait(self.max, &reading, g.answering, now)
            };
            match until {
                Wait::Now => return,
                Wait::Until(t) => tokio::select! {
                    () = tokio::time::sleep_until(t) => {}
                    () = self.released.notified() => {}
                },
                Wait::Release => self.released.notified().await,
            }
        }
    }

    /// A place for a new connection from `ip`, reading its request, and
    /// what tells it it was closed to make room; `None` when no place may
    /// be taken (see [`Slots::room`]).
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<(Held, oneshot::Receiver<()>)> {
        let now = Instant::now();
        let mut g = self.inner.lock();
        if g.reading.len() + g.answering >= self.max {
            let reading: Vec<_> = g.reading.iter().map(|r| (r.ip, r.since)).collect();
            let victim = g.reading.swap_remove(evict(&reading, now)?);
            let _ = victim.evict.send(());
        }
        let (tx, rx) = oneshot::channel();
        let id = g.next_id;
        g.next_id += 1;
        g.reading.push(Reading {
            id,
            ip,
            since: now,
            evict: tx,
        });
        debug_assert!(g.reading.len() + g.answering <= self.max);
        let held = Held {
            slots: self.clone(),
            id,
            answering: false,
        };
        Some((held, rx))
    }
}

impl Held {
    /// Its request is in: it is no longer one to close for room.
    pub(crate) fn answering(&mut self) {
        if self.answering {
            return;
        }
        let mut g = self.slots.inner.lock();
        if let Some(i) = g.reading.iter().position(|r| r.id == self.id) {
            g.reading.swap_remove(i);
            g.answering += 1;
            self.answering = true;
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut g = self.slots.inner.lock();
        if self.answering {
            g.answering -= 1;
        } else if let Some(i) = g.reading.iter().position(|r| r.id == self.id) {
            g.reading.swap_remove(i);
        }
        drop(g);
        self.slots.released.notify_one();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use std::time::Duration;

    #[test]
    fn room_is_made_from_the_address_that_holds_the_most() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let now = at(10);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        assert_eq!(evict(&[], now), None);
        // b holds three, a two older ones: b's oldest goes.
        let reading = [(a, at(0)), (b, at(3)), (a, at(1)), (b, at(2)), (b, at(4))];
        assert_eq!(evict(&reading, now), Some(3));
        // As many each: the older of their oldest.
        let even = [(b, at(5)), (a, at(1)), (b, at(2)), (a, at(6))];
        assert_eq!(evict(&even, now), Some(1));
        // Not one reading for less than the grace.
        let young = now - GRACE / 2;
        assert_eq!(evict(&[(a, young), (a, young), (b, at(9))], now), Some(2));
        assert_eq!(evict(&[(a, young)], now), None);
    }

    #[test]
    fn the_port_waits_for_a_place_or_one_past_its_grace() {
        let now = Instant::now();
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let young = now - GRACE / 2;
        assert_eq!(wait(2, &[(ip, now)], 0, now), Wait::Now, "a place free");
        assert_eq!(wait(2, &[(ip, now - GRACE)], 1, now), Wait::Now);
        assert_eq!(
            wait(2, &[(ip, young), (ip, now)], 0, now),
            Wait::Until(young + GRACE)
        );
        assert_eq!(wait(2, &[], 2, now), Wait::Release);
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_connection_closes_a_reading_one_never_an_answering_one() {
        let slots = Slots::new(2);
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let (mut scraper, _) = slots.admit(ip).unwrap();
        scraper.answering();
        let (_slow, slow_evicted) = slots.admit(ip).unwrap();
        assert!(slots.admit(ip).is_none(), "within its grace");
        let start = Instant::now();
        slots.room().await;
        assert_eq!(start.elapsed(), GRACE);
        let (mut next, _) = slots.admit(ip).unwrap();
        assert!(slow_evicted.await.is_ok(), "the slow one made room");
        // Both places answering now: none until one is released.
        next.answering();
        assert!(slots.admit(ip).is_none());
        drop(scraper);
        slots.room().await;
        assert!(slots.admit(ip).is_some());
        let g = slots.inner.lock();
        assert_eq!((g.reading.len(), g.answering), (0, 1));
    }
}
