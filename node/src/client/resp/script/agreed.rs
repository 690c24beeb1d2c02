//! A script whose declared keys are all one key runs as one agreed change
//! of that key (`cluster::agree`): it reads the key's string as decided,
//! runs against it in memory (`view`), and the change it made is agreed
//! only if the key still holds what the script read; otherwise the script
//! runs again from what the key holds now. So a compare-and-delete or a
//! rate limiter's `INCR` and `EXPIRE` happen at one instant, through any
//! node, as in Redis, where a script runs alone.
//!
//! A script that leaves the view (another key, a command on a counter,
//! a hash or a list, a command the view lacks, an `INCR` that finds no
//! string) or whose key holds a live counter or list runs the way every
//! other script does: nothing of its view run was applied. Like Redis, writes a
//! script made before an error stand (here: are agreed with its error as
//! the reply).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use tally_engine::now_ms;
use tally_net::wire::{Consistency, Register, Registers, WireError, WireKey};

use super::super::counters::wire_err;
use super::super::lua::vm;
use super::super::proto::Reply;
use super::super::registers::value_column;
use super::super::turns::Turns;
use super::view::{Step, View};
use crate::cluster::agree::history;
use crate::node::Node;

/// Most runs of one script before it gives up on a key that kept
/// changing under it.
const RUNS_MAX: usize = 30;

/// The host of a script's view run: its commands change the view; any
/// the view does not serve marks the run as left.
pub(crate) struct ViewHost {
    view: Mutex<View>,
    left: AtomicBool,
}

impl ViewHost {
    fn new(view: View) -> ViewHost {
        ViewHost {
            view: Mutex::new(view),
            left: AtomicBool::new(false),
        }
    }
}

impl vm::Host for ViewHost {
    fn call(&self, args: Vec<Vec<u8>>) -> vm::Pending {
        let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
        let reply = match name.as_str() {
            "ping" => Reply::Simple("PONG"),
            "time" => super::super::admin::time(),
            _ => match self.view.lock().call(&args) {
                Step::Done(reply) => reply,
                Step::Leaves => {
                    self.left.store(true, Ordering::Relaxed);
                    Reply::err("ERR the script left its key (it runs again, unagreed)")
                }
            },
        };
        Box::pin(std::future::ready(reply))
    }
}

/// The key of a script whose keys are all one, if they are.
pub(crate) fn one_key(keys: &[Vec<u8>]) -> Option<&[u8]> {
    let first = keys.first()?;
    keys.iter().all(|k| k == first).then_some(first)
}

/// The registers that hold data (not the round history), to compare.
fn data(registers: &Registers) -> Vec<&Register> {
    registers
        .0
        .iter()
        .filter(|r| r.column != history::COLUMN)
        .collect()
}

/// What an agreed run answers: the script's reply, or the registers the
/// key held instead of the ones the script read.
pub(crate) type Outcome = Result<Reply, Registers>;

/// The change that applies a run: the script's registers if the key
/// still holds the `read` ones (each live at its own reading), else none,
/// answering what it holds.
pub(crate) fn apply_if_unchanged(
    read: &Registers,
    next: &Registers,
    reply: &Reply,
    current: &Registers,
) -> (Registers, Outcome) {
    if data(current) == data(read) {
        (next.clone(), Ok(reply.clone()))
    } else {
        (current.clone(), Err(current.clone()))
    }
}

