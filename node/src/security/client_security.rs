//! How the command-line tools (`tally`, `tally-bench`) secure their
//! connections to the client ports: TLS and a login.
//!
//! TLS is used when `--tls` is given or the config's `[cluster.client_tls]`
//! puts it on the native port; the CA is `--tls-ca` or the cluster's
//! (`<certs_dir>/ca.pem`), and `--tls-cert`/`--tls-key` present a client
//! certificate to nodes that ask for one. `--user` and `--password` (or
//! `TALLY_USER` and `TALLY_PASSWORD`, which keep the password out of the
//! process list) log every connection in; a password alone logs in as
//! `default`.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use tally_net::client::{ClientTls, Login, Security};
use tally_net::client_tls::{ClientFiles, client_config};

use crate::config::Config;

/// The security flags of a command-line tool.
#[derive(clap::Args, Debug, Clone)]
pub struct Flags {
    /// Log in as this user.
    #[arg(long, env = "TALLY_USER", global = true)]
    user: Option<String>,
    /// Its password (better: the TALLY_PASSWORD environment variable).
    #[arg(long, env = "TALLY_PASSWORD", global = true, hide_env_values = true)]
    password: Option<String>,
    /// Speak TLS to the native port (implied when the config puts TLS on it).
    #[arg(long, global = true)]
    tls: bool,
    /// The CA the nodes' certificates are signed by (default: the cluster's).
    #[arg(long, global = true)]
    tls_ca: Option<PathBuf>,
    /// A client certificate to present, for nodes that ask for one.
    #[arg(long, global = true, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// Its private key.
    #[arg(long, global = true, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// The name the nodes' certificates must bear (default: the IP dialled).
    #[arg(long, global = true)]
    tls_server_name: Option<String>,
}

impl Flags {
    /// No flags given: a login only from `TALLY_USER` and `TALLY_PASSWORD`.
    pub fn from_env() -> Flags {
        Flags {
            user: std::env::var("TALLY_USER").ok(),
            password: std::env::var("TALLY_PASSWORD").ok(),
            tls: false,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            tls_server_name: None,
        }
    }
}

/// The security of every connection, from the flags and the config (if
/// there is one).
pub fn security(flags: &Flags, config: Option<&Config>) -> Result<Security> {
    let tls_in_config = config
        .and_then(|c| c.cluster.client_tls.as_ref())
        .is_some_and(|t| t.native);
    let tls = if flags.tls || tls_in_config {
        let ca = match (&flags.tls_ca, config) {
            (Some(ca), _) => ca.clone(),
            (None, Some(c)) => c.cluster.certs_dir.join("ca.pem"),
            (None, None) => bail!("--tls needs --tls-ca (or a config whose certs_dir has ca.pem)"),
        };
        let files = ClientFiles {
            ca,
            identity: flags.tls_cert.clone().zip(flags.tls_key.clone()),
        };
        let config = client_config(&files).context("client TLS")?;
        Some(ClientTls {
            config,
            server_name: flags.tls_server_name.clone(),
        })
    } else {
        None
    };
    let login = match (&flags.user, &flags.password) {
        (user, Some(password)) => Some(Login {
            user: user.clone().unwrap_or_else(|| "default".into()),
            password: password.clone(),
        }),
        (Some(_), None) => bail!("--user needs a password: --password or TALLY_PASSWORD"),
        (None, None) => None,
    };
    Ok(Security { tls, login })
}
