//! The Luau interpreters scripts run in (`resp::script` is the commands):
//! the sandbox (`sandbox`), the `redis` table (`api`, `convert`), one run
//! on an interpreter (`vm`), the threads they run on (`runner`), the runs
//! `SCRIPT KILL` sees (`runs`) and the memory they hold (`budget`), and
//! Redis 7's function libraries (`library`). A
//! node's threads, memory and runs are its own (`runner::Pool`,
//! `runs::Runs`, held by `resp::shared`).

pub(crate) mod api;
pub(crate) mod budget;
pub(crate) mod convert;
pub(crate) mod library;
pub(crate) mod runner;
pub(crate) mod runs;
pub(crate) mod sandbox;
pub(crate) mod vm;

#[cfg(test)]
mod fuzz;
