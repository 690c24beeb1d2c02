//! Revocation: what a change to a user does to the connections it has
//! open, as Redis' `ACL DELUSER` and `ACL SETUSER` do.
//!
//! A login gets a [`Ticket`] for its user as the node knew it then. When
//! the users change (the users file read again: at a login, or by the
//! node's check every second), every user's ticket is judged by
//! [`verdict`]: deleting the user or changing its password closes the
//! ticket, and every connection holding it stops and is closed with a word
//! why; a new role is taken by the ticket, so its connections are served
//! with the new role from their next command. A connection reads its
//! ticket (one atomic load) before each command, and waits on its closing
//! while idle, so an idle connection is closed too.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use parking_lot::Mutex;
use tokio::sync::watch;

use super::access::Role;
use super::users::{UserEntry, Users};

/// What a change of a user does to the connections logged in as it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing they would notice changed.
    Keep,
    /// They go on with this role.
    Role(Role),
    /// They are closed: the user is gone, or its password changed.
    Close,
}

/// The verdict on connections that logged in as `held` when the user is
/// now `now` (`None`: deleted). A new password hash is a new password:
/// `tallyd passwd` keeps the hash when the password stays.
pub fn verdict(held: &UserEntry, now: Option<&UserEntry>) -> Verdict {
    match now {
        None => Verdict::Close,
        Some(now) if now.password_hash != held.password_hash => Verdict::Close,
        Some(now) if now.role != held.role => Verdict::Role(now.role),
        Some(_) => Verdict::Keep,
    }
}

/// What the connections of one user's logins hold: its role now, or that
/// they must close.
///
/// # Invariants
/// - Once closed, a ticket stays closed (its role reads `None`).
#[derive(Debug)]
pub struct Ticket {
    user: String,
    /// `CLOSED`, or a role's code (see [`code`]).
    state: AtomicU8,
    closed: watch::Sender<bool>,
}

const CLOSED: u8 = 0;

fn code(role: Role) -> u8 {
    match role {
        Role::ReadOnly => 1,
        Role::ReadWrite => 2,
        Role::Admin => 3,
    }
}

impl Ticket {
    /// The ticket of the connections a node without users lets in as
    /// administrators; closed when users come.
    pub(super) fn without_users() -> Ticket {
        Ticket {
            user: "default".into(),
            state: AtomicU8::new(code(Role::Admin)),
            closed: watch::Sender::new(false),
        }
    }

    /// Closes it: its connections stop.
    pub(super) fn close(&self) {
        self.apply(Verdict::Close);
    }

    fn new(entry: &UserEntry) -> Ticket {
        Ticket {
            user: entry.name.clone(),
            state: AtomicU8::new(code(entry.role)),
            closed: watch::Sender::new(false),
        }
    }

    /// The role its connections have now; `None` once closed.
    pub fn role(&self) -> Option<Role> {
        match self.state.load(Ordering::Acquire) {
            1 => Some(Role::ReadOnly),
            2 => Some(Role::ReadWrite),
            3 => Some(Role::Admin),
            _ => None,
        }
    }

    /// The user it is for.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// Resolves once the ticket is closed (at once if it is).
    pub async fn closed(&self) {
        let mut rx = self.closed.subscribe();
        let _ = rx.wait_for(|closed| *closed).await;
    }

    fn apply(&self, v: Verdict) {
        match v {
            Verdict::Keep => {}
            Verdict::Role(role) => {
                // Never reopens a closed ticket.
                let _ = self
                    .state
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                        (s != CLOSED).then_some(code(role))
                    });
            }
            Verdict::Close => {
                self.state.store(CLOSED, Ordering::Release);
                self.closed.send_replace(true);
            }
        }
    }
}

/// The tickets of a node's logins, one per user (for the user as it is
/// now), with the entry each stands for.
#[derive(Debug, Default)]
pub struct Tickets(Mutex<HashMap<String, (UserEntry, Arc<Ticket>)>>);

/// How many users' connections a change of the users reached.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reached {
    /// Users whose connections are closed.
    pub closed: usize,
    /// Users whose connections have a new role.
    pub changed: usize,
}

