//! Certificates for client TLS: what each node's client ports present,
//! and what clients present when the nodes ask for one.
//!
//! - `<id>.clients.pem` / `.key`: a node's client ports. Its names are
//!   `localhost` and the IP addresses of the node's `client`, `resp` and
//!   `cql` listeners, so `redis-cli --tls --cacert ca.pem -h 127.0.0.1` and
//!   `tally --tls` check it without being told a name. Server
//!   authentication only, and it names no node: it can never pass as a
//!   peer (see `tally_net::identity`). Issued by `tallyd certs` when
//!   missing, due for renewal, or no longer naming the node's addresses.
//! - `clients/<name>.pem` / `.key`: `tallyd certs --client <name>`.
//!   Client authentication only; its one DNS name is `<name>.client.tally`,
//!   and a node id has no dot, so no client certificate names a node.
//!
//! Both are signed by the cluster CA (`certs`), valid for a year.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context, Result, bail};
use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, KeyUsagePurpose};
use tally_net::client_tls::ListenerFiles;
use tally_net::tls::TlsFiles;

use crate::config::NodeConfig;
use crate::security::certs::{self, NODE_CERT_DAYS};

/// The suffix of every client certificate's name.
pub const CLIENT_NAME_SUFFIX: &str = ".client.tally";

/// Paths of a node's client-port certificate and key.
pub fn listener_files(certs_dir: &Path, node_id: &str) -> (PathBuf, PathBuf) {
    (
        certs_dir.join(format!("{node_id}.clients.pem")),
        certs_dir.join(format!("{node_id}.clients.key")),
    )
}

/// Paths of a client certificate and key.
pub fn client_files(certs_dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let dir = certs_dir.join("clients");
    (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    )
}

/// The names a node's client-port certificate must bear: `localhost` and
/// its listeners' addresses (an unspecified address, `0.0.0.0`, names
/// nothing: such a node wants the operator's own certificate).
pub fn listener_names(node: &NodeConfig) -> Vec<String> {
    let mut ips: Vec<IpAddr> = [node.client.ip(), node.resp.ip()]
        .into_iter()
        .chain(node.cql.map(|a| a.ip()))
        .filter(|ip| !ip.is_unspecified())
        .collect();
    ips.sort();
    ips.dedup();
    std::iter::once("localhost".to_string())
        .chain(ips.iter().map(IpAddr::to_string))
        .collect()
}

/// Issues the client-port certificate of every node in `nodes` that lacks
/// one valid at `renew_at` for all its names; returns the files written.
pub fn ensure_listeners(
    certs_dir: &Path,
    cluster: &str,
    nodes: &[NodeConfig],
    renew_at: SystemTime,
) -> Result<Vec<PathBuf>> {
    let ca_cert = certs_dir.join("ca.pem");
    let due: Vec<&NodeConfig> = nodes
        .iter()
        .filter(|n| !listener_valid(&ca_cert, certs_dir, n, renew_at))
        .collect();
    if due.is_empty() {
        return Ok(Vec::new());
    }
    let issuer = issuer(certs_dir, cluster, "a client-port certificate")?;
    let mut written = Vec::new();
    for node in due {
        let (cert_path, key_path) = listener_files(certs_dir, &node.id);
        let names = listener_names(node);
        let cn = format!("tally {cluster} node {} client ports", node.id);
        let (cert, key) = issue(names, cn, ExtendedKeyUsagePurpose::ServerAuth, &issuer)?;
        certs::write_private(&key_path, &key)?;
        certs::write_public(&cert_path, &cert)?;
        written.extend([key_path, cert_path]);
    }
    Ok(written)
}

/// Issues (or issues again) the client certificate `name`; returns its
/// certificate and key paths.
pub fn issue_client(certs_dir: &Path, cluster: &str, name: &str) -> Result<(PathBuf, PathBuf)> {
    check_client_name(name)?;
    let issuer = issuer(certs_dir, cluster, "a client certificate")?;
    let (cert_path, key_path) = client_files(certs_dir, name);
    let dir = certs_dir.join("clients");
    tally_world::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let names = vec![format!("{name}{CLIENT_NAME_SUFFIX}")];
    let cn = format!("tally {cluster} client {name}");
    let (cert, key) = issue(names, cn, ExtendedKeyUsagePurpose::ClientAuth, &issuer)?;
    certs::write_private(&key_path, &key)?;
    certs::write_public(&cert_path, &cert)?;
    Ok((cert_path, key_path))
}

/// A client name: 1-64 of `[A-Za-z0-9_-]`.
pub fn check_client_name(name: &str) -> Result<()> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !ok {
        bail!("client name {name:?}: use 1 to 64 of A-Z, a-z, 0-9, _ and -");
    }
    Ok(())
}

