//! The bare single-flight: the least one tokio allows, a mutex over a map of parked callers. It is
//! the baseline the table's owner is measured against (the `herd` and `peers` benches),
//! so it has no expiry, no L2, no lock and no error path of its own.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

use crate::BoxError;

/// One key's slot: a load in progress with its parked callers, or its value.
enum Slot<V> {
    Loading(Vec<oneshot::Sender<Arc<V>>>),
    /// Kept so that a caller arriving after the load finished does not start a second one, as the
    /// table's L1 would answer it.
    Ready(Arc<V>),
}

/// A `Mutex<HashMap<K, Slot>>` where the first caller of a key loads it and the others park on a
/// oneshot until it answers.
pub struct SingleFlight<K, V> {
    slots: Mutex<HashMap<K, Slot<V>>>,
}

impl<K, V> Default for SingleFlight<K, V> {
    fn default() -> Self {
        SingleFlight {
            slots: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Hash + Eq + Clone, V> SingleFlight<K, V> {
    /// The value of `key`: the kept one, the running load's (parked until it answers), or one
    /// loaded now by `load`. Fails only when the loading caller was dropped before answering.
    pub async fn get<F: Future<Output = V>>(
        &self,
        key: &K,
        load: impl FnOnce() -> F,
    ) -> Result<Arc<V>, BoxError> {
        let parked = {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            match slots.get_mut(key) {
                Some(Slot::Ready(value)) => return Ok(Arc::clone(value)),
                Some(Slot::Loading(waiters)) => {
                    let (tx, rx) = oneshot::channel();
                    waiters.push(tx);
                    Some(rx)
                }
                None => {
                    slots.insert(key.clone(), Slot::Loading(Vec::new()));
                    None
                }
            }
        };
        if let Some(rx) = parked {
            return rx
                .await
                .map_err(|_| "the loading caller went away before answering".into());
        }
        let value = Arc::new(load().await);
        let previous = self
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone(), Slot::Ready(Arc::clone(&value)));
        if let Some(Slot::Loading(waiters)) = previous {
            for tx in waiters {
                let _ = tx.send(Arc::clone(&value));
            }
        }
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::atomic::{AtomicU64, Ordering};

    /// Callers parked on one key all get the one load's value, and later callers the kept one.
    #[tokio::test]
    async fn concurrent_callers_share_one_load() {
        let flight = Arc::new(SingleFlight::<u64, u64>::default());
        let loads = Arc::new(AtomicU64::new(0));
        let (release, released) = tokio::sync::watch::channel(false);
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (flight, loads) = (Arc::clone(&flight), Arc::clone(&loads));
                let mut released = released.clone();
                tokio::spawn(async move {
                    let load = || async move {
                        loads.fetch_add(1, Ordering::SeqCst);
                        released
                            .wait_for(|r| *r)
                            .await
                            .expect("the test holds the sender");
                        42
                    };
                    flight.get(&7, load).await.map(|v| *v).ok()
                })
            })
            .collect();
        release.send_replace(true);
        for task in tasks {
            assert_eq!(task.await.expect("task"), Some(42));
        }
        assert_eq!(*flight.get(&7, || async { 0 }).await.expect("kept"), 42);
        assert_eq!(loads.load(Ordering::SeqCst), 1);
    }
}
