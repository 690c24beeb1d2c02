//! The security of `tally`'s connections (see
//! `tally_node::security::client_security`), set once at start.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::Result;
use tally_net::client::Security;
use tally_net::{Client, ClientError};
use tally_node::config::Config;
use tally_node::security::client_security::{Flags, security as from_flags};

static SECURITY: OnceLock<Security> = OnceLock::new();

/// Works out the security of every connection from the flags and, if it
/// loads, the config.
pub(crate) fn init(flags: &Flags, config: Option<&Config>) -> Result<()> {
    let _ = SECURITY.set(from_flags(flags, config)?);
    Ok(())
}

/// The security every connection uses.
pub(crate) fn security() -> Security {
    SECURITY.get().cloned().unwrap_or_default()
}

/// A connection to `addr`, secured as the flags say.
pub(crate) async fn dial(addr: SocketAddr, timeout: Duration) -> Result<Client, ClientError> {
    Client::connect_secure(addr, timeout, &security()).await
}
