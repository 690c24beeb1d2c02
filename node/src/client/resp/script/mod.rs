//! Scripts: `EVAL`, `EVALSHA`, `EVAL_RO`, `EVALSHA_RO` and `SCRIPT LOAD`,
//! `EXISTS`, `FLUSH`, `KILL`, in Luau, the sandboxed Lua 5.1 dialect
//! (`resp::lua`: `vm`, `sandbox`, `api`, `convert`).
//!
//! A script whose keys are all one key runs as one agreed change of that
//! key once the cluster has enabled agreement (`agreed`, over `view`): it
//! happens at one instant through any node, as a Redis script runs alone.
//! Any other script's commands run one after another on this node as
//! coordinator, at the connection's database and consistency level, each
//! as if the client had sent it: there is no isolation from other clients
//! (so does a one-key script that touches another key, or a key holding a
//! counter, a hash, a list or a unique counter). A command Tally lacks fails in the
//! script with Redis' error. A script past its time limit (5 s, Redis'
//! `busy-reply-threshold`) or its memory limit (32 MiB, and 256 MiB for
//! all scripts of the node: `lua::budget`) is aborted with a clear error, and
//! so is one `SCRIPT KILL` names (`lua::runs`); scripts run on threads of their
//! own meanwhile, and the node keeps serving.
//!
//! Scripts are cached by sha1 (`crate::cluster::scripts`): `SCRIPT LOAD` through one
//! node serves `EVALSHA` through any other, and a sha no node has answers
//! `NOSCRIPT`, so clients send the script again (`EVAL`), as they do with
//! Redis. Scripts run on a few threads of their own (`lua::runner`), each as a
//! coroutine; interpreters are pooled there, each compiling a script once,
//! so memory does not grow with the connections that run scripts. A
//! node's threads, memory and runs are its own (`resp::shared`).
//! `SCRIPT FLUSH` needs an administrator (`crate::security::auth::access`), and so
//! do the commands a script runs that need one.

mod agreed;
mod functions;
mod view;

use std::sync::Arc;
use std::time::Duration;

use tally_net::wire::Consistency;

use super::lua::{api, runner, runs, vm};
use super::proto::Reply;
use super::session::{Session, arity};
use crate::base::keyspace::Keyspace;
use crate::cluster::scripts;
use crate::node::Node;
use crate::security::auth::Need;

/// How long a script may run (Redis' `busy-reply-threshold`).
pub(crate) const TIME_LIMIT: Duration = Duration::from_secs(5);

/// Answers `name` if it is one of this module's commands.
pub(crate) async fn execute(
    node: &Arc<Node>,
    s: &Session,
    name: &str,
    args: &[Vec<u8>],
) -> Option<Reply> {
    let reply = match name {
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" if args.len() >= 3 => {
            eval(node, s, name, args).await
        }
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" => arity(name),
        "script" if args.len() >= 2 => script(node, s, &args[1..]).await,
        "script" => arity(name),
        "fcall" | "fcall_ro" if args.len() >= 3 => functions::fcall(node, s, name, args).await,
        "fcall" | "fcall_ro" => arity(name),
        "function" if args.len() >= 2 => functions::function(node, s, &args[1..]).await,
        "function" => arity(name),
        _ => return None,
    };
    Some(reply)
}

/// Where a script's commands go: this node, at the connection's level and
/// database, as its user (whose operation ids they name); called from the
/// script's thread.
struct NodeHost {
    node: Arc<Node>,
    cl: Consistency,
    space: Keyspace,
    user: Option<Arc<str>>,
    runtime: tokio::runtime::Handle,
}

impl vm::Host for NodeHost {
    fn call(&self, args: Vec<Vec<u8>>) -> vm::Pending {
        let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
        let now = |reply: Reply| -> vm::Pending { Box::pin(std::future::ready(reply)) };
        match name.as_str() {
            "ping" => now(Reply::Simple("PONG")),
            "time" => now(super::admin::time()),
            _ => {
                let (node, cl, space) = (self.node.clone(), self.cl, self.space);
                let user = self.user.clone();
                let command = self.runtime.spawn(async move {
                    let cmd = super::command::Cmd::parse(args);
                    super::keyed_as(&node, cl, space, user.as_deref(), &cmd).await
                });
                Box::pin(async move {
                    command
                        .await
                        .unwrap_or_else(|e| Reply::err(format!("ERR the command failed: {e}")))
                })
            }
        }
    }
}

