//! Placement: who leads a write and who answers a read, as pure functions
//! of a partition's replicas and a liveness view.
//!
//! - A write is led by this node when it is one of the partition's
//!   replicas (it is always live to itself and costs no hop); otherwise it
//!   is forwarded to the live replicas in ring order, the first that takes
//!   it leading.
//! - Anything at a consistency level fails fast, before a byte is sent,
//!   when fewer replicas are live than the level needs: nothing was
//!   applied, which the error says.
//! - Reads ask live replicas, this node first.
//!
//! The async code asks these functions and moves bytes; the rules are
//! tested here without a network.

use tally_net::wire::Consistency;

use crate::ring::Replicas;

/// Where a write goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// This node leads; the partition's replicas.
    Lead(Replicas),
    /// Forward to these live replicas, in turn.
    Forward(Vec<usize>),
}

/// Too few live replicas for a consistency level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shortfall {
    /// Replicas the level needs.
    pub(crate) required: usize,
    /// Replicas of the partition.
    pub(crate) replicas: usize,
    /// The replicas that are down, in ring order.
    pub(crate) down: Vec<usize>,
}

/// Checks that `cl` can be met: `required` of `replicas` live, where `me`
/// is always live. Counts without allocating unless it fails: every add asks.
pub(crate) fn check(
    replicas: &[usize],
    me: usize,
    is_up: impl Fn(usize) -> bool,
    cl: Consistency,
) -> Result<(), Shortfall> {
    let required = cl.required(replicas.len());
    let live = |r: usize| r == me || is_up(r);
    if replicas.iter().filter(|&&r| live(r)).count() >= required {
        return Ok(());
    }
    Err(Shortfall {
        required,
        replicas: replicas.len(),
        down: replicas.iter().copied().filter(|&r| !live(r)).collect(),
    })
}

/// Who leads a write from a client: this node when it is a replica, else
/// the live replicas in turn. Fails fast when `cl` cannot be met.
pub(crate) fn route(
    replicas: Replicas,
    me: usize,
    is_up: impl Fn(usize) -> bool,
    cl: Consistency,
) -> Result<Route, Shortfall> {
    check(&replicas, me, &is_up, cl)?;
    Ok(if replicas.contains(&me) {
        Route::Lead(replicas)
    } else {
        Route::Forward(live_first(&replicas, me, is_up))
    })
}

/// The replicas of a write a peer forwarded here to lead: this node leads
/// if `cl` can be met in its own view, never forwarding again.
pub(crate) fn lead_here(
    replicas: Replicas,
    me: usize,
    is_up: impl Fn(usize) -> bool,
    cl: Consistency,
) -> Result<Replicas, Shortfall> {
    check(&replicas, me, is_up, cl)?;
    Ok(replicas)
}

/// The live replicas, `me` first when it is one, then the others in ring
/// order.
pub(crate) fn live_first(
    replicas: &[usize],
    me: usize,
    is_up: impl Fn(usize) -> bool,
) -> Vec<usize> {
    let mut live: Vec<usize> = replicas.iter().copied().filter(|&r| r == me).collect();
    live.extend(replicas.iter().copied().filter(|&r| r != me && is_up(r)));
    live
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use tally_net::wire::Consistency::{All, One, Quorum};

    /// Replicas 0, 1, 2 of a ring of five (3 and 4 hold other ranges).
    fn replicas() -> Replicas {
        let ids: Vec<String> = ["n1", "n2", "n3"].map(String::from).into();
        let ring = crate::ring::Ring::new(&ids, 4, 3);
        let r = ring.replicas(b"any");
        assert_eq!(r.len(), 3);
        r
    }

    fn up_except(down: &'static [usize]) -> impl Fn(usize) -> bool {
        move |r| !down.contains(&r)
    }

    /// One case: this node, the nodes down, the level, and the nodes the
    /// shortfall names (`None`: available).
    type Case = (
        usize,
        &'static [usize],
        Consistency,
        Option<&'static [usize]>,
    );

    #[test]
    fn availability_by_level_and_live_count() {
        let r = replicas();
        let cases: &[Case] = &[
            (0, &[], All, None),
            (0, &[1], All, Some(&[1])),
            (0, &[1], Quorum, None),
            (0, &[1, 2], Quorum, Some(&[1, 2])),
            (0, &[1, 2], One, None),
            // This node is live to itself whatever the view says.
            (0, &[0, 1], Quorum, None),
            // A coordinator outside the replicas counts none for itself.
            (7, &[0, 1, 2], One, Some(&[0, 1, 2])),
            (7, &[0, 1], One, None),
        ];
        for (me, down, cl, want) in cases {
            let got = check(&r, *me, up_except(down), *cl);
            match want {
                None => assert_eq!(got, Ok(()), "me {me}, down {down:?}, {cl}"),
                Some(d) => {
                    let mut want_down: Vec<usize> =
                        r.iter().copied().filter(|x| d.contains(x)).collect();
                    want_down.sort_unstable();
                    let mut got_down = got.expect_err("shortfall").down;
                    got_down.sort_unstable();
                    assert_eq!(got_down, want_down, "me {me}, {cl}");
                }
            }
        }
    }

    #[test]
    fn a_replica_leads_and_others_forward_to_live_replicas_in_ring_order() {
        let r = replicas();
        let me = r[1];
        assert_eq!(
            route(r.clone(), me, up_except(&[]), Quorum),
            Ok(Route::Lead(r.clone()))
        );
        let outsider = 9;
        assert_eq!(
            route(r.clone(), outsider, up_except(&[]), Quorum),
            Ok(Route::Forward(r.to_vec()))
        );
        let down = r[0];
        let want: Vec<usize> = r.iter().copied().filter(|&x| x != down).collect();
        assert_eq!(
            route(r.clone(), outsider, move |x| x != down, Quorum),
            Ok(Route::Forward(want))
        );
        // Forwarded here: lead, never forward again, but still check.
        assert_eq!(lead_here(r.clone(), me, up_except(&[]), All), Ok(r.clone()));
        let others: Vec<usize> = r.iter().copied().filter(|&x| x != me).collect();
        assert!(lead_here(r.clone(), me, move |x| !others.contains(&x), Quorum).is_err());
    }

    #[test]
    fn live_first_puts_this_node_first() {
        let r = replicas();
        let me = r[2];
        let live = live_first(&r, me, up_except(&[]));
        assert_eq!(live[0], me);
        assert_eq!(live[1..], [r[0], r[1]]);
        let first = r[0];
        let live = live_first(&r, me, move |x| x != first);
        assert_eq!(live.len(), 2);
    }
}
