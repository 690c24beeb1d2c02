//! The batch in flight: when its last part ends, the queue may send the
//! next (see `batch`).

use tally_world::Instant;
use tokio::sync::oneshot;

/// Held by the batch in flight (shared by its parts when it is split);
/// tells when it ended once the last part drops it, its adds answered.
pub(super) struct InFlight(pub(super) Option<oneshot::Sender<Instant>>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(done) = self.0.take() {
            let _ = done.send(Instant::now());
        }
    }
}
