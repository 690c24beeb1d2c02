//! The acceptor's side of agreement: a partition's Paxos state, changed by
//! the rules of `tally_model::paxos` under its cell's lock, and durable
//! here before the answer (what an acceptor promises or accepts must
//! survive its crash, or two values could be decided). The state lives in
//! the cell of the partition's reserved column (`cell::agreed`).

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};

use super::Engine;
use crate::error::Result;
use crate::key::Key;
use crate::unique;
use tally_model::paxos::{Accepted, Acceptor, Ballot, Promise};

impl Engine {
    /// A prepare of `ballot` for `partition`: promised, durable here, with
    /// what this node accepted and knows committed; or rejected with the
    /// later ballot it promised.
    pub async fn prepare(&self, partition: &[u8], ballot: Ballot) -> Result<Promise> {
        self.agree_with(partition, |a| {
            let promise = a.prepare(ballot);
            let granted = matches!(promise, Promise::Promised { .. });
            (granted, promise)
        })
        .await
    }

    /// A proposal for `partition`: accepted, durable here; or rejected with
    /// the later ballot this node promised.
    pub async fn accept(&self, partition: &[u8], proposal: Accepted) -> Result<Result<(), Ballot>> {
        self.agree_with(partition, |a| {
            let answer = a.accept(proposal);
            (answer.is_ok(), answer)
        })
        .await
    }

    /// A value decided for `partition`: kept if later than the one this
    /// node knows committed, durable here once it returns if it is logged
    /// at all ([`commit_logs`]).
    pub async fn commit(&self, partition: &[u8], decided: Accepted) -> Result<()> {
        self.agree_with(partition, |a| (commit_logs(a, decided), ()))
            .await
    }

    /// [`Engine::commit`], without waiting until it is durable: it goes
    /// with the next group commit. What a proposer tells its own node: a
    /// commit need not survive a crash (the next prepare finishes a value
    /// accepted and not known committed), and nobody waits for it.
    pub fn commit_unwaited(&self, partition: &[u8], decided: Accepted) -> Result<()> {
        let ((), logged) = self.agree_logged(partition, |a| (commit_logs(a, decided), ()))?;
        if let Some(logged) = logged {
            self.let_go(logged);
        }
        Ok(())
    }

    /// Merges another replica's Paxos state of `partition` into this
    /// node's, each part the later (`Acceptor::merge`), durable here once
    /// it returns; whether it changed. How agreed state moves with a
    /// range to a new replica.
    pub async fn merge_agreed(&self, partition: &[u8], theirs: &Acceptor) -> Result<bool> {
        self.agree_with(partition, |a| {
            let before = a.clone();
            a.merge(theirs);
            let changed = *a != before;
            (changed, changed)
        })
        .await
    }

