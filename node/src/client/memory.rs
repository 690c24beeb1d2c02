//! Client connections in memory, for the simulator: a client's bytes go
//! through a pipe to the connection handler a port's socket would reach,
//! admitted by the same cap and logins, without TCP or TLS. Closing the
//! doors ends every connection through them, as a killed process's
//! sockets are closed under its clients.
//!
//! Connections run as tasks of the runtime's local set (the simulator
//! runs in one), where scripts run inline too (see `lua::runner`): a
//! connection must be made from a task of that set.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Result;
use parking_lot::Mutex;
use tokio::io::DuplexStream;
use tokio::task::JoinSet;

use crate::client::accept::{Accepted, ClientGate, Full, places};
use crate::client::cql::shared::{Shared, watch};
use crate::client::stream::Either;
use crate::client::{cql, resp};
use crate::node::Node;
use crate::security::auth::Auth;

/// Bytes a pipe holds in each direction before its writer waits.
const PIPE_BYTES: usize = 64 * 1024;

/// A node's client ports, in memory.
pub struct MemoryDoors {
    node: Arc<Node>,
    gate: Arc<ClientGate>,
    auth: Arc<Auth>,
    resp: resp::Port,
    /// What the CQL port's connections share (prepared statements,
    /// events), as a listener's do.
    cql: Arc<Shared>,
    /// Whether the CQL port's watch of the cluster (for its events)
    /// runs: from its first connection on.
    watching: AtomicBool,
    /// The connections' tasks, ended when the doors close.
    tasks: Mutex<JoinSet<()>>,
}

impl MemoryDoors {
    /// `node`'s doors: its users as its configuration names them, its
    /// connections capped at `clients_max`.
    pub fn new(node: &Arc<Node>) -> Result<MemoryDoors> {
        let config = node.config();
        let auth = Auth::load(&config.cluster.auth).map_err(anyhow::Error::msg)?;
        Ok(MemoryDoors {
            node: node.clone(),
            gate: ClientGate::new(config.cluster.limits.clients_max),
            auth: Arc::new(auth),
            resp: resp::Port::new(node),
            cql: Arc::new(Shared::default()),
            watching: AtomicBool::new(false),
            tasks: Mutex::new(JoinSet::new()),
        })
    }

    /// A new connection to the RESP port: the client's end of its pipe.
    pub fn resp(&self) -> io::Result<DuplexStream> {
        let (client, accepted) = self.accept()?;
        let port = self.resp.clone();
        self.spawn(port.connection(accepted));
        Ok(client)
    }

    /// A new connection to the CQL port: the client's end of its pipe.
    pub fn cql(&self) -> io::Result<DuplexStream> {
        let (client, accepted) = self.accept()?;
        if !self.watching.swap(true, Ordering::Relaxed) {
            self.spawn(watch(self.node.clone(), self.cql.clone()));
        }
        self.spawn(cql::conn::connection(accepted, self.cql.clone()));
        Ok(client)
    }

    /// Ends every connection: their clients read the end of their pipes.
    pub fn close(&self) {
        self.tasks.lock().abort_all();
    }

    /// Admits a connection as a port does (the cap, and a place among
    /// those not logged in where the node has users).
    fn accept(&self) -> io::Result<(DuplexStream, Accepted)> {
        let login_timeout = self.node.config().cluster.limits.login_timeout();
        let (slot, anonymous) = places(&self.gate, &self.auth, login_timeout).map_err(|full| {
            let what = match full {
                Full::Clients => "clients",
                Full::Anonymous => "clients not logged in",
            };
            io::Error::other(format!("max number of {what} reached"))
        })?;
        let (client, server) = tokio::io::duplex(PIPE_BYTES);
        let accepted = Accepted {
            stream: Either::Memory(server),
            node: self.node.clone(),
            slot,
            auth: self.auth.clone(),
            anonymous,
        };
        Ok((client, accepted))
    }

    fn spawn(&self, connection: impl Future<Output = ()> + Send + 'static) {
        let mut tasks = self.tasks.lock();
        // Ended connections are reaped here, so the set holds open ones.
        while tasks.try_join_next().is_some() {}
        tasks.spawn_local(connection);
    }
}

impl Drop for MemoryDoors {
    fn drop(&mut self) {
        self.close();
    }
}
