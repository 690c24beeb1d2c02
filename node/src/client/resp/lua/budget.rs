//! The memory every script interpreter of the node holds, together: each
//! may hold [`VM_MEMORY_MAX`], and all of them [`NODE_MEMORY_MAX`], so
//! that scripts in flight on every connection cannot take the node's
//! memory. An interpreter's [`Share`] tells the node's total ([`Memory`])
//! what it holds after each step of a run, and its limit for the next
//! step is what the others leave ([`limit`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Memory one interpreter may hold.
pub(crate) const VM_MEMORY_MAX: usize = 32 << 20;
/// Memory all interpreters of the node may hold together.
pub(crate) const NODE_MEMORY_MAX: usize = 256 << 20;

/// What all interpreters of one node hold, as they last told it.
#[derive(Debug, Default)]
pub(crate) struct Memory(AtomicUsize);

impl Memory {
    /// Whether idle interpreters may be kept: not once the node's
    /// interpreters hold half of what they may.
    pub(crate) fn roomy(&self) -> bool {
        self.0.load(Ordering::Acquire) < NODE_MEMORY_MAX / 2
    }
}

/// An interpreter's memory limit for its next step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    /// The interpreter's own limit.
    Own(usize),
    /// Less: what the node's other interpreters leave.
    Node(usize),
}

impl Limit {
    pub(crate) fn bytes(self) -> usize {
        match self {
            Limit::Own(n) | Limit::Node(n) => n,
        }
    }
}

/// The limit of an interpreter holding `mine` while all of them hold
/// `held` (its own included): its own, unless the others leave less.
pub(crate) fn limit(mine: usize, held: usize, own_max: usize, node_max: usize) -> Limit {
    let others = held.saturating_sub(mine);
    let room = node_max.saturating_sub(others);
    match room < own_max {
        // Never 0: mlua reads a limit of 0 as none.
        true => Limit::Node(room.max(1)),
        false => Limit::Own(own_max),
    }
}

/// One interpreter's part of its node's [`Memory`]; given back when it
/// is dropped.
#[derive(Debug)]
pub(crate) struct Share {
    told: usize,
    memory: Arc<Memory>,
}

impl Share {
    /// A part of `memory`, holding nothing yet.
    pub(crate) fn new(memory: Arc<Memory>) -> Share {
        Share { told: 0, memory }
    }

    /// Tells the total that the interpreter now holds `used` bytes.
    pub(crate) fn tell(&mut self, used: usize) {
        if used >= self.told {
            self.memory.0.fetch_add(used - self.told, Ordering::AcqRel);
        } else {
            self.memory.0.fetch_sub(self.told - used, Ordering::AcqRel);
        }
        self.told = used;
    }

    /// This interpreter's limit for its next step.
    pub(crate) fn limit(&self) -> Limit {
        limit(
            self.told,
            self.memory.0.load(Ordering::Acquire),
            VM_MEMORY_MAX,
            NODE_MEMORY_MAX,
        )
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.tell(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interpreter_gets_its_own_limit_unless_the_others_leave_less() {
        const MIB: usize = 1 << 20;
        assert_eq!(limit(0, 0, 32 * MIB, 256 * MIB), Limit::Own(32 * MIB));
        // Its own memory does not count against it.
        assert_eq!(
            limit(30 * MIB, 230 * MIB, 32 * MIB, 256 * MIB),
            Limit::Own(32 * MIB)
        );
        assert_eq!(
            limit(MIB, 240 * MIB, 32 * MIB, 256 * MIB),
            Limit::Node(17 * MIB)
        );
        // Others holding it all leave a limit that refuses any allocation.
        assert_eq!(limit(0, 300 * MIB, 32 * MIB, 256 * MIB), Limit::Node(1));
    }
}
