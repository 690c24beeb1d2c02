//! `--secure`: the cluster wants a login on both client ports and speaks
//! only TLS on them, and every connection of the run (native workers, RESP
//! pipelines, flushes, the faults' own calls, the CLI) logs in over TLS.
//! A run without it connects in plaintext, without a login.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use parking_lot::Mutex;
use tally_net::client::{ClientTls, Login, Security};
use tally_net::client_tls::{ClientFiles, client_config};
use tally_net::{Client, ClientError};
use tally_node::client::stream::Either;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::Cluster;

/// The user every connection of a secure run logs in as, unless it says
/// which of [`OTHERS`] it is.
const USER: (&str, &str) = ("chaos", "chaos-pw");

/// The other users of a secure run: (name, role); each one's password is
/// its name and `-pw`.
const OTHERS: &[(&str, &str)] = &[
    ("writer-0", "readwrite"),
    ("writer-1", "readwrite"),
    ("mallory", "readwrite"),
];

/// The user whose scripts try to plant code for the others' (the last of
/// [`OTHERS`]).
pub(crate) const HOSTILE: Option<&str> = Some("mallory");

/// The user RESP worker `w` logs in as (in a secure run).
pub(crate) fn writer(w: usize) -> Option<&'static str> {
    Some(OTHERS[w % 2].0)
}

/// The tables a secure run adds to the config.
pub(crate) const TABLES: &str =
    "[cluster.auth]\nusers_file = \"users.toml\"\n[cluster.client_tls]\n";

/// The security of each secure run's nodes, by their client and RESP
/// addresses (runs in one process, as tests are, have their own CAs).
static BY_ADDR: Mutex<Option<HashMap<SocketAddr, Security>>> = Mutex::new(None);

/// Makes `cluster` (configured with [`TABLES`], not started) secure: its
/// user, and every connection's TLS and login from now on.
pub(crate) fn enable(cluster: &mut Cluster) -> anyhow::Result<()> {
    cluster.passwd(USER.0, "admin", USER.1)?;
    for (user, role) in OTHERS {
        cluster.passwd(user, role, &format!("{user}-pw"))?;
    }
    let files = ClientFiles {
        ca: cluster.certs_dir().join("ca.pem"),
        identity: None,
    };
    let security = Security {
        tls: Some(ClientTls {
            config: client_config(&files)?,
            server_name: None,
        }),
        login: Some(Login {
            user: USER.0.into(),
            password: USER.1.into(),
        }),
    };
    let mut by_addr = BY_ADDR.lock();
    let by_addr = by_addr.get_or_insert_with(HashMap::new);
    for n in &cluster.config.nodes {
        by_addr.insert(n.client, security.clone());
        by_addr.insert(n.resp, security.clone());
    }
    cluster.security = security;
    Ok(())
}

/// How to connect to `addr`: as its run says, or plainly.
fn security(addr: SocketAddr) -> Security {
    BY_ADDR
        .lock()
        .as_ref()
        .and_then(|m| m.get(&addr).cloned())
        .unwrap_or_default()
}

/// A native connection, secured as the run is.
pub(crate) async fn dial(addr: SocketAddr, timeout: Duration) -> Result<Client, ClientError> {
    Client::connect_secure(addr, timeout, &security(addr)).await
}

/// A RESP connection: plain TCP, or TLS.
pub(crate) type RespStream = Either<TcpStream, Box<tokio_rustls::client::TlsStream<TcpStream>>>;

/// A RESP connection, secured and logged in as the run is.
pub(crate) async fn resp(addr: SocketAddr) -> std::io::Result<BufReader<RespStream>> {
    resp_as(addr, None).await
}

/// A RESP connection, secured as the run is, and logged in as `user` (one
/// of [`OTHERS`]) or as the run's user.
pub(crate) async fn resp_as(
    addr: SocketAddr,
    user: Option<&str>,
) -> std::io::Result<BufReader<RespStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let _ = tcp.set_nodelay(true);
    let s = security(addr);
    let stream = match &s.tls {
        None => Either::Plain(tcp),
        Some(tls) => {
            let name = rustls_pki_types::ServerName::IpAddress(addr.ip().into());
            let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
            Either::Tls(Box::new(connector.connect(name, tcp).await?))
        }
    };
    let mut conn = BufReader::new(stream);
    if let Some(login) = &s.login {
        let auth = match user {
            Some(user) => format!("AUTH {user} {user}-pw\r\n"),
            None => format!("AUTH {} {}\r\n", login.user, login.password),
        };
        conn.get_mut().write_all(auth.as_bytes()).await?;
        conn.get_mut().flush().await?;
        let mut line = String::new();
        conn.read_line(&mut line).await?;
        if line.trim_end() != "+OK" {
            return Err(std::io::Error::other(format!("AUTH: {line}")));
        }
    }
    Ok(conn)
}
