//! A deterministic simulation of a whole Tally cluster in one process
//! (FoundationDB's simulation, TigerBeetle's VOPR): the production nodes
//! ([`tally_node::Node`], not models of them) on one current-thread
//! runtime whose clock is paused, so that simulated time jumps to the next
//! timer whenever every task waits; a seeded network between them
//! ([`net`]); a disk that forgets what was not fsync'd when a node
//! crashes, and fails or fills up when told ([`disk`]); engines without
//! threads, their group commits and flushes written as the runtime parks;
//! the wall clock and every random byte from the run's seed ([`world`]).
//!
//! A run ([`run`]) draws everything from its seed: the clients'
//! operations ([`workload`]), the faults (crashes and restarts, cut links,
//! lost, delayed and repeated batches), their timing. The chaos harness's
//! checker judges the history. Every event goes into the run's trace
//! ([`trace`]), whose hash names the run: the same seed gives the same
//! trace, so a seed that fails replays exactly, with its log.

pub mod broken;
pub mod cluster;
pub mod cql;
pub mod disk;
pub mod exact;
pub mod flushes;
pub mod lists;
pub mod net;
pub mod repairs;
pub mod resp;
pub mod run;
pub mod script;
pub mod strings;
pub mod topology;
pub mod trace;
pub mod unique;
pub mod workload;
pub mod world;

#[cfg(test)]
mod layers {
    /// The simulator's modules, lowest first: each imports only from its
    /// own layer and those below.
    const LAYERS: &[&[&str]] = &[
        &["world", "disk"],
        &["trace"],
        &["net", "broken"],
        &["cluster"],
        &["topology", "repairs"],
        &["workload"],
        &[
            "exact", "strings", "lists", "flushes", "resp", "cql", "unique",
        ],
        &["run", "script"],
    ];

    #[test]
    fn imports_run_one_way() {
        let src = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
        if let Err(wrong) = tally_layers::check(src, LAYERS) {
            panic!("{wrong}");
        }
    }
}
