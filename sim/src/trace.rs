//! A run's trace: every event the simulation decides or sees (a message
//! delivered or lost, a fault, a client's operation and its answer), with
//! the simulated time it happened at. Its hash names the run: the same
//! seed gives the same hash, and a run that does not is not deterministic.
//! With `keep`, the events are kept as lines too, to print a replay.

use std::cell::RefCell;
use std::fmt::Write as _;

use xxhash_rust::xxh3::Xxh3;

use crate::world::SimWorld;

struct Trace {
    hash: Xxh3,
    events: u64,
    lines: Option<Vec<String>>,
}

thread_local! {
    static TRACE: RefCell<Option<Trace>> = const { RefCell::new(None) };
}

/// Starts this thread's trace, keeping the lines if `keep`.
pub fn begin(keep: bool) {
    TRACE.with(|t| {
        *t.borrow_mut() = Some(Trace {
            hash: Xxh3::new(),
            events: 0,
            lines: keep.then(Vec::new),
        })
    });
}

/// Ends this thread's trace: its hash, how many events it saw, and its
/// lines if kept.
pub fn end() -> (u64, u64, Vec<String>) {
    TRACE.with(|t| match t.borrow_mut().take() {
        Some(t) => (t.hash.digest(), t.events, t.lines.unwrap_or_default()),
        None => (0, 0, Vec::new()),
    })
}

/// Records an event, at the simulated time now.
pub fn event(what: std::fmt::Arguments<'_>) {
    TRACE.with(|t| {
        let mut t = t.borrow_mut();
        let Some(t) = t.as_mut() else { return };
        let mut line = String::new();
        let at = SimWorld::elapsed();
        let _ = write!(line, "{:>7}.{:06} {what}", at.as_secs(), at.subsec_micros());
        t.hash.update(line.as_bytes());
        t.hash.update(b"\n");
        t.events += 1;
        if let Some(lines) = &mut t.lines {
            lines.push(line);
        }
    });
}

/// Records an event: `trace!("n{} crashes", i)`.
#[macro_export]
macro_rules! trace {
    ($($arg:tt)*) => {
        $crate::trace::event(format_args!($($arg)*))
    };
}