impl Tickets {
    /// A ticket for a login verified against `verified`, if the user is
    /// still so in `users` (the users now, read under the same lock that
    /// [`Tickets::apply`] holds, so no change slips between).
    pub fn issue(
        &self,
        verified: &UserEntry,
        users: impl FnOnce() -> Arc<Users>,
    ) -> Option<Arc<Ticket>> {
        let mut map = self.0.lock();
        let users = users();
        let now = users.get(&verified.name)?;
        if verdict(verified, Some(now)) == Verdict::Close {
            return None;
        }
        let (entry, ticket) = map
            .entry(now.name.clone())
            .or_insert_with(|| (now.clone(), Arc::new(Ticket::new(now))));
        debug_assert_eq!(entry, now, "a ticket outlived a change of its user");
        Some(ticket.clone())
    }

    /// Judges every ticket against `users` (the users now): closes or
    /// changes them, and forgets those no connection holds.
    pub fn apply(&self, users: &Users) -> Reached {
        let mut reached = Reached::default();
        self.0.lock().retain(|name, (entry, ticket)| {
            let v = verdict(entry, users.get(name));
            ticket.apply(v);
            match v {
                Verdict::Close => reached.closed += 1,
                Verdict::Role(_) => reached.changed += 1,
                Verdict::Keep => {}
            }
            if let (Verdict::Role(_), Some(now)) = (v, users.get(name)) {
                *entry = now.clone();
            }
            v != Verdict::Close && Arc::strong_count(ticket) > 1
        });
        reached
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    fn entry(name: &str, hash: &str, role: Role) -> UserEntry {
        UserEntry {
            name: name.into(),
            password_hash: hash.into(),
            role,
        }
    }

    #[test]
    fn a_deleted_user_or_a_new_password_closes_a_new_role_is_taken() {
        let held = entry("app", "h1", Role::ReadWrite);
        let table = [
            (None, Verdict::Close),
            (Some(entry("app", "h2", Role::ReadWrite)), Verdict::Close),
            (Some(entry("app", "h2", Role::Admin)), Verdict::Close),
            (
                Some(entry("app", "h1", Role::ReadOnly)),
                Verdict::Role(Role::ReadOnly),
            ),
            (
                Some(entry("app", "h1", Role::Admin)),
                Verdict::Role(Role::Admin),
            ),
            (Some(held.clone()), Verdict::Keep),
        ];
        for (now, want) in table {
            assert_eq!(verdict(&held, now.as_ref()), want, "{now:?}");
        }
    }

    #[tokio::test]
    async fn tickets_close_and_change_with_their_user() {
        let users = |entries: &[UserEntry]| Arc::new(Users::from_entries(entries.to_vec()));
        let (app, ro) = (
            entry("app", "h1", Role::ReadWrite),
            entry("ro", "h3", Role::ReadOnly),
        );
        let tickets = Tickets::default();
        let before = users(&[app.clone(), ro.clone()]);
        let a = tickets.issue(&app, || before.clone()).unwrap();
        let r = tickets.issue(&ro, || before.clone()).unwrap();
        assert_eq!(a.role(), Some(Role::ReadWrite));
        // The app's password changes; ro becomes an administrator.
        let after = users(&[
            entry("app", "h2", Role::ReadWrite),
            entry("ro", "h3", Role::Admin),
        ]);
        let reached = tickets.apply(&after);
        assert_eq!(
            reached,
            Reached {
                closed: 1,
                changed: 1
            }
        );
        assert_eq!(a.role(), None);
        a.closed().await;
        assert_eq!(r.role(), Some(Role::Admin));
        // A login checked against the old password gets no ticket.
        assert!(tickets.issue(&app, || after.clone()).is_none());
        // A later change of role does not reopen a closed ticket.
        a.apply(Verdict::Role(Role::Admin));
        assert_eq!(a.role(), None);
        // Deleting ro closes its ticket; nothing is left to judge.
        assert_eq!(tickets.apply(&users(&[])).closed, 1);
        assert_eq!(r.role(), None);
        assert!(tickets.0.lock().is_empty());
    }
}
