//! The connection and server commands clients send around their work:
//! `HELLO`, `AUTH`, `CLIENT`, `INFO`, `COMMAND`, `CONFIG GET`, `TIME`,
//! `PING`, `ECHO`, `SELECT`, `READONLY`, `READWRITE`.
//!
//! `AUTH` and the login in `HELLO ... AUTH` are `login`'s.

use std::sync::Arc;

use tally_world::Instant;

use tally_net::wire::Consistency;

use super::proto::{Proto, Reply};
use super::session::{Session, arity};
use crate::base::commands::{self, COMMANDS};
use crate::client::accept::ClientSlot;
use crate::node::Node;

/// The Redis version Tally answers as: the commands it serves behave as
/// Redis 7.2's do.
const REDIS_VERSION: &str = "7.2.0";

/// Answers `name` if it is one of this module's commands.
pub(crate) fn execute(
    node: &Arc<Node>,
    slot: &ClientSlot,
    s: &mut Session,
    name: &str,
    args: &[Vec<u8>],
) -> Option<Reply> {
    let rest = &args[1..];
    let reply = match (name, rest.len()) {
        ("ping", 0) => Reply::Simple("PONG"),
        ("ping", 1) | ("echo", 1) => Reply::bulk(rest[0].clone()),
        ("select", 1) => match super::db::select(&rest[0]) {
            Ok(db) => {
                s.db = db;
                Reply::Simple("OK")
            }
            Err(e) => e,
        },
        ("readonly" | "readwrite", 0) => Reply::Simple("OK"),
        ("hello", _) => hello(node, s, rest),
        ("client", n) if n >= 1 => client(s, rest),
        ("info", _) => {
            let text = info(node, slot, s.shared.started(), rest);
            Reply::Verbatim("txt", text.into_bytes())
        }
        ("command", _) => command(rest),
        ("config", n) if n >= 2 && rest[0].eq_ignore_ascii_case(b"get") => config_get(&rest[1..]),
        ("config", n) if n >= 1 && !rest[0].eq_ignore_ascii_case(b"get") => Reply::err(format!(
            "ERR CONFIG {} is not supported: a Tally node is configured by cluster.toml",
            String::from_utf8_lossy(&rest[0]).to_ascii_uppercase()
        )),
        ("time", 0) => time(),
        (
            "ping" | "echo" | "select" | "readonly" | "readwrite" | "client" | "config" | "time",
            _,
        ) => arity(name),
        _ => return None,
    };
    Some(reply)
}

/// `HELLO [protover [AUTH user pass] [SETNAME name]]`: checks everything,
/// then switches, and answers the server's map in the new protocol.
fn hello(node: &Node, s: &mut Session, rest: &[Vec<u8>]) -> Reply {
    let mut proto = s.proto;
    let mut name = None;
    if let Some(v) = rest.first() {
        proto = match std::str::from_utf8(v)
            .ok()
            .and_then(|v| v.parse::<i64>().ok())
        {
            Some(2) => Proto::Resp2,
            Some(3) => Proto::Resp3,
            Some(_) => return Reply::err("NOPROTO unsupported protocol version"),
            None => return Reply::err("ERR Protocol version is not an integer or out of range"),
        };
        let mut i = 1;
        while i < rest.len() {
            let opt = rest[i].to_ascii_lowercase();
            match (opt.as_slice(), rest.len() - i - 1) {
                // Checked before, by `login::hello`.
                (b"auth", n) if n >= 2 => i += 3,
                (b"setname", n) if n >= 1 => {
                    if let Err(e) = check_name(&rest[i + 1]) {
                        return e;
                    }
                    name = Some(rest[i + 1].clone());
                    i += 2;
                }
                _ => {
                    return Reply::err(format!(
                        "ERR Syntax error in HELLO option '{}'",
                        String::from_utf8_lossy(&rest[i])
                    ));
                }
            }
        }
    }
    s.proto = proto;
    if name.is_some() {
        s.name = name;
    }
    let me = &node.config().nodes[node.me()];
    let pair = |k: &str, v: Reply| (Reply::bulk(k), v);
    Reply::Map(vec![
        pair("server", Reply::bulk("redis")),
        pair("version", Reply::bulk(REDIS_VERSION)),
        pair("proto", Reply::Int(proto.version())),
        pair("id", Reply::Int(i64::try_from(s.id).unwrap_or(i64::MAX))),
        pair("mode", Reply::bulk("standalone")),
        pair("role", Reply::bulk("master")),
        pair("modules", Reply::Array(Vec::new())),
        pair("tally_version", Reply::bulk(env!("CARGO_PKG_VERSION"))),
        pair("tally_node", Reply::bulk(me.id.as_str())),
    ])
}

