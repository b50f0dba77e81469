//! A cold miss costs three Valkey round trips in all, as `MONITOR` shows them: the caller's read
//! (`GETRANGE`), the lock attempt that reads the value again (`acquire-or-read`), and the fenced
//! write that releases the lock in the same script. The read the caller made is handed to the
//! flight it starts, which does not read the value key a second time on its own.

use crate::common;

use std::time::Duration;

use common::{Source, round_trips_of, settled, table_on};
use echostore::{Origin, Store};

/// A store on a fresh server with no tracking connection (its health pings would be counted).
async fn quiet_store(url: &str) -> Store {
    Store::builder()
        .valkey(url)
        .coherence(false)
        .require_valkey(true)
        .build()
        .await
        .expect("store")
}

/// A miss on an id Valkey does not hold: `GETRANGE`, then one script to lock, one to write and
/// release; the source is read once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_miss_is_a_read_a_lock_and_a_write() {
    let valkey = embedded_valkey::EmbeddedValkey::start().expect("a valkey-server");
    let source = Source::open();
    let table = table_on(&quiet_store(&valkey.url()).await, "cold", &source, |t| t).await;
    table
        .get(&1000)
        .await
        .expect("warm: the scripts are loaded");
    let commands = round_trips_of(&valkey.url(), async {
        let fetched = table.fetch(&1).await.expect("a load");
        assert_eq!(fetched.origin, Origin::Loaded);
    })
    .await;
    assert_eq!(commands, ["GETRANGE", "EVALSHA", "EVALSHA"]);
    assert_eq!(source.calls(), 2, "one source read for the cold id");
    settled(&table).await;
}

/// A miss on an id whose copy on Valkey has expired (kept as a stale copy; L1's entry expired with
/// it): the same three round trips; the caller's read of the stale copy is the only plain read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_copy_costs_the_same_three() {
    let valkey = embedded_valkey::EmbeddedValkey::start().expect("a valkey-server");
    let source = Source::open();
    let store = quiet_store(&valkey.url()).await;
    let table = table_on(&store, "expired", &source, |t| {
        t.ttl(Duration::from_millis(50))
            .stale_for(Duration::from_secs(60))
    })
    .await;
    table
        .get(&1000)
        .await
        .expect("warm: the scripts are loaded");
    table.get(&1).await.expect("a first load");
    let mut conn = common::raw(&valkey.url()).await;
    common::until_async("the copy on Valkey is stale", async || {
        common::stale_on_valkey(&mut conn, "expired:{1}").await
    })
    .await;
    let loads = source.calls();
    let commands = round_trips_of(&valkey.url(), async {
        let fetched = table.fetch(&1).await.expect("a reload");
        assert_ne!(fetched.origin, Origin::L1);
    })
    .await;
    assert_eq!(commands, ["GETRANGE", "EVALSHA", "EVALSHA"]);
    assert_eq!(
        source.calls(),
        loads + 1,
        "one source read for the expired id"
    );
    settled(&table).await;
}
