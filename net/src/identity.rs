//! Who a peer is: the node its certificate names.
//!
//! A node's certificate, issued by `tallyd certs`, carries exactly one
//! subject alternative name: the node's id (`n1`). Mutual TLS proves that a
//! peer holds the key of a certificate signed by the cluster CA; this
//! module turns that certificate into a *node index*:
//!
//! - A dialler checks the server's certificate against the id it dialled
//!   (rustls' own server-name check): a process at `n3`'s address holding
//!   `n1`'s certificate is not `n3`.
//! - A server accepts a client only if its certificate names exactly one of
//!   the config's nodes, and not this node itself ([`node_of`], enforced
//!   during the handshake by [`NodeVerifier`]). A certificate the CA issued
//!   for anything else (a client tool, a test, a node of a retired config)
//!   is refused before any request is read.
//!
//! Messages carry no sender field: whoever sent a batch is the node its
//! connection's certificate names ([`peer_of`]), so no message can claim
//! to come from another node. What each node may then send is the
//! receiver's business (see `tally_node`'s `authz`).

use std::sync::Arc;
use std::time::SystemTime;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// The nodes of the cluster, in config order, and which one this is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Members {
    /// Node ids in config order (the index is the node index).
    pub ids: Vec<String>,
    /// This node's index in `ids`.
    pub me: usize,
}

/// Why a certificate does not make its holder a peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAPeer {
    /// The certificate does not parse.
    #[error("unreadable certificate: {0}")]
    Unreadable(String),
    /// It names none of the cluster's nodes.
    #[error("the certificate names none of the cluster's nodes")]
    NoNode,
    /// It names several nodes: whose messages would they be?
    #[error("the certificate names several nodes: {0:?}")]
    Several(Vec<String>),
    /// It names this node, which never dials itself: a copy of its key.
    #[error("the certificate names this node ({0}) itself")]
    Me(String),
    /// The TLS session holds no certificate (cannot happen with mutual TLS).
    #[error("the connection has no peer certificate")]
    Anonymous,
}

/// The index of the one node `cert` names, other than this one.
pub fn node_of(cert: &CertificateDer<'_>, members: &Members) -> Result<usize, NotAPeer> {
    let parsed =
        webpki::EndEntityCert::try_from(cert).map_err(|e| NotAPeer::Unreadable(e.to_string()))?;
    let named: Vec<usize> = members
        .ids
        .iter()
        .enumerate()
        .filter(|(_, id)| {
            ServerName::try_from(id.as_str())
                .is_ok_and(|name| parsed.verify_is_valid_for_subject_name(&name).is_ok())
        })
        .map(|(i, _)| i)
        .collect();
    match named.as_slice() {
        [] => Err(NotAPeer::NoNode),
        [i] if *i == members.me => Err(NotAPeer::Me(members.ids[*i].clone())),
        [i] => Ok(*i),
        several => Err(NotAPeer::Several(
            several.iter().map(|&i| members.ids[i].clone()).collect(),
        )),
    }
}

/// The node a connection's client certificate names (already checked by
/// [`NodeVerifier`] during the handshake; checked again here because the
/// index is what everything after relies on).
pub fn peer_of(conn: &quinn::Connection, members: &Members) -> Result<usize, NotAPeer> {
    let chain = conn
        .peer_identity()
        .and_then(|id| id.downcast::<Vec<CertificateDer<'static>>>().ok())
        .ok_or(NotAPeer::Anonymous)?;
    let end_entity = chain.first().ok_or(NotAPeer::Anonymous)?;
    node_of(end_entity, members)
}

/// A client-certificate verifier: the chain must verify under the cluster
/// CA (`inner`), and the certificate must name a peer ([`node_of`]).
#[derive(Debug)]
pub struct NodeVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    members: Arc<Members>,
}

impl NodeVerifier {
    /// Wraps a verifier of the chain.
    pub fn new(inner: Arc<dyn ClientCertVerifier>, members: Arc<Members>) -> NodeVerifier {
        NodeVerifier { inner, members }
    }
}

impl ClientCertVerifier for NodeVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        node_of(end_entity, &self.members).map_err(|e| {
            rustls::Error::InvalidCertificate(CertificateError::Other(rustls::OtherError(
                Arc::new(e),
            )))
        })?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Whether `cert` is, at time `at`, a valid certificate for node `id`
/// under the CA `ca`: its chain, its validity period and its name. For
/// tools and tests (`tallyd certs` renews what fails this a month ahead).
pub fn verify_node_cert(
    ca: &CertificateDer<'_>,
    cert: &CertificateDer<'_>,
    id: &str,
    at: SystemTime,
) -> Result<(), rustls::Error> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone().into_owned())?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| rustls::Error::General(e.to_string()))?;
    let name = ServerName::try_from(id.to_string())
        .map_err(|e| rustls::Error::General(format!("node id {id:?}: {e}")))?;
    let since_epoch = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_err(|_| rustls::Error::General("a time before 1970".into()))?;
    verifier
        .verify_server_cert(
            cert,
            &[],
            &name,
            &[],
            UnixTime::since_unix_epoch(since_epoch),
        )
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use rcgen::{CertificateParams, KeyPair};

    fn cert_for(names: &[&str]) -> CertificateDer<'static> {
        let names = names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(names)
            .unwrap()
            .self_signed(&key)
            .unwrap();
        cert.der().clone()
    }

    fn members(me: usize) -> Members {
        Members {
            ids: ["n1", "n2", "n3", "node_4"].map(String::from).to_vec(),
            me,
        }
    }

    #[test]
    fn a_certificate_makes_a_peer_of_the_one_other_node_it_names() {
        let m = members(0);
        assert_eq!(node_of(&cert_for(&["n2"]), &m), Ok(1));
        assert_eq!(node_of(&cert_for(&["node_4"]), &m), Ok(3));
        // DNS names compare without case.
        assert_eq!(node_of(&cert_for(&["N3"]), &m), Ok(2));
        assert_eq!(
            node_of(&cert_for(&["n1"]), &m),
            Err(NotAPeer::Me("n1".into()))
        );
        assert_eq!(node_of(&cert_for(&["n1"]), &members(1)), Ok(0));
        assert_eq!(node_of(&cert_for(&["intruder"]), &m), Err(NotAPeer::NoNode));
        assert_eq!(node_of(&cert_for(&["n22"]), &m), Err(NotAPeer::NoNode));
        assert_eq!(node_of(&cert_for(&["n2.evil"]), &m), Err(NotAPeer::NoNode));
        assert_eq!(
            node_of(&cert_for(&["n2", "n3"]), &m),
            Err(NotAPeer::Several(vec!["n2".into(), "n3".into()]))
        );
        assert!(matches!(
            node_of(&CertificateDer::from(vec![0x30, 0x03, 1, 2, 3]), &m),
            Err(NotAPeer::Unreadable(_))
        ));
    }
}
