//! Users on the client ports, over real node processes: every port
//! (native, RESP, metrics) refuses a client that has not logged in; a
//! wrong password is refused, after a delay, and logged without the
//! password; a read-only user cannot add; the users file is taken up
//! without a restart; malformed and huge logins and a flood of wrong ones
//! get clear answers while the node keeps serving.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use tally_net::client::{Login, Security};
use tally_net::{Client, ClientError, Consistency, ErrorKind};
use tally_tests::{Cluster, ClusterOptions, resp_command as command, runtime as rt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Users: `default` in cluster.toml, the others in the users file.
const USERS: [(&str, &str, &str); 4] = [
    ("default", "readwrite", "default-pw"),
    ("admin", "admin", "admin-pw"),
    ("app", "readwrite", "app-pw"),
    ("viewer", "readonly", "viewer-pw"),
];

/// A 3-node cluster whose users are [`USERS`].
fn start() -> Cluster {
    let hash = tally_tests::passwd(&["default", "--hash-only"], USERS[0].2).unwrap();
    let tables = format!(
        "[cluster.auth]\nusers_file = \"users.toml\"\n\
         [[cluster.auth.user]]\nname = \"default\"\npassword_hash = \"{}\"\nrole = \"readwrite\"\n",
        hash.trim()
    );
    let mut cluster = Cluster::configure(ClusterOptions {
        cluster_tables: tables,
        ..ClusterOptions::default()
    })
    .unwrap();
    for (user, role, password) in &USERS[1..] {
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

async fn login(addr: SocketAddr, user: &str, password: &str) -> Result<Client, ClientError> {
    Client::connect_secure(addr, Duration::from_secs(10), &security(user, password)).await
}

fn kind<T>(r: Result<T, ClientError>) -> Option<ErrorKind> {
    match r {
        Ok(_) => panic!("not refused"),
        Err(e) => e.kind(),
    }
}

/// `redis-cli -p PORT ARGS` against `cluster`'s node 0; its output.
fn redis_cli(cluster: &Cluster, args: &[&str]) -> String {
    let port = cluster.resp_addr(0).port().to_string();
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port])
        .args(args)
        .env_remove("REDISCLI_AUTH")
        .output()
        .expect("redis-cli is installed");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text += &String::from_utf8_lossy(&out.stderr);
    text
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

#[test]
fn every_port_wants_a_login_and_roles_limit_what_it_may_do() {
    let cluster = start();
    let addr = cluster.nodes[0].client;
    rt().block_on(async {
        // Native: nothing before a login.
        let anon = Client::connect(addr).await.unwrap();
        let got = anon.get(b"k", b"", Consistency::Quorum).await;
        assert_eq!(kind(got), Some(ErrorKind::NoAuth));
        assert_eq!(kind(anon.status().await), Some(ErrorKind::NoAuth));
        // A wrong password: refused, after the delay.
        let started = Instant::now();
        assert_eq!(
            kind(login(addr, "app", "nope").await),
            Some(ErrorKind::Denied)
        );
        assert_eq!(
            kind(login(addr, "nobody", "app-pw").await),
            Some(ErrorKind::Denied)
        );
        assert!(started.elapsed() >= Duration::from_millis(200));
        // The writer adds; the viewer reads but cannot add or snapshot.
        let app = login(addr, "app", "app-pw").await.unwrap();
        assert_eq!(app.add(b"k", b"", 5, Consistency::Quorum).await.unwrap(), 5);
        let viewer = login(addr, "viewer", "viewer-pw").await.unwrap();
        assert_eq!(viewer.get(b"k", b"", Consistency::Quorum).await.unwrap(), 5);
        let refused = viewer.add(b"k", b"", 1, Consistency::Quorum).await;
        let e = refused.expect_err("a read-only user adds");
        assert_eq!(e.kind(), Some(ErrorKind::Denied));
        assert!(e.to_string().contains("NOPERM user viewer"), "{e}");
        assert_eq!(e.outcome(), tally_net::Outcome::NotApplied);
        assert!(viewer.status().await.is_ok());
        // Repair, ring changes and snapshots are the administrator's.
        let snapshot = tally_net::wire::ClientOp::Snapshot(tally_net::wire::WireSnapshotOp::List);
        assert_eq!(
            kind(app.call(snapshot.clone()).await),
            Some(ErrorKind::Denied)
        );
        let admin = login(addr, "admin", "admin-pw").await.unwrap();
        assert!(admin.call(snapshot).await.is_ok());
    });
    // The CLI logs in from the environment.
    let out = cluster.tally_env(&[], &["get", "k"]).unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("NOAUTH"),
        "{out:?}"
    );
    let env = [("TALLY_USER", "app"), ("TALLY_PASSWORD", "app-pw")];
    let out = cluster.tally_env(&env, &["add", "k", "2"]).unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "7");
    let viewer = [("TALLY_USER", "viewer"), ("TALLY_PASSWORD", "viewer-pw")];
    let out = cluster.tally_env(&viewer, &["add", "k", "1"]).unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("NOPERM"),
        "{out:?}"
    );

    // RESP, with redis-cli: NOAUTH, WRONGPASS, users and their roles.
    assert!(redis_cli(&cluster, &["GET", "k"]).contains("NOAUTH Authentication required."));
    let wrong = redis_cli(&cluster, &["--no-auth-warning", "-a", "nope", "GET", "k"]);
    assert!(wrong.contains("WRONGPASS"), "{wrong}");
    let default = redis_cli(
        &cluster,
        &["--no-auth-warning", "-a", "default-pw", "INCR", "k"],
    );
    assert_eq!(default.trim(), "8", "AUTH password logs in as default");
    let app = ["--no-auth-warning", "--user", "app", "--pass", "app-pw"];
    assert_eq!(
        redis_cli(&cluster, &[&app[..], &["INCRBY", "k", "2"]].concat()).trim(),
        "10"
    );
    let viewer = [
        "--no-auth-warning",
        "--user",
        "viewer",
        "--pass",
        "viewer-pw",
    ];
    let incr = redis_cli(&cluster, &[&viewer[..], &["INCR", "k"]].concat());
    assert!(
        incr.contains("NOPERM User viewer has no permissions to run the 'incr' command"),
        "{incr}"
    );
    assert_eq!(
        redis_cli(&cluster, &[&viewer[..], &["GET", "k"]].concat()).trim(),
        "10"
    );
    let script = redis_cli(
        &cluster,
        &[
            &viewer[..],
            &["EVAL", "return redis.call('INCR', KEYS[1])", "1", "k"],
        ]
        .concat(),
    );
    assert!(
        script.contains("Write commands are not allowed"),
        "{script}"
    );
    assert!(redis_cli(&cluster, &["-3", "HELLO", "3"]).contains("NOAUTH HELLO must be called"));
    let hello = redis_cli(&cluster, &["-3", "HELLO", "3", "AUTH", "app", "app-pw"]);
    assert!(
        hello.contains("proto") && hello.contains("redis"),
        "{hello}"
    );

    // The metrics port: HTTP Basic authentication.
    let metrics = cluster.metrics_addr(0);
    let get = |auth: &str| {
        http(
            metrics,
            &format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n"),
        )
    };
    let anon = get("");
    assert!(
        anon.starts_with("HTTP/1.1 401") && anon.contains("WWW-Authenticate: Basic"),
        "{anon}"
    );
    // base64("viewer:nope") and base64("viewer:viewer-pw")
    assert!(get("Authorization: Basic dmlld2VyOm5vcGU=\r\n").starts_with("HTTP/1.1 401"));
    let page = get("Authorization: Basic dmlld2VyOnZpZXdlci1wdw==\r\n");
    assert!(page.starts_with("HTTP/1.1 200") && page.contains("tally_coordinator_add_seconds"));

    // Failures are logged with the user, never the password.
    let log = cluster.log_text(0);
    assert!(
        log.contains("authentication failed") && log.contains("app"),
        "{log}"
    );
    assert!(log.contains("clients must log in"));
    assert!(!log.contains("nope"), "a wrong password reached the log");
}

