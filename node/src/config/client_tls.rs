//! The `[cluster.client_tls]` table (`security::client_tls` serves it).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The `[cluster.client_tls]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClientTlsConfig {
    /// TLS on the native client port.
    pub native: bool,
    /// TLS on the RESP port.
    pub resp: bool,
    /// TLS on the CQL port.
    pub cql: bool,
    /// Clients must present a certificate signed by `client_ca`.
    pub verify_clients: bool,
    /// The ports' certificate chain; `{node}` is the node id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert: Option<PathBuf>,
    /// Its private key; `{node}` is the node id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
    /// The CA client certificates must be signed by (default: the cluster's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_ca: Option<PathBuf>,
}

impl Default for ClientTlsConfig {
    fn default() -> Self {
        ClientTlsConfig {
            native: true,
            resp: true,
            cql: true,
            verify_clients: false,
            cert: None,
            key: None,
            client_ca: None,
        }
    }
}

impl ClientTlsConfig {
    /// The first thing wrong with the table, as (key, reason).
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.cert.is_some() != self.key.is_some() {
            return Err(("cert", "give both cert and key, or neither".into()));
        }
        if self.client_ca.is_some() && !self.verify_clients {
            return Err(("client_ca", "set only with verify_clients = true".into()));
        }
        Ok(())
    }
}
