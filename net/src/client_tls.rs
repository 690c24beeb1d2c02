//! TLS on the client ports (native and RESP), over TCP.
//!
//! The node side presents a listener certificate (by default the one
//! `tallyd certs` issues each node for its client ports, naming its client
//! addresses' IPs and `localhost`) and may require clients to present a
//! certificate signed by a CA of its choice. The client side trusts the
//! CA it is given and checks the server's name: the address it dialled,
//! or the name it is told. TLS 1.2 and 1.3 are spoken, as Redis clients
//! expect; the crypto provider is ring, chosen explicitly (see
//! [`crate::tls`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::PrivateKeyDer;
use rustls_pki_types::pem::PemObject;

use crate::tls::{TlsError, check_key_file, load_certs, pem_err};

/// What a node's client listeners present, and whom they let in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerFiles {
    /// The listener's certificate chain (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM), readable by its owner only.
    pub key: PathBuf,
    /// Clients must present a certificate signed by this CA (PEM); `None`:
    /// no client certificate is asked for.
    pub client_ca: Option<PathBuf>,
}

/// What a client trusts, and the certificate it presents, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFiles {
    /// The CA the node's certificate must be signed by (PEM).
    pub ca: PathBuf,
    /// The client's certificate and key, for a node that asks for one.
    pub identity: Option<(PathBuf, PathBuf)>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn rustls_err(e: impl ToString) -> TlsError {
    TlsError::Rustls(e.to_string())
}

fn roots(what: &'static str, path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for ca in load_certs(what, path)? {
        roots.add(ca).map_err(|e| pem_err(what, path, e))?;
    }
    Ok(Arc::new(roots))
}

fn key(what: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    check_key_file(path)?;
    PrivateKeyDer::from_pem_file(path).map_err(|e| pem_err(what, path, e))
}

/// The rustls configuration of a node's client listeners.
pub fn server_config(files: &ListenerFiles) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain = load_certs("listener certificate", &files.cert)?;
    let key = key("listener key", &files.key)?;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(rustls_err)?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(
                roots("client CA certificate", ca)?,
                provider(),
            )
            .build()
            .map_err(rustls_err)?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder.with_single_cert(chain, key).map_err(rustls_err)?;
    Ok(Arc::new(config))
}

/// The rustls configuration of a client of the client ports.
pub fn client_config(files: &ClientFiles) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(rustls_err)?
        .with_root_certificates(roots("CA certificate", &files.ca)?);
    let config = match &files.identity {
        None => builder.with_no_client_auth(),
        Some((cert, key_path)) => builder
            .with_client_auth_cert(
                load_certs("client certificate", cert)?,
                key("client key", key_path)?,
            )
            .map_err(rustls_err)?,
    };
    Ok(Arc::new(config))
}
