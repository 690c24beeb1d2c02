//! Placement: who leads a write and who answers a read, as pure functions
//! of a partition's replicas and a view of them.
//!
//! - A write is led by a *writable* replica: up, and its storage taking
//!   writes (a node whose engine is poisoned stays up for reads but steps
//!   aside, telling its peers in its heartbeats). This node leads when it
//!   is one of the partition's replicas and can write (it costs no hop);
//!   otherwise it forwards to the writable replicas in ring order, the
//!   first that takes it leading ([`next_leader_may_try`]).
//! - A replica a peer forwarded a write to leads it itself or refuses it,
//!   never forwarding again; one that cannot write refuses it as not
//!   applied, so the coordinator tries the next.
//! - Anything at a consistency level fails fast, before a byte is sent,
//!   when fewer replicas can answer than the level needs: writable ones for
//!   a write, live ones for a read. Nothing was applied, which the error says.
//! - Reads ask live replicas, this node first.
//!
//! The async code asks these functions and moves bytes; the rules are
//! tested here without a network.

use tally_net::wire::{Consistency, ErrorKind, Outcome, WireError};

use crate::ring::Replicas;

/// What a node's view says of a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// It does not answer heartbeats.
    Down,
    /// Up, but its storage takes no writes (or it is being replaced): it
    /// leads none.
    ReadOnly,
    /// Up and taking writes.
    Writable,
    /// Up and taking writes, and leaving the ring (decommission): it
    /// leads a write only when no other replica can.
    Leaving,
}

impl State {
    fn live(self) -> bool {
        self != State::Down
    }

    fn writable(self) -> bool {
        matches!(self, State::Writable | State::Leaving)
    }
}

/// Where a write goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// This node leads; the partition's replicas.
    Lead(Replicas),
    /// Forward to these writable replicas, in turn.
    Forward(Vec<usize>),
}

/// Too few replicas can answer for a consistency level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shortfall {
    /// Replicas the level needs.
    pub(crate) required: usize,
    /// Replicas of the partition.
    pub(crate) replicas: usize,
    /// The replicas that are down, in ring order.
    pub(crate) down: Vec<usize>,
    /// The replicas that are up but cannot write (a write's shortfall
    /// only), in ring order.
    pub(crate) read_only: Vec<usize>,
}

/// Why a replica a write was forwarded to does not lead it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// This node is not one of the key's replicas (the sender's ring is
    /// not this node's).
    NotAReplica,
    /// This node cannot write.
    ReadOnly,
    /// Too few writable replicas in this node's view.
    Shortfall(Shortfall),
    /// An add with an operation id whose applier is another replica.
    NotTheApplier {
        /// The replica that applies it.
        applier: usize,
    },
}

/// Why an add with an operation id cannot be routed now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OnceRefusal {
    /// Too few writable replicas for the level.
    Shortfall(Shortfall),
    /// The one replica that applies it cannot now (down, or cannot write).
    ApplierUnavailable {
        /// The applier.
        applier: usize,
        /// What this node's view says of it.
        state: State,
    },
}

/// Checks that a read at `cl` can be met: `required` of `replicas` live.
/// Counts without allocating unless it fails: every read asks.
pub(crate) fn check(
    replicas: &[usize],
    state: impl Fn(usize) -> State,
    cl: Consistency,
) -> Result<(), Shortfall> {
    check_by(replicas, cl.required(replicas.len()), &state, State::live)
}

/// Checks that a write at `cl` can be met: `required` of the natural
/// replicas writable, and one more for each pending one (a ring change in
/// progress: the write must reach the node that will replace one).
/// Counts without allocating unless it fails: every add asks.
pub(crate) fn check_write(
    replicas: &Replicas,
    state: impl Fn(usize) -> State,
    cl: Consistency,
) -> Result<(), Shortfall> {
    let required = write_acks(replicas, cl);
    check_by(replicas.all(), required, &state, State::writable)
}

/// Answers a write at `cl` needs from `replicas`: the level's count of the
/// natural replicas, plus every pending one.
pub(crate) fn write_acks(replicas: &Replicas, cl: Consistency) -> usize {
    cl.required(replicas.len()) + replicas.pending().len()
}

