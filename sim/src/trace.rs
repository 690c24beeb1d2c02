//! A run's trace: every event the simulation decides or sees (a message
//! delivered or lost, a fault, a client's operation and its answer), with
//! the simulated time it happened at. Its hash names the run: the same
//! seed gives the same hash, and a run that does not is not deterministic.
//! With `print`, each event is printed as it happens too: a replay's log.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt::Write as _;

use xxhash_rust::xxh3::Xxh3;

use crate::world::SimWorld;

/// How a run's directory is named: this, then random characters
/// (`tempfile`'s). Errors that name a file name it; the trace writes
/// every run's alike ([`scrub`]), so that its hash is the seed's alone.
pub const RUN_DIR_PREFIX: &str = "tally-sim-";

struct Trace {
    hash: Xxh3,
    events: u64,
    print: bool,
    /// The line being written: one buffer for every event.
    line: String,
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
            line: String::new(),
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
        t.line.clear();
        let at = SimWorld::elapsed();
        let _ = write!(
            t.line,
            "{:>7}.{:06} {what}",
            at.as_secs(),
            at.subsec_micros()
        );
        let line = scrub(&t.line);
        t.hash.update(line.as_bytes());
        t.hash.update(b"\n");
        t.events += 1;
        if t.print {
            use std::io::Write;
            let _ = writeln!(std::io::stdout(), "{line}");
        }
    });
}

/// `line` with every run directory's random part as `*`.
fn scrub(line: &str) -> Cow<'_, str> {
    if !line.contains(RUN_DIR_PREFIX) {
        return Cow::Borrowed(line);
    }
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(i) = rest.find(RUN_DIR_PREFIX) {
        let (before, after) = rest.split_at(i + RUN_DIR_PREFIX.len());
        out.push_str(before);
        out.push('*');
        let random = after.find(|c: char| !c.is_ascii_alphanumeric());
        rest = &after[random.unwrap_or(after.len())..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// Records an event: `trace!("n{} crashes", i)`.
#[macro_export]
macro_rules! trace {
    ($($arg:tt)*) => {
        $crate::trace::event(format_args!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_run_directory_is_written_alike() {
        let a = "write /dev/shm/tally-sim-BawtSK/n1/engine/000002.log: EIO; tally-sim-x9";
        let b = "write /dev/shm/tally-sim-tpfkda/n1/engine/000002.log: EIO; tally-sim-Q1";
        assert_eq!(scrub(a), scrub(b));
        assert_eq!(
            scrub(a),
            "write /dev/shm/tally-sim-*/n1/engine/000002.log: EIO; tally-sim-*"
        );
        assert!(matches!(scrub("n1 dials n2"), Cow::Borrowed(_)));
    }
}
