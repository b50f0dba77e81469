//! What a store has under way on Valkey that a leaving process must not drop: fills (each holds
//! an id's lock until its fenced write), writes on their way, and the retried release of a lock
//! or return of a budget lease. Each is counted from the moment it is spawned until its future
//! ends or is dropped ([`tracked`]), so that `Store::shutdown` can wait until none is
//! left: a process that exits with a lock held leaves every other process's readers of that id
//! waiting for its `lock_ttl`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// The count of one store's work under way, and a wake-up for whoever waits for it to be none.
#[derive(Debug, Default)]
pub(crate) struct UnderWay {
    count: AtomicUsize,
    idle: Notify,
}

/// `work`, counted in `under_way` (if any) from now until it ends or is dropped.
pub(crate) fn tracked<F: Future>(
    under_way: Option<&Arc<UnderWay>>,
    work: F,
) -> impl Future<Output = F::Output> + use<F> {
    let counted = under_way.map(|u| Counted::new(Arc::clone(u)));
    async move {
        let _counted = counted;
        work.await
    }
}

impl UnderWay {
    /// How much is under way now.
    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Returns once nothing is under way.
    pub(crate) async fn idle(&self) {
        loop {
            let woken = self.idle.notified();
            tokio::pin!(woken);
            // Registered before the count is read: an end between the two still wakes it.
            woken.as_mut().enable();
            if self.count() == 0 {
                return;
            }
            woken.await;
        }
    }
}

/// One piece of work's place in the count, given back when it is dropped.
struct Counted(Arc<UnderWay>);

impl Counted {
    fn new(under_way: Arc<UnderWay>) -> Counted {
        under_way.count.fetch_add(1, Ordering::SeqCst);
        Counted(under_way)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Work is counted from when it is made, not first polled, until it ends or is dropped;
    /// `idle` returns once the count is back to none.
    #[tokio::test]
    async fn work_is_counted_until_it_ends_or_is_dropped() {
        let under_way = Arc::new(UnderWay::default());
        let (tell, told) = tokio::sync::oneshot::channel::<()>();
        let waiting = tracked(Some(&under_way), async move {
            let _ = told.await;
        });
        let dropped = tracked(Some(&under_way), std::future::pending::<()>());
        assert_eq!(under_way.count(), 2, "counted before any poll");
        drop(dropped);
        assert_eq!(under_way.count(), 1);
        let task = tokio::spawn(waiting);
        let idle = {
            let under_way = Arc::clone(&under_way);
            tokio::spawn(async move { under_way.idle().await })
        };
        tokio::task::yield_now().await;
        assert!(!idle.is_finished(), "work is still under way");
        tell.send(()).expect("the work listens");
        task.await.expect("the work");
        idle.await.expect("idle once it ended");
        assert_eq!(under_way.count(), 0);
    }
}
