//! The cluster's certificate authority and node certificates.
//!
//! `tallyd certs` (and `tallyd up`, when they are missing) writes into the
//! config's `certs_dir`:
//!
//! ```text
//! ca.pem  ca.key         the cluster CA (self-signed; the key signs nodes)
//! <id>.pem  <id>.key     one per node; the certificate's DNS name is the id
//! ```
//!
//! A node presents `<id>.pem` both as a server and as a client, and trusts
//! only `ca.pem`: two clusters with different CAs cannot talk to each other.
//! Keys are written with mode 0600, through a temporary file and a rename so
//! a crash never leaves half a key behind.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use tally_net::tls::TlsFiles;

/// Paths of one node's TLS material.
pub fn node_files(certs_dir: &Path, node_id: &str) -> TlsFiles {
    TlsFiles {
        ca_cert: certs_dir.join("ca.pem"),
        cert: certs_dir.join(format!("{node_id}.pem")),
        key: certs_dir.join(format!("{node_id}.key")),
    }
}

/// Whether every file the given nodes need exists.
pub fn complete(certs_dir: &Path, node_ids: &[String]) -> bool {
    certs_dir.join("ca.key").exists()
        && node_ids.iter().all(|id| {
            let f = node_files(certs_dir, id);
            f.ca_cert.exists() && f.cert.exists() && f.key.exists()
        })
}

/// Creates the CA if it is missing, and a certificate for every node that
/// lacks one. Returns the files written.
pub fn ensure(certs_dir: &Path, cluster: &str, node_ids: &[String]) -> Result<Vec<PathBuf>> {
    fs::create_dir_all(certs_dir).with_context(|| format!("create {}", certs_dir.display()))?;
    let mut written = Vec::new();
    let ca_cert = certs_dir.join("ca.pem");
    let ca_key = certs_dir.join("ca.key");
    let ca_params = ca_params(cluster);
    if !ca_key.exists() || !ca_cert.exists() {
        let key = KeyPair::generate().context("generate the CA key")?;
        let cert = ca_params.self_signed(&key).context("self-sign the CA")?;
        write_private(&ca_key, &key.serialize_pem())?;
        write_public(&ca_cert, &cert.pem())?;
        written.extend([ca_key.clone(), ca_cert.clone()]);
    }
    let key_pem =
        fs::read_to_string(&ca_key).with_context(|| format!("read {}", ca_key.display()))?;
    let key = KeyPair::from_pem(&key_pem)
        .with_context(|| format!("parse the CA key {}", ca_key.display()))?;
    // The CA's parameters are a function of the cluster name, so the issuer
    // is rebuilt from them rather than parsed back from ca.pem.
    let issuer = Issuer::new(ca_params, key);
    for id in node_ids {
        let files = node_files(certs_dir, id);
        if files.cert.exists() && files.key.exists() {
            continue;
        }
        let (cert, key) = node_cert(id, cluster, &issuer)?;
        write_private(&files.key, &key)?;
        write_public(&files.cert, &cert)?;
        written.extend([files.key, files.cert]);
    }
    Ok(written)
}

fn ca_params(cluster: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, format!("tally cluster {cluster} CA"));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

/// A certificate for `id` signed by `issuer`, as (cert PEM, key PEM).
pub fn node_cert(
    id: &str,
    cluster: &str,
    issuer: &Issuer<'_, KeyPair>,
) -> Result<(String, String)> {
    let mut params = CertificateParams::new(vec![id.to_string()])
        .with_context(|| format!("certificate name {id:?}"))?;
    params
        .distinguished_name
        .push(DnType::CommonName, format!("tally {cluster} node {id}"));
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let key = KeyPair::generate().context("generate a node key")?;
    let cert = params
        .signed_by(&key, issuer)
        .context("sign a node certificate")?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn write_private(path: &Path, text: &str) -> Result<()> {
    write_atomic(path, text, 0o600)
}

fn write_public(path: &Path, text: &str) -> Result<()> {
    write_atomic(path, text, 0o644)
}

fn write_atomic(path: &Path, text: &str, mode: u32) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .with_context(|| format!("create {}", tmp.display()))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("write {}", tmp.display()))?;
    fs::rename(&tmp, path)
        .with_context(|| format!("rename {} to {}", tmp.display(), path.display()))?;
    Ok(())
}