fn http(addr: SocketAddr, request: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut back = String::new();
    s.read_to_string(&mut back).unwrap();
    back
}

#[test]
fn a_changed_users_file_is_taken_up_without_a_restart() {
    let cluster = start();
    let addr = cluster.nodes[1].client;
    rt().block_on(async {
        assert_eq!(
            kind(login(addr, "late", "late-pw").await),
            Some(ErrorKind::Denied)
        );
        cluster.passwd("late", "readonly", "late-pw").unwrap();
        let late = login(addr, "late", "late-pw").await.unwrap();
        assert_eq!(late.get(b"x", b"", Consistency::One).await.unwrap(), 0);
        // A new password replaces the old one at once.
        cluster.passwd("app", "readwrite", "app-pw-2").unwrap();
        assert_eq!(
            kind(login(addr, "app", "app-pw").await),
            Some(ErrorKind::Denied)
        );
        assert!(login(addr, "app", "app-pw-2").await.is_ok());
    });
    // A broken file is reported and the users as they were stay.
    let users = cluster.dir.path().join("users.toml");
    let good = std::fs::read_to_string(&users).unwrap();
    std::fs::write(
        &users,
        good.clone() + "\n[[user]]\nname = \"x\"\npassword = \"clear\"\n",
    )
    .unwrap();
    rt().block_on(async {
        assert!(login(addr, "late", "late-pw").await.is_ok());
    });
    assert!(cluster.log_text(1).contains("does not load"));
}

