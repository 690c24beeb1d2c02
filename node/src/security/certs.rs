//! The cluster's certificate authority and node certificates.
//!
//! `tallyd certs` (and `tallyd up`, when some are missing) writes into the
//! config's `certs_dir`:
//!
//! ```text
//! ca.pem  ca.key         the cluster CA (self-signed, 10 years; the key signs nodes)
//! <id>.pem  <id>.key     one per node (1 year); the certificate's one DNS name is the id
//! <id>.clients.pem/.key  its client ports' certificate, for client TLS (see `client_certs`)
//! clients/<name>.pem/.key  client certificates, `tallyd certs --client <name>`
//! ```
//!
//! A node presents `<id>.pem` both as a server and as a client, and trusts
//! only `ca.pem`: two clusters with different CAs cannot talk to each other.
//! A node never reads `ca.key`: only issuing certificates needs it, so it
//! can be kept off the nodes' hosts once they have theirs, and put back to
//! issue or renew one.
//!
//! Renewal: `tallyd certs` issues a node certificate again when it is
//! missing, or will not be valid in [`RENEW_BEFORE_DAYS`] days (expiring,
//! or not signed by this CA). Running nodes take up the new files within
//! seconds, without a restart (`tally_net::tls_reload`).
//!
//! Keys are created with mode 0600, as a new temporary file of a name no
//! other writer uses, then renamed into place, so a crash never leaves
//! half a key behind, and no file that someone else prepared (or a
//! leftover with looser permissions) is ever written into.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use tally_world::fs;

use anyhow::{Context, Result, bail};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use tally_net::tls::{self, TlsFiles};

/// How long a node certificate is valid.
pub const NODE_CERT_DAYS: u64 = 365;
/// How long the CA certificate is valid.
pub const CA_CERT_DAYS: u64 = 3650;
/// A node certificate that will not be valid this many days from now is
/// issued again.
pub const RENEW_BEFORE_DAYS: u64 = 30;
/// How far before now a certificate's validity starts, for clocks behind ours.
const BACKDATE: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

/// Paths of one node's TLS material.
pub fn node_files(certs_dir: &Path, node_id: &str) -> TlsFiles {
    TlsFiles {
        ca_cert: certs_dir.join("ca.pem"),
        cert: certs_dir.join(format!("{node_id}.pem")),
        key: certs_dir.join(format!("{node_id}.key")),
    }
}

/// Whether every file the given nodes need to run exists (the CA's key is
/// not one of them).
pub fn complete(certs_dir: &Path, node_ids: &[String]) -> bool {
    node_ids.iter().all(|id| {
        let f = node_files(certs_dir, id);
        f.ca_cert.exists() && f.cert.exists() && f.key.exists()
    })
}

/// The nodes among `node_ids` whose certificate will not be valid at `at`
/// (expired by then, not signed by this CA, unreadable), with why.
pub fn invalid_at(certs_dir: &Path, node_ids: &[String], at: SystemTime) -> Vec<(String, String)> {
    node_ids
        .iter()
        .filter_map(|id| {
            let files = node_files(certs_dir, id);
            tls::verify_node_files(&files, id, at)
                .err()
                .map(|e| (id.clone(), e.to_string()))
        })
        .collect()
}

/// Creates the CA if there is none, and a certificate for every node that
/// lacks one or whose certificate is due for renewal. Returns the files
/// written. Without `ca.key` it only checks: every node must have its files.
pub fn ensure(certs_dir: &Path, cluster: &str, node_ids: &[String]) -> Result<Vec<PathBuf>> {
    fs::create_dir_all(certs_dir).with_context(|| format!("create {}", certs_dir.display()))?;
    let mut written = Vec::new();
    let ca_cert = certs_dir.join("ca.pem");
    let ca_key = certs_dir.join("ca.key");
    let ca_params = ca_params(cluster);
    let present = |id: &String| {
        let f = node_files(certs_dir, id);
        f.cert.exists() || f.key.exists()
    };
    match (ca_cert.exists(), ca_key.exists()) {
        (true, true) => {}
        (false, false) => {
            if let Some(id) = node_ids.iter().find(|id| present(id)) {
                bail!(
                    "{} holds files of node {id} but no CA (ca.pem): restore ca.pem and ca.key, \
                     or delete every node's files to start a new CA",
                    certs_dir.display()
                );
            }
            let key = KeyPair::generate().context("generate the CA key")?;
            let cert = ca_params.self_signed(&key).context("self-sign the CA")?;
            write_private(&ca_key, &key.serialize_pem())?;
            write_public(&ca_cert, &cert.pem())?;
            written.extend([ca_key.clone(), ca_cert.clone()]);
        }
        (false, true) => bail!(
            "{} has the CA key but not its certificate ca.pem: restore it",
            certs_dir.display()
        ),
        (true, false) => {
            let missing: Vec<&str> = node_ids
                .iter()
                .filter(|id| !complete(certs_dir, std::slice::from_ref(*id)))
                .map(String::as_str)
                .collect();
            if missing.is_empty() {
                // Renewing needs the key; running does not.
                return Ok(written);
            }
            bail!(
                "issuing a certificate for {} needs the CA key {}, which nodes do not need: \
                 put it back and run `tallyd certs` again",
                missing.join(", "),
                ca_key.display()
            );
        }
    }
    let issuer = load_issuer(&ca_key, ca_params)?;
    let renew_at = tally_world::wall() + DAY * u32::try_from(RENEW_BEFORE_DAYS).unwrap_or(30);
    let due: Vec<String> = invalid_at(certs_dir, node_ids, renew_at)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    for id in &due {
        let files = node_files(certs_dir, id);
        let (cert, key) = node_cert(id, cluster, &issuer)?;
        write_private(&files.key, &key)?;
        write_public(&files.cert, &cert)?;
        written.extend([files.key, files.cert]);
    }
    Ok(written)
}