/// The files a node's listeners use by default.
pub fn default_listener(certs_dir: &Path, node_id: &str) -> ListenerFiles {
    let (cert, key) = listener_files(certs_dir, node_id);
    ListenerFiles {
        cert,
        key,
        client_ca: None,
    }
}

fn listener_valid(ca_cert: &Path, certs_dir: &Path, node: &NodeConfig, at: SystemTime) -> bool {
    let (cert, key) = listener_files(certs_dir, &node.id);
    let files = TlsFiles {
        ca_cert: ca_cert.to_path_buf(),
        cert,
        key,
    };
    files.key.exists()
        && listener_names(node)
            .iter()
            .all(|name| tally_net::tls::verify_node_files(&files, name, at).is_ok())
}

fn issuer(certs_dir: &Path, cluster: &str, what: &str) -> Result<Issuer<'static, KeyPair>> {
    let ca_key = certs_dir.join("ca.key");
    if !ca_key.exists() {
        bail!(
            "issuing {what} needs the CA key {}: put it back and run `tallyd certs` again",
            ca_key.display()
        );
    }
    certs::load_issuer(&ca_key, certs::ca_params(cluster))
}

/// A certificate for `names`, for one purpose, signed by `issuer`, valid
/// for [`NODE_CERT_DAYS`], as (cert PEM, key PEM).
fn issue(
    names: Vec<String>,
    common_name: String,
    purpose: ExtendedKeyUsagePurpose,
    issuer: &Issuer<'_, KeyPair>,
) -> Result<(String, String)> {
    let mut params =
        CertificateParams::new(names.clone()).with_context(|| format!("names {names:?}"))?;
    certs::set_validity(&mut params, NODE_CERT_DAYS);
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![purpose];
    let key = KeyPair::generate().context("generate a key")?;
    let cert = params
        .signed_by(&key, issuer)
        .context("sign a certificate")?;
    Ok((cert.pem(), key.serialize_pem()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use rustls_pki_types::pem::PemObject;

    fn node(id: &str, client: &str, resp: &str) -> NodeConfig {
        NodeConfig {
            id: id.into(),
            peer: "127.0.0.1:1".parse().unwrap(),
            peer_bind: None,
            client: client.parse().unwrap(),
            resp: resp.parse().unwrap(),
            metrics: None,
            cql: None,
            data_dir: "d".into(),
            join: false,
        }
    }

    #[test]
    fn a_listener_certificate_names_its_addresses_and_is_renewed_when_they_change() {
        let dir = tempfile::tempdir().unwrap();
        let n1 = node("n1", "127.0.0.1:7201", "127.0.0.2:7301");
        certs::ensure(dir.path(), "c", &["n1".to_string()]).unwrap();
        let now = tally_world::wall();
        let written = ensure_listeners(dir.path(), "c", std::slice::from_ref(&n1), now).unwrap();
        assert_eq!(written.len(), 2);
        assert_eq!(listener_names(&n1), ["localhost", "127.0.0.1", "127.0.0.2"]);
        // Complete: nothing to do.
        assert!(
            ensure_listeners(dir.path(), "c", std::slice::from_ref(&n1), now)
                .unwrap()
                .is_empty()
        );
        // A new address: issued again.
        let moved = node("n1", "127.0.0.3:7201", "127.0.0.2:7301");
        assert_eq!(
            ensure_listeners(dir.path(), "c", &[moved], now)
                .unwrap()
                .len(),
            2
        );
        // And due for renewal a year on.
        let later = now + std::time::Duration::from_secs(86_400 * NODE_CERT_DAYS);
        assert_eq!(
            ensure_listeners(dir.path(), "c", &[n1], later)
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn client_names_are_checked_and_never_name_a_node() {
        assert!(check_client_name("app-1").is_ok());
        for bad in ["", "a.b", "a/b", &"x".repeat(65)] {
            assert!(check_client_name(bad).is_err(), "{bad:?}");
        }
        let dir = tempfile::tempdir().unwrap();
        certs::ensure(dir.path(), "c", &["n1".to_string()]).unwrap();
        let (cert, key) = issue_client(dir.path(), "c", "app").unwrap();
        assert!(cert.exists() && key.exists());
        let members = tally_net::identity::Members {
            ids: vec!["n1".into(), "app".into()],
            me: 0,
        };
        let der = rustls_pki_types::CertificateDer::from_pem_file(&cert).unwrap();
        assert!(tally_net::identity::node_of(&der, &members).is_err());
    }
}