/// The script an `EVAL` or `EVALSHA` names, with its sha: an `EVALSHA`'s
/// from this node's cache or another node's.
async fn script_of(node: &Node, name: &str, arg: &[u8]) -> Result<(String, Arc<[u8]>), Reply> {
    if name.starts_with("evalsha") {
        let sha = String::from_utf8_lossy(arg).to_ascii_lowercase();
        if sha.len() != 40 {
            return Err(Reply::err(NOSCRIPT));
        }
        return match node.find_script(&sha).await {
            Some(body) => Ok((sha, body)),
            None => Err(Reply::err(NOSCRIPT)),
        };
    }
    if arg.len() > scripts::SCRIPT_BYTES_MAX {
        return Err(too_long());
    }
    let sha = scripts::sha1_hex(arg);
    let body: Arc<[u8]> = arg.into();
    node.scripts().insert_eval(&sha, body.clone());
    Ok((sha, body))
}

const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";

fn too_long() -> Reply {
    Reply::err(format!(
        "ERR a script may be {} MiB at most",
        scripts::SCRIPT_BYTES_MAX >> 20
    ))
}

/// How many of an `EVAL`'s words are keys, or Redis' error.
pub(crate) fn key_count(word: &[u8], rest: usize) -> Result<usize, Reply> {
    let n: i64 = std::str::from_utf8(word)
        .ok()
        .and_then(|w| w.parse().ok())
        .ok_or_else(|| Reply::err("ERR value is not an integer or out of range"))?;
    if n < 0 {
        return Err(Reply::err("ERR Number of keys can't be negative"));
    }
    usize::try_from(n)
        .ok()
        .filter(|&n| n <= rest)
        .ok_or_else(|| Reply::err("ERR Number of keys can't be greater than number of args"))
}

/// `EVAL script numkeys key... arg...` and its kin.
async fn eval(node: &Arc<Node>, s: &Session, name: &str, args: &[Vec<u8>]) -> Reply {
    let (sha, body) = match script_of(node, name, &args[1]).await {
        Ok(found) => found,
        Err(e) => return e,
    };
    let n = match key_count(&args[2], args.len() - 3) {
        Ok(n) => n,
        Err(e) => return e,
    };
    let script = Run {
        sha,
        body,
        keys: &args[3..3 + n],
        argv: &args[3 + n..],
        read_only: name.ends_with("_ro"),
    };
    run(node, s, script).await
}

/// One run of a script (of `EVAL` and its kin, or of `FCALL`).
pub(crate) struct Run<'a> {
    pub(crate) sha: String,
    pub(crate) body: Arc<[u8]>,
    pub(crate) keys: &'a [Vec<u8>],
    pub(crate) argv: &'a [Vec<u8>],
    /// Whether it may only read (`*_RO`).
    pub(crate) read_only: bool,
}

/// Runs `script` for the connection: as one agreed change of its key when
/// its keys are all one and it stays on that key, else command by command
/// on this node.
pub(crate) async fn run(node: &Arc<Node>, s: &Session, script: Run<'_>) -> Reply {
    let Run {
        sha,
        body,
        keys,
        argv,
        read_only,
    } = script;
    let registered = s.shared.runs().start(s.login.user());
    let space = node.keyspace(s.db);
    let run = |host: Arc<dyn vm::Host>| {
        let job = runner::Job {
            sha: sha.clone(),
            body: body.clone(),
            keys: keys.to_vec(),
            argv: argv.to_vec(),
            host,
            limit: TIME_LIMIT,
            run: registered.run.clone(),
            may: api::May {
                // A user who may not write runs every script as read-only.
                read_only: read_only || !s.login.may_write(),
                admin: admin(s),
            },
            generation: node.scripts().generation(),
            sealed: node.seals_scripts(),
        };
        s.shared.scripts().run(job)
    };
    // A script of one key: one agreed change of it, where it can be.
    if let Some(key) = agreed::one_key(keys).filter(|_| node.agrees())
        && let Ok(stored) = space.stored(key)
        && let Some(reply) = agreed::run(node, (s.cl, s.shared.turns()), (key, &stored), &run).await
    {
        return reply;
    }
    let host = NodeHost {
        node: node.clone(),
        cl: s.cl,
        space,
        user: s.login.user().map(Arc::from),
        runtime: tokio::runtime::Handle::current(),
    };
    run(Arc::new(host)).await
}