    /// A page of this node's Paxos states of the partitions `wanted`
    /// says, in key order after partition `after`: at most `max_states`,
    /// and about `max_bytes` of registers; with the partition to go on
    /// after when the page ended before the states did. Blocking (a scan):
    /// call it off an async runtime's threads.
    pub fn agreed_states(
        &self,
        after: Option<&[u8]>,
        wanted: impl Fn(&[u8]) -> bool,
        (max_states, max_bytes): (usize, usize),
    ) -> Result<AgreedPage> {
        let after = after.map(unique::count_key).transpose()?;
        let mut page = AgreedPage::default();
        let mut bytes = 0;
        self.scan(after.as_ref(), |k, c| {
            let Some(a) = c.agreed() else {
                return ControlFlow::Continue(());
            };
            if !wanted(k.partition()) {
                return ControlFlow::Continue(());
            }
            bytes += a.committed.value.size() + a.accepted.as_ref().map_or(0, |x| x.value.size());
            page.states.push((k.partition().to_vec(), (**a).clone()));
            if page.states.len() >= max_states || bytes >= max_bytes {
                page.more = Some(k.partition().to_vec());
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        })?;
        Ok(page)
    }

    /// This node's Paxos state of `partition` (a default one if it has
    /// none): what a read at QUORUM compares across replicas.
    pub fn agreed(&self, partition: &[u8]) -> Result<Acceptor> {
        let cell = self.get(&unique::count_key(partition)?)?;
        Ok(cell.agreed().map(|a| (**a).clone()).unwrap_or_default())
    }

    /// Whether this node's Paxos state of `key`'s partition holds a
    /// register in any of `columns` (a key's string: the empty column; a
    /// hash's string field: the field's; a column the node keeps) live at
    /// `now_ms`, committed or accepted, as far as the cell cache shows (no
    /// disk is read: a state not cached answers false). The add path's
    /// cheap check that a counter is not started beside a string: an
    /// agreed key in use has its state cached on every replica, each round
    /// touching it. A partition no round here saw hold a register answers
    /// at once ([`StringFilter`]).
    pub fn holds_register_cached(&self, key: &Key, columns: &[&[u8]], now_ms: u64) -> bool {
        if !self.strings.may_hold(key.partition_hash()) {
            return false;
        }
        let Ok(count) = unique::count_key(key.partition()) else {
            return false;
        };
        self.cache
            .peek(&count, |cell| {
                cell.agreed()
                    .is_some_and(|a| columns.iter().any(|c| holds_string(a, c, now_ms)))
            })
            .unwrap_or(false)
    }

    /// Runs `rule` on the partition's Paxos state under its cell lock; when
    /// it says so, logs the cell and waits until it is durable. A rule
    /// that grants a promise or an acceptance always logs, even when the
    /// state did not change (the same ballot again): the answer then waits
    /// for a record of it, never for one still in flight.
    async fn agree_with<T>(
        &self,
        partition: &[u8],
        rule: impl FnOnce(&mut Acceptor) -> (bool, T),
    ) -> Result<T> {
        let (answer, logged) = self.agree_logged(partition, rule)?;
        if let Some(logged) = logged {
            self.durable(logged).await?;
        }
        Ok(answer)
    }

    /// [`Engine::agree_with`]'s rule and record, without the wait: the
    /// answer, and the record to wait for if the rule logged one.
    fn agree_logged<T>(
        &self,
        partition: &[u8],
        rule: impl FnOnce(&mut Acceptor) -> (bool, T),
    ) -> Result<(T, Option<super::logged::Logged>)> {
        self.check_writable()?;
        let key: Key = unique::count_key(partition)?;
        self.cache.with_cell(&key, |cached, v| {
            let (log, answer) = rule(cached.cell.agreed_mut());
            if cached.cell.agreed().is_some_and(|a| holds_any_register(a)) {
                self.strings.saw(key.partition_hash());
            }
            if !log {
                return Ok::<_, crate::error::Error>((answer, None));
            }
            cached.mark_written(&key, v);
            let logged = self.log_cell(&key, &cached.cell, v)?;
            Ok((answer, Some(logged)))
        })?
    }
}

/// A page of Paxos states (`Engine::agreed_states`).
#[derive(Debug, Default)]
pub struct AgreedPage {
    /// Partitions and their states, in key order.
    pub states: Vec<(Vec<u8>, Acceptor)>,
    /// The partition to go on after, if there may be more.
    pub more: Option<Vec<u8>>,
}

/// Applies the value `decided` to `a`; whether the state must be logged.
/// A commit of the very value this node accepted (the same ballot) is
/// kept in the cached state only, and reaches disk with the cell's next
/// record or a flush of it: lost to a crash first, the state reads as
/// that value accepted and not known committed, which the next prepare
/// or read finishes (the value a quorum accepted is decided either way). So a
/// commit that tells acceptors what they accepted, nearly every one,
/// costs them no log record. A commit of a value this node lacks is
/// logged, as it carries news.
fn commit_logs(a: &mut Acceptor, decided: Accepted) -> bool {
    let before = a.committed.ballot;
    let accepted_it = a
        .accepted
        .as_ref()
        .is_some_and(|x| x.ballot == decided.ballot);
    a.commit(decided);
    a.committed.ballot != before && !accepted_it
}

/// Whether `a` holds a string in `column` live at `now_ms`, committed or
/// accepted.
fn holds_string(a: &Acceptor, column: &[u8], now_ms: u64) -> bool {
    let live = |x: &Accepted| x.value.get(column, now_ms).is_some();
    live(&a.committed) || a.accepted.as_ref().is_some_and(live)
}

/// Whether `a` holds a register in any column, committed or accepted,
/// expired or not: a client's string or hash field, or one the node keeps
/// in a reserved column (a sorted set, the round history). What sets the
/// [`StringFilter`]'s bit, which only sends the add path to look.
fn holds_any_register(a: &Acceptor) -> bool {
    !a.committed.value.0.is_empty() || a.accepted.as_ref().is_some_and(|x| !x.value.0.is_empty())
}

/// Bits of partition hashes a round here saw hold a register, never
/// cleared: a clear bit says a partition's state holds none (as far as
/// this node's rounds went since it started), so the add path skips the
/// cache for nearly every counter; a set one (the partition's, or another
/// of the same bit) sends it to look.
pub(crate) struct StringFilter(Box<[AtomicU64]>);

/// Bits in a [`StringFilter`].
const FILTER_BITS: usize = 1 << 16;

impl Default for StringFilter {
    fn default() -> StringFilter {
        StringFilter((0..FILTER_BITS / 64).map(|_| AtomicU64::new(0)).collect())
    }
}

impl StringFilter {
    fn place(hash: u64) -> (usize, u64) {
        let bit = (hash as usize) % FILTER_BITS;
        (bit / 64, 1 << (bit % 64))
    }