#[test]
fn bad_logins_get_clear_answers_and_a_flood_of_them_does_not_stop_the_node() {
    let cluster = start();
    let resp = cluster.resp_addr(0);
    rt().block_on(async {
        let mut c = TcpStream::connect(resp).await.unwrap();
        assert!(
            ask(&mut c, &[b"AUTH"])
                .await
                .starts_with("-ERR wrong number of arguments")
        );
        assert_eq!(
            ask(&mut c, &[b"AUTH", b"a", b"b", b"c"]).await,
            "-ERR syntax error"
        );
        assert!(
            ask(&mut c, &[b"AUTH", b"app", &[0xff, 0xfe]])
                .await
                .starts_with("-WRONGPASS")
        );
        let huge = vec![b'x'; 60 << 10]; // under the bulk limit, over the login limit
        let reply = ask(&mut c, &[b"AUTH", b"app", &huge]).await;
        assert!(reply.starts_with("-WRONGPASS"), "{reply}");
        let reply = ask(&mut c, &[b"AUTH", &huge, b"x"]).await;
        assert!(reply.starts_with("-WRONGPASS"), "{reply}");
        assert_eq!(
            ask(&mut c, &[b"PING"]).await,
            "-NOAUTH Authentication required."
        );
        assert_eq!(ask(&mut c, &[b"AUTH", b"app", b"app-pw"]).await, "+OK");
        assert_eq!(ask(&mut c, &[b"PING"]).await, "+PONG");

        // 40 connections guessing at once, while a logged-in client adds.
        let guessers: Vec<_> = (0..40)
            .map(|i| {
                tokio::spawn(async move {
                    let mut g = TcpStream::connect(resp).await.unwrap();
                    for j in 0..4 {
                        let guess = format!("guess-{i}-{j}");
                        let reply = ask(&mut g, &[b"AUTH", b"admin", guess.as_bytes()]).await;
                        assert!(reply.starts_with("-WRONGPASS"), "{reply}");
                    }
                })
            })
            .collect();
        let app = login(cluster.nodes[0].client, "app", "app-pw")
            .await
            .unwrap();
        let mut slowest = Duration::ZERO;
        for _ in 0..20 {
            let t = Instant::now();
            app.add(b"during", b"", 1, Consistency::Quorum)
                .await
                .unwrap();
            slowest = slowest.max(t.elapsed());
            assert_eq!(ask(&mut c, &[b"PING"]).await, "+PONG");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            slowest < Duration::from_secs(1),
            "an add took {slowest:?} during the flood"
        );
        for g in guessers {
            g.await.unwrap();
        }
        assert_eq!(app.get(b"during", b"", Consistency::All).await.unwrap(), 20);
    });
}