/// The CA as an issuer: its parameters are a function of the cluster name,
/// so it is rebuilt from them and the key rather than parsed from ca.pem.
pub(crate) fn load_issuer(
    ca_key: &Path,
    ca_params: CertificateParams,
) -> Result<Issuer<'static, KeyPair>> {
    tls::check_key_file(ca_key)?;
    let key_pem =
        fs::read_to_string(ca_key).with_context(|| format!("read {}", ca_key.display()))?;
    let key = KeyPair::from_pem(&key_pem)
        .with_context(|| format!("parse the CA key {}", ca_key.display()))?;
    Ok(Issuer::new(ca_params, key))
}

/// Sets a certificate's validity: from a little before now, for `days`.
pub(crate) fn set_validity(params: &mut CertificateParams, days: u64) {
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    let now = tally_world::wall()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    params.not_before = epoch + now.saturating_sub(BACKDATE);
    params.not_after = epoch + now + DAY * u32::try_from(days).unwrap_or(u32::MAX);
}

pub(crate) fn ca_params(cluster: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    set_validity(&mut params, CA_CERT_DAYS);
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

/// A certificate for `id` signed by `issuer`, valid for [`NODE_CERT_DAYS`],
/// as (cert PEM, key PEM).
pub fn node_cert(
    id: &str,
    cluster: &str,
    issuer: &Issuer<'_, KeyPair>,
) -> Result<(String, String)> {
    let mut params = CertificateParams::new(vec![id.to_string()])
        .with_context(|| format!("certificate name {id:?}"))?;
    set_validity(&mut params, NODE_CERT_DAYS);
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

pub(crate) fn write_private(path: &Path, text: &str) -> Result<()> {
    write_atomic(path, text, 0o600)
}

pub(crate) fn write_public(path: &Path, text: &str) -> Result<()> {
    write_atomic(path, text, 0o644)
}

/// Writes `path` whole or not at all: into a temporary file created
/// exclusively with `mode` (never an existing file, never a symlink),
/// synced, renamed into place, and the directory synced.
fn write_atomic(path: &Path, text: &str, mode: u32) -> Result<()> {
    let dir = directory_of(path);
    let (tmp, mut f) = create_temporary(path, mode)?;
    let written = f
        .write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("write {}", tmp.display()))
        .and_then(|()| {
            fs::rename(&tmp, path)
                .with_context(|| format!("rename {} to {}", tmp.display(), path.display()))
        });
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written?;
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("sync directory {}", dir.display()))
}

