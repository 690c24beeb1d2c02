//! A run's trace: every event the simulation decides or sees (a message
//! delivered or lost, a fault, a client's operation and its answer), with
//! the simulated time it happened at. Its hash names the run: the same
//! seed gives the same hash, and a run that does not is not deterministic.
//! With `print`, each event is printed as it happens too: a replay's log.

use std::cell::RefCell;
use std::fmt::Write as _;

use xxhash_rust::xxh3::Xxh3;

use crate::world::SimWorld;

struct Trace {
    hash: Xxh3,
    events: u64,
    print: bool,
}

thread_local! {
    static TRACE: RefCell<Option<Trace>> = const { RefCell::new(None) };
}

/// Starts this thread's trace, printing each event if `print`.
pub fn begin(print: bool) {
    TRACE.with(|t| {
        *t.borrow_mut() = Some(Trace {
            hash: Xxh3::new(),
            events: 0,
            print,
        })
    });
}

/// Ends this thread's trace: its hash, and how many events it saw.
pub fn end() -> (u64, u64) {
    TRACE.with(|t| match t.borrow_mut().take() {
        Some(t) => (t.hash.digest(), t.events),
        None => (0, 0),
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
        if t.print {
            use std::io::Write;
            let _ = writeln!(std::io::stdout(), "{line}");
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
