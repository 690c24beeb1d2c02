//! TLS on a node's client ports: the `[cluster.client_tls]` table.
//!
//! ```toml
//! [cluster.client_tls]
//! native = true          # the native client port speaks only TLS (default true)
//! resp = true            # the RESP port too (default true)
//! verify_clients = false # also require a client certificate (default false)
//! # Optional: the operator's own files; `{node}` is the node's id.
//! # cert = "/etc/tally/{node}.pem"
//! # key = "/etc/tally/{node}.key"
//! # client_ca = "/etc/tally/clients-ca.pem"
//! ```
//!
//! By default a node presents the client-port certificate `tallyd certs`
//! issues it (see `client_certs`) and, with `verify_clients`, takes client
//! certificates signed by the cluster CA (`tallyd certs --client NAME`).
//! A port with TLS speaks nothing else: a plaintext client fails its
//! handshake, which must complete within the request timeout. Passwords
//! still apply over TLS (see `auth`). Renewed files are taken up within
//! seconds, without a restart ([`watch`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use parking_lot::RwLock;
use tally_net::client_tls::{self, ListenerFiles};
use tally_net::tls::TlsFiles;
use tally_net::tls_reload;
use tokio_rustls::TlsAcceptor;

pub use crate::config::client_tls::ClientTlsConfig;

impl ClientTlsConfig {
    /// Resolves its paths against `base` (the config's directory).
    pub fn resolve(&mut self, base: &Path) {
        for p in [&mut self.cert, &mut self.key, &mut self.client_ca]
            .into_iter()
            .flatten()
        {
            *p = base.join(&*p);
        }
    }

    /// The files node `id` uses.
    pub fn files(&self, certs_dir: &Path, id: &str) -> ListenerFiles {
        let of_node = |p: &PathBuf| PathBuf::from(p.to_string_lossy().replace("{node}", id));
        let default = crate::security::client_certs::default_listener(certs_dir, id);
        let client_ca = self.verify_clients.then(|| {
            self.client_ca
                .as_ref()
                .map_or_else(|| certs_dir.join("ca.pem"), of_node)
        });
        ListenerFiles {
            cert: self.cert.as_ref().map_or(default.cert, of_node),
            key: self.key.as_ref().map_or(default.key, of_node),
            client_ca,
        }
    }
}

/// The client ports' TLS: the acceptor of the files as they were last
/// loaded. [`watch`] loads them again when they change, as the peer
/// transport does its own (`tally_net::tls_reload`): connections accepted
/// after that get the new certificate, open ones keep their session.
pub struct LiveTls {
    files: ListenerFiles,
    acceptor: RwLock<TlsAcceptor>,
}

impl LiveTls {
    /// Loads `files`.
    pub fn load(files: ListenerFiles) -> anyhow::Result<LiveTls> {
        let acceptor = RwLock::new(Self::build(&files)?);
        Ok(LiveTls { files, acceptor })
    }

    fn build(files: &ListenerFiles) -> anyhow::Result<TlsAcceptor> {
        let server = client_tls::server_config(files).map_err(|e| {
            anyhow::anyhow!(
                "client TLS: {e} (`tallyd certs` issues the client ports' certificates)"
            )
        })?;
        Ok(TlsAcceptor::from(server))
    }

    /// The acceptor for a new connection.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.read().clone()
    }

    /// What the files look like now (the client CA, or the certificate
    /// again when there is none; the certificate; the key).
    fn stamps(&self) -> tls_reload::Stamps {
        let f = &self.files;
        tls_reload::stamps(&TlsFiles {
            ca_cert: f.client_ca.clone().unwrap_or_else(|| f.cert.clone()),
            cert: f.cert.clone(),
            key: f.key.clone(),
        })
    }
}

/// Looks at `live`'s files until it is dropped, and loads them again
/// once they changed and settled (`tls_reload::watch_files`).
pub async fn watch(live: Weak<LiveTls>) {
    let Some((first, cert)) = live
        .upgrade()
        .map(|l| (l.stamps(), l.files.cert.display().to_string()))
    else {
        return;
    };
    let look = || live.upgrade().map(|l| l.stamps());
    let reload = || -> anyhow::Result<()> {
        if let Some(l) = live.upgrade() {
            *l.acceptor.write() = LiveTls::build(&l.files)?;
        }
        Ok(())
    };
    tls_reload::watch_files(tls_reload::Watch::new(first), look, reload, &cert).await
}

/// A port's TLS, if it speaks TLS.
pub type PortTls = Option<Arc<LiveTls>>;

/// The TLS of node `id`'s native and RESP ports (`None`: plain TCP),
/// watched for renewed files.
pub fn acceptors(
    config: Option<&ClientTlsConfig>,
    certs_dir: &Path,
    id: &str,
) -> anyhow::Result<(PortTls, PortTls, PortTls)> {
    let Some(c) = config else {
        return Ok((None, None, None));
    };
    let live = Arc::new(LiveTls::load(c.files(certs_dir, id))?);
    tokio::spawn(watch(Arc::downgrade(&live)));
    let port = |on: bool| on.then(|| live.clone());
    Ok((port(c.native), port(c.resp), port(c.cql)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_default_to_the_certs_dir_and_take_the_node_id() {
        let dir = Path::new("/c");
        let c = ClientTlsConfig::default();
        let f = c.files(dir, "n2");
        assert_eq!(f.cert, Path::new("/c/n2.clients.pem"));
        assert_eq!(f.key, Path::new("/c/n2.clients.key"));
        assert_eq!(f.client_ca, None);
        let own = ClientTlsConfig {
            verify_clients: true,
            cert: Some("/etc/t/{node}.pem".into()),
            key: Some("/etc/t/{node}.key".into()),
            ..ClientTlsConfig::default()
        };
        let f = own.files(dir, "n2");
        assert_eq!(f.cert, Path::new("/etc/t/n2.pem"));
        assert_eq!(f.client_ca.as_deref(), Some(Path::new("/c/ca.pem")));
    }

    #[test]
    fn half_a_key_pair_is_refused() {
        let c = ClientTlsConfig {
            cert: Some("a".into()),
            ..ClientTlsConfig::default()
        };
        assert_eq!(c.validate().map_err(|e| e.0), Err("cert"));
        let c = ClientTlsConfig {
            client_ca: Some("a".into()),
            ..ClientTlsConfig::default()
        };
        assert_eq!(c.validate().map_err(|e| e.0), Err("client_ca"));
    }
}
