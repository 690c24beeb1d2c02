//! Mutual TLS for the peer transport.
//!
//! Every node holds the cluster CA's certificate, its own certificate (whose
//! subject alternative name is its node id) and its private key, as PEM
//! files. A node accepts a connection only from a client presenting a
//! certificate signed by the cluster CA, and connects only to a server that
//! presents one for the node id it dialled. Someone outside the cluster can
//! therefore neither join it nor inject shards; a certificate of the CA
//! that names no node is refused too (see [`crate::identity`]). The crypto
//! provider is ring, chosen explicitly: rustls' default builders panic when
//! two are compiled in.
//!
//! A private key readable by anyone but its owner is refused, with the
//! command that fixes it: a node never runs on a key others could copy.
//! The files are read again whenever they change (see [`crate::tls_reload`]).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::identity::{Members, NodeVerifier};

/// Where a node's TLS material lives.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The cluster CA's certificate (PEM).
    pub ca_cert: PathBuf,
    /// This node's certificate chain (PEM).
    pub cert: PathBuf,
    /// This node's private key (PEM).
    pub key: PathBuf,
}

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file is missing or unreadable or holds nothing usable.
    #[error("read {what} from {path}: {reason}")]
    Pem {
        /// Which file.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A private key file that group or others may read.
    #[error(
        "private key {path} is readable by group or others (mode {mode:04o}): run `chmod 600 {path}`",
        path = .path.display()
    )]
    KeyExposed {
        /// The key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// rustls refused the material.
    #[error("tls setup: {0}")]
    Rustls(String),
}

/// Client and server configurations for quinn, from one node's files.
pub struct TlsConfigs {
    /// Accepts only clients signed by the cluster CA.
    pub server: quinn::ServerConfig,
    /// Presents this node's certificate; trusts only the cluster CA.
    pub client: quinn::ClientConfig,
}

pub(crate) fn pem_err(what: &'static str, path: &Path, reason: impl ToString) -> TlsError {
    TlsError::Pem {
        what,
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

pub(crate) fn load_certs(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_err(what, path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_err(what, path, e))?;
    if certs.is_empty() {
        return Err(pem_err(what, path, "no certificate in the file"));
    }
    Ok(certs)
}

/// The key behind QUIC stateless resets, derived from the node's private
/// key so it survives a restart. A restarted node then answers packets of
/// its previous incarnation's connections with a reset its peers accept,
/// and they drop those connections at once instead of after an idle
/// timeout.
pub fn reset_key(files: &TlsFiles) -> Result<ring::hmac::Key, TlsError> {
    check_key_file(&files.key)?;
    let pem = std::fs::read(&files.key).map_err(|e| pem_err("node key", &files.key, e))?;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(b"tally stateless reset key\0");
    ctx.update(&pem);
    Ok(ring::hmac::Key::new(
        ring::hmac::HMAC_SHA256,
        ctx.finish().as_ref(),
    ))
}

/// Refuses a private key file that anyone but its owner may read (or that
/// cannot be looked at).
pub fn check_key_file(path: &Path) -> Result<(), TlsError> {
    let meta = std::fs::metadata(path).map_err(|e| pem_err("private key", path, e))?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(TlsError::KeyExposed {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

/// Builds the quinn configurations for a node of `members`: its server
/// accepts only clients whose certificate names another of them.
pub fn configs(
    files: &TlsFiles,
    transport: Arc<quinn::TransportConfig>,
    members: Arc<Members>,
) -> Result<TlsConfigs, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for ca in load_certs("CA certificate", &files.ca_cert)? {
        roots
            .add(ca)
            .map_err(|e| pem_err("CA certificate", &files.ca_cert, e))?;
    }
    let roots = Arc::new(roots);
    let chain = load_certs("node certificate", &files.cert)?;
    check_key_file(&files.key)?;
    let key =
        PrivateKeyDer::from_pem_file(&files.key).map_err(|e| pem_err("node key", &files.key, e))?;
    let rustls_err = |e: rustls::Error| TlsError::Rustls(e.to_string());

    let chain_verifier =
        WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let verifier = Arc::new(NodeVerifier::new(chain_verifier, members));
    let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(rustls_err)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain.clone(), key.clone_key())
        .map_err(rustls_err)?;
    server.alpn_protocols = crate::version::peer_alpns();
    let server = quinn::crypto::rustls::QuicServerConfig::try_from(server)
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(server));
    server.transport_config(transport.clone());

    let mut client = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(rustls_err)?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(rustls_err)?;
    client.alpn_protocols = crate::version::peer_alpns();
    let client = quinn::crypto::rustls::QuicClientConfig::try_from(client)
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let mut client = quinn::ClientConfig::new(Arc::new(client));
    client.transport_config(transport);
    Ok(TlsConfigs { server, client })
}

/// Whether `files` hold, at time `at`, a valid certificate for node `id`
/// under their CA (chain, validity period, name); see
/// [`crate::identity::verify_node_cert`].
pub fn verify_node_files(
    files: &TlsFiles,
    id: &str,
    at: std::time::SystemTime,
) -> Result<(), TlsError> {
    let ca = load_certs("CA certificate", &files.ca_cert)?;
    let chain = load_certs("node certificate", &files.cert)?;
    crate::identity::verify_node_cert(&ca[0], &chain[0], id, at)
        .map_err(|e| pem_err("node certificate", &files.cert, e))
}