/// One node whose users come only from its users file, `users.toml`
/// (none yet: the caller adds them).
fn start_with_users_file_only() -> Cluster {
    let mut cluster = Cluster::configure(ClusterOptions {
        nodes: 1,
        replication_factor: 1,
        cluster_tables: "[cluster.auth]\nusers_file = \"users.toml\"\n".into(),
        ..ClusterOptions::default()
    })
    .unwrap();
    cluster.start_all().unwrap();
    cluster
}

/// GET on a new RESP connection to `addr` that has not logged in.
async fn anonymous_get(addr: SocketAddr) -> String {
    let mut c = TcpStream::connect(addr).await.unwrap();
    ask(&mut c, &[b"GET", b"k"]).await
}

#[test]
fn users_added_to_a_node_without_users_are_asked_for_on_every_port() {
    let mut cluster = start_with_users_file_only();
    cluster.passwd("admin", "admin", "admin-pw").unwrap();
    cluster.passwd("app", "readwrite", "app-pw").unwrap();
    cluster.security = security("admin", "admin-pw");
    let (resp, native) = (cluster.resp_addr(0), cluster.nodes[0].client);
    rt().block_on(async {
        // RESP: before any login reads the file again, a new connection
        // already has to log in, and AUTH takes the new users.
        assert_eq!(
            anonymous_get(resp).await,
            "-NOAUTH Authentication required."
        );
        let mut c = TcpStream::connect(resp).await.unwrap();
        assert_eq!(ask(&mut c, &[b"AUTH", b"app", b"app-pw"]).await, "+OK");
        assert_eq!(
            ask(&mut c, &[b"AUTH", b"app", b"nope"]).await,
            "-WRONGPASS invalid username-password pair or user is disabled."
        );
        // Native.
        let anon = Client::connect(native).await.unwrap();
        let got = anon.get(b"k", b"", Consistency::Quorum).await;
        assert_eq!(kind(got), Some(ErrorKind::NoAuth));
    });
    // Metrics.
    let anon = http(
        cluster.metrics_addr(0),
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert!(anon.starts_with("HTTP/1.1 401"), "{anon}");
}

#[test]
fn an_emptied_missing_or_unreadable_users_file_keeps_the_users() {
    let mut cluster = start_with_users_file_only();
    cluster.passwd("admin", "admin", "admin-pw").unwrap();
    cluster.passwd("app", "readwrite", "app-pw").unwrap();
    cluster.security = security("admin", "admin-pw");
    let users = cluster.dir.path().join("users.toml");
    let resp = cluster.resp_addr(0);
    let still_closed = |what: &str| {
        rt().block_on(async {
            let mut c = TcpStream::connect(resp).await.unwrap();
            assert_eq!(
                ask(&mut c, &[b"AUTH", b"app", b"app-pw"]).await,
                "+OK",
                "{what}: the users were dropped"
            );
            assert_eq!(
                anonymous_get(resp).await,
                "-NOAUTH Authentication required.",
                "{what}: authentication turned itself off"
            );
            let anon = Client::connect(cluster.nodes[0].client).await.unwrap();
            let got = anon.get(b"k", b"", Consistency::Quorum).await;
            assert_eq!(kind(got), Some(ErrorKind::NoAuth), "{what}: native");
        });
        let page = http(
            cluster.metrics_addr(0),
            "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        assert!(page.starts_with("HTTP/1.1 401"), "{what}: metrics: {page}");
    };
    // The node reads the users at a login.
    rt().block_on(async { login(cluster.nodes[0].client, "app", "app-pw").await })
        .expect("the users file was read");
    std::fs::write(&users, "").unwrap();
    still_closed("an empty file");
    std::fs::write(&users, "# no users\n").unwrap();
    still_closed("a file of comments");
    std::fs::remove_file(&users).unwrap();
    still_closed("a missing file");
    std::fs::create_dir(&users).unwrap();
    still_closed("an unreadable file");
    let log = cluster.log_text(0);
    assert!(log.contains("keeping the users as they were"), "{log}");
}

#[test]
fn deleting_the_last_user_needs_force() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("users.toml");
    let file = file.to_str().unwrap();
    for user in ["a", "b"] {
        tally_tests::passwd(&["--users-file", file, user], "pw").unwrap();
    }
    tally_tests::passwd(&["--users-file", file, "--delete", "a"], "").unwrap();
    let refused = tally_tests::passwd(&["--users-file", file, "--delete", "b"], "");
    let e = refused.expect_err("the last user was deleted without --force");
    assert!(e.to_string().contains("--force"), "{e}");
    assert!(
        std::fs::read_to_string(file)
            .unwrap()
            .contains("name = \"b\"")
    );
    let out = tally_tests::passwd(&["--users-file", file, "--delete", "--force", "b"], "");
    assert!(out.unwrap().contains("removed user b"));
}

#[test]
fn dangerous_commands_need_an_admin() {
    let cluster = start();
    let resp = cluster.resp_addr(0);
    rt().block_on(async {
        let mut app = TcpStream::connect(resp).await.unwrap();
        assert_eq!(ask(&mut app, &[b"AUTH", b"app", b"app-pw"]).await, "+OK");
        assert_eq!(ask(&mut app, &[b"INCRBY", b"kept", b"7"]).await, ":7");
        let noperm =
            |cmd: &str| format!("-NOPERM User app has no permissions to run the '{cmd}' command");
        // Redis' @dangerous commands that Tally serves, and SCRIPT FLUSH.
        let refused: [(&[&[u8]], &str); 11] = [
            (&[b"FLUSHALL"], "flushall"),
            (&[b"FLUSHALL", b"SYNC"], "flushall"),
            (&[b"FLUSHDB"], "flushdb"),
            (&[b"flushdb", b"ASYNC"], "flushdb"),
            (&[b"SCRIPT", b"FLUSH"], "script|flush"),
            (&[b"script", b"flush", b"sync"], "script|flush"),
            (&[b"KEYS", b"*"], "keys"),
            (&[b"SWAPDB", b"0", b"1"], "swapdb"),
            (&[b"CONFIG", b"GET", b"maxmemory"], "config|get"),
            (&[b"INFO"], "info"),
            (&[b"INFO", b"server"], "info"),
        ];
        for (words, name) in refused {
            let shown: Vec<_> = words.iter().map(|w| String::from_utf8_lossy(w)).collect();
            assert_eq!(ask(&mut app, words).await, noperm(name), "{shown:?}");
        }
        // What is not dangerous still runs; the counter is still there.
        assert!(
            ask(&mut app, &[b"SCRIPT", b"KILL"])
                .await
                .starts_with("-NOTBUSY")
        );
        assert_eq!(ask(&mut app, &[b"EXISTS", b"kept"]).await, ":1");
        // Queued in a transaction: refused there, and EXEC aborts.
        assert_eq!(ask(&mut app, &[b"MULTI"]).await, "+OK");
        assert_eq!(ask(&mut app, &[b"FLUSHALL"]).await, noperm("flushall"));
        assert!(
            ask(&mut app, &[b"EXEC"]).await.starts_with("-EXECABORT"),
            "EXEC ran a transaction with a refused command"
        );
        // The administrator may.
        let mut admin = TcpStream::connect(resp).await.unwrap();
        assert_eq!(
            ask(&mut admin, &[b"AUTH", b"admin", b"admin-pw"]).await,
            "+OK"
        );
        assert_eq!(ask(&mut admin, &[b"SCRIPT", b"FLUSH"]).await, "+OK");
        assert_eq!(ask(&mut admin, &[b"FLUSHALL"]).await, "+OK");
        assert_eq!(ask(&mut app, &[b"EXISTS", b"kept"]).await, ":0");
    });
}

/// Reads one line of `conn`.
async fn line(conn: &mut TcpStream) -> String {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        assert_eq!(conn.read(&mut byte).await.unwrap(), 1, "the node closed");
        line.push(byte[0]);
    }
    String::from_utf8_lossy(&line).trim_end().to_string()
}

