//! A loader slower than `lock_ttl` is still the one source read, and its value is cached: the
//! winner's lease (a token-checked `PEXPIRE` every `lock_ttl / 3`) keeps the lock for the whole
//! load, so no poller elsewhere sees the lock lapse and reads the source again, and the fenced
//! write finds the lock still its own.

use crate::common;

use std::time::Duration;

use common::{
    Source, example, exists, herd_across, node_lines, raw, read_envelope, settled, spawn_node,
    store_on, valkey,
};
use echostore::{LoserPolicy, Origin, Table, TableStats};
use redis::AsyncCommands;

const LOCK_TTL: Duration = Duration::from_millis(100);

/// Four stores (as four processes would have) on one Valkey, 25 misses each on one id, a loader
/// that takes four `lock_ttl`s: one source read, the value on Valkey, and in every store's L1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_stores_share_one_load_four_times_slower_than_the_lock() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    // The slowness is the behaviour under test: four lock_ttls.
    let source = Source::taking(LOCK_TTL * 4);
    let mut tables: Vec<Table<u64, String>> = Vec::new();
    for _ in 0..4 {
        let table = store_on(&valkey.url())
            .await
            .table::<u64, String>("slow")
            .lock_ttl(LOCK_TTL)
            .losers(LoserPolicy::Poll {
                every: Duration::from_millis(10),
                up_to: Duration::from_secs(30),
            })
            .loader(source.answering(|id, n| Ok(format!("value-{id}-read-{n}"))))
            .build()
            .await
            .expect("table");
        tables.push(table);
    }

    let callers = herd_across(&tables, 25, 7);
    for caller in callers {
        let answer = caller.await.expect("task").expect("a value");
        assert_eq!(*answer.value, "value-7-read-1", "one answer for all");
    }
    assert_eq!(source.calls(), 1, "one source read in all");

    let stored = read_envelope::<String>(&mut conn, "slow:{7}")
        .await
        .expect("the value is cached on Valkey");
    assert_eq!(stored.value, "value-7-read-1");
    assert!(
        !exists(&mut conn, "lock:slow:{7}").await,
        "the winner released its lock"
    );
    for table in &tables {
        settled(table).await;
        // Cached, never read from the source again: in L1, or — when the winner's push reached
        // a store while one of its loser's polls was reading (it then keeps nothing: the read may
        // have raced the write, docs/coherence.md) — on Valkey.
        let again = table.fetch(&7).await.expect("cached");
        assert_eq!(again.value.as_str(), "value-7-read-1");
        assert!(
            matches!(again.origin, Origin::L1 | Origin::L2),
            "{:?}",
            again.origin
        );
    }
    assert_eq!(source.calls(), 1);
    let total: TableStats = tables.iter().map(Table::stats).sum();
    assert_eq!((total.source_reads, total.lock_won), (1, 1));
    assert_eq!((total.fenced_write_skipped, total.l2_errors), (0, 0));
    assert!(total.lease_extended > 0, "the lease kept the lock");
    assert_eq!(total.lease_lost, 0);
}

/// The headline, across OS processes: four `race_node` processes (given a `lock_ttl`) on one Valkey, 50 misses each,
/// a loader four times slower than `lock_ttl`. The source — counted by itself, on Valkey — is
/// read once; the value is on Valkey and in every process's L1 (each process's next get is an
/// L1 hit, and the count stays 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_share_one_load_four_times_slower_than_the_lock() {
    let valkey = valkey();
    let node = example("race_node");
    let run = std::process::id().to_string();
    let url = valkey.url();
    let lock_ttl_ms = LOCK_TTL.as_millis().to_string();
    let children = (0..4)
        .map(|_| spawn_node(&node, &[&url, "4", "50", &run, &lock_ttl_ms]))
        .collect();
    let lines = node_lines(children);

    let mut conn = raw(&url).await;
    let reads: u64 = conn
        .get(format!("race:{run}:source_reads"))
        .await
        .expect("GET counter");
    assert_eq!(reads, 1, "exactly one source read across four processes");
    let value = format!("hot-{run} read #1");
    let key = format!("race:{{hot-{run}}}");
    let stored = read_envelope::<String>(&mut conn, &key)
        .await
        .expect("the value is cached on Valkey");
    assert_eq!(stored.value, value);
    let pttl: i64 = conn.pttl(&key).await.expect("PTTL");
    assert!(pttl > 0, "stored with a physical life: {pttl}");
    assert!(
        !exists(&mut conn, format!("lock:race:{{hot-{run}}}")).await,
        "the lock was released"
    );

    for line in &lines {
        assert_eq!(line["answers"], serde_json::json!([value]), "{line}");
        // The next get is answered by the cache, never the source: from L1, or — when the
        // winner's push reached a process while one of its safety polls was reading (the flight
        // is then detached and keeps nothing: docs/coherence.md) — from Valkey.
        let again = &line["again"];
        assert_eq!(again["value"], serde_json::json!(value), "{line}");
        assert!(
            matches!(again["origin"].as_str(), Some("L1" | "L2")),
            "{line}"
        );
        assert_eq!(line["in_flight"], 0, "{line}");
        assert_eq!(line["fenced_write_skipped"], 0, "{line}");
    }
    let sum = |field: &str| {
        lines
            .iter()
            .map(|l| l[field].as_u64().expect(field))
            .sum::<u64>()
    };
    assert_eq!((sum("source_reads"), sum("lock_won")), (1, 1));
    assert!(
        sum("lease_extended") > 0,
        "the winner's lease kept the lock"
    );
    assert_eq!(sum("lease_lost"), 0);
    let reads_after: u64 = conn
        .get(format!("race:{run}:source_reads"))
        .await
        .expect("GET counter");
    assert_eq!(reads_after, 1, "the second gets read nothing");
}
