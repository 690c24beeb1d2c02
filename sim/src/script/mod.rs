//! Golden scripts (toydb's goldenscript, CockroachDB's datadriven): a
//! file of commands run against a simulated cluster (`cluster nodes=3`,
//! `add n1 k 5`, `kill n3`, `read n2 k cl=all`, `stabilize`), each block
//! followed by what it printed. The simulation is deterministic, so the
//! output is too: a test runs each script and compares the output with
//! the file's, and `UPDATE_GOLDEN=1` writes the new output back for a
//! review of the diff.
//!
//! The commands are [`session`]'s; the format is [`parse`]'s.

pub mod cql;
pub mod parse;
pub mod resp;
pub mod session;
pub mod words;

use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};

use self::parse::{Block, Script};
use self::session::Session;
use crate::cluster::{self, Hooks};
use crate::trace;
use crate::world::SimWorld;

/// What an empty block prints.
const NOTHING: &str = "ok";

/// Runs `text` as a script; answers it written back with what each block
/// printed. `print_trace` prints every event of the simulation.
pub fn run(text: &str, print_trace: bool) -> Result<String> {
    let script = parse::parse(text)?;
    let hooks = Hooks::default();
    let rt = cluster::runtime(&hooks)?;
    trace::begin(print_trace);
    let outputs = tokio::task::LocalSet::new().block_on(&rt, async {
        let mut session = Session::new(hooks.clone());
        let outputs = run_blocks(&script, &mut session).await;
        let closed = session.close();
        SimWorld::end();
        let outputs = outputs?;
        closed.map(|()| outputs)
    });
    drop(rt);
    trace::end();
    Ok(parse::format(&script, &outputs?))
}

async fn run_blocks(script: &Script, session: &mut Session) -> Result<Vec<Vec<String>>> {
    let mut outputs = Vec::new();
    for block in &script.blocks {
        outputs.push(run_block(block, session).await?);
    }
    Ok(outputs)
}

async fn run_block(block: &Block, session: &mut Session) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for command in &block.commands {
        let lines = session
            .run(command)
            .await
            .map_err(|e| anyhow!("line {}: `{}`: {e:#}", command.line, command.text))?;
        out.extend(lines);
        out.extend(SimWorld::broken_invariants());
    }
    if out.is_empty() {
        out.push(NOTHING.to_string());
    }
    Ok(out)
}

/// Runs the script in `path` and compares its output with the file's;
/// with `update`, writes a different output back instead of failing.
pub fn check(path: &Path, update: bool, print_trace: bool) -> Result<()> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    let got = run(&text, print_trace).with_context(|| format!("run {}", path.display()))?;
    if got == text {
        return Ok(());
    }
    if update {
        #[allow(clippy::disallowed_methods, reason = "the script, not a node's file")]
        return std::fs::write(path, got).with_context(|| format!("write {}", path.display()));
    }
    bail!(
        "{} printed other output{}\n--- the whole script as it ran:\n{got}",
        path.display(),
        first_difference(&text, &got)
    )
}

/// Where two outputs first part, for a failure's first line.
fn first_difference(want: &str, got: &str) -> String {
    let lines = want.lines().zip(got.lines()).enumerate();
    match lines.into_iter().find(|(_, (w, g))| w != g) {
        Some((i, (w, g))) => format!(" at line {}:\n  want: {w}\n  got:  {g}", i + 1),
        None => format!(
            " (it has {} lines, the file {})",
            got.lines().count(),
            want.lines().count()
        ),
    }
}
