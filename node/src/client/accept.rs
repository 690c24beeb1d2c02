//! Accepting client connections: protected mode, the node's cap on them,
//! and their TLS handshake.
//!
//! Without users (and with protected mode on, see `auth`), a client off
//! loopback is told why and closed before it takes a slot.
//! Both listeners (native and RESP) share one [`ClientGate`]: a connection
//! holds a [`ClientSlot`] for as long as it is open. One that finds no
//! slot free is accepted only to be refused, so that its client learns why
//! at once instead of waiting in the listen backlog: it gets the
//! listener's last word (RESP: `-ERR max number of clients reached`, as
//! Redis says; native: an error frame) and is closed, giving its file
//! descriptor back. Refusals and failed accepts are logged at most once a
//! second each, with a count of those held back.
//!
//! Where the node has users, a connection also holds an [`Anonymous`]
//! place until it logs in: at most `limits::anonymous_max` of the slots,
//! so connections that never log in cannot take every slot, and one over
//! that is refused at once as above (RESP: `-ERR max number of clients not
//! logged in reached`). Its place carries the connection's login deadline.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tally_world::Instant;
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, warn};

use crate::client::stream::{ClientStream, Either};
use crate::config::limits::Limits;
use crate::node::Node;
use crate::security::auth::{Auth, Login};
use crate::security::client_tls::LiveTls;
use tally_net::log_limit::LogLimit;

/// What a listener's connections need besides the node: its users, and
/// TLS if the port speaks it.
#[derive(Clone)]
pub struct Doors {
    /// The node's users.
    pub auth: Arc<Auth>,
    /// TLS on the port, if any.
    pub tls: Option<Arc<LiveTls>>,
}

/// How often a flood of refusals or failed accepts may log a line.
const LOG_INTERVAL: Duration = Duration::from_secs(1);
/// Pause after a failed accept (out of file descriptors and the like).
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// The node's client connections: at most `max` open at once.
///
/// # Invariants
/// - `open <= max`: a slot is only taken below `max`, and given back once.
#[derive(Debug)]
pub struct ClientGate {
    max: usize,
    open: AtomicUsize,
    /// Most connections not logged in at once.
    anonymous_max: usize,
    /// Connections not logged in now (each holds a slot too).
    anonymous: AtomicUsize,
    refusals: LogLimit,
}

/// A connection's place among those not logged in yet, and its login
/// deadline; dropped once it logs in.
#[derive(Debug)]
pub struct Anonymous {
    gate: Arc<ClientGate>,
    deadline: Instant,
}

impl Anonymous {
    /// When the connection must have logged in.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

impl Drop for Anonymous {
    fn drop(&mut self) {
        self.gate.anonymous.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Resolves at `anonymous`'s login deadline; never once logged in.
pub async fn login_deadline(anonymous: &Option<Anonymous>) {
    match anonymous {
        Some(a) => tokio::time::sleep_until(a.deadline).await,
        None => std::future::pending().await,
    }
}

/// Why a connection must close before its next request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closing {
    /// Its user was deleted or given a new password.
    Revoked,
    /// It did not log in by its deadline.
    NoLogin,
}

impl Closing {
    /// What the client is told.
    pub(crate) fn words(self, login: &Login, limits: &Limits) -> String {
        match self {
            Closing::Revoked => login.revoked_words(),
            Closing::NoLogin => limits.login_timeout_words(),
        }
    }
}

/// Whether a connection logged in as `login`, with its place among those
/// not logged in `anonymous`, must close at `now`; frees that place once
/// it has logged in.
pub(crate) fn closing(
    login: &Login,
    anonymous: &mut Option<Anonymous>,
    now: Instant,
) -> Option<Closing> {
    if login.revoked() {
        return Some(Closing::Revoked);
    }
    if login.user().is_some() {
        *anonymous = None;
    }
    let late = anonymous.as_ref().is_some_and(|a| a.deadline <= now);
    late.then_some(Closing::NoLogin)
}

/// Resolves when a connection waiting for its next request must close
/// (after [`closing`] said it need not yet).
pub(crate) async fn until_closing(login: &Login, anonymous: &Option<Anonymous>) -> Closing {
    tokio::select! {
        () = login.until_revoked() => Closing::Revoked,
        () = login_deadline(anonymous) => Closing::NoLogin,
    }
}

/// One open client connection's place under the cap; dropping it frees it.
#[derive(Debug)]
pub struct ClientSlot(Arc<ClientGate>);

impl ClientSlot {
    /// Connections open now on this node.
    pub fn open_now(&self) -> usize {
        self.0.open()
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ClientGate {
    /// A gate that holds at most `max` connections.
    pub fn new(max: usize) -> Arc<ClientGate> {
        Arc::new(ClientGate {
            max,
            open: AtomicUsize::new(0),
            anonymous_max: crate::config::limits::anonymous_max(max),
            anonymous: AtomicUsize::new(0),
            refusals: LogLimit::every(LOG_INTERVAL),
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// A slot for a new connection, if one is free.
    pub fn admit(self: &Arc<Self>) -> Option<ClientSlot> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| ClientSlot(self.clone()))
    }

    /// A place among the connections not logged in, if one is free; the
    /// connection must log in within `login_timeout`.
    pub fn admit_anonymous(self: &Arc<Self>, login_timeout: Duration) -> Option<Anonymous> {
        self.anonymous
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.anonymous_max).then_some(n + 1)
            })
            .ok()
            .map(|_| Anonymous {
                gate: self.clone(),
                deadline: Instant::now() + login_timeout,
            })
    }

