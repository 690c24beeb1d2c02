//! The threads scripts run on. Each script is a coroutine on one of them
//! (see `vm`): while its `redis.call` waits for the node, the thread runs
//! the others, so scripts in flight cost no thread each and the node's
//! own threads never run Lua.
//!
//! A script that computes without calling the node holds its thread, and
//! the scripts on it wait, until it ends or is aborted at its time limit.
//! So no one script holds them all, there are several threads
//! ([`THREADS_MIN`], more up to [`THREADS_MAX`] while every one is held),
//! and a new script goes to a thread that is not held ([`pick`]): each
//! thread shows since when it has run Lua without a break, and one that
//! has for [`HELD_AFTER`] is held. Scripts go to the first thread that is
//! not held, not spread over all: a thread kept busy needs no waking.
//!
//! In a simulation (`tally_world::runs_inline`) scripts run on the
//! runtime's own thread instead, as tasks of its local set, so that a
//! seed replays exactly; each node keeps its idle interpreters apart.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};

use super::super::proto::Reply;
use super::api::May;
use super::budget;
use super::runs::Run;
use super::vm::{self, Host, Script, Vm};

/// Threads started at first.
pub(crate) const THREADS_MIN: usize = 2;
/// Most threads: started while every thread is held.
pub(crate) const THREADS_MAX: usize = 8;
/// How long a thread runs Lua without a break before it counts as held.
pub(crate) const HELD_AFTER: Duration = Duration::from_millis(50);
/// Interpreters a thread keeps idle between scripts: enough for a hundred
/// scripts in flight without making new ones.
pub(crate) const IDLE_VMS_MAX: usize = 128;

/// One script run.
pub(crate) struct Job {
    pub(crate) sha: String,
    pub(crate) body: Arc<[u8]>,
    pub(crate) keys: Vec<Vec<u8>>,
    pub(crate) argv: Vec<Vec<u8>>,
    pub(crate) host: Arc<dyn Host>,
    pub(crate) limit: Duration,
    /// The run as `SCRIPT KILL` sees it.
    pub(crate) run: Arc<Run>,
    pub(crate) may: May,
    /// The script cache's generation (compiled scripts of older ones go).
    pub(crate) generation: u64,
    /// Whether a new interpreter for it is sealed (see `sandbox::seal`).
    pub(crate) sealed: bool,
}

/// One node's script threads, started as scripts come (at first
/// [`THREADS_MIN`]), and the memory their interpreters hold. The threads
/// end once it is dropped.
#[derive(Default)]
pub(crate) struct Pool {
    workers: Mutex<Vec<Arc<Worker>>>,
    memory: Arc<budget::Memory>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("threads", &self.workers.lock().len())
            .field("memory", &self.memory)
            .finish()
    }
}

type Queue = mpsc::UnboundedSender<(Job, oneshot::Sender<Reply>)>;

/// One script thread.
struct Worker {
    queue: Queue,
    /// Since when (see [`vm::Busy`]) it runs Lua, or 0.
    busy: Arc<vm::Busy>,
    /// Scripts on it now.
    scripts: AtomicUsize,
}

/// Where a new script goes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Pick {
    /// To this thread.
    Thread(usize),
    /// To a new thread.
    New,
}

/// Where a new script goes, the threads being (held, scripts on it): to
/// the first one not held; if every one is held, to a new one while there
/// may be more, or else to the one with the fewest scripts.
pub(crate) fn pick(threads: &[(bool, usize)], may_grow: bool) -> Pick {
    let first_free = threads.iter().position(|&(held, _)| !held);
    let fewest = (0..threads.len()).min_by_key(|&i| threads[i].1);
    match (first_free, may_grow) {
        (Some(i), _) => Pick::Thread(i),
        (None, true) => Pick::New,
        (None, false) => fewest.map_or(Pick::New, Pick::Thread),
    }
}

impl Pool {
    /// Runs `job` on a script thread and answers its reply.
    pub(crate) async fn run(&self, job: Job) -> Reply {
        if tally_world::runs_inline() {
            return self.run_inline(job).await;
        }
        let Some(worker) = self.worker() else {
            return Reply::err("ERR the script threads could not be started");
        };
        worker.scripts.fetch_add(1, Ordering::AcqRel);
        let (done, answer) = oneshot::channel();
        let reply = match worker.queue.send((job, done)) {
            Ok(()) => answer
                .await
                .unwrap_or_else(|_| Reply::err("ERR the script thread has stopped")),
            Err(_) => Reply::err("ERR the script thread has stopped"),
        };
        worker.scripts.fetch_sub(1, Ordering::AcqRel);
        reply
    }

    /// Runs `job` on this thread (a simulation's: no thread of its own,
    /// so the run stays deterministic), as a task of the runtime's local
    /// set, on interpreters this pool keeps.
    async fn run_inline(&self, job: Job) -> Reply {
        let (memory, idle) = (self.memory.clone(), Idle::Pool(self.inline_key()));
        let task =
            tokio::task::spawn_local(async move { one(job, Arc::default(), &memory, idle).await });
        task.await
            .unwrap_or_else(|_| Reply::err("ERR the script stopped"))
    }

    /// This pool's idle interpreters' place in [`INLINE_IDLE`].
    fn inline_key(&self) -> usize {
        Arc::as_ptr(&self.memory) as usize
    }