fn check_name(name: &[u8]) -> Result<(), Reply> {
    if name.iter().all(|&b| (b'!'..=b'~').contains(&b)) {
        Ok(())
    } else {
        Err(Reply::err(
            "ERR Client names cannot contain spaces, newlines or special characters.",
        ))
    }
}

fn client(s: &mut Session, rest: &[Vec<u8>]) -> Reply {
    let sub = String::from_utf8_lossy(&rest[0]).to_ascii_lowercase();
    let args = &rest[1..];
    match (sub.as_str(), args.len()) {
        ("setname", 1) => match check_name(&args[0]) {
            Ok(()) => {
                s.name = (!args[0].is_empty()).then(|| args[0].clone());
                Reply::Simple("OK")
            }
            Err(e) => e,
        },
        ("getname", 0) => Reply::Bulk(s.name.clone()),
        ("id", 0) => Reply::Int(i64::try_from(s.id).unwrap_or(i64::MAX)),
        ("info", 0) => Reply::Verbatim("txt", client_info(s).into_bytes()),
        ("setinfo", 2) => {
            let value = String::from_utf8_lossy(&args[1]).into_owned();
            if value.contains(|c: char| c.is_whitespace() || c.is_control()) {
                return Reply::err(format!(
                    "ERR {} cannot contain spaces, newlines or special characters.",
                    String::from_utf8_lossy(&args[0])
                ));
            }
            match args[0].to_ascii_lowercase().as_slice() {
                b"lib-name" => s.lib.0 = Some(value),
                b"lib-ver" => s.lib.1 = Some(value),
                _ => {
                    return Reply::err(format!(
                        "ERR Unrecognized option '{}'",
                        String::from_utf8_lossy(&args[0])
                    ));
                }
            }
            Reply::Simple("OK")
        }
        ("consistency", 0) => Reply::bulk(level_name(s.cl)),
        ("consistency", 1) => match level(&args[0]) {
            Some(cl) => {
                s.cl = cl;
                Reply::Simple("OK")
            }
            None => Reply::err("ERR consistency level must be ONE, QUORUM, ALL or SERIAL"),
        },
        ("no-evict" | "no-touch", 1) => Reply::Simple("OK"),
        ("help", 0) => Reply::Array(
            [
                "CLIENT <subcommand> [<arg> ...]. Subcommands are:",
                "CONSISTENCY [ONE|QUORUM|ALL|SERIAL]: the level of this connection's reads and writes (QUORUM by default; SERIAL: reads that never go back).",
                "GETNAME, SETNAME <name>, ID, INFO, SETINFO <LIB-NAME|LIB-VER> <value>, NO-EVICT, NO-TOUCH.",
            ]
            .into_iter()
            .map(Reply::Simple)
            .collect(),
        ),
        _ => Reply::err(format!(
            "ERR unknown subcommand or wrong number of arguments for '{sub}'. Try CLIENT HELP."
        )),
    }
}

/// A consistency level by name, any case.
fn level(name: &[u8]) -> Option<Consistency> {
    match name.to_ascii_lowercase().as_slice() {
        b"one" => Some(Consistency::One),
        b"quorum" => Some(Consistency::Quorum),
        b"all" => Some(Consistency::All),
        b"serial" => Some(Consistency::Serial),
        _ => None,
    }
}

