//! The repair role's own state (`repair`): the repair this node runs, as
//! far as it got. A leaf beside `ctx`, so that `Ctx` holds it without
//! importing the role, which imports `Ctx`.

use parking_lot::Mutex;
use tally_net::wire::WireRepaired;

/// The repair this node is running, as far as it got (one at a time).
#[derive(Debug, Default)]
pub(crate) struct Repairing(Mutex<Option<WireRepaired>>);

impl Repairing {
    /// Marks `started` as the running repair, unless one runs: then
    /// answers how far that one got.
    pub(crate) fn begin(&self, started: WireRepaired) -> Result<(), WireRepaired> {
        let mut running = self.0.lock();
        match running.as_ref() {
            Some(r) => Err(r.clone()),
            None => {
                *running = Some(started);
                Ok(())
            }
        }
    }

    /// The running repair got as far as `done`.
    pub(crate) fn progress(&self, done: &WireRepaired) {
        *self.0.lock() = Some(done.clone());
    }

    /// The running repair ended, however it ended.
    pub(crate) fn end(&self) {
        *self.0.lock() = None;
    }

    /// The running repair, as far as it got, if one runs.
    pub(crate) fn running(&self) -> Option<WireRepaired> {
        self.0.lock().clone()
    }
}
