//! Who may do what: logins, users and roles on the client ports, what a
//! peer may ask, and the certificates and TLS both kinds of port use.

pub mod auth;
pub(crate) mod authz;
pub mod certs;
pub mod client_certs;
pub mod client_security;
pub mod client_tls;