fn level_name(cl: Consistency) -> &'static str {
    match cl {
        Consistency::One => "ONE",
        Consistency::Quorum => "QUORUM",
        Consistency::All => "ALL",
        Consistency::Serial => "SERIAL",
    }
}

/// `CLIENT INFO`'s line, in Redis' `key=value` form.
fn client_info(s: &Session) -> String {
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    format!(
        "id={} addr={} laddr={} name={} db={} multi={} user={} resp={} lib-name={} lib-ver={} consistency={}\n",
        s.id,
        s.addrs.0,
        s.addrs.1,
        String::from_utf8_lossy(s.name.as_deref().unwrap_or_default()),
        s.db,
        if s.in_multi() { 0 } else { -1 },
        s.login.user().unwrap_or("default"),
        s.proto.version(),
        text(&s.lib.0),
        text(&s.lib.1),
        level_name(s.cl),
    )
}

/// `INFO [section ...]`: `# Section` headers and `key:value` lines.
fn info(node: &Node, slot: &ClientSlot, started: Instant, rest: &[Vec<u8>]) -> String {
    let me = &node.config().nodes[node.me()];
    let sections: [(&str, Vec<(&str, String)>); 5] = [
        (
            "Server",
            vec![
                ("redis_version", REDIS_VERSION.into()),
                ("redis_mode", "standalone".into()),
                ("tally_version", env!("CARGO_PKG_VERSION").into()),
                ("tally_cluster", node.config().cluster.name.clone()),
                ("tally_node", me.id.clone()),
                ("process_id", std::process::id().to_string()),
                ("tcp_port", me.resp.port().to_string()),
                ("uptime_in_seconds", started.elapsed().as_secs().to_string()),
            ],
        ),
        (
            "Clients",
            vec![("connected_clients", slot.open_now().to_string())],
        ),
        (
            "Persistence",
            vec![("loading", "0".into()), ("aof_enabled", "0".into())],
        ),
        (
            "Replication",
            vec![("role", "master".into()), ("connected_slaves", "0".into())],
        ),
        ("Keyspace", Vec::new()),
    ];
    let wanted: Vec<String> = rest
        .iter()
        .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
        .collect();
    let all = wanted.is_empty()
        || wanted
            .iter()
            .any(|w| matches!(w.as_str(), "all" | "default" | "everything"));
    let mut out = String::new();
    for (name, lines) in sections {
        if !all && !wanted.contains(&name.to_ascii_lowercase()) {
            continue;
        }
        if !out.is_empty() {
            out.push_str("\r\n");
        }
        out.push_str(&format!("# {name}\r\n"));
        for (k, v) in lines {
            out.push_str(&format!("{k}:{v}\r\n"));
        }
    }
    out
}

/// `COMMAND`, `COMMAND COUNT|LIST|INFO [name ...]|DOCS [name ...]`.
fn command(rest: &[Vec<u8>]) -> Reply {
    let Some(sub) = rest.first() else {
        return Reply::Array(COMMANDS.iter().map(command_info).collect());
    };
    let names: Vec<String> = rest[1..]
        .iter()
        .map(|n| String::from_utf8_lossy(n).to_ascii_lowercase())
        .collect();
    match sub.to_ascii_lowercase().as_slice() {
        b"count" if names.is_empty() => {
            Reply::Int(i64::try_from(COMMANDS.len()).unwrap_or(i64::MAX))
        }
        b"list" => Reply::Array(COMMANDS.iter().map(|c| Reply::bulk(c.name)).collect()),
        b"info" if names.is_empty() => Reply::Array(COMMANDS.iter().map(command_info).collect()),
        b"info" => Reply::Array(
            names
                .iter()
                .map(|n| commands::find(n).map_or(Reply::NIL, command_info))
                .collect(),
        ),
        b"docs" => Reply::Map(
            COMMANDS
                .iter()
                .filter(|c| names.is_empty() || names.iter().any(|n| n == c.name))
                .map(|c| (Reply::bulk(c.name), command_docs(c)))
                .collect(),
        ),
        _ => Reply::err(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try COMMAND HELP.",
            String::from_utf8_lossy(sub)
        )),
    }
}

