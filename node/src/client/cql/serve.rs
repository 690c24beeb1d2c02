//! The CQL listener: each accepted connection gets its task
//! (`conn::connection`), under the node's caps on connections and on
//! those not logged in, and TLS when the port speaks it.

use std::sync::Arc;

use tokio::net::TcpListener;

use super::conn::connection;
use super::response::CqlError;
use super::shared::{Shared, watch};
use crate::client::accept::Doors;
use crate::client::accept::{ClientGate, Listener, accept_loop};
use crate::node::Node;

/// What a client off loopback is told without users, in protected mode.
const PROTECTED: &str = "Tally is running in protected mode: no users are configured, so only \
     clients on loopback addresses are served. Add users under [cluster.auth] (see `tallyd \
     passwd`), or set protected_mode = false.";

/// Serves CQL on `listener` until it fails.
pub(crate) async fn serve(
    listener: TcpListener,
    node: Arc<Node>,
    gate: Arc<ClientGate>,
    doors: Doors,
) {
    let shared = Arc::new(Shared::default());
    tokio::spawn(watch(node.clone(), shared.clone()));
    let l = Listener {
        what: "CQL",
        refusal: CqlError::Overloaded("Too many connections".into()).frame(0),
        refusal_anonymous: CqlError::Overloaded("Too many connections not logged in".into())
            .frame(0),
        protected: CqlError::Unauthorized(PROTECTED.into()).frame(0),
        auth: doors.auth,
        tls: doors.tls,
        handle: move |accepted| connection(accepted, shared.clone()),
    };
    accept_loop(listener, node, gate, l).await
}