    fn log_refusal(&self, listener: &str, reached: &str) {
        if let Some(suppressed) = self.refusals.admit() {
            warn!(
                listener,
                clients_max = self.max,
                anonymous_max = self.anonymous_max,
                suppressed,
                "refused a client connection: max number of {reached} reached"
            );
        }
    }
}

/// What a listener tells the connections it refuses, how it secures and
/// serves the ones it admits.
pub(crate) struct Listener<F> {
    /// For logs: `client` or `RESP`.
    pub(crate) what: &'static str,
    /// Sent to a connection over the cap before it is closed.
    pub(crate) refusal: Vec<u8>,
    /// Sent to a connection over the cap of those not logged in.
    pub(crate) refusal_anonymous: Vec<u8>,
    /// Sent to a client off loopback in protected mode before it is closed.
    pub(crate) protected: Vec<u8>,
    /// The node's users.
    pub(crate) auth: Arc<Auth>,
    /// TLS on this port, if any.
    pub(crate) tls: Option<Arc<LiveTls>>,
    /// Serves one admitted connection, holding its slot until it ends.
    pub(crate) handle: F,
}

/// An admitted connection, its TLS handshake done, and what serving it takes.
pub(crate) struct Accepted {
    /// The connection.
    pub(crate) stream: ClientStream,
    /// The node.
    pub(crate) node: Arc<Node>,
    /// Its place under the cap.
    pub(crate) slot: ClientSlot,
    /// The node's users.
    pub(crate) auth: Arc<Auth>,
    /// Until it logs in (where the node has users).
    pub(crate) anonymous: Option<Anonymous>,
}

/// Accepts connections until the listener fails; runs `l.handle` on each
/// admitted one in its own task (after its TLS handshake, which must end
/// within the request timeout), refuses the others.
pub(crate) async fn accept_loop<F, Fut>(
    listener: TcpListener,
    node: Arc<Node>,
    gate: Arc<ClientGate>,
    l: Listener<F>,
) where
    F: Fn(Accepted) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let failures = LogLimit::every(LOG_INTERVAL);
    let protected = LogLimit::every(LOG_INTERVAL);
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: back off, keep serving.
                if let Some(suppressed) = failures.admit() {
                    warn!(listener = l.what, error = %e, suppressed, "accept failed");
                }
                tokio::time::sleep(ACCEPT_RETRY).await;
                continue;
            }
        };
        if !l.auth.admits(peer.ip()) {
            if let Some(suppressed) = protected.admit() {
                warn!(listener = l.what, client = %peer, suppressed, "refused a client off loopback: protected mode (no users configured)");
            }
            refuse(stream, &l.protected);
            continue;
        }
        let login_timeout = node.config().cluster.limits.login_timeout();
        let (slot, anonymous) = match places(&gate, &l.auth, login_timeout) {
            Ok(places) => places,
            Err(Full::Clients) => {
                gate.log_refusal(l.what, "clients");
                refuse(stream, &l.refusal);
                continue;
            }
            Err(Full::Anonymous) => {
                gate.log_refusal(l.what, "clients not logged in");
                refuse(stream, &l.refusal_anonymous);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (node, auth, tls, handle) = (
            node.clone(),
            l.auth.clone(),
            l.tls.clone(),
            l.handle.clone(),
        );
        tokio::spawn(async move {
            let stream = match tls {
                None => Either::Plain(stream),
                Some(tls) => {
                    let deadline = node.config().cluster.limits.request_timeout();
                    let accept = tls.acceptor().accept(stream);
                    match tokio::time::timeout(deadline, accept).await {
                        Ok(Ok(s)) => Either::Tls(Box::new(s)),
                        Ok(Err(e)) => {
                            return debug!(client = %peer, error = %e, "TLS handshake failed");
                        }
                        Err(_) => return debug!(client = %peer, "TLS handshake timed out"),
                    }
                }
            };
            handle(Accepted {
                stream,
                node,
                slot,
                auth,
                anonymous,
            })
            .await
        });
    }
}