/// Whether the connection is an administrator's.
pub(crate) fn admin(s: &Session) -> bool {
    s.login.check(Need::Admin).is_ok()
}

/// `SCRIPT LOAD | EXISTS | FLUSH | KILL`.
async fn script(node: &Node, s: &Session, rest: &[Vec<u8>]) -> Reply {
    let sub = String::from_utf8_lossy(&rest[0]).to_ascii_lowercase();
    match (sub.as_str(), rest.len() - 1) {
        ("load", 1) => load(node, &rest[1]),
        ("exists", n) if n >= 1 => Reply::Array(
            rest[1..]
                .iter()
                .map(|sha| {
                    let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
                    Reply::Int(i64::from(node.scripts().contains(&sha)))
                })
                .collect(),
        ),
        ("flush", 0) => flush(node).await,
        ("flush", 1)
            if [&b"async"[..], b"sync"].contains(&rest[1].to_ascii_lowercase().as_slice()) =>
        {
            flush(node).await
        }
        ("flush", _) => Reply::err("ERR SCRIPT FLUSH only support SYNC|ASYNC option"),
        ("kill", 0) => kill(s),
        ("load" | "exists" | "kill", _) => Reply::err(format!(
            "ERR wrong number of arguments for 'script|{sub}' command"
        )),
        _ => Reply::err(format!(
            "ERR unknown subcommand '{}'. Try SCRIPT HELP.",
            String::from_utf8_lossy(&rest[0])
        )),
    }
}

/// `SCRIPT LOAD body`: compiled first, so a syntax error is told now.
fn load(node: &Node, body: &[u8]) -> Reply {
    if body.len() > scripts::SCRIPT_BYTES_MAX {
        return too_long();
    }
    if let Err(e) = vm::check_syntax(body) {
        return Reply::err(e);
    }
    let sha = scripts::sha1_hex(body);
    if !node.scripts().insert_loaded(&sha, body.into()) {
        return Reply::err(format!(
            "ERR the node keeps at most {} loaded scripts ({} MiB): SCRIPT FLUSH, or use EVAL",
            scripts::SCRIPTS_MAX,
            scripts::LOADED_BYTES_MAX >> 20
        ));
    }
    Reply::bulk(sha)
}

/// `SCRIPT KILL` (and `FUNCTION KILL`): ends the connection's user's
/// script that runs on this node (any user's, for an administrator).
pub(crate) fn kill(s: &Session) -> Reply {
    match s.shared.runs().kill(s.login.user(), admin(s)) {
        runs::Kill::NotBusy => Reply::err("NOTBUSY No scripts in execution right now."),
        runs::Kill::Unkillable => Reply::err(
            "UNKILLABLE Sorry the script already executed write commands against the \
             dataset. You can either wait the script termination or kill the server in \
             a hard way using the SHUTDOWN NOSAVE command.",
        ),
        runs::Kill::End(_) => Reply::Simple("OK"),
    }
}

/// `SCRIPT FLUSH`: this node's cache and every live peer's.
async fn flush(node: &Node) -> Reply {
    node.flush_scripts().await;
    Reply::Simple("OK")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_counts_get_redis_errors() {
        assert_eq!(key_count(b"2", 3).ok(), Some(2));
        assert_eq!(key_count(b"0", 0).ok(), Some(0));
        let err = |r: Result<usize, Reply>| match r {
            Err(Reply::Error(e)) => e,
            other => format!("{other:?}"),
        };
        assert_eq!(
            err(key_count(b"-1", 3)),
            "ERR Number of keys can't be negative"
        );
        assert_eq!(
            err(key_count(b"4", 3)),
            "ERR Number of keys can't be greater than number of args"
        );
        assert_eq!(
            err(key_count(b"x", 3)),
            "ERR value is not an integer or out of range"
        );
    }
}