    /// Notes that the partition of `hash` holds a string.
    fn saw(&self, hash: u64) {
        let (word, bit) = StringFilter::place(hash);
        self.0[word].fetch_or(bit, Ordering::Relaxed);
    }

    /// Whether the partition of `hash` may hold a string.
    fn may_hold(&self, hash: u64) -> bool {
        let (word, bit) = StringFilter::place(hash);
        self.0[word].load(Ordering::Relaxed) & bit != 0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use crate::options::Options;
    use tally_model::paxos::{Register, Registers};

    fn ballot(ms: u64) -> Ballot {
        Ballot {
            ms,
            seq: 0,
            proposer: 7,
        }
    }

    fn at(ms: u64, v: &str) -> Accepted {
        Accepted {
            ballot: ballot(ms),
            value: Registers(vec![Register {
                column: Vec::new(),
                value: v.as_bytes().to_vec(),
                at_ms: 0,
            }]),
        }
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn only_a_commit_of_a_value_not_accepted_here_is_logged() {
        let mut a = Acceptor::default();
        assert!(
            a.prepare(ballot(5))
                != Promise::Rejected {
                    promised: ballot(5)
                }
        );
        a.accept(at(5, "alice")).unwrap();
        // What it accepted: marked in memory, nothing to log.
        assert!(!commit_logs(&mut a.clone(), at(5, "alice")));
        // A value it never accepted (it missed the round): news, logged.
        assert!(commit_logs(&mut a.clone(), at(6, "bob")));
        assert!(commit_logs(&mut Acceptor::default(), at(5, "alice")));
        // A commit it knew already: no change, nothing to log.
        commit_logs(&mut a, at(5, "alice"));
        assert!(!commit_logs(&mut a, at(5, "alice")));
        assert_eq!((a.accepted, a.committed), (None, at(5, "alice")));
    }

    #[test]
    fn a_string_in_the_cached_state_is_seen_by_the_add_path() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(dir.path(), Options::default()).unwrap();
        let (k, other) = (
            Key::new(b"k", b"").unwrap(),
            Key::new(b"other", b"").unwrap(),
        );
        assert!(!e.holds_register_cached(&k, &[b""], 0));
        runtime().block_on(async {
            e.accept(b"k", at(5, "alice")).await.unwrap().unwrap();
            // Accepted, not yet known decided: it counts.
            assert!(e.holds_register_cached(&k, &[b""], 0));
            e.commit(b"k", at(5, "alice")).await.unwrap();
            assert!(e.holds_register_cached(&k, &[b""], 0));
            let none = Accepted {
                ballot: ballot(6),
                value: Registers::default(),
            };
            e.commit(b"k", none).await.unwrap();
        });
        assert!(!e.holds_register_cached(&k, &[b""], 0), "deleted");
        assert!(!e.holds_register_cached(&other, &[b""], 0));
    }

    #[test]
    fn a_register_in_a_reserved_column_is_seen_where_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(dir.path(), Options::default()).unwrap();
        let k = Key::new(b"k", b"").unwrap();
        let set = Accepted {
            ballot: ballot(5),
            value: Registers(vec![Register {
                column: b"\xff\xffset".to_vec(),
                value: b"members".to_vec(),
                at_ms: 0,
            }]),
        };
        runtime().block_on(async { e.commit(b"k", set).await.unwrap() });
        assert!(!e.holds_register_cached(&k, &[b""], 0));
        assert!(e.holds_register_cached(&k, &[b"", b"\xff\xffset"], 0));
    }