/// The directory `path` is in: `.` for a bare file name, whose parent is
/// the empty path (which names no directory to sync).
fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// A new file next to `path`, of a name no other writer picks: this
/// process's id, a counter, and a retry on the rare collision.
fn create_temporary(path: &Path, mode: u32) -> Result<(PathBuf, fs::File)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    // Process-wide on purpose: names unique among every writer of the process.
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .with_context(|| format!("{} names no file", path.display()))?
        .to_string_lossy()
        .into_owned();
    for _ in 0..64 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tmp = path.with_file_name(format!(".{name}.{}.{n}.tmp", std::process::id()));
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
        {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("create {}", tmp.display())),
        }
    }
    bail!("no free temporary name next to {}", path.display())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    fn ids(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_bare_file_name_is_in_the_working_directory() {
        assert_eq!(directory_of(Path::new("users.toml")), Path::new("."));
        assert_eq!(directory_of(Path::new("a/users.toml")), Path::new("a"));
        assert_eq!(directory_of(Path::new("/users.toml")), Path::new("/"));
    }

    #[test]
    fn a_leftover_temporary_cannot_leave_a_key_readable() {
        let dir = tempfile::tempdir().unwrap();
        // Whatever a crashed or concurrent writer left behind, world-readable.
        for name in ["ca.tmp", "n1.tmp", "ca.key.tmp", "n1.key.tmp"] {
            let path = dir.path().join(name);
            fs::write(&path, "junk").unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        }
        ensure(dir.path(), "t", &ids(&["n1"])).unwrap();
        assert_eq!(mode(&dir.path().join("ca.key")), 0o600, "ca.key");
        assert_eq!(mode(&dir.path().join("n1.key")), 0o600, "n1.key");
        assert_eq!(mode(&dir.path().join("n1.pem")), 0o644, "n1.pem");
    }

    #[test]
    fn a_key_readable_by_others_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        ensure(dir.path(), "t", &ids(&["n1"])).unwrap();
        let files = node_files(dir.path(), "n1");
        fs::set_permissions(&files.key, fs::Permissions::from_mode(0o640)).unwrap();
        let members = tally_net::identity::Members {
            ids: ids(&["n1", "n2"]),
            me: 0,
        };
        let err = match tls::configs(&files, Default::default(), members.into()) {
            Ok(_) => panic!("a group-readable key was loaded"),
            Err(e) => e.to_string(),
        };
        let fix = format!("chmod 600 {}", files.key.display());
        assert!(err.contains(&fix), "{err}");
    }

    #[test]
    fn the_ca_key_is_needed_only_to_issue_certificates() {
        let dir = tempfile::tempdir().unwrap();
        ensure(dir.path(), "t", &ids(&["n1", "n2"])).unwrap();
        let ca_pem = fs::read(dir.path().join("ca.pem")).unwrap();
        fs::remove_file(dir.path().join("ca.key")).unwrap();
        let written = ensure(dir.path(), "t", &ids(&["n1", "n2"])).unwrap();
        assert_eq!(written, Vec::<PathBuf>::new());
        assert_eq!(fs::read(dir.path().join("ca.pem")).unwrap(), ca_pem);
        assert!(complete(dir.path(), &ids(&["n1", "n2"])));
        let err = ensure(dir.path(), "t", &ids(&["n3"])).unwrap_err();
        assert!(format!("{err:#}").contains("ca.key"), "{err:#}");
        assert!(!dir.path().join("ca.key").exists());
        assert_eq!(fs::read(dir.path().join("ca.pem")).unwrap(), ca_pem);
    }

    #[test]
    fn node_certificates_expire_after_a_year() {
        let dir = tempfile::tempdir().unwrap();
        ensure(dir.path(), "t", &ids(&["n1"])).unwrap();
        let files = node_files(dir.path(), "n1");
        let now = tally_world::wall();
        tls::verify_node_files(&files, "n1", now).unwrap();
        tls::verify_node_files(&files, "n1", now + DAY * 364).unwrap();
        let err = tls::verify_node_files(&files, "n1", now + DAY * 366).unwrap_err();
        assert!(err.to_string().contains("xpired"), "{err}");
        // Clocks a little behind this one accept it too.
        tls::verify_node_files(&files, "n1", now - Duration::from_secs(600)).unwrap();
        // And it is n1's, nobody else's.
        assert!(tls::verify_node_files(&files, "n2", now).is_err());
    }

    #[test]
    fn a_certificate_due_for_renewal_is_issued_again() {
        let dir = tempfile::tempdir().unwrap();
        ensure(dir.path(), "t", &ids(&["n1", "n2"])).unwrap();
        assert_eq!(
            ensure(dir.path(), "t", &ids(&["n1", "n2"])).unwrap(),
            Vec::<PathBuf>::new()
        );
        // n1's certificate from some other CA: not valid here, so due.
        let other = tempfile::tempdir().unwrap();
        ensure(other.path(), "t", &ids(&["n1"])).unwrap();
        let n1 = node_files(dir.path(), "n1");
        fs::copy(other.path().join("n1.pem"), &n1.cert).unwrap();
        let soon = tally_world::wall() + DAY * u32::try_from(RENEW_BEFORE_DAYS).unwrap();
        let due = invalid_at(dir.path(), &ids(&["n1", "n2"]), soon);
        assert_eq!(
            due.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(),
            ["n1"]
        );
        let written = ensure(dir.path(), "t", &ids(&["n1", "n2"])).unwrap();
        assert_eq!(written, vec![n1.key.clone(), n1.cert.clone()]);
        assert!(invalid_at(dir.path(), &ids(&["n1", "n2"]), soon).is_empty());
        // A year on, both are due.
        let later = tally_world::wall() + DAY * 366;
        assert_eq!(invalid_at(dir.path(), &ids(&["n1", "n2"]), later).len(), 2);
    }

    #[test]
    fn a_group_readable_ca_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        ensure(dir.path(), "t", &ids(&["n1"])).unwrap();
        let ca_key = dir.path().join("ca.key");
        fs::set_permissions(&ca_key, fs::Permissions::from_mode(0o640)).unwrap();
        let err = ensure(dir.path(), "t", &ids(&["n2"])).unwrap_err();
        assert!(format!("{err:#}").contains("chmod 600"), "{err:#}");
    }
}