fn check_by(
    replicas: &[usize],
    required: usize,
    state: &impl Fn(usize) -> State,
    counts: fn(State) -> bool,
) -> Result<(), Shortfall> {
    if replicas.iter().filter(|&&r| counts(state(r))).count() >= required {
        return Ok(());
    }
    let with = |s: State| {
        replicas
            .iter()
            .copied()
            .filter(|&r| state(r) == s)
            .collect()
    };
    Err(Shortfall {
        required,
        replicas: replicas.len(),
        down: with(State::Down),
        read_only: if counts(State::ReadOnly) {
            Vec::new()
        } else {
            with(State::ReadOnly)
        },
    })
}

/// Who leads a write from a client: this node when it is a writable
/// replica, else the writable replicas in turn. Fails fast when `cl`
/// cannot be met.
pub(crate) fn route(
    replicas: Replicas,
    me: usize,
    state: impl Fn(usize) -> State,
    cl: Consistency,
) -> Result<Route, Shortfall> {
    check_write(&replicas, &state, cl)?;
    let mine = replicas.contains(&me);
    if mine && state(me) == State::Writable {
        return Ok(Route::Lead(replicas));
    }
    let mut others = leaders_in_order(&replicas, &state);
    others.retain(|&r| r != me);
    let only_leaving = others.iter().all(|&r| state(r) == State::Leaving);
    Ok(if mine && state(me).writable() && only_leaving {
        Route::Lead(replicas)
    } else {
        Route::Forward(others)
    })
}

/// The writable natural replicas in the order they may lead: ring order,
/// a leaving one last (it leads only when no other can).
fn leaders_in_order(replicas: &Replicas, state: impl Fn(usize) -> State) -> Vec<usize> {
    let mut order: Vec<usize> = replicas
        .iter()
        .copied()
        .filter(|&r| state(r).writable())
        .collect();
    // Stable: ring order otherwise.
    order.sort_by_key(|&r| state(r) == State::Leaving);
    order
}

/// Who leads a change of a list: its first writable natural replica in
/// ring order (a leaving one only when no other can), here or forwarded,
/// so that changes through any coordinator meet under one cell lock and
/// none overwrites another it raced; after it, the others in turn (a list
/// is a last-writer-wins value: two leaders at once, during a failover,
/// may lose one change to the other). Fails fast when `cl` cannot be met.
pub(crate) fn route_first(
    replicas: Replicas,
    me: usize,
    state: impl Fn(usize) -> State,
    cl: Consistency,
) -> Result<Route, Shortfall> {
    check_write(&replicas, &state, cl)?;
    let mut order = leaders_in_order(&replicas, &state);
    if order.first() == Some(&me) {
        return Ok(Route::Lead(replicas));
    }
    order.retain(|&r| r != me);
    Ok(Route::Forward(order))
}

/// The replicas of a write a peer forwarded here to lead: this node leads
/// if it can write and `cl` can be met in its own view, never forwarding
/// again.
pub(crate) fn lead_here(
    replicas: Replicas,
    me: usize,
    state: impl Fn(usize) -> State,
    cl: Consistency,
) -> Result<Replicas, Refusal> {
    if !replicas.contains(&me) {
        return Err(Refusal::NotAReplica);
    }
    if !state(me).writable() {
        return Err(Refusal::ReadOnly);
    }
    check_write(&replicas, state, cl).map_err(Refusal::Shortfall)?;
    Ok(replicas)
}

/// Who applies an add with an operation id from a client: its applier
/// (`tally_net::once::applier`) alone, here or forwarded there. When the
/// applier cannot, no other replica may (it could apply the id a second
/// time): the add fails fast, not applied, and the client retries the id.
pub(crate) fn route_once(
    replicas: Replicas,
    me: usize,
    applier: usize,
    state: impl Fn(usize) -> State,
    cl: Consistency,
) -> Result<Route, OnceRefusal> {
    check_write(&replicas, &state, cl).map_err(OnceRefusal::Shortfall)?;
    let applier_state = state(applier);
    if !applier_state.writable() {
        return Err(OnceRefusal::ApplierUnavailable {
            applier,
            state: applier_state,
        });
    }
    Ok(if applier == me {
        Route::Lead(replicas)
    } else {
        Route::Forward(vec![applier])
    })
}

/// The replicas of an add with an operation id forwarded here: led only by
/// its applier, by the rules of [`lead_here`].
pub(crate) fn lead_once_here(
    replicas: Replicas,
    me: usize,
    applier: usize,
    state: impl Fn(usize) -> State,
    cl: Consistency,
) -> Result<Replicas, Refusal> {
    if replicas.contains(&me) && applier != me {
        return Err(Refusal::NotTheApplier { applier });
    }
    lead_here(replicas, me, state, cl)
}

