//! One at a time per key: the scripts of one key that run as one agreed
//! change through this node take turns (`script::agreed`). Each run is
//! agreed only over the state it read, so two runs of one key through one
//! node at once would only fail each other's compare and run again; in
//! turns, each starts from what the one before left (this node's last
//! seen registers, no read), and only runs through other nodes contend.
//! A key is listed while a run holds or awaits its turn.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::OwnedMutexGuard;

type Lock = Arc<tokio::sync::Mutex<()>>;

/// The keys whose runs take turns now.
#[derive(Debug, Default)]
pub(crate) struct Turns {
    keys: Mutex<HashMap<Vec<u8>, Lock>>,
}

/// A run's turn of its key, until dropped (first come, first served).
pub(crate) struct Turn<'a> {
    turns: &'a Turns,
    key: Vec<u8>,
    lock: Lock,
    guard: Option<OwnedMutexGuard<()>>,
}

impl Turns {
    /// Waits for `key`'s turn.
    pub(crate) async fn take(&self, key: &[u8]) -> Turn<'_> {
        let lock = self.keys.lock().entry(key.to_vec()).or_default().clone();
        let guard = lock.clone().lock_owned().await;
        Turn {
            turns: self,
            key: key.to_vec(),
            lock,
            guard: Some(guard),
        }
    }

    /// How many keys are listed.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.keys.lock().len()
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.guard.take();
        let mut keys = self.turns.keys.lock();
        // The list's and this turn's: no one else holds or awaits it.
        if Arc::strong_count(&self.lock) == 2 {
            keys.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_of_one_key_take_turns_and_keys_are_forgotten() {
        let turns = Arc::new(Turns::default());
        let first = turns.take(b"k").await;
        let (t, order) = (turns.clone(), Arc::new(Mutex::new(Vec::new())));
        let o = order.clone();
        let second = tokio::spawn(async move {
            let _turn = t.take(b"k").await;
            o.lock().push("second");
        });
        // Another key does not wait.
        drop(turns.take(b"other").await);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        order.lock().push("first ends");
        drop(first);
        second.await.unwrap_or_default();
        assert_eq!(*order.lock(), ["first ends", "second"]);
        assert_eq!(turns.len(), 0, "no key is listed once no run waits");
    }
}
