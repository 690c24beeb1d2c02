//! Client authentication: users, passwords, roles, protected mode.
//!
//! Users come from `cluster.toml` (`[[cluster.auth.user]]`) and from an
//! optional users file (`[cluster.auth] users_file`, which `tallyd passwd`
//! writes); each has a name, an argon2id hash of its password (never the
//! password: see `password`) and a role (`access`). The users file is read
//! again when it changes, at the next connection or login on any port
//! (native, RESP `AUTH` and `HELLO AUTH`, metrics), and every second
//! ([`Auth::watch_file`]). A user deleted, or given a new password, loses
//! the connections it has open, and one given a new role has them served
//! with it, within about a second (see `revoke`); so are connections let
//! in while the node had no users, once users come. Once the file has users,
//! a node never drops them by accident: see `users::keep_previous`.
//!
//! With users, a connection serves nothing but logging in until it has
//! (native: `ClientOp::Auth`, answered `NoAuth` before; RESP: `AUTH`,
//! `HELLO ... AUTH`, answered `-NOAUTH` before), and then what its role
//! allows. A wrong password is answered only after a delay that doubles
//! with each failure in a row on the connection (`access::penalty`), is
//! logged with the user and the client's address but never the password,
//! and an unknown user costs the same hashing as a known one, so timing
//! does not tell which names exist. Failures are also limited per client
//! address and per user name across connections and ports (`throttle`).
//! Hash checks run on blocking threads, at most [`VERIFY_PARALLEL`] at
//! once, so a flood of logins cannot take the node's async threads; a
//! user's last good password is remembered (as a keyed digest) so clients
//! that reconnect do not pay the hash again.
//!
//! Without users every client is an administrator, as before there were
//! users, and (unless `protected_mode = false`) only clients on loopback
//! addresses are served, as Redis' protected mode: the node says so when
//! it starts.

pub mod access;
pub mod password;
pub mod revoke;
pub mod throttle;
pub mod users;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tally_net::log_limit::LogLimit;
use tokio::sync::Semaphore;
use tracing::{info, warn};

pub use crate::config::auth::{AuthConfig, UserEntry};
pub use access::{Need, Role};
pub use revoke::Ticket;
use revoke::Tickets;
pub use users::Users;

/// Password hash checks that may run at once.
pub const VERIFY_PARALLEL: usize = 2;
/// How often a node looks whether its users file changed.
pub const FILE_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// A login refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not logged in, and the node has users.
    NoAuth,
    /// Logged in, but the role does not allow it.
    NoPerm(Role),
}

/// One node's users and the state of its logins.
pub struct Auth {
    config: AuthConfig,
    users: RwLock<Arc<Users>>,
    /// The users file as last read; held while it is read again.
    file: Mutex<FileSeen>,
    /// Per user, a keyed digest of the last password that logged in.
    remembered: Mutex<HashMap<String, ring::hmac::Tag>>,
    secret: ring::hmac::Key,
    verifying: Semaphore,
    failures: LogLimit,
    /// The tickets of the logins of each user (see `revoke`).
    tickets: Tickets,
    /// The ticket of connections let in while the node has no users.
    without_users: Mutex<Arc<Ticket>>,
    /// Failed logins per address and per user (see `throttle`).
    throttle: Mutex<throttle::Throttle>,
    limited: LogLimit,
}