/// Runs the script `run` makes (given its host) on `key` (as the client
/// names it; `stored` as kept) as one agreed change; `None` when it must
/// run the way other scripts do.
pub(crate) async fn run<F, Fut>(
    node: &Arc<Node>,
    (cl, turns): (Consistency, &Turns),
    (key, stored): (&[u8], &[u8]),
    run: F,
) -> Option<Reply>
where
    F: Fn(Arc<dyn vm::Host>) -> Fut,
    Fut: Future<Output = Reply>,
{
    let _turn = turns.take(stored).await;
    let (mut state, mut fresh) = match start(node, cl, stored).await {
        Ok(Some(started)) => started,
        Ok(None) => return None,
        Err(e) => return Some(wire_err(&e)),
    };
    for _ in 0..RUNS_MAX {
        let none = data(&state).is_empty();
        let view = View::new(key, state, now_ms());
        let read = view.state().clone();
        let host = Arc::new(ViewHost::new(view));
        let reply = run(host.clone()).await;
        if host.left.load(Ordering::Relaxed) {
            return None;
        }
        let next = host.view.lock().state().clone();
        // A run that found no string in a state just read and made none
        // is a read, answered as of that read: no round (which would
        // leave promises on a key that holds none).
        if fresh && none && next == read {
            return Some(reply);
        }
        let read = match node.scripts_skip_compare() {
            // FAULT INJECTION: "what it read" is whatever is there.
            true => None,
            false => Some(read),
        };
        let outcome = node
            .agree(stored, move |current, _| {
                let read = read.as_ref().unwrap_or(current);
                Ok(apply_if_unchanged(read, &next, &reply, current))
            })
            .await;
        match outcome {
            Ok(Ok(reply)) => return Some(reply),
            Ok(Err(holds)) => (state, fresh) = (holds, true),
            Err(e) => return Some(wire_err(&e)),
        }
    }
    Some(Reply::err(
        "ERR the script's key kept changing while it ran; try again",
    ))
}

/// What a run starts from, and whether it was just read (linearizably):
/// the key's registers as this node last saw them when they hold a
/// string or a sorted set (a lock, a limiter's window, a semaphore: no
/// read), else as read; `None`
/// when the key holds a live counter (or list), which the script then
/// reads and changes as every script does. As a plain
/// `SET` of a string, the view does not look for a hash's fields or a
/// unique counter's members (a key of those with no string shows none).
async fn start(
    node: &Arc<Node>,
    cl: Consistency,
    stored: &[u8],
) -> Result<Option<(Registers, bool)>, WireError> {
    let now = now_ms();
    if let Some(seen) = node.last_seen_registers(stored)
        && value_column(&seen, now).is_some()
    {
        return Ok(Some((seen, false)));
    }
    if node
        .get_cell(&WireKey::new(stored, b""), cl)
        .await?
        .live(now)
    {
        return Ok(None);
    }
    Ok(Some((node.read_registers(stored).await?, true)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(v: &str) -> Registers {
        Registers(vec![Register {
            column: Vec::new(),
            value: v.as_bytes().to_vec(),
            at_ms: 0,
        }])
    }

    fn with_rounds(mut r: Registers, seq: u8) -> Registers {
        r.put(Register {
            column: history::COLUMN.to_vec(),
            value: vec![seq],
            at_ms: 0,
        });
        r
    }

    #[test]
    fn a_run_applies_only_over_what_it_read() {
        let ok = Reply::Simple("OK");
        let (read, next) = (string("a"), string("b"));
        // The round history moved on, the data did not: applied.
        let current = with_rounds(string("a"), 7);
        assert_eq!(
            apply_if_unchanged(&read, &next, &ok, &current),
            (next.clone(), Ok(ok.clone()))
        );
        // Another change came first: nothing applied, what it holds told.
        let current = with_rounds(string("c"), 8);
        assert_eq!(
            apply_if_unchanged(&read, &next, &ok, &current),
            (current.clone(), Err(current.clone()))
        );
        // A string that expired since the run read it is a change too (the
        // round hands over live registers only).
        assert_eq!(
            apply_if_unchanged(&read, &next, &ok, &Registers::default()).1,
            Err(Registers::default())
        );
    }

    #[test]
    fn only_scripts_of_one_key_run_agreed() {
        let keys = |ks: &[&str]| ks.iter().map(|k| k.as_bytes().to_vec()).collect::<Vec<_>>();
        assert_eq!(one_key(&keys(&["a"])), Some(&b"a"[..]));
        assert_eq!(one_key(&keys(&["a", "a"])), Some(&b"a"[..]));
        assert_eq!(one_key(&keys(&["a", "b"])), None);
        assert_eq!(one_key(&keys(&[])), None);
    }
}
