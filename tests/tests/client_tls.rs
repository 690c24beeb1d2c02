//! TLS on the client ports, over real node processes: the native client,
//! `tally`, `redis-cli --tls` and redis-py (from PyPI) connect with TLS and
//! a login; a plaintext client and a client that does not trust the
//! cluster's CA cannot; with `verify_clients`, only a client presenting a
//! certificate of `tallyd certs --client` gets in.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use tally_net::client::{ClientTls, Login, Security};
use tally_net::client_tls::{ClientFiles, client_config};
use tally_net::{Client, Consistency};
use tally_tests::{Cluster, ClusterOptions, runtime as rt};

/// A cluster with `tables`; with `users`, two users; with `client_cert`,
/// the client certificate `app` (which the harness then presents).
fn start(tables: &str, users: bool, client_cert: bool) -> Cluster {
    let mut cluster = Cluster::configure(ClusterOptions {
        cluster_tables: tables.to_string(),
        ..ClusterOptions::default()
    })
    .unwrap();
    let certs = cluster.certs_dir();
    let identity = client_cert.then(|| {
        let out = Command::new(tally_tests::bin("tallyd").unwrap())
            .args(["certs", "--client", "app", "--config"])
            .arg(&cluster.config_path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        (certs.join("clients/app.pem"), certs.join("clients/app.key"))
    });
    let login = users.then(|| {
        cluster.passwd("admin", "admin", "admin-pw").unwrap();
        cluster.passwd("app", "readwrite", "app-pw").unwrap();
        Login {
            user: "admin".into(),
            password: "admin-pw".into(),
        }
    });
    let identity = identity.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
    cluster.security = Security {
        tls: Some(tls(&certs.join("ca.pem"), identity)),
        login,
    };
    cluster.start_all().unwrap();
    cluster
}

fn tls(ca: &Path, identity: Option<(&Path, &Path)>) -> ClientTls {
    let files = ClientFiles {
        ca: ca.to_path_buf(),
        identity: identity.map(|(c, k)| (c.to_path_buf(), k.to_path_buf())),
    };
    ClientTls {
        config: client_config(&files).unwrap(),
        server_name: None,
    }
}

/// `redis-cli -p <node 0's RESP port> ARGS`: stdout and stderr together.
fn redis_cli(cluster: &Cluster, args: &[&str]) -> String {
    let port = cluster.resp_addr(0).port().to_string();
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port, "--no-auth-warning"])
        .args(args)
        .output()
        .expect("redis-cli is installed");
    text(&out)
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

const REDIS_PY_TLS: &str = r#"
import sys, ssl, redis
port, ca = int(sys.argv[1]), sys.argv[2]
r = redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=ca,
                username="app", password="app-pw")
assert r.connection_pool.get_connection().protocol in (3, "3")
assert r.incr("py:tls") == 1 and r.incrby("py:tls", 4) == 5 and r.get("py:tls") == b"5"
pipe = r.pipeline(transaction=False)
for _ in range(50):
    pipe.incr("py:tls")
assert pipe.execute()[-1] == 55
try:
    redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=ca,
                username="app", password="wrong").ping()
    raise SystemExit("a wrong password logged in")
except redis.AuthenticationError:
    pass
try:
    redis.Redis(host="127.0.0.1", port=port, username="app", password="app-pw").ping()
    raise SystemExit("plaintext was served on a TLS port")
except redis.ConnectionError:
    pass
print("ok")
"#;

/// The DER of the certificate in the PEM file at `path`.
fn pem_der(path: &Path) -> Vec<u8> {
    use rustls_pki_types::pem::PemObject;
    rustls_pki_types::CertificateDer::from_pem_file(path)
        .unwrap()
        .to_vec()
}

