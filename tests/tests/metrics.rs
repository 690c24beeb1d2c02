//! Prometheus metrics: every node serves `/metrics` in Prometheus' text
//! format, a real Prometheus (Debian's package, installed by `.ci/run`)
//! scrapes the three nodes and sees a metric move as the load does, and
//! the metrics port answers any request shape with a clear HTTP status
//! while the node keeps serving.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tally_tests::{Cluster, ClusterOptions, free_port};

/// Sends `request` raw and answers the whole response, if it connects.
fn try_http(addr: SocketAddr, request: &[u8]) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(request).ok()?;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    Some(String::from_utf8_lossy(&out).into_owned())
}

fn http(addr: SocketAddr, request: &[u8]) -> String {
    try_http(addr, request).unwrap_or_else(|| panic!("nothing listens on {addr}"))
}

fn get_request(addr: SocketAddr, path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").into_bytes()
}

fn get(addr: SocketAddr, path: &str) -> String {
    http(addr, &get_request(addr, path))
}

/// The value of the unlabelled sample `name` on a metrics page.
fn sample(page: &str, name: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in {page}"))
        .parse()
        .unwrap()
}

#[test]
fn every_node_serves_its_metrics_and_any_request_gets_a_clear_answer() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    for i in 0..3 {
        assert_eq!(
            cluster.redis_cli(i, &["INCRBY", "m", "2"]).trim(),
            (2 * i + 2).to_string()
        );
    }
    assert_eq!(cluster.redis_cli(0, &["GET", "m"]).trim(), "6");
    let page = get(cluster.metrics_addr(0), "/metrics");
    assert!(page.starts_with("HTTP/1.1 200 OK\r\n"), "{page}");
    assert!(
        page.contains("Content-Type: text/plain; version=0.0.4"),
        "{page}"
    );
    assert!(
        page.contains("tally_coordinator_add_seconds_count{cl=\"quorum\"} 1\n"),
        "{page}"
    );
    assert!(
        page.contains("tally_coordinator_read_seconds_count{cl=\"quorum\"} 1\n"),
        "{page}"
    );
    assert!(
        page.contains("tally_resp_commands_total{command=\"incrby\"} 1\n"),
        "{page}"
    );
    assert!(sample(&page, "tally_client_connections") >= 0.0);
    assert!(
        sample(&page, "tally_commitlog_syncs_total") >= 1.0,
        "{page}"
    );
    assert!(
        page.contains("tally_commitlog_sync_seconds_bucket{le=\"+Inf\"}"),
        "{page}"
    );
    assert!(
        page.contains("tally_hints_pending{peer=\"n2\"} 0\n"),
        "{page}"
    );
    // A read at SERIAL, natively (`tally --cl serial`, client protocol 4)
    // and over RESP, arrives as SERIAL: counted under its own level.
    let out = cluster
        .tally(&["--node", "n3", "--cl", "serial", "get", "m"])
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "6");
    let mut resp = std::process::Command::new("redis-cli")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &cluster.resp_addr(2).port().to_string(),
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = resp.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, b"CLIENT CONSISTENCY SERIAL\nGET m\n").unwrap();
    drop(stdin);
    let out = resp.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "OK\n6\n");
    let page = get(cluster.metrics_addr(2), "/metrics");
    assert!(
        page.contains("tally_coordinator_read_seconds_count{cl=\"serial\"} 2\n"),
        "{page}"
    );
    assert!(
        page.contains("tally_coordinator_read_seconds_count{cl=\"quorum\"} 0\n"),
        "{page}"
    );
    // A string's decided value reaches every acceptor: the proposer's
    // commits go out though it waits for none of them.
    cluster.wait_agreement().unwrap();
    assert_eq!(cluster.redis_cli(0, &["SET", "word", "hello"]).trim(), "OK");
    for i in 1..3 {
        let commits = "tally_acceptor_requests_total{kind=\"commit\"}";
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while sample(&get(cluster.metrics_addr(i), "/metrics"), commits) < 1.0 {
            assert!(
                std::time::Instant::now() < deadline,
                "node {i} heard no commit"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // Each node led its own add (RF 3: every node is a replica), and
    // merged the other two nodes' as a replica.
    for i in 0..3 {
        let page = get(cluster.metrics_addr(i), "/metrics");
        assert!(
            sample(&page, "tally_leader_adds_total") >= 1.0,
            "node {i}: {page}"
        );
        assert!(
            sample(&page, "tally_replica_applies_total") >= 1.0,
            "node {i}: {page}"
        );
    }

    let addr = cluster.metrics_addr(1);
    let cases: &[(&[u8], &str)] = &[
        (b"HEAD /metrics HTTP/1.1\r\n\r\n", "HTTP/1.1 200 OK"),
        (b"GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 404 Not Found"),
        (
            b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
            "HTTP/1.1 405",
        ),
        (b"GET /metrics HTTP/2.0\r\n\r\n", "HTTP/1.1 505"),
        (
            b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n",
            "HTTP/1.1 400",
        ),
        (b"GET\r\n\r\n", "HTTP/1.1 400"),
        (b"garbage\r\n\r\n", "HTTP/1.1 400"),
    ];
    for (request, want) in cases {
        let answer = http(addr, request);
        assert!(answer.starts_with(want), "{request:?}: {answer}");
    }
    let head = http(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n");
    assert!(head.ends_with("\r\n\r\n"), "HEAD has no body: {head}");
    let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
    assert!(http(addr, huge.as_bytes()).starts_with("HTTP/1.1 431"));
    // A client that sends nothing holds one connection, not the port.
    let _silent: Vec<TcpStream> = (0..40).map(|_| TcpStream::connect(addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(cluster.redis_cli(1, &["INCR", "m"]).trim(), "7");
    drop(_silent);
    assert!(get(addr, "/metrics").starts_with("HTTP/1.1 200 OK"));
}

/// A scrape job of `targets` in Prometheus' config, logging in with
/// `basic_auth` (user, password) if given.
fn job(name: &str, targets: &[SocketAddr], basic_auth: Option<(&str, &str)>) -> String {
    let targets: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
    let auth = basic_auth.map_or_else(String::new, |(u, p)| {
        format!("    basic_auth:\n      username: {u}\n      password: {p}\n")
    });
    format!(
        "  - job_name: {name}\n{auth}    static_configs:\n      - targets: [{}]\n",
        targets.join(", ")
    )
}

/// A Prometheus server scraping `targets` every second.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(targets: &[SocketAddr]) -> Prometheus {
        Prometheus::start_jobs(&[job("tally", targets, None)])
    }

    /// A Prometheus server scraping each of `jobs` (see [`job`]) every second.
    fn start_jobs(jobs: &[String]) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n{}",
            jobs.concat()
        );
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config).unwrap();
        let addr = free_port().unwrap();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus is installed (Debian's package; .ci/run installs it)");
        let p = Prometheus {
            child,
            addr,
            _dir: dir,
        };
        p.wait(Duration::from_secs(60), "ready", || {
            try_http(addr, &get_request(addr, "/-/ready")).is_some_and(|r| r.contains(" 200 "))
        });
        p
    }

    /// The value of an instant query that answers one number.
    fn query(&self, promql: &str) -> Option<f64> {
        let q: String = promql
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        let answer = try_http(
            self.addr,
            &get_request(self.addr, &format!("/api/v1/query?query={q}")),
        )?;
        let body = answer.split("\r\n\r\n").nth(1)?;
        let json: serde_json::Value = serde_json::from_str(body).ok()?;
        json["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    }

    fn wait(&self, within: Duration, what: &str, mut done: impl FnMut() -> bool) {
        let started = Instant::now();
        while !done() {
            assert!(
                started.elapsed() < within,
                "prometheus: not {what} within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        eprintln!("prometheus: {what} after {:?}", started.elapsed());
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_real_prometheus_scrapes_every_node_and_sees_the_adds_it_makes() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let targets: Vec<SocketAddr> = (0..3).map(|i| cluster.metrics_addr(i)).collect();
    let prometheus = Prometheus::start(&targets);
    prometheus.wait(Duration::from_secs(30), "scraping all three", || {
        prometheus.query("sum(up{job=\"tally\"})") == Some(3.0)
    });
    let adds = "sum(tally_coordinator_add_seconds_count)";
    let before = prometheus.query(adds).unwrap();
    // 2,000 INCRs through node 2's RESP port, in one redis-benchmark run.
    let port = cluster.resp_addr(2).port().to_string();
    let out = Command::new("redis-benchmark")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-n",
            "2000",
            "-c",
            "4",
            "-q",
            "-t",
            "incr",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    prometheus.wait(Duration::from_secs(30), "seeing the 2,000 adds", || {
        prometheus
            .query(adds)
            .is_some_and(|after| after >= before + 2000.0)
    });
    let incrs = prometheus
        .query("sum(tally_resp_commands_total{command=\"incr\"})")
        .unwrap();
    assert!(incrs >= 2000.0, "{incrs}");
    let p99 = prometheus
        .query("histogram_quantile(0.99, sum by (le) (tally_coordinator_add_seconds_bucket))")
        .unwrap();
    assert!(p99 > 0.0 && p99 < 10.0, "p99 add latency {p99} s");
}

/// Where the cluster has users, Prometheus scrapes with `basic_auth`: a
/// user's login is served, a wrong password is not.
#[test]
fn a_real_prometheus_logs_in_where_the_cluster_has_users() {
    let mut cluster = Cluster::configure(ClusterOptions {
        nodes: 1,
        replication_factor: 1,
        cluster_tables: "[cluster.auth]\nusers_file = \"users.toml\"\n".into(),
        ..ClusterOptions::default()
    })
    .unwrap();
    cluster.passwd("prom", "readonly", "prom-pw").unwrap();
    cluster.security = tally_net::client::Security {
        tls: None,
        login: Some(tally_net::client::Login {
            user: "prom".into(),
            password: "prom-pw".into(),
        }),
    };
    cluster.start_all().unwrap();
    let targets = [cluster.metrics_addr(0)];
    let prometheus = Prometheus::start_jobs(&[
        job("tally", &targets, Some(("prom", "prom-pw"))),
        job("stranger", &targets, Some(("prom", "wrong"))),
        job("anonymous", &targets, None),
    ]);
    prometheus.wait(Duration::from_secs(30), "scraping with a login", || {
        prometheus.query("up{job=\"tally\"}") == Some(1.0)
    });
    prometheus.wait(Duration::from_secs(30), "refused without one", || {
        prometheus.query("up{job=\"stranger\"}") == Some(0.0)
            && prometheus.query("up{job=\"anonymous\"}") == Some(0.0)
    });
    let adds = "tally_coordinator_add_seconds_count{job=\"tally\",cl=\"quorum\"}";
    assert_eq!(
        prometheus.query(adds),
        Some(0.0),
        "the logged-in scrape read the metrics"
    );
    let stranger = "tally_coordinator_add_seconds_count{job=\"stranger\",cl=\"quorum\"}";
    assert_eq!(
        prometheus.query(stranger),
        None,
        "a wrong password read the metrics"
    );
}
