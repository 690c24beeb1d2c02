//! Helpers for the engine's unit tests.

use super::Engine;
use crate::cell::{Cell, Epoch};
use crate::error::Result;
use crate::key::Key;
use crate::outcome::{AddOutcome, Staged, Wait};

/// One add through [`Engine::add`], answered once durable here: a sealed
/// add waits for the batch's `Durable`, a queued one for the sealer, then
/// for its own.
pub(crate) async fn add_one(e: &Engine, key: &Key, delta: i64) -> Result<AddOutcome> {
    let (staged, durable) = e.add([(key, delta)])?;
    let (outcome, durable) = match staged.into_iter().next() {
        Some(Staged::Sealed(outcome)) => (outcome, durable),
        Some(Staged::Queued(queued)) => queued.wait().await?,
        Some(Staged::Refused(e)) => return Err(e),
        None => panic!("one add answered nothing"),
    };
    durable.wait().await?;
    Ok(outcome)
}

/// One cell through [`Engine::apply`], waited for until durable: its answer.
pub(crate) async fn apply_one(e: &Engine, key: &Key, cell: &Cell) -> Result<Epoch> {
    let mut answers = e.apply([(key, cell, None)], Wait::Durable).await?;
    answers.pop().expect("one answer per cell")
}