/// Tools ask for settings (redis-benchmark: save, appendonly); every name
/// asked for gets an empty value, as Redis has no such setting here.
fn config_get(names: &[Vec<u8>]) -> Reply {
    Reply::Map(
        names
            .iter()
            .map(|n| (Reply::bulk(n.clone()), Reply::bulk(Vec::new())))
            .collect(),
    )
}

pub(crate) fn time() -> Reply {
    let now = tally_world::since_epoch();
    Reply::Array(vec![
        Reply::bulk(now.as_secs().to_string()),
        Reply::bulk(now.subsec_micros().to_string()),
    ])
}

/// `COMMAND INFO`'s entry for `c` (Redis 7's ten fields).
fn command_info(c: &commands::Command) -> Reply {
    let (first, last, step) = c.keys;
    Reply::Array(vec![
        Reply::bulk(c.name),
        Reply::Int(c.arity),
        Reply::Set(c.flags.iter().map(|f| Reply::Simple(f)).collect()),
        Reply::Int(first),
        Reply::Int(last),
        Reply::Int(step),
        Reply::Set(vec![Reply::Status(format!("@{}", c.group))]),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
    ])
}

/// `COMMAND DOCS`' entry for `c`.
fn command_docs(c: &commands::Command) -> Reply {
    Reply::Map(vec![
        (Reply::bulk("summary"), Reply::bulk(c.summary)),
        (Reply::bulk("since"), Reply::bulk("1.0.0")),
        (Reply::bulk("group"), Reply::bulk(c.group)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<Vec<u8>> {
        line.split(' ').map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn client_settings_and_their_errors() {
        let mut s = Session::new(
            ("127.0.0.1:1".into(), "127.0.0.1:2".into()),
            crate::security::auth::Login::admin(),
            super::super::queued::Budget::new(1 << 20, 1 << 20),
            super::super::shared::Shared::new(),
        );
        assert_eq!(client(&mut s, &words("GETNAME")), Reply::NIL);
        assert_eq!(client(&mut s, &words("SETNAME app-1")), Reply::Simple("OK"));
        assert_eq!(client(&mut s, &words("getname")), Reply::bulk("app-1"));
        assert!(client(&mut s, &words("SETNAME a\nb")).is_error());
        assert_eq!(
            client(&mut s, &words("SETINFO LIB-NAME redis-py")),
            Reply::Simple("OK")
        );
        assert!(client(&mut s, &words("SETINFO COLOR red")).is_error());
        assert_eq!(client(&mut s, &words("CONSISTENCY")), Reply::bulk("QUORUM"));
        assert_eq!(
            client(&mut s, &words("CONSISTENCY all")),
            Reply::Simple("OK")
        );
        assert_eq!(s.cl, Consistency::All);
        assert!(client(&mut s, &words("CONSISTENCY most")).is_error());
        assert_eq!(s.cl, Consistency::All);
        let Reply::Verbatim(_, line) = client(&mut s, &words("INFO")) else {
            panic!("CLIENT INFO is text")
        };
        let line = String::from_utf8(line).unwrap_or_default();
        assert!(
            line.contains(" name=app-1 ")
                && line.contains("lib-name=redis-py")
                && line.contains("consistency=ALL"),
            "{line}"
        );
        assert!(client(&mut s, &words("KILL x")).is_error());
    }

    #[test]
    fn command_answers_from_the_table() {
        assert_eq!(command(&words("COUNT")), Reply::Int(COMMANDS.len() as i64));
        let Reply::Array(infos) = command(&words("INFO get nope")) else {
            panic!("an array")
        };
        assert_eq!(infos[1], Reply::NIL);
        let Reply::Array(get) = &infos[0] else {
            panic!("get's info")
        };
        assert_eq!(get[..2], [Reply::bulk("get"), Reply::Int(2)]);
        let Reply::Map(docs) = command(&words("DOCS incr")) else {
            panic!("a map")
        };
        assert_eq!(docs.len(), 1);
        assert!(command(&words("GETKEYS get a")).is_error());
    }
}