impl Auth {
    /// The users of `config` and of its users file.
    pub fn load(config: &AuthConfig) -> Result<Auth, String> {
        let loaded = Users::load(config)?;
        // A secret: the OS's random bytes, never a simulation's seeded ones.
        #[allow(clippy::disallowed_methods, reason = "a secret key")]
        let rng = ring::rand::SystemRandom::new();
        let secret = ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng)
            .map_err(|_| "no randomness for the login digests".to_string())?;
        Ok(Auth {
            config: config.clone(),
            users: RwLock::new(Arc::new(loaded.users)),
            file: Mutex::new(FileSeen {
                stamp: loaded.stamp,
                users: loaded.file.count(),
            }),
            remembered: Mutex::new(HashMap::new()),
            secret,
            verifying: Semaphore::new(VERIFY_PARALLEL),
            failures: LogLimit::per_second(),
            tickets: Tickets::default(),
            without_users: Mutex::new(Arc::new(Ticket::without_users())),
            throttle: Mutex::new(throttle::Throttle::new(tally_world::Instant::now())),
            limited: LogLimit::per_second(),
        })
    }

    /// Whether any user is configured (then every client must log in),
    /// after reading the users file again if it changed.
    pub fn has_users(&self) -> bool {
        self.reload_if_changed();
        !self.users.read().is_empty()
    }

    /// What a new connection may do before it logs in: everything without
    /// users (until users come: the ticket says so), nothing with them.
    pub fn initial(&self) -> Option<Arc<Ticket>> {
        self.reload_if_changed();
        let ticket = self.without_users.lock();
        // Read under the lock a change of the users takes to close it.
        self.users.read().is_empty().then(|| ticket.clone())
    }

    /// Whether a client at `peer` is served at all (protected mode).
    pub fn admits(&self, peer: IpAddr) -> bool {
        access::admits(self.has_users(), self.config.protected_mode, peer)
    }

    /// Logs what start-up should say about clients' access.
    pub fn announce(&self) {
        let users = self.users.read().len();
        match (users, self.config.protected_mode) {
            (0, true) => warn!(
                "no users are configured: protected mode, serving clients on loopback \
                 addresses only (add users under [cluster.auth], or set protected_mode = false)"
            ),
            (0, false) => warn!(
                "no users are configured and protected mode is off: anyone who reaches \
                 the client ports may do anything"
            ),
            (n, _) => info!(users = n, "clients must log in"),
        }
    }

    /// The ticket `user` logs in with (its role, until it changes), if
    /// `password` is its password. Slow on purpose when it is not; `peer`
    /// is for the log.
    pub async fn login(
        &self,
        user: &str,
        password: &str,
        peer: Option<SocketAddr>,
    ) -> Option<Arc<Ticket>> {
        self.reload_if_changed();
        let addr = peer.map(|p| p.ip());
        let now = tally_world::Instant::now();
        if let Err(why) = self.throttle.lock().may_try(addr, user, now) {
            if let Some(suppressed) = self.limited.admit() {
                warn!(user, client = ?peer, ?why, suppressed, "login refused unchecked: too many failed logins lately");
            }
            return None;
        }
        let entry = self.users.read().get(user).cloned();
        let msg = digest_input(user, password);
        if let Some(e) = &entry
            && let Some(tag) = self.remembered.lock().get(user)
            && ring::hmac::verify(&self.secret, &msg, tag.as_ref()).is_ok()
        {
            return self.ticket(e);
        }
        // An unknown user costs the same hashing as a known one.
        let phc = entry.as_ref().map(|e| e.password_hash.clone());
        let good = self.verify(phc, password.to_string()).await && entry.is_some();
        match entry {
            Some(e) if good => {
                let ticket = self.ticket(&e)?;
                let tag = ring::hmac::sign(&self.secret, &msg);
                self.remembered.lock().insert(user.to_string(), tag);
                Some(ticket)
            }
            _ => {
                let now = tally_world::Instant::now();
                self.throttle.lock().failed(addr, user, now);
                if let Some(suppressed) = self.failures.admit() {
                    warn!(user, client = ?peer, suppressed, "authentication failed: wrong user or password");
                }
                None
            }
        }
    }

    /// A ticket for a login checked against `verified`; `None` if the
    /// user was deleted or its password changed meanwhile.
    fn ticket(&self, verified: &UserEntry) -> Option<Arc<Ticket>> {
        self.tickets.issue(verified, || self.users.read().clone())
    }

    /// Reads the users file again whenever it changes, checking every
    /// second, so that a change reaches open connections without waiting
    /// for a login. Runs until the node stops.
    pub async fn watch_file(self: Arc<Self>) {
        if self.config.users_file.is_none() {
            return;
        }
        let mut tick = tokio::time::interval(FILE_CHECK_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let auth = self.clone();
            // Reading a file blocks: not on an async thread.
            let _ = tally_world::blocking(move || auth.reload_if_changed()).await;
        }
    }

    /// Whether `password` matches `phc` (the decoy's when `None`), checked
    /// on a blocking thread, at most [`VERIFY_PARALLEL`] at once.
    async fn verify(&self, phc: Option<String>, password: String) -> bool {
        let Ok(_permit) = self.verifying.acquire().await else {
            return false;
        };
        tally_world::blocking(move || {
            let phc = phc.as_deref().unwrap_or_else(|| users::decoy_hash());
            password::verify(phc, &password)
        })
        .await
        .unwrap_or(false)
    }

    /// Reads the users file again if it changed; one that no longer loads,
    /// or lost its users by accident (`users::keep_previous`), is logged
    /// and the users as they were are kept.
    fn reload_if_changed(&self) {
        let Some(path) = &self.config.users_file else {
            return;
        };
        let now = users::stamp(path);
        let mut seen = self.file.lock();
        if now == seen.stamp {
            return;
        }
        seen.stamp = now;
        let loaded = Users::load(&self.config);
        let read = loaded.as_ref().map(|l| l.file).map_err(String::as_str);
        if let Some(why) = users::keep_previous(seen.users, read) {
            warn!(file = %path.display(), "the users file changed and {why}: keeping the users as they were");
            return;
        }
        if let Ok(l) = loaded {
            info!(file = %path.display(), users = l.users.len(), "read the users file again");
            seen.users = l.file.count();
            let users = Arc::new(l.users);
            *self.users.write() = users.clone();
            self.remembered.lock().clear();
            if !users.is_empty() {
                let mut ticket = self.without_users.lock();
                ticket.close();
                *ticket = Arc::new(Ticket::without_users());
            }
            let reached = self.tickets.apply(&users);
            if reached != revoke::Reached::default() {
                info!(
                    closed = reached.closed,
                    changed = reached.changed,
                    "users deleted or with a new password lose their connections; \
                     users with a new role have it on theirs"
                );
            }
        }
    }
}

