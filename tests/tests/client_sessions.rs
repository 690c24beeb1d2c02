//! Logged-in connections over time, over a real node process: deleting a
//! user, changing its password or its role reaches the connections it
//! already has within seconds (closed, or left with the new role), on the
//! RESP and the native port; a connection that does not log in is closed
//! at its deadline, and such connections hold only a share of the slots.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::net::SocketAddr;
use std::time::Duration;

use tally_net::client::{Login, Security};
use tally_net::{Client, ClientError, Consistency, ErrorKind};
use tally_tests::{Cluster, ClusterOptions, resp_command as command, runtime as rt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// How long a change to the users file may take to reach a connection.
const REACH: Duration = Duration::from_secs(5);

/// One node whose users come from its users file: `(user, role, password)`.
fn start(users: &[(&str, &str, &str)], limits: &str) -> Cluster {
    let mut cluster = Cluster::configure(ClusterOptions {
        nodes: 1,
        replication_factor: 1,
        cluster_tables: format!("[cluster.auth]\nusers_file = \"users.toml\"\n{limits}"),
        ..ClusterOptions::default()
    })
    .unwrap();
    for (user, role, password) in users {
        cluster.passwd(user, role, password).unwrap();
    }
    cluster.security = security("admin", "admin-pw");
    cluster.start_all().unwrap();
    cluster
}

fn security(user: &str, password: &str) -> Security {
    Security {
        tls: None,
        login: Some(Login {
            user: user.into(),
            password: password.into(),
        }),
    }
}

async fn native_login(addr: SocketAddr, user: &str, password: &str) -> Client {
    Client::connect_secure(addr, Duration::from_secs(10), &security(user, password))
        .await
        .unwrap()
}

/// Sends `words` on `conn` and reads its one-line reply.
async fn ask(conn: &mut TcpStream, words: &[&[u8]]) -> String {
    conn.write_all(&command(words)).await.unwrap();
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    while !reply.ends_with(b"\r\n") {
        assert_eq!(conn.read(&mut byte).await.unwrap(), 1, "the node closed");
        reply.push(byte[0]);
    }
    String::from_utf8_lossy(&reply).trim_end().to_string()
}

/// What the node sends on `conn` until it closes it, if it does within
/// `within` (without being asked anything).
async fn closed_within(conn: &mut TcpStream, within: Duration) -> Option<String> {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    let mut chunk = [0u8; 512];
    loop {
        match tokio::time::timeout_at(deadline, conn.read(&mut chunk)).await {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => return Some(String::from_utf8_lossy(&got).into_owned()),
            Ok(Ok(n)) => got.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The error of `client`'s next GET once it fails, if it does within `within`.
async fn native_fails_within(client: &Client, within: Duration) -> Option<ClientError> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Err(e) = client.get(b"k", b"", Consistency::One).await {
            return Some(e);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// A RESP connection and a native client, both logged in as `user`.
async fn both(cluster: &Cluster, user: &str, password: &str) -> (TcpStream, Client) {
    let mut resp = TcpStream::connect(cluster.resp_addr(0)).await.unwrap();
    let auth = ask(&mut resp, &[b"AUTH", user.as_bytes(), password.as_bytes()]).await;
    assert_eq!(auth, "+OK", "{user}");
    let native = native_login(cluster.nodes[0].client, user, password).await;
    (resp, native)
}

#[test]
fn a_deleted_or_changed_user_loses_its_open_connections_within_seconds() {
    let cluster = start(
        &[
            ("admin", "admin", "admin-pw"),
            ("gone", "readwrite", "gone-pw"),
            ("app", "readwrite", "app-pw"),
            ("writer", "readwrite", "writer-pw"),
        ],
        "",
    );
    let config = cluster.config_path.to_string_lossy().into_owned();
    rt().block_on(async {
        let (mut gone, gone_native) = both(&cluster, "gone", "gone-pw").await;
        let (mut app, app_native) = both(&cluster, "app", "app-pw").await;
        let (mut writer, writer_native) = both(&cluster, "writer", "writer-pw").await;
        assert_eq!(ask(&mut writer, &[b"INCR", b"k"]).await, ":1");

        tally_tests::passwd(&["--config", &config, "--delete", "gone"], "").unwrap();
        cluster.passwd("app", "readwrite", "app-pw-2").unwrap();
        // The same password, a lower role.
        cluster.passwd("writer", "readonly", "writer-pw").unwrap();

        // Closed with a word why, though idle: a deleted user, a changed password.
        for (user, conn, native) in [
            ("gone", &mut gone, &gone_native),
            ("app", &mut app, &app_native),
        ] {
            let last = closed_within(conn, REACH).await;
            let last = last.unwrap_or_else(|| panic!("{user}'s RESP connection still open"));
            assert!(
                last.starts_with("-ERR") && last.contains(user),
                "{user}: {last:?}"
            );
            let e = native_fails_within(native, REACH).await;
            let e = e.unwrap_or_else(|| panic!("{user}'s native connection still serves"));
            assert!(e.to_string().contains(user), "{user}: {e}");
        }
        // Downgraded, still open.
        let deadline = Instant::now() + REACH;
        let mut incr = ask(&mut writer, &[b"INCR", b"k"]).await;
        while incr.starts_with(':') && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            incr = ask(&mut writer, &[b"INCR", b"k"]).await;
        }
        assert_eq!(
            incr,
            "-NOPERM User writer has no permissions to run the 'incr' command"
        );
        let get = ask(&mut writer, &[b"GET", b"k"]).await;
        assert!(!get.starts_with('-'), "{get}");
        let add = writer_native.add(b"k", b"", 1, Consistency::One).await;
        assert_eq!(add.err().and_then(|e| e.kind()), Some(ErrorKind::Denied));
        assert!(writer_native.get(b"k", b"", Consistency::One).await.is_ok());
        // The new password logs in.
        let (mut again, _) = both(&cluster, "app", "app-pw-2").await;
        assert_eq!(ask(&mut again, &[b"PING"]).await, "+PONG");
    });
}

#[test]
fn a_connection_that_does_not_log_in_is_closed_at_its_deadline() {
    let cluster = start(&[("admin", "admin", "admin-pw")], "");
    rt().block_on(async {
        let opened = Instant::now();
        let mut anonymous = TcpStream::connect(cluster.resp_addr(0)).await.unwrap();
        let (mut logged_in, _) = both(&cluster, "admin", "admin-pw").await;
        let native = Client::connect(cluster.nodes[0].client).await.unwrap();
        // Busy, but never logged in: the deadline is not an idle timeout.
        let mut last = String::new();
        while opened.elapsed() < Duration::from_secs(15) {
            match closed_within(&mut anonymous, Duration::ZERO).await {
                Some(words) => {
                    last = words;
                    break;
                }
                None => {
                    anonymous.write_all(&command(&[b"PING"])).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
        let took = opened.elapsed();
        assert!(
            (Duration::from_secs(9)..Duration::from_secs(15)).contains(&took),
            "closed after {took:?}: {last:?}"
        );
        assert!(last.contains("log in within 10 s"), "{last:?}");
        let e = native_fails_within(&native, Duration::from_secs(3)).await;
        let e = e.map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("log in within 10 s"), "native: {e:?}");
        // A connection that logged in stays.
        assert_eq!(ask(&mut logged_in, &[b"PING"]).await, "+PONG");
    });
}

#[test]
fn connections_not_logged_in_hold_at_most_half_the_slots() {
    let cluster = start(
        &[("admin", "admin", "admin-pw")],
        "[cluster.limits]\nclients_max = 8\n",
    );
    let resp = cluster.resp_addr(0);
    rt().block_on(async {
        let mut held = Vec::new();
        for _ in 0..4 {
            let mut c = TcpStream::connect(resp).await.unwrap();
            assert_eq!(
                ask(&mut c, &[b"PING"]).await,
                "-NOAUTH Authentication required."
            );
            held.push(c);
        }
        let mut fifth = TcpStream::connect(resp).await.unwrap();
        let refused = closed_within(&mut fifth, Duration::from_secs(2)).await;
        assert_eq!(
            refused.as_deref(),
            Some("-ERR max number of clients not logged in reached\r\n"),
            "a fifth connection not logged in, of 8 slots"
        );
        // The native client's first request (its hello) gets the refusal.
        let e = match Client::connect(cluster.nodes[0].client).await {
            Err(e) => e.to_string(),
            Ok(native) => native_fails_within(&native, Duration::from_secs(2))
                .await
                .map(|e| e.to_string())
                .unwrap_or_default(),
        };
        assert!(e.contains("not logged in reached"), "native: {e:?}");
        // One logs in: its place before a login is free again.
        assert_eq!(
            ask(&mut held[0], &[b"AUTH", b"admin", b"admin-pw"]).await,
            "+OK"
        );
        let mut next = TcpStream::connect(resp).await.unwrap();
        assert_eq!(
            ask(&mut next, &[b"PING"]).await,
            "-NOAUTH Authentication required."
        );
        assert_eq!(ask(&mut held[0], &[b"PING"]).await, "+PONG");
    });
}

#[test]
fn failed_logins_are_limited_per_user_not_only_per_connection() {
    let cluster = start(
        &[
            ("admin", "admin", "admin-pw"),
            ("app", "readwrite", "app-pw"),
        ],
        "",
    );
    let resp = cluster.resp_addr(0);
    rt().block_on(async {
        // Guessers on fresh connections, each guess on a new one, for 3 s.
        let flood_end = Instant::now() + Duration::from_secs(3);
        let guessers: Vec<_> = (0..8)
            .map(|i| {
                tokio::spawn(async move {
                    let mut j = 0;
                    while Instant::now() < flood_end {
                        let mut g = TcpStream::connect(resp).await.unwrap();
                        let guess = format!("guess-{i}-{j}");
                        let reply = ask(&mut g, &[b"AUTH", b"app", guess.as_bytes()]).await;
                        assert!(reply.starts_with("-WRONGPASS"), "{reply}");
                        j += 1;
                    }
                })
            })
            .collect();
        // Meanwhile the right password, now and then.
        let mut refused = 0;
        while Instant::now() < flood_end {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let mut c = TcpStream::connect(resp).await.unwrap();
            if ask(&mut c, &[b"AUTH", b"app", b"app-pw"]).await != "+OK" {
                refused += 1;
            }
        }
        assert!(
            refused > 0,
            "no login of app was refused during a flood of wrong ones"
        );
        // Another user at the same (loopback) address is not held up.
        let mut admin = TcpStream::connect(resp).await.unwrap();
        assert_eq!(
            ask(&mut admin, &[b"AUTH", b"admin", b"admin-pw"]).await,
            "+OK"
        );
        for g in guessers {
            g.await.unwrap();
        }
        // Once the guessing stops, app logs in again within seconds.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut c = TcpStream::connect(resp).await.unwrap();
        while ask(&mut c, &[b"AUTH", b"app", b"app-pw"]).await != "+OK" {
            assert!(
                Instant::now() < deadline,
                "app still refused after the flood"
            );
        }
    });
    assert!(cluster.log_text(0).contains("too many failed logins"));
}

/// A metrics request as `admin`, and the status line of its answer, if
/// one comes within `within`.
async fn scrape(addr: SocketAddr, within: Duration) -> Option<String> {
    // base64("admin:admin-pw")
    let request =
        "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic YWRtaW46YWRtaW4tcHc=\r\n\r\n";
    let ask = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        s.write_all(request.as_bytes()).await.ok()?;
        let mut back = Vec::new();
        s.read_to_end(&mut back).await.ok()?;
        let text = String::from_utf8_lossy(&back).into_owned();
        text.lines().next().map(str::to_string)
    };
    tokio::time::timeout(within, ask).await.ok().flatten()
}

#[test]
fn the_metrics_port_answers_during_a_slow_client_flood() {
    let cluster = start(&[("admin", "admin", "admin-pw")], "");
    let metrics = cluster.metrics_addr(0);
    rt().block_on(async {
        assert_eq!(
            scrape(metrics, Duration::from_secs(5)).await.as_deref(),
            Some("HTTP/1.1 200 OK")
        );
        // 100 connections that start a request and never finish it,
        // opened again as the node closes them, for 6 s.
        let flood_end = Instant::now() + Duration::from_secs(6);
        let slow: Vec<_> = (0..100)
            .map(|_| {
                tokio::spawn(async move {
                    while Instant::now() < flood_end {
                        let Ok(mut s) = TcpStream::connect(metrics).await else {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        };
                        let _ = s.write_all(b"GET /metrics HTTP/1.1\r\n").await;
                        let mut sink = [0u8; 256];
                        let _ = tokio::time::timeout_at(flood_end, s.read(&mut sink)).await;
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut answered = Vec::new();
        while Instant::now() + Duration::from_secs(1) < flood_end {
            answered.push(scrape(metrics, Duration::from_secs(1)).await);
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let missed = answered
            .iter()
            .filter(|a| a.as_deref() != Some("HTTP/1.1 200 OK"));
        assert_eq!(
            missed.count(),
            0,
            "scrapes not answered within 1 s during the flood: {answered:?}"
        );
        for s in slow {
            s.await.unwrap();
        }
    });
}

#[test]
fn a_connection_opened_before_the_first_user_is_closed_when_users_come() {
    let mut cluster = Cluster::configure(ClusterOptions {
        nodes: 1,
        replication_factor: 1,
        cluster_tables: "[cluster.auth]\nusers_file = \"users.toml\"\n".into(),
        ..ClusterOptions::default()
    })
    .unwrap();
    cluster.start_all().unwrap();
    rt().block_on(async {
        let mut early = TcpStream::connect(cluster.resp_addr(0)).await.unwrap();
        assert_eq!(ask(&mut early, &[b"PING"]).await, "+PONG");
        let native = Client::connect(cluster.nodes[0].client).await.unwrap();
        assert!(native.get(b"k", b"", Consistency::One).await.is_ok());
        cluster.passwd("admin", "admin", "admin-pw").unwrap();
        let last = closed_within(&mut early, REACH).await;
        let last = last.expect("a connection without a login still open once users came");
        assert!(
            last.starts_with("-ERR") && last.contains("log in"),
            "{last:?}"
        );
        let e = native_fails_within(&native, REACH).await;
        let e = e.map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("log in"), "native: {e:?}");
    });
    cluster.security = security("admin", "admin-pw");
}