/// Which places a new connection lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Full {
    /// Every client slot is taken.
    Clients,
    /// Those for connections not logged in are.
    Anonymous,
}

/// A new connection's slot and, where the node has users, its place
/// among those not logged in (with a deadline `login_timeout` away).
pub(crate) fn places(
    gate: &Arc<ClientGate>,
    auth: &Auth,
    login_timeout: Duration,
) -> Result<(ClientSlot, Option<Anonymous>), Full> {
    let slot = gate.admit().ok_or(Full::Clients)?;
    if !auth.has_users() {
        return Ok((slot, None));
    }
    match gate.admit_anonymous(login_timeout) {
        Some(a) => Ok((slot, Some(a))),
        None => Err(Full::Anonymous),
    }
}

/// Sends the last word and closes. A fresh socket's send buffer is empty,
/// so the few bytes go out without waiting; closing at once gives the file
/// descriptor back before the next accept.
fn refuse(stream: TcpStream, last_word: &[u8]) {
    let _ = stream.try_write(last_word);
    drop(stream);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn slots_are_capped_and_given_back() {
        let gate = ClientGate::new(2);
        let a = gate.admit().unwrap();
        let b = gate.admit().unwrap();
        assert!(gate.admit().is_none(), "a third over a cap of two");
        assert_eq!(gate.open(), 2);
        drop(a);
        let c = gate.admit().unwrap();
        assert!(gate.admit().is_none());
        drop((b, c));
        assert_eq!(gate.open(), 0);
        assert!(ClientGate::new(0).admit().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn connections_not_logged_in_get_half_the_slots_and_a_deadline() {
        let gate = ClientGate::new(4);
        let timeout = Duration::from_secs(10);
        let a = gate.admit_anonymous(timeout).unwrap();
        let _b = gate.admit_anonymous(timeout).unwrap();
        assert!(gate.admit_anonymous(timeout).is_none(), "a third of four");
        assert_eq!(a.deadline(), Instant::now() + timeout);
        drop(a);
        let c = Some(gate.admit_anonymous(timeout).unwrap());
        let start = Instant::now();
        login_deadline(&c).await;
        assert_eq!(start.elapsed(), timeout);
        let never = tokio::time::timeout(Duration::from_secs(3600), login_deadline(&None));
        assert!(never.await.is_err(), "a login has no deadline");
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_closes_when_late_to_log_in_or_revoked() {
        use crate::security::auth::{AuthConfig, Role, UserEntry, password};
        let gate = ClientGate::new(4);
        let timeout = Duration::from_secs(10);
        let auth = Auth::load(&AuthConfig {
            user: vec![UserEntry {
                name: "app".into(),
                password_hash: password::hash("pw").unwrap(),
                role: Role::ReadWrite,
            }],
            ..AuthConfig::default()
        })
        .unwrap();
        let mut login = Login::new(&auth);
        let mut anonymous = gate.admit_anonymous(timeout);
        let now = Instant::now();
        assert_eq!(closing(&login, &mut anonymous, now), None);
        let late = now + timeout;
        assert_eq!(
            closing(&login, &mut anonymous, late),
            Some(Closing::NoLogin)
        );
        let waited = until_closing(&login, &anonymous).await;
        assert_eq!(waited, Closing::NoLogin);
        // Logged in: the place is given back, the deadline gone.
        assert!(login.login(&auth, "app", "pw", None).await);
        assert_eq!(closing(&login, &mut anonymous, late), None);
        assert!(anonymous.is_none());
        assert_eq!(gate.anonymous.load(Ordering::Acquire), 0);
    }
}
