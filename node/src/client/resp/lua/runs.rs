//! The scripts running on this node, as `SCRIPT KILL` sees them: whose
//! each is, and whether it has written.
//!
//! `SCRIPT KILL` ends the caller's own running scripts (an administrator's
//! ends everyone's) that have not written, as Redis kills only a script
//! that has not written (`UNKILLABLE` otherwise): a script killed half way
//! through its writes would leave them half done. A script that has
//! written still ends at its time limit.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

/// One running script.
#[derive(Debug)]
pub(crate) struct Run {
    /// Who runs it (`None` on a node without users).
    user: Option<String>,
    wrote: AtomicBool,
    killed: AtomicBool,
}

impl Run {
    /// Marks that the script sent a write command.
    pub(crate) fn wrote(&self) {
        self.wrote.store(true, Ordering::Release);
    }

    /// Whether `SCRIPT KILL` named this run.
    pub(crate) fn killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }
}

/// How a `SCRIPT KILL` ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kill {
    /// No script of the caller's is running.
    NotBusy,
    /// Every one of them has written.
    Unkillable,
    /// These (indexes into the runs asked about) are to end.
    End(Vec<usize>),
}

/// Which of `runs` (each its user and whether it wrote) a `SCRIPT KILL`
/// by `caller` ends; an administrator's ends anyone's.
pub(crate) fn decide(runs: &[(Option<&str>, bool)], caller: Option<&str>, admin: bool) -> Kill {
    let mine: Vec<usize> = (0..runs.len())
        .filter(|&i| admin || runs[i].0 == caller)
        .collect();
    if mine.is_empty() {
        return Kill::NotBusy;
    }
    let killable: Vec<usize> = mine.into_iter().filter(|&i| !runs[i].1).collect();
    match killable.is_empty() {
        true => Kill::Unkillable,
        false => Kill::End(killable),
    }
}

/// The runs of one node's scripts, by number.
#[derive(Debug, Default)]
pub(crate) struct Runs {
    running: Mutex<HashMap<u64, Arc<Run>>>,
    next: AtomicU64,
}

/// A run, known to `SCRIPT KILL` until this is dropped.
pub(crate) struct Registered<'a> {
    id: u64,
    runs: &'a Runs,
    pub(crate) run: Arc<Run>,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.runs.running.lock().remove(&self.id);
    }
}

impl Runs {
    /// Registers a run of `user`'s.
    pub(crate) fn start(&self, user: Option<&str>) -> Registered<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let run = Arc::new(Run {
            user: user.map(str::to_string),
            wrote: AtomicBool::new(false),
            killed: AtomicBool::new(false),
        });
        self.running.lock().insert(id, run.clone());
        Registered {
            id,
            runs: self,
            run,
        }
    }

    /// `SCRIPT KILL` by `caller`: marks the runs [`decide`] picks.
    pub(crate) fn kill(&self, caller: Option<&str>, admin: bool) -> Kill {
        let all = self.running.lock();
        let listed: Vec<&Arc<Run>> = all.values().collect();
        let seen: Vec<(Option<&str>, bool)> = listed
            .iter()
            .map(|r| (r.user.as_deref(), r.wrote.load(Ordering::Acquire)))
            .collect();
        let outcome = decide(&seen, caller, admin);
        if let Kill::End(which) = &outcome {
            for &i in which {
                listed[i].killed.store(true, Ordering::Release);
            }
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_kill_ends_only_the_callers_scripts_that_have_not_written() {
        let runs = [
            (Some("ann"), false),
            (Some("bob"), false),
            (Some("ann"), true),
            (Some("bob"), true),
        ];
        assert_eq!(decide(&runs, Some("ann"), false), Kill::End(vec![0]));
        assert_eq!(decide(&runs, Some("cat"), false), Kill::NotBusy);
        assert_eq!(decide(&runs, Some("cat"), true), Kill::End(vec![0, 1]));
        assert_eq!(decide(&runs[2..], Some("ann"), false), Kill::Unkillable);
        assert_eq!(decide(&[], None, true), Kill::NotBusy);
        // Without users every connection is an administrator.
        assert_eq!(decide(&[(None, false)], None, true), Kill::End(vec![0]));
    }
}