    /// The thread a new script goes to.
    fn worker(&self) -> Option<Arc<Worker>> {
        let mut pool = self.workers.lock();
        if pool.is_empty() {
            pool.extend((0..THREADS_MIN).filter_map(|_| start(&self.memory)));
        }
        let now = vm::Busy::now();
        let seen: Vec<(bool, usize)> = pool
            .iter()
            .map(|w| {
                let held = w.busy.since(now).is_some_and(|d| d >= HELD_AFTER);
                (held, w.scripts.load(Ordering::Acquire))
            })
            .collect();
        match pick(&seen, pool.len() < THREADS_MAX) {
            Pick::Thread(i) => Some(pool[i].clone()),
            Pick::New => {
                let w = start(&self.memory)?;
                pool.push(w.clone());
                Some(w)
            }
        }
    }
}

/// Starts a script thread, its interpreters counted in `memory`.
fn start(memory: &Arc<budget::Memory>) -> Option<Arc<Worker>> {
    let (tx, rx) = mpsc::unbounded_channel();
    let busy = Arc::new(vm::Busy::default());
    let shown = busy.clone();
    let memory = memory.clone();
    let started = std::thread::Builder::new()
        .name("tally-scripts".into())
        .spawn(move || serve(rx, shown, memory));
    match started {
        Ok(_) => Some(Arc::new(Worker {
            queue: tx,
            busy,
            scripts: AtomicUsize::new(0),
        })),
        Err(e) => {
            tracing::error!(error = %e, "could not start a script thread");
            None
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if tally_world::runs_inline() {
            let key = self.inline_key();
            INLINE_IDLE.with_borrow_mut(|pools| pools.remove(&key));
        }
    }
}

fn serve(
    mut rx: mpsc::UnboundedReceiver<(Job, oneshot::Sender<Reply>)>,
    busy: Arc<vm::Busy>,
    memory: Arc<budget::Memory>,
) {
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
            let (busy, memory) = (busy.clone(), memory.clone());
            tokio::task::spawn_local(async move {
                let _ = done.send(one(job, busy, &memory, Idle::Thread).await);
            });
        }
    });
}

async fn one(job: Job, busy: Arc<vm::Busy>, memory: &Arc<budget::Memory>, idle: Idle) -> Reply {
    let mut vm = match take_vm(job.generation, memory, job.sealed, idle) {
        Ok(vm) => vm,
        Err(e) => return Reply::err(format!("ERR could not start a script interpreter: {e}")),
    };
    let script = Script {
        sha: &job.sha,
        body: &job.body,
        keys: &job.keys,
        argv: &job.argv,
        may: job.may,
    };
    match vm.run(script, job.host, job.limit, job.run, &busy).await {
        Ok(reply) => {
            give_vm(vm, memory, idle);
            reply
        }
        // The interpreter hit a limit: the next script gets a new one.
        Err((reply, vm::Spoiled)) => reply,
    }
}

thread_local! {
    /// The idle interpreters of this script thread.
    static IDLE: std::cell::RefCell<Vec<Vm>> = const { std::cell::RefCell::new(Vec::new()) };
    /// The idle interpreters of each pool whose scripts run inline on this
    /// thread (a simulation's nodes), by [`Pool::inline_key`].
    static INLINE_IDLE: std::cell::RefCell<HashMap<usize, Vec<Vm>>> =
        std::cell::RefCell::new(HashMap::new());
}

/// Where a script's interpreter comes from and goes back to.
#[derive(Debug, Clone, Copy)]
enum Idle {
    /// The script thread's.
    Thread,
    /// Its pool's, on this thread (scripts run inline).
    Pool(usize),
}

impl Idle {
    fn with<T>(self, f: impl FnOnce(&mut Vec<Vm>) -> T) -> T {
        match self {
            Idle::Thread => IDLE.with_borrow_mut(f),
            Idle::Pool(key) => {
                INLINE_IDLE.with_borrow_mut(|pools| f(pools.entry(key).or_default()))
            }
        }
    }
}

/// An interpreter for a script: an idle one, or a new one (`sealed`
/// unless fault injection says not).
fn take_vm(
    generation: u64,
    memory: &Arc<budget::Memory>,
    sealed: bool,
    idle: Idle,
) -> mlua::Result<Vm> {
    let mut vm = match idle.with(Vec::pop) {
        Some(vm) => vm,
        None => Vm::new(generation, memory, sealed)?,
    };
    if vm.generation != generation {
        vm.forget(generation);
    }
    Ok(vm)
}

/// Keeps an interpreter for the next script, if fewer than the limit are
/// idle and the node's interpreters have memory to spare.
fn give_vm(vm: Vm, memory: &budget::Memory, idle: Idle) {
    idle.with(|idle| {
        if idle.len() < IDLE_VMS_MAX && memory.roomy() {
            idle.push(vm);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_goes_to_a_thread_no_script_holds() {
        // The first free thread, however many scripts wait on it.
        assert_eq!(
            pick(&[(true, 0), (false, 3), (false, 1)], true),
            Pick::Thread(1)
        );
        // Every thread held: a new one, while there may be more.
        assert_eq!(pick(&[(true, 0), (true, 1)], true), Pick::New);
        // Else the one with the fewest scripts, held or not.
        assert_eq!(pick(&[(true, 4), (true, 1)], false), Pick::Thread(1));
        assert_eq!(pick(&[], true), Pick::New);
    }
}