/// The users file as a node last read it.
struct FileSeen {
    /// Its stamp then.
    stamp: Option<users::Stamp>,
    /// How many users of the node it gave.
    users: usize,
}

/// What the remembered digest of a login covers.
fn digest_input(user: &str, password: &str) -> Vec<u8> {
    let mut msg = Vec::with_capacity(user.len() + 1 + password.len());
    msg.extend_from_slice(user.as_bytes());
    msg.push(0);
    msg.extend_from_slice(password.as_bytes());
    msg
}

/// One connection's login.
#[derive(Debug, Clone)]
pub struct Login {
    /// Without users: the ticket that lets it in as administrator until
    /// users come.
    without_users: Option<Arc<Ticket>>,
    /// Once logged in: the user's ticket, which says its role now.
    ticket: Option<Arc<Ticket>>,
    failures: u32,
}

impl Login {
    /// A new connection's: logged in as administrator without users.
    pub fn new(auth: &Auth) -> Login {
        Login {
            without_users: auth.initial(),
            ticket: None,
            failures: 0,
        }
    }

    /// A login with every right, as a node without users gives.
    #[cfg(test)]
    pub fn admin() -> Login {
        Login {
            without_users: Some(Arc::new(Ticket::without_users())),
            ticket: None,
            failures: 0,
        }
    }

    /// The user logged in, if any.
    pub fn user(&self) -> Option<&str> {
        self.ticket.as_deref().map(Ticket::user)
    }