/// Reads one reply of `conn` as a line (a bulk string as its value).
async fn reply(conn: &mut TcpStream) -> String {
    let first = line(conn).await;
    if first.starts_with('$') && first != "$-1" {
        return line(conn).await;
    }
    first
}

/// One rule refuses a command on every path: alone, in a pipeline (where
/// the commands around it still run, in order), queued in a `MULTI`, and
/// in a script.
#[test]
fn a_refused_command_is_refused_alike_on_every_path() {
    let cluster = start();
    let resp = cluster.resp_addr(0);
    rt().block_on(async {
        let mut app = TcpStream::connect(resp).await.unwrap();
        assert_eq!(ask(&mut app, &[b"AUTH", b"app", b"app-pw"]).await, "+OK");
        assert_eq!(ask(&mut app, &[b"INCRBY", b"k", b"5"]).await, ":5");
        let mut viewer = TcpStream::connect(resp).await.unwrap();
        assert_eq!(
            ask(&mut viewer, &[b"AUTH", b"viewer", b"viewer-pw"]).await,
            "+OK"
        );
        let noperm = |user: &str, cmd: &str| {
            format!("-NOPERM User {user} has no permissions to run the '{cmd}' command")
        };
        // Alone.
        assert_eq!(
            ask(&mut viewer, &[b"INCR", b"k"]).await,
            noperm("viewer", "incr")
        );
        // In a pipeline: the reads around the refused write run.
        let cmds: [&[&[u8]]; 5] = [
            &[b"GET", b"k"],
            &[b"INCR", b"k"],
            &[b"HINCRBY", b"h", b"f", b"1"],
            &[b"MGET", b"k", b"nope"],
            &[b"GET", b"k"],
        ];
        let bytes: Vec<u8> = cmds.iter().flat_map(|w| command(w)).collect();
        viewer.write_all(&bytes).await.unwrap();
        let mut replies = Vec::new();
        for _ in 0..4 {
            replies.push(reply(&mut viewer).await);
        }
        assert_eq!(
            replies,
            [
                "5".to_string(),
                noperm("viewer", "incr"),
                noperm("viewer", "hincrby"),
                "*2".into()
            ]
        );
        assert_eq!(reply(&mut viewer).await, "5", "MGET's first");
        assert_eq!(reply(&mut viewer).await, "$-1", "MGET's second");
        assert_eq!(reply(&mut viewer).await, "5");
        // Queued in a transaction: refused there, and EXEC aborts.
        assert_eq!(ask(&mut viewer, &[b"MULTI"]).await, "+OK");
        assert_eq!(ask(&mut viewer, &[b"GET", b"k"]).await, "+QUEUED");
        assert_eq!(
            ask(&mut viewer, &[b"DECR", b"k"]).await,
            noperm("viewer", "decr")
        );
        assert!(ask(&mut viewer, &[b"EXEC"]).await.starts_with("-EXECABORT"));
        // A writer's pipeline: a flush it may not run is refused in its
        // place, and the adds on either side of it run.
        let cmds: [&[&[u8]]; 3] = [&[b"INCR", b"k"], &[b"FLUSHDB"], &[b"INCR", b"k"]];
        let bytes: Vec<u8> = cmds.iter().flat_map(|w| command(w)).collect();
        app.write_all(&bytes).await.unwrap();
        let mut replies = Vec::new();
        for _ in cmds {
            replies.push(reply(&mut app).await);
        }
        assert_eq!(
            replies,
            [":6".to_string(), noperm("app", "flushdb"), ":7".into()]
        );
        viewer.write_all(&command(&[b"GET", b"k"])).await.unwrap();
        assert_eq!(reply(&mut viewer).await, "7");
    });
}
