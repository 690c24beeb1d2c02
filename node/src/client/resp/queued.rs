//! What queued transactions hold, and a node's budget for them.
//!
//! A `MULTI`'s queue is charged what it holds, as Redis'
//! `multiStateMemOverhead` counts it: per command its slot in the queue
//! and its argument array, and per argument its allocation, so a command
//! of thousands of empty arguments costs what it takes, not nothing. One
//! transaction may hold at most its share (`multi_bytes_max`), and all the
//! open transactions of a node together at most `multi_node_bytes_max`: a
//! command past either is refused, and the transaction's `EXEC` aborts
//! (`EXECABORT`), as Redis aborts one whose command was refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::proto::Reply;

/// Most commands one `MULTI` may queue.
pub(crate) const MULTI_QUEUED_MAX: usize = 10_000;

/// What queueing `args` (a command and its arguments) holds: its slot in
/// the queue, its argument array, and each argument's allocation.
pub(crate) fn cost(args: &Vec<Vec<u8>>) -> usize {
    let slot = std::mem::size_of::<Vec<Vec<u8>>>();
    let array = args.capacity() * std::mem::size_of::<Vec<u8>>();
    slot + array + args.iter().map(Vec::capacity).sum::<usize>()
}

/// Which bound a command would take its transaction past.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Over {
    /// The transaction's own share (or its count of commands).
    Share,
    /// What the node's open transactions may hold together.
    Node,
}

/// Whether a command costing `cost` may join a transaction of `commands`
/// commands holding `held`, with the node's transactions holding
/// `node_held`: the rule, apart from any bookkeeping.
pub(crate) fn over(
    commands: usize,
    held: usize,
    cost: usize,
    node_held: usize,
    b: &Budget,
) -> Option<Over> {
    if commands >= MULTI_QUEUED_MAX || held.saturating_add(cost) > b.share {
        Some(Over::Share)
    } else if node_held.saturating_add(cost) > b.node {
        Some(Over::Node)
    } else {
        None
    }
}

impl Over {
    /// What the refused command is answered.
    pub(crate) fn reply(self, b: &Budget) -> Reply {
        Reply::err(match self {
            Over::Share => format!(
                "ERR MULTI queue is full: at most {MULTI_QUEUED_MAX} commands holding {} bytes \
                 (arguments and their arrays) in one transaction",
                b.share
            ),
            Over::Node => format!(
                "ERR MULTI queue is full: this node's queued transactions hold their budget of \
                 {} bytes; try again after others EXEC",
                b.node
            ),
        })
    }
}

/// A node's budget for queued transactions.
///
/// # Invariants
/// - `held` is the sum of the live [`Charge`]s' bytes, at most `node`.
#[derive(Debug)]
pub(crate) struct Budget {
    held: AtomicUsize,
    share: usize,
    node: usize,
}

impl Budget {
    /// A budget of `node` bytes, at most `share` of them to one transaction.
    pub(crate) fn new(share: usize, node: usize) -> Arc<Budget> {
        Arc::new(Budget {
            held: AtomicUsize::new(0),
            share,
            node,
        })
    }

    /// What the node's transactions hold now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}

/// What one transaction holds of its node's budget; given back when it
/// is dropped (`EXEC`, `DISCARD`, an abort, a closed connection).
#[derive(Debug)]
pub(crate) struct Charge {
    budget: Arc<Budget>,
    bytes: usize,
}

impl Charge {
    /// Nothing yet, against `budget`.
    pub(crate) fn new(budget: Arc<Budget>) -> Charge {
        Charge { budget, bytes: 0 }
    }

    /// Takes `cost` more for a transaction of `commands` commands, or says
    /// which bound that would pass (and takes nothing).
    pub(crate) fn take(&mut self, commands: usize, cost: usize) -> Result<(), Over> {
        let b = &*self.budget;
        let mut node_held = b.held.load(Ordering::Relaxed);
        loop {
            if let Some(o) = over(commands, self.bytes, cost, node_held, b) {
                return Err(o);
            }
            match b.held.compare_exchange_weak(
                node_held,
                node_held + cost,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => node_held = now,
            }
        }
        self.bytes += cost;
        Ok(())
    }

    /// The budget it draws on.
    pub(crate) fn budget(&self) -> &Budget {
        &self.budget
    }

    /// The budget it draws on, shared.
    pub(crate) fn budget_arc(&self) -> Arc<Budget> {
        self.budget.clone()
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        let was = self.budget.held.fetch_sub(self.bytes, Ordering::Relaxed);
        debug_assert!(
            was >= self.bytes,
            "budget held {was} < charge {}",
            self.bytes
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(n: usize, each: usize) -> Vec<Vec<u8>> {
        (0..n).map(|_| vec![b'x'; each]).collect()
    }

    #[test]
    fn a_command_costs_its_array_and_each_arguments_allocation() {
        let ptr = std::mem::size_of::<Vec<u8>>();
        assert_eq!(cost(&words(2, 0)), ptr + 2 * ptr);
        assert_eq!(cost(&words(3, 10)), ptr + 3 * ptr + 30);
        let mut roomy = Vec::with_capacity(8);
        roomy.push(Vec::with_capacity(100));
        assert_eq!(cost(&roomy), ptr + 8 * ptr + 100, "capacity, not length");
    }

    #[test]
    fn a_command_past_its_share_or_the_nodes_budget_is_refused() {
        let b = Budget::new(100, 250);
        let table = [
            // commands, held, cost, node held -> verdict
            (0, 0, 100, 0, None),
            (0, 0, 101, 0, Some(Over::Share)),
            (5, 60, 40, 211, Some(Over::Node)),
            (5, 60, 40, 210, None),
            (MULTI_QUEUED_MAX, 0, 1, 0, Some(Over::Share)),
            (0, usize::MAX, 1, 0, Some(Over::Share)),
        ];
        for (commands, held, cost, node_held, want) in table {
            assert_eq!(over(commands, held, cost, node_held, &b), want);
        }
    }

    #[test]
    fn charges_share_the_budget_and_give_it_back() {
        let b = Budget::new(100, 150);
        let mut one = Charge::new(b.clone());
        let mut two = Charge::new(b.clone());
        assert_eq!(one.take(0, 80), Ok(()));
        assert_eq!(one.take(1, 30), Err(Over::Share));
        assert_eq!(two.take(0, 80), Err(Over::Node));
        assert_eq!(two.take(0, 70), Ok(()));
        assert_eq!(b.held(), 150);
        drop(one);
        assert_eq!(b.held(), 70);
        assert_eq!(two.take(1, 30), Ok(()));
        drop(two);
        assert_eq!(b.held(), 0);
    }
}