    /// What the connection may do now: its user's role, as changed since
    /// it logged in; none once the user is deleted or has a new password.
    pub(crate) fn role(&self) -> Option<Role> {
        self.held().and_then(|t| t.role())
    }

    /// The ticket the connection is served under, if any.
    fn held(&self) -> Option<&Arc<Ticket>> {
        self.ticket.as_ref().or(self.without_users.as_ref())
    }

    /// Whether the connection must close: its user was deleted or given a
    /// new password since it logged in, or users came to a node that let
    /// it in without.
    pub fn revoked(&self) -> bool {
        self.held().is_some_and(|t| t.role().is_none())
    }

    /// Resolves once [`Login::revoked`] holds; never without a ticket.
    pub async fn until_revoked(&self) {
        match self.held() {
            Some(t) => t.closed().await,
            None => std::future::pending().await,
        }
    }

    /// What a revoked connection is told before it is closed.
    pub fn revoked_words(&self) -> String {
        match self.user() {
            Some(user) => format!(
                "user {user} was deleted or given a new password: this connection is closed, \
                 log in again"
            ),
            None => "users were added to this node: this connection, opened without a login, \
                 is closed; log in"
                .into(),
        }
    }

    /// Whether the connection may do what `need` asks.
    pub fn check(&self, need: Need) -> Result<(), Refusal> {
        access::permits(self.role(), need)
    }

    /// Whether the connection may run the RESP command `c` (`None`: one
    /// the table does not know) with the arguments `rest`
    /// ([`access::authorize`], the one rule every RESP path asks).
    pub(crate) fn authorize(
        &self,
        c: Option<&crate::base::commands::Command>,
        rest: &[Vec<u8>],
    ) -> Result<(), Refusal> {
        access::authorize(self.role(), c, rest)
    }

    /// Whether everything short of administration is allowed.
    pub fn may_write(&self) -> bool {
        self.role().is_some_and(|r| r.allows(Need::Write))
    }

    /// Logs in as `user`; on a wrong password, waits the penalty first
    /// and keeps the connection's login as it was. Credentials over the
    /// size limit are refused without hashing.
    pub async fn login(
        &mut self,
        auth: &Auth,
        user: &str,
        password: &str,
        peer: Option<SocketAddr>,
    ) -> bool {
        let max = tally_net::wire::CREDENTIAL_BYTES_MAX;
        let ticket = if user.len() > max || password.len() > max {
            None
        } else {
            auth.login(user, password, peer).await
        };
        match ticket {
            Some(ticket) => {
                self.ticket = Some(ticket);
                self.without_users = None;
                self.failures = 0;
                true
            }
            None => {
                self.refuse().await;
                false
            }
        }
    }

