//! L1 answers only while the store's tracking task keeps up: a process paused whole, or a
//! runtime that never lets the task run, wakes to pushes waiting unread, and past the tracking
//! connections' vouch (`Tracking::SILENT_LINK_BOUND` after the last health PING answered) its
//! L1 answers nothing they could have dropped; reads go to Valkey.

use crate::common;

use common::{Source, coherent_table, valkey, valkey_table};
use futures::FutureExt;
use std::time::{Duration, Instant};

/// The test's own loop holds the one thread of its runtime: the store's tracking task, and the
/// connection under it, never run while another process's put lands. L1 answered the old value
/// at once for as long as the thread was held (a minute, before); it now stops within the vouch,
/// and the read that follows gets the put's value from Valkey.
#[tokio::test(flavor = "current_thread")]
async fn a_starved_tracking_task_stops_l1_answering_what_a_push_would_drop() {
    let valkey = valkey();
    let source = Source::open();
    let long = |t: echostore::TableBuilder<u64, String>| t.ttl(Duration::from_secs(600));
    let here = coherent_table(&valkey.url(), "starved", &source, long).await;
    assert_eq!(*here.get(&1).await.expect("load"), "value-1-1");

    let url = valkey.url();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        runtime.block_on(async {
            let elsewhere = valkey_table(&url, "starved", &Source::open(), long).await;
            elsewhere.put(&1, "put".to_owned()).await.expect("put");
        });
    })
    .join()
    .expect("the other process's put");

    // From here the thread is held: only an answer from L1 comes without a wait.
    let held = Instant::now();
    while let Some(answer) = here.get(&1).now_or_never() {
        assert_eq!(*answer.expect("an L1 answer"), "value-1-1");
        assert!(
            held.elapsed() < Duration::from_secs(60),
            "L1 went on answering what the unread push drops"
        );
    }
    assert_eq!(*here.get(&1).await.expect("read"), "put", "Valkey's copy");
    assert_eq!(source.calls(), 1, "Valkey answered: no second source read");
}
