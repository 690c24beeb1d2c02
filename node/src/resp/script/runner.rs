//! The thread every script of the process runs on. Each script is a
//! coroutine there (see `vm`): while its `redis.call` waits for the node,
//! the thread runs the others, so scripts in flight cost no thread each and
//! the node's own threads never run Lua. A script that computes without
//! calling the node holds the thread, and the scripts behind it wait, until
//! it ends or is aborted at its time limit, as Redis' busy scripts hold the
//! whole server; the node keeps serving everything else.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::super::proto::Reply;
use super::vm::{self, Host, Vm};

/// Interpreters kept idle between scripts: enough for a hundred scripts
/// in flight without making new ones.
pub(crate) const IDLE_VMS_MAX: usize = 128;

/// One script run.
pub(crate) struct Job {
    pub(crate) sha: String,
    pub(crate) body: Arc<[u8]>,
    pub(crate) keys: Vec<Vec<u8>>,
    pub(crate) argv: Vec<Vec<u8>>,
    pub(crate) host: Arc<dyn Host>,
    pub(crate) limit: Duration,
    /// Whether `SCRIPT KILL` named this run.
    pub(crate) killed: Box<dyn Fn() -> bool + Send>,
    pub(crate) read_only: bool,
    /// The script cache's generation (compiled scripts of older ones go).
    pub(crate) generation: u64,
}

/// Runs `job` on the script thread and answers its reply.
pub(crate) async fn run(job: Job) -> Reply {
    let Some(jobs) = jobs() else {
        return Reply::err("ERR the script thread could not be started");
    };
    let (done, answer) = oneshot::channel();
    if jobs.send((job, done)).is_err() {
        return Reply::err("ERR the script thread has stopped");
    }
    answer
        .await
        .unwrap_or_else(|_| Reply::err("ERR the script thread has stopped"))
}

type Queue = mpsc::UnboundedSender<(Job, oneshot::Sender<Reply>)>;

/// The script thread's queue, started on first use.
fn jobs() -> Option<&'static Queue> {
    static JOBS: OnceLock<Option<Queue>> = OnceLock::new();
    JOBS.get_or_init(|| {
        let (tx, rx) = mpsc::unbounded_channel();
        let started = std::thread::Builder::new()
            .name("tally-scripts".into())
            .spawn(move || serve(rx));
        match started {
            Ok(_) => Some(tx),
            Err(e) => {
                tracing::error!(error = %e, "could not start the script thread");
                None
            }
        }
    })
    .as_ref()
}

fn serve(mut rx: mpsc::UnboundedReceiver<(Job, oneshot::Sender<Reply>)>) {
    let runtime = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!(error = %e, "could not start the script thread's runtime");
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        while let Some((job, done)) = rx.recv().await {
            tokio::task::spawn_local(async move {
                let _ = done.send(one(job).await);
            });
        }
    });
}

async fn one(job: Job) -> Reply {
    let mut vm = match take_vm(job.generation) {
        Ok(vm) => vm,
        Err(e) => return Reply::err(format!("ERR could not start a script interpreter: {e}")),
    };
    let ran = vm
        .run(
            &job.sha,
            &job.body,
            &job.keys,
            &job.argv,
            job.host,
            job.limit,
            job.killed,
            job.read_only,
        )
        .await;
    match ran {
        Ok(reply) => {
            give_vm(vm);
            reply
        }
        // The interpreter hit a limit: the next script gets a new one.
        Err((reply, vm::Spoiled)) => reply,
    }
}

thread_local! {
    /// The idle interpreters (only the script thread has any).
    static IDLE: std::cell::RefCell<Vec<Vm>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// An interpreter for a script: an idle one, or a new one.
fn take_vm(generation: u64) -> mlua::Result<Vm> {
    let mut vm = match IDLE.with_borrow_mut(Vec::pop) {
        Some(vm) => vm,
        None => Vm::new(generation)?,
    };
    if vm.generation != generation {
        vm.forget(generation);
    }
    Ok(vm)
}

/// Keeps an interpreter for the next script, if fewer than the limit are idle.
fn give_vm(vm: Vm) {
    IDLE.with_borrow_mut(|idle| {
        if idle.len() < IDLE_VMS_MAX {
            idle.push(vm);
        }
    });
}
