//! Waits on a condition, each with a deadline so that a broken implementation fails instead of
//! hanging the suite; a test never sleeps a fixed time in place of one of these.

use std::time::{Duration, Instant};

use echostore::{Key, Table, TableStats, Value};

/// How long any wait may take: far beyond a healthy run, even on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(30);
/// How often a condition is checked again.
const POLL: Duration = Duration::from_millis(1);

/// Waits until `cond` holds; panics after 30 s.
pub async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    until_async(what, async || cond()).await;
}

/// Waits until the async `cond` holds (for conditions that ask Valkey, or fetch); panics after
/// 30 s.
pub async fn until_async(what: &str, mut cond: impl AsyncFnMut() -> bool) {
    poll_until(what, async || (!cond().await).then_some(Unmet)).await;
}

/// Waits until `table`'s stats satisfy `cond`; a timeout says what the stats were last.
pub async fn until_stats<K: Key, V: Value>(
    table: &Table<K, V>,
    what: &str,
    cond: impl Fn(&TableStats) -> bool,
) {
    poll_until(what, async || Some(table.stats()).filter(|s| !cond(s))).await;
}

/// What a plain condition says while it does not hold.
#[derive(Debug)]
struct Unmet;

/// The one wait loop: checks until `check` answers `None`, and on timeout panics with what it
/// answered last.
async fn poll_until<T: std::fmt::Debug>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) {
    let deadline = Instant::now() + DEADLINE;
    while let Some(last) = check().await {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for: {what}; last seen: {last:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until `table` has no flight and no waiter left (`in_flight == 0`), which
/// docs/failure-semantics.md promises after every herd, failure, timeout and cancellation.
pub async fn settled<K: Key, V: Value>(table: &Table<K, V>) {
    until_stats(table, "no flight or waiter left", |s| s.in_flight == 0).await;
}