/// Whether a coordinator that forwarded a write may send it to the next
/// writable replica after the leader it chose answered `e`: only when
/// nothing was applied, and only for what another leader may not share
/// (its storage, its view of who is up). An overflow or an invalid request
/// would fail at every leader alike.
pub(crate) fn next_leader_may_try(e: &WireError) -> bool {
    e.outcome == Outcome::NotApplied
        && matches!(e.kind, ErrorKind::Storage | ErrorKind::Unavailable)
}

/// The live replicas, `me` first when it is one, then the others in ring
/// order.
pub(crate) fn live_first(
    replicas: &[usize],
    me: usize,
    state: impl Fn(usize) -> State,
) -> Vec<usize> {
    let mut live: Vec<usize> = replicas.iter().copied().filter(|&r| r == me).collect();
    live.extend(
        replicas
            .iter()
            .copied()
            .filter(|&r| r != me && state(r).live()),
    );
    live
}

#[cfg(test)]
mod first_tests {
    use super::*;
    use State::{Down, Leaving, Writable};

    fn replicas() -> Replicas {
        Replicas::new(&[2, 0, 1], &[])
    }

    #[test]
    fn a_list_is_led_by_its_first_writable_replica_in_ring_order() {
        let q = Consistency::Quorum;
        let up = |_| Writable;
        assert_eq!(
            route_first(replicas(), 2, up, q),
            Ok(Route::Lead(replicas()))
        );
        assert_eq!(
            route_first(replicas(), 0, up, q),
            Ok(Route::Forward(vec![2, 1]))
        );
        assert_eq!(
            route_first(replicas(), 5, up, q),
            Ok(Route::Forward(vec![2, 0, 1]))
        );
        let first_down = |r| if r == 2 { Down } else { Writable };
        assert_eq!(
            route_first(replicas(), 0, first_down, q),
            Ok(Route::Lead(replicas()))
        );
        assert_eq!(
            route_first(replicas(), 1, first_down, q),
            Ok(Route::Forward(vec![0]))
        );
        let first_leaving = |r| if r == 2 { Leaving } else { Writable };
        assert_eq!(
            route_first(replicas(), 0, first_leaving, q),
            Ok(Route::Lead(replicas())),
            "a leaving replica leads only when no other can"
        );
        let two_down = |r| if r == 1 { Writable } else { Down };
        assert!(route_first(replicas(), 1, two_down, q).is_err());
        assert_eq!(
            route_first(replicas(), 1, two_down, Consistency::One),
            Ok(Route::Lead(replicas()))
        );
    }
}

#[cfg(test)]
mod once_tests {
    use super::*;
    use State::{Down, ReadOnly, Writable};

    /// Nodes 0, 1, 2 in some ring order.
    fn replicas() -> Replicas {
        let ids: Vec<String> = ["n1", "n2", "n3"].map(String::from).into();
        crate::ring::Ring::new(&ids, 4, 3).replicas(b"any")
    }

    #[test]
    fn an_add_with_an_id_goes_to_its_applier_alone() {
        let up = |_| Writable;
        let q = Consistency::Quorum;
        assert_eq!(
            route_once(replicas(), 1, 1, up, q),
            Ok(Route::Lead(replicas()))
        );
        assert_eq!(
            route_once(replicas(), 0, 2, up, q),
            Ok(Route::Forward(vec![2]))
        );
        // Not a replica itself: forwards to the applier too.
        assert_eq!(
            route_once(replicas(), 5, 0, up, q),
            Ok(Route::Forward(vec![0]))
        );
        // The applier down or read-only: fails fast, though others could lead.
        for (s, state) in [(Down, Down), (ReadOnly, ReadOnly)] {
            let view = |r| if r == 2 { s } else { Writable };
            assert_eq!(
                route_once(replicas(), 0, 2, view, Consistency::One),
                Err(OnceRefusal::ApplierUnavailable { applier: 2, state })
            );
        }
        // The level is checked first.
        let two_down = |r| if r == 0 { Writable } else { Down };
        assert!(matches!(
            route_once(replicas(), 0, 0, two_down, q),
            Err(OnceRefusal::Shortfall(_))
        ));
    }

