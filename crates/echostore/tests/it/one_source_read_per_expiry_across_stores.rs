//! Over Valkey, a herd becomes one source read: inside one store through the flights map, and
//! across stores (own owners, own L1s, own connections) through the regeneration lock.

use crate::common;

use std::time::Duration;

use common::{Source, answers, herd, herd_across, until, until_stats, valkey, valkey_table};
use echostore::{LoserPolicy, Origin, Table, TableStats};

async fn table_on(url: &str, source: &Source) -> Table<u64, String> {
    // The winner holds the source until every caller has joined, which `until` allows 30 s on
    // a loaded machine: neither its lock nor the losers' polling may run out before that (the
    // defaults, 5 s each, could, and a second source read or a WaitTimeout would follow).
    valkey_table(url, "hot", source, |t| {
        t.lock_ttl(Duration::from_secs(60))
            .losers(LoserPolicy::Poll {
                every: Duration::from_millis(10),
                up_to: Duration::from_secs(60),
            })
    })
    .await
}

/// The tables' stats as one.
fn total(tables: &[Table<u64, String>]) -> TableStats {
    tables.iter().map(Table::stats).sum()
}

/// One store, 1,000 concurrent misses: one source read, one lock won and released.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_store_reads_the_source_once() {
    let valkey = valkey();
    let source = Source::gated();
    let table = table_on(&valkey.url(), &source).await;

    let callers = herd(&table, 1000, 1);
    until_stats(&table, "every caller joined", |s| s.coalesced == 999).await;
    source.release();
    for answer in answers(callers).await {
        assert_eq!(*answer.expect("value").value, "value-1-1");
    }
    let s = table.stats();
    assert_eq!(source.calls(), 1, "the loader ran exactly once");
    assert_eq!((s.source_reads, s.lock_won, s.released), (1, 1, 1));
    assert_eq!(s.lock_lost, 0);
    common::settled(&table).await; // its flight answered on its own task; the owner ends it
}

/// Four stores on one Valkey, 250 misses each: one source read in all, three locks lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_stores_read_the_source_once() {
    let valkey = valkey();
    let source = Source::gated();
    let mut tables = Vec::new();
    for _ in 0..4 {
        tables.push(table_on(&valkey.url(), &source).await);
    }

    let callers = herd_across(&tables, 250, 2);
    // The winner holds the source until every other flight has lost the lock and every caller
    // has joined its store's flight.
    until("three stores lost the lock and 996 callers joined", || {
        let s = total(&tables);
        s.lock_lost == 3 && s.coalesced == 996
    })
    .await;
    source.release();
    let mut origins = std::collections::HashMap::new();
    for answer in answers(callers).await {
        let answer = answer.expect("value");
        assert_eq!(*answer.value, "value-2-1", "everyone got the one answer");
        *origins.entry(answer.origin).or_insert(0) += 1;
    }
    let s = total(&tables);
    assert_eq!(
        source.calls(),
        1,
        "exactly one source read across four stores"
    );
    assert_eq!(s.source_reads, 1);
    assert_eq!((s.lock_won, s.lock_lost, s.coalesced), (1, 3, 996));
    assert_eq!(
        s.l2_hits, 3,
        "each losing store's flight read the winner's value"
    );
    assert_eq!(origins.get(&Origin::Loaded), Some(&1));
    assert_eq!(origins.get(&Origin::L2), Some(&3));
    assert_eq!(origins.get(&Origin::Coalesced), Some(&996));
    for table in &tables {
        common::settled(table).await; // each flight answered on its own task; its owner ends it
    }
}