    /// Counts a failed login, and waits its penalty.
    pub async fn refuse(&mut self) {
        self.failures = self.failures.saturating_add(1);
        tokio::time::sleep(access::penalty(self.failures)).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    fn auth_with(users: &[(&str, &str, Role)]) -> Auth {
        let user = users
            .iter()
            .map(|(name, pw, role)| UserEntry {
                name: name.to_string(),
                password_hash: password::hash(pw).unwrap(),
                role: *role,
            })
            .collect();
        Auth::load(&AuthConfig {
            user,
            ..AuthConfig::default()
        })
        .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn logins_take_the_right_password_and_give_the_users_role() {
        let auth = auth_with(&[
            ("app", "pw1", Role::ReadWrite),
            ("ro", "pw2", Role::ReadOnly),
        ]);
        let mut login = Login::new(&auth);
        assert_eq!(login.check(Need::Read), Err(Refusal::NoAuth));
        assert_eq!(login.check(Need::Nothing), Ok(()));
        assert!(!login.login(&auth, "app", "wrong", None).await);
        assert!(!login.login(&auth, "nobody", "pw1", None).await);
        assert_eq!(login.check(Need::Read), Err(Refusal::NoAuth));
        assert!(login.login(&auth, "ro", "pw2", None).await);
        assert_eq!(login.check(Need::Read), Ok(()));
        assert_eq!(
            login.check(Need::Write),
            Err(Refusal::NoPerm(Role::ReadOnly))
        );
        // Again, from the remembered digest; a wrong one keeps the login.
        assert!(login.login(&auth, "app", "pw1", None).await);
        assert!(login.login(&auth, "app", "pw1", None).await);
        assert!(!login.login(&auth, "app", "pw2", None).await);
        assert_eq!(login.user(), Some("app"));
        assert!(login.may_write());
        assert_eq!(
            login.check(Need::Admin),
            Err(Refusal::NoPerm(Role::ReadWrite))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_users_everyone_is_admin_on_loopback() {
        let auth = auth_with(&[]);
        assert!(!auth.has_users());
        assert_eq!(Login::new(&auth).check(Need::Admin), Ok(()));
        assert!(auth.admits("127.0.0.1".parse().unwrap()));
        assert!(!auth.admits("192.168.1.2".parse().unwrap()));
    }

    #[tokio::test(start_paused = true)]
    async fn wrong_passwords_wait_longer_each_time() {
        let auth = auth_with(&[("app", "pw", Role::Admin)]);
        let mut login = Login::new(&auth);
        let start = tally_world::Instant::now();
        for _ in 0..3 {
            assert!(!login.login(&auth, "app", "no", None).await);
        }
        assert!(start.elapsed() >= std::time::Duration::from_millis(700));
        let huge = "x".repeat(tally_net::wire::CREDENTIAL_BYTES_MAX + 1);
        assert!(!login.login(&auth, "app", &huge, None).await);
        assert!(login.login(&auth, "app", "pw", None).await);
    }

    #[tokio::test(start_paused = true)]
    async fn connections_let_in_without_users_close_when_users_come() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users.toml");
        let auth = Auth::load(&AuthConfig {
            users_file: Some(path.clone()),
            ..AuthConfig::default()
        })
        .unwrap();
        let early = Login::new(&auth);
        assert_eq!(early.check(Need::Admin), Ok(()));
        assert!(!early.revoked());
        let entry = UserEntry {
            name: "app".into(),
            password_hash: password::hash("pw").unwrap(),
            role: Role::ReadWrite,
        };
        users::update_file(&path, "app", Some(entry), false).unwrap();
        assert!(auth.has_users());
        assert!(early.revoked());
        early.until_revoked().await;
        assert_eq!(early.check(Need::Read), Err(Refusal::NoAuth));
        assert!(early.revoked_words().contains("users were added"));
        let late = Login::new(&auth);
        assert!(
            !late.revoked(),
            "a new connection is not closed: it must log in"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_users_file_that_empties_or_goes_keeps_its_users() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users.toml");
        let entry = UserEntry {
            name: "app".into(),
            password_hash: password::hash("pw").unwrap(),
            role: Role::ReadWrite,
        };
        users::update_file(&path, "app", Some(entry), false).unwrap();
        let auth = Auth::load(&AuthConfig {
            users_file: Some(path.clone()),
            ..AuthConfig::default()
        })
        .unwrap();
        let changes: [(&str, &dyn Fn()); 3] = [
            ("emptied", &|| tally_world::fs::write(&path, "").unwrap()),
            ("removed", &|| tally_world::fs::remove_file(&path).unwrap()),
            ("unreadable", &|| {
                tally_world::fs::create_dir(&path).unwrap()
            }),
        ];
        for (what, change) in changes {
            change();
            let mut login = Login::new(&auth);
            assert_eq!(login.check(Need::Read), Err(Refusal::NoAuth), "{what}");
            assert!(auth.has_users(), "{what}");
            assert!(login.login(&auth, "app", "pw", None).await, "{what}");
        }
    }
}