/// The certificate the node at `addr` presents in a TLS handshake.
async fn served_cert(addr: std::net::SocketAddr, ca: &Path) -> Vec<u8> {
    let config = tls(ca, None).config;
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls_pki_types::ServerName::IpAddress(addr.ip().into());
    let s = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .unwrap();
    s.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

#[test]
fn clients_speak_tls_with_a_login_and_nothing_else_gets_in() {
    let tables = "[cluster.auth]\nusers_file = \"users.toml\"\n[cluster.client_tls]\n";
    let cluster = start(tables, true, false);
    let ca = cluster.certs_dir().join("ca.pem");
    let addr = cluster.nodes[0].client;
    rt().block_on(async {
        let c = cluster.client(0).await.unwrap();
        assert_eq!(c.add(b"k", b"", 3, Consistency::All).await.unwrap(), 3);
        // Plaintext on a TLS port: the client's first request (its hello)
        // gets no answer it can read, and the connect fails.
        assert!(Client::connect(addr).await.is_err());
        // A client that trusts another CA refuses the node's certificate.
        let other = Cluster::configure(ClusterOptions::default()).unwrap();
        let stranger = Security {
            tls: Some(tls(&other.certs_dir().join("ca.pem"), None)),
            login: None,
        };
        let e = Client::connect_secure(addr, Duration::from_secs(5), &stranger).await;
        let e = e.err().expect("a client of another CA connected");
        assert!(e.to_string().contains("TLS handshake"), "{e}");
        // The node kept serving.
        assert_eq!(c.get(b"k", b"", Consistency::All).await.unwrap(), 3);
    });
    // `tally` speaks TLS because the config says so.
    let env = [("TALLY_USER", "app"), ("TALLY_PASSWORD", "app-pw")];
    let out = cluster.tally_env(&env, &["add", "k", "2"]).unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "5");

    // redis-cli --tls, with the cluster CA and a login.
    let ca_s = ca.to_string_lossy().into_owned();
    let tls_args = [
        "--tls", "--cacert", &ca_s, "--user", "app", "--pass", "app-pw",
    ];
    assert_eq!(
        redis_cli(&cluster, &[&tls_args[..], &["INCRBY", "k", "5"]].concat()).trim(),
        "10"
    );
    assert_eq!(
        redis_cli(&cluster, &[&tls_args[..], &["-3", "GET", "k"]].concat()).trim(),
        "10"
    );
    let plain = redis_cli(&cluster, &["--user", "app", "--pass", "app-pw", "GET", "k"]);
    assert!(!plain.contains("10"), "plaintext got an answer: {plain}");

    // Renewed client-port certificates are served without a restart.
    let (cert_file, key_file) =
        tally_node::security::client_certs::listener_files(&cluster.certs_dir(), "n1");
    let on_disk = || pem_der(&cert_file);
    rt().block_on(async {
        let c = cluster.client(0).await.unwrap();
        assert_eq!(served_cert(addr, &ca).await, on_disk());
        let before = on_disk();
        std::fs::remove_file(&cert_file).unwrap();
        std::fs::remove_file(&key_file).unwrap();
        let out = Command::new(tally_tests::bin("tallyd").unwrap())
            .args(["certs", "--config"])
            .arg(&cluster.config_path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        assert_ne!(on_disk(), before, "tallyd certs issued a new certificate");
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while served_cert(addr, &ca).await != on_disk() {
            assert!(
                std::time::Instant::now() < deadline,
                "the renewed certificate was not taken up"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // A connection opened before keeps its session.
        assert_eq!(c.get(b"k", b"", Consistency::All).await.unwrap(), 10);
    });

    // redis-py with ssl=True, at its default protocol (HELLO 3 AUTH).
    let mut python = Command::new("python3");
    python
        .env("PYTHONPATH", tally_tests::redis_py())
        .args(["-c", REDIS_PY_TLS])
        .arg(cluster.resp_addr(1).port().to_string())
        .arg(&ca);
    tally_tests::assert_script_ok(&mut python, "redis-py over TLS");
}

#[test]
fn with_verify_clients_only_a_client_certificate_of_the_ca_gets_in() {
    let cluster = start("[cluster.client_tls]\nverify_clients = true\n", false, true);
    let certs = cluster.certs_dir();
    let (cert, key) = (certs.join("clients/app.pem"), certs.join("clients/app.key"));
    let (cert_s, key_s) = (cert.to_string_lossy(), key.to_string_lossy());
    // tally without a certificate: refused; with it: served.
    let out = cluster.tally(&["add", "c"]).unwrap();
    assert!(
        !out.status.success(),
        "no client certificate: {}",
        text(&out)
    );
    let with_cert = ["--tls-cert", &cert_s, "--tls-key", &key_s];
    let out = cluster
        .tally(&[&with_cert[..], &["add", "c", "4"]].concat())
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "4");
    // A node's own client-port certificate is no client certificate.
    let (own_cert, own_key) = tally_node::security::client_certs::listener_files(&certs, "n1");
    let (oc, ok) = (own_cert.to_string_lossy(), own_key.to_string_lossy());
    let out = cluster
        .tally(&["--tls-cert", &oc, "--tls-key", &ok, "get", "c"])
        .unwrap();
    assert!(
        !out.status.success(),
        "a server certificate passed as a client's"
    );
    // redis-cli, the same.
    let ca = certs.join("ca.pem");
    let ca_s = ca.to_string_lossy();
    let refused = redis_cli(&cluster, &["--tls", "--cacert", &ca_s, "GET", "c"]);
    assert!(!refused.contains('4'), "{refused}");
    let args = [
        "--tls", "--cacert", &ca_s, "--cert", &cert_s, "--key", &key_s, "GET", "c",
    ];
    assert_eq!(redis_cli(&cluster, &args).trim(), "4");
}