    #[test]
    fn states_merge_in_and_page_out_in_key_order() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(dir.path(), Options::default()).unwrap();
        runtime().block_on(async {
            for p in ["a", "b", "c", "d"] {
                e.commit(p.as_bytes(), at(5, p)).await.unwrap();
            }
            // Another replica's later state wins part by part; an equal
            // or older one changes nothing.
            let theirs = Acceptor {
                promised: ballot(9),
                accepted: Some(at(8, "b2")),
                committed: at(7, "b1"),
            };
            assert!(e.merge_agreed(b"b", &theirs).await.unwrap());
            assert!(!e.merge_agreed(b"b", &theirs).await.unwrap());
            let older = Acceptor {
                committed: at(1, "old"),
                ..Acceptor::default()
            };
            assert!(!e.merge_agreed(b"a", &older).await.unwrap());
            assert_eq!(e.agreed(b"b").unwrap(), theirs);
        });
        // A counter beside them is no state.
        let counter = Key::new(b"bb", b"").unwrap();
        runtime()
            .block_on(crate::engine::test_support::add_one(&e, &counter, 1))
            .unwrap();
        let names = |page: &AgreedPage| -> Vec<String> {
            page.states
                .iter()
                .map(|(p, _)| String::from_utf8(p.clone()).unwrap())
                .collect()
        };
        let wanted = |p: &[u8]| p != b"c";
        let first = e.agreed_states(None, wanted, (2, usize::MAX)).unwrap();
        assert_eq!(
            (names(&first), first.more.clone()),
            (vec!["a".into(), "b".into()], Some(b"b".to_vec()))
        );
        let rest = e
            .agreed_states(first.more.as_deref(), wanted, (2, usize::MAX))
            .unwrap();
        assert_eq!((names(&rest), rest.more), (vec!["d".to_string()], None));
        // A byte budget ends a page too.
        let small = e.agreed_states(None, |_| true, (100, 1)).unwrap();
        assert_eq!(names(&small), ["a"]);
        // A cell of nothing but agreed state is marked as such.
        let only = e.get(&unique::count_key(b"a").unwrap()).unwrap();
        assert!(only.holds_only_agreed());
        assert!(!e.get(&counter).unwrap().holds_only_agreed());
    }

    #[test]
    fn promises_accepts_and_news_of_commits_survive_a_restart_and_a_flush() {
        let dir = tempfile::tempdir().unwrap();
        let rt = runtime();
        {
            let e = Engine::open(dir.path(), Options::default()).unwrap();
            rt.block_on(async {
                assert!(matches!(
                    e.prepare(b"lock", ballot(5)).await.unwrap(),
                    Promise::Promised { accepted: None, .. }
                ));
                e.accept(b"lock", at(5, "alice")).await.unwrap().unwrap();
                e.commit(b"other", at(3, "bob")).await.unwrap();
            });
            e.close().unwrap();
        }
        // Replayed from the commit log.
        let e = Engine::open(dir.path(), Options::default()).unwrap();
        let lock = e.agreed(b"lock").unwrap();
        assert_eq!(lock.promised, ballot(5));
        assert_eq!(lock.accepted, Some(at(5, "alice")));
        assert_eq!(e.agreed(b"other").unwrap().committed, at(3, "bob"));
        rt.block_on(async {
            assert_eq!(
                e.prepare(b"lock", ballot(4)).await.unwrap(),
                Promise::Rejected {
                    promised: ballot(5)
                }
            );
            assert_eq!(
                e.accept(b"lock", at(4, "eve")).await.unwrap(),
                Err(ballot(5))
            );
            e.commit(b"lock", at(5, "alice")).await.unwrap();
        });
        // The commit of what it accepted is in the cached state only.
        let lock = e.agreed(b"lock").unwrap();
        assert_eq!((lock.accepted, lock.committed), (None, at(5, "alice")));
        // Read back from an SSTable: the value accepted, not known
        // committed, which the next prepare or read finishes.
        e.flush().unwrap();
        e.close().unwrap();
        let e = Engine::open(dir.path(), Options::default()).unwrap();
        let lock = e.agreed(b"lock").unwrap();
        assert_eq!(lock.accepted, Some(at(5, "alice")));
        assert_eq!(lock.promised, ballot(5));
        assert_eq!(e.agreed(b"other").unwrap().committed, at(3, "bob"));
        assert_eq!(e.agreed(b"never").unwrap(), Acceptor::default());
        // The partition's counter view is untouched: no counter there.
        let count = e.get(&unique::count_key(b"lock").unwrap()).unwrap();
        assert!(!count.exists());
    }
}