    #[test]
    fn only_the_applier_leads_a_forwarded_add_with_an_id() {
        let up = |_| Writable;
        let q = Consistency::Quorum;
        assert_eq!(lead_once_here(replicas(), 1, 1, up, q), Ok(replicas()));
        assert_eq!(
            lead_once_here(replicas(), 1, 2, up, q),
            Err(Refusal::NotTheApplier { applier: 2 })
        );
        assert_eq!(
            lead_once_here(replicas(), 7, 7, up, q),
            Err(Refusal::NotAReplica)
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use State::{Down, ReadOnly, Writable};
    use tally_net::wire::Consistency::{All, One, Quorum};

    /// The replicas of a partition on a ring of three nodes: 0, 1, 2 in
    /// some ring order.
    fn replicas() -> Replicas {
        let ids: Vec<String> = ["n1", "n2", "n3"].map(String::from).into();
        let ring = crate::ring::Ring::new(&ids, 4, 3);
        let r = ring.replicas(b"any");
        assert_eq!(r.len(), 3);
        r
    }

    /// A view: the nodes down and the nodes read-only; every other writable.
    fn view(down: &'static [usize], ro: &'static [usize]) -> impl Fn(usize) -> State {
        move |r| {
            if down.contains(&r) {
                Down
            } else if ro.contains(&r) {
                ReadOnly
            } else {
                Writable
            }
        }
    }

    /// The members of `r` that are in `of`, in ring order.
    fn in_ring_order(r: &Replicas, of: &[usize]) -> Vec<usize> {
        r.iter().copied().filter(|x| of.contains(x)).collect()
    }

    /// One case: the nodes down, the nodes read-only, the level, and what
    /// the shortfall names, `(down, read_only)` (`None`: available).
    type Case = (
        &'static [usize],
        &'static [usize],
        Consistency,
        Option<(&'static [usize], &'static [usize])>,
    );

    #[test]
    fn a_write_needs_writable_replicas_a_read_live_ones() {
        let r = replicas();
        let writes: &[Case] = &[
            (&[], &[], All, None),
            (&[1], &[], All, Some((&[1], &[]))),
            (&[1], &[], Quorum, None),
            (&[1, 2], &[], Quorum, Some((&[1, 2], &[]))),
            (&[1, 2], &[], One, None),
            // A replica whose storage failed counts for no write.
            (&[], &[0], Quorum, None),
            (&[], &[0], All, Some((&[], &[0]))),
            (&[2], &[0], Quorum, Some((&[2], &[0]))),
            (&[], &[0, 1], Quorum, Some((&[], &[0, 1]))),
            (&[], &[0, 1, 2], One, Some((&[], &[0, 1, 2]))),
        ];
        for (down, ro, cl, want) in writes {
            let got = check_write(&r, view(down, ro), *cl);
            let want = want.map(|(d, o)| Shortfall {
                required: cl.required(3),
                replicas: 3,
                down: in_ring_order(&r, d),
                read_only: in_ring_order(&r, o),
            });
            assert_eq!(
                got,
                want.map_or(Ok(()), Err),
                "write, down {down:?}, ro {ro:?}, {cl}"
            );
        }
        let reads: &[Case] = &[
            // A read-only replica answers reads.
            (&[], &[0, 1, 2], All, None),
            (&[1], &[0, 2], Quorum, None),
            (&[1, 2], &[0], Quorum, Some((&[1, 2], &[]))),
            (&[0, 1, 2], &[], One, Some((&[0, 1, 2], &[]))),
        ];
        for (down, ro, cl, want) in reads {
            let got = check(&r, view(down, ro), *cl);
            let want = want.map(|(d, _)| Shortfall {
                required: cl.required(3),
                replicas: 3,
                down: in_ring_order(&r, d),
                read_only: Vec::new(),
            });
            assert_eq!(
                got,
                want.map_or(Ok(()), Err),
                "read, down {down:?}, ro {ro:?}, {cl}"
            );
        }
    }

    /// One case: this node, the nodes down, the nodes read-only, and the
    /// route (`None`: unavailable at `QUORUM`).
    type RouteCase = (
        usize,
        &'static [usize],
        &'static [usize],
        Option<Result<(), &'static [usize]>>,
    );

    #[test]
    fn a_writable_replica_leads_and_others_forward_to_writable_replicas_in_ring_order() {
        let r = replicas();
        let outsider = 9;
        // `Ok(())`: leads here; `Err(to)`: forwards to `to`, in ring order.
        let cases: &[RouteCase] = &[
            (0, &[], &[], Some(Ok(()))),
            (0, &[1], &[], Some(Ok(()))),
            (outsider, &[], &[], Some(Err(&[0, 1, 2]))),
            (outsider, &[0], &[], Some(Err(&[1, 2]))),
            (outsider, &[], &[1], Some(Err(&[0, 2]))),
            (outsider, &[0], &[1], None),
            // A replica that cannot write steps aside for the writable ones.
            (0, &[], &[0], Some(Err(&[1, 2]))),
            (0, &[2], &[0], None),
            (1, &[], &[1, 2], None),
        ];
        for (me, down, ro, want) in cases {
            let got = route(r.clone(), *me, view(down, ro), Quorum);
            let want = want.map(|w| match w {
                Ok(()) => Route::Lead(r.clone()),
                Err(to) => Route::Forward(in_ring_order(&r, to)),
            });
            match want {
                Some(w) => assert_eq!(got, Ok(w), "me {me}, down {down:?}, ro {ro:?}"),
                None => assert!(got.is_err(), "me {me}, down {down:?}, ro {ro:?}: {got:?}"),
            }
        }
    }

    #[test]
    fn a_leaving_replica_leads_only_when_no_other_can() {
        let r = replicas();
        let leaving = |l: usize, down: &'static [usize]| {
            move |x: usize| match x {
                _ if down.contains(&x) => Down,
                _ if x == l => State::Leaving,
                _ => Writable,
            }
        };
        let others = in_ring_order(&r, &[1, 2]);
        assert_eq!(
            route(r.clone(), 0, leaving(0, &[]), Quorum),
            Ok(Route::Forward(others.clone()))
        );
        // An outsider forwards to it last.
        let mut last = others.clone();
        last.push(0);
        assert_eq!(
            route(r.clone(), 9, leaving(0, &[]), Quorum),
            Ok(Route::Forward(last))
        );
        // Alone, it leads; and it counts as writable for the level.
        assert_eq!(
            route(r.clone(), 0, leaving(0, &[1, 2]), One),
            Ok(Route::Lead(r.clone()))
        );
        assert_eq!(check_write(&r, leaving(0, &[1]), Quorum), Ok(()));
        // Another replica leaving changes nothing for a writable one here.
        assert_eq!(
            route(r.clone(), 0, leaving(1, &[]), Quorum),
            Ok(Route::Lead(r.clone()))
        );
    }

    #[test]
    fn a_forwarded_write_is_led_here_or_refused_never_forwarded() {
        let r = replicas();
        assert_eq!(lead_here(r.clone(), 0, view(&[], &[]), All), Ok(r.clone()));
        // A node outside the key's replicas never leads it: its copy
        // would count toward the level without being one.
        assert_eq!(
            lead_here(r.clone(), 7, view(&[], &[]), One),
            Err(Refusal::NotAReplica)
        );
        assert_eq!(
            lead_here(r.clone(), 0, view(&[], &[0]), One),
            Err(Refusal::ReadOnly)
        );
        assert!(matches!(
            lead_here(r.clone(), 0, view(&[1], &[2]), Quorum),
            Err(Refusal::Shortfall(_))
        ));
    }

    #[test]
    fn the_next_leader_is_tried_only_after_nothing_was_applied() {
        use ErrorKind::{Internal, Invalid, Overflow, Storage, Timeout, Unavailable};
        let table = [
            (WireError::not_applied(Storage, "cannot write"), true),
            (WireError::new(Unavailable, "1 of 3 writable"), true),
            // Storage and unavailable errors of unknown outcome: never.
            (WireError::new(Storage, "fsync failed"), false),
            (WireError::unknown(Unavailable, "forward timed out"), false),
            (WireError::new(Timeout, "no answer"), false),
            (WireError::new(Internal, "bug"), false),
            // Not applied, but every leader would say the same.
            (WireError::new(Overflow, "too big"), false),
            (WireError::new(Invalid, "too long"), false),
        ];
        for (e, want) in table {
            assert_eq!(next_leader_may_try(&e), want, "{e:?}");
        }
    }

    #[test]
    fn live_first_puts_this_node_first() {
        let r = replicas();
        let me = r[2];
        let live = live_first(&r, me, view(&[], &[]));
        assert_eq!(live[0], me);
        assert_eq!(live[1..], [r[0], r[1]]);
        let first = r[0];
        let live = live_first(&r, me, move |x| if x == first { Down } else { Writable });
        assert_eq!(live.len(), 2);
        // A read-only replica still answers reads.
        let live = live_first(
            &r,
            me,
            move |x| if x == first { ReadOnly } else { Writable },
        );
        assert_eq!(live.len(), 3);
    }
}
