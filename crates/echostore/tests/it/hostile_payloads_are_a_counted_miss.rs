//! Bytes on Valkey are input from anyone who can write there. Whatever they are, reading them is
//! bounded: a payload nested a million deep, or one over the table's `max_value_bytes`, is a
//! counted miss (`decode_errors`), the process goes on, and the loader's value replaces it; a
//! `fresh_until` far past the table's ttl keeps nothing fresh longer than that ttl.

use crate::common;

use std::time::Duration;

use common::{
    envelope, envelope_header, exists, info_count, raw, read_envelope, settled, store_on, unix_ms,
    valkey,
};
use echostore::{Origin, Table};
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};

/// A value type that nests through itself: what a hostile payload exploits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Nest {
    Leaf(u32),
    Deeper(Box<Nest>),
}

impl Nest {
    /// `levels` levels: `levels - 1` times `Deeper`, then `Leaf(n)`.
    fn of(levels: usize, n: u32) -> Nest {
        (1..levels).fold(Nest::Leaf(n), |inner, _| Nest::Deeper(Box::new(inner)))
    }
}

/// How deep the loader's values nest: deep, but within the limit of 128.
const LEGIT: usize = 100;

async fn nest_table(url: &str) -> Table<u64, Nest> {
    store_on(url)
        .await
        .table::<u64, Nest>("deep")
        .jitter(0.0)
        .loader(|id: u64| async move { Ok::<_, std::io::Error>(Nest::of(LEGIT, id as u32)) })
        .build()
        .await
        .expect("table")
}

/// An envelope, fresh for an hour, whose payload is a `Nest` a million levels deep: postcard's
/// variant 1 (`Deeper`) 999,999 times, then `Leaf(0)`. About a megabyte: within the default
/// `max_value_bytes`, so the decoder sees all of it.
fn million_deep() -> Vec<u8> {
    let now = unix_ms();
    let mut bytes = envelope_header(now + 3_600_000, now);
    bytes.extend(std::iter::repeat_n(1u8, 999_999));
    bytes.extend([0u8, 0u8]);
    bytes
}

/// A self-boxing enum planted a million deep on Valkey: the read is a counted miss, the process
/// survives (decoding it unbounded overflows the stack and aborts the test binary), and the
/// loader's value replaces it, for this store and the next. The limit is on nesting, not on
/// ordinary values: the loader's value, 100 levels deep, is an L2 hit in the next store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_deep_payload_is_a_counted_miss_and_gets_replaced() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let _: () = conn.set("deep:{1}", million_deep()).await.expect("plant");
    let t = nest_table(&valkey.url()).await;

    let f = t.fetch(&1).await.expect("loaded instead");
    assert_eq!((f.origin, &*f.value), (Origin::Loaded, &Nest::of(LEGIT, 1)));
    let s = t.stats();
    // The fill reads the key twice — its first GETRANGE, then the acquire-or-read's — but counts
    // (and parses) the same bytes once.
    assert_eq!((s.decode_errors, s.source_reads, s.lock_won), (1, 1, 1));
    let stored = read_envelope::<Nest>(&mut conn, "deep:{1}")
        .await
        .expect("replaced");
    assert_eq!(
        stored.value,
        Nest::of(LEGIT, 1),
        "the loader's value replaced it"
    );
    settled(&t).await;

    let other = nest_table(&valkey.url()).await;
    let seen = other.fetch(&1).await.expect("L2");
    assert_eq!(
        (seen.origin, &*seen.value),
        (Origin::L2, &Nest::of(LEGIT, 1))
    );
    assert_eq!(other.stats().decode_errors, 0);
    settled(&other).await;
}

/// A table `name` whose values may be 256 bytes, with a fresh envelope of a `bytes`-long string
/// planted on Valkey for id `id` before it starts; its loader answers `small <id>`.
async fn capped(
    url: &str,
    conn: &mut common::RawConn,
    name: &str,
    id: &str,
    bytes: usize,
) -> echostore::Table<String, String> {
    let now = unix_ms();
    let planted = envelope(now + 3_600_000, now, &"x".repeat(bytes));
    let key = format!("{name}:{{{id}}}");
    let _: () = conn.set(key, &planted).await.expect("plant");
    store_on(url)
        .await
        .table::<String, String>(name)
        .ttl(Duration::from_secs(60))
        .max_value_bytes(256)
        .loader(|id: String| async move { Ok::<_, std::io::Error>(format!("small {id}")) })
        .build()
        .await
        .expect("table")
}

/// A fresh envelope over the table's `max_value_bytes` planted on Valkey is a counted miss
/// (Valkey is asked for at most one byte more than the limit), and the loader's value replaces it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_over_the_limit_on_valkey_is_a_counted_miss() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let t = capped(&valkey.url(), &mut conn, "capped", "k", 1000).await;

    let f = t.fetch(&"k".to_string()).await.expect("loaded instead");
    assert_eq!((f.origin, f.value.as_str()), (Origin::Loaded, "small k"));
    let s = t.stats();
    // The fill's two reads (GETRANGE, then the acquire-or-read's) see the same bytes: one count.
    assert_eq!((s.decode_errors, s.source_reads), (1, 1));
    let stored = read_envelope::<String>(&mut conn, "capped:{k}")
        .await
        .expect("replaced");
    assert_eq!(stored.value, "small k");
    settled(&t).await;
}

/// A batch read is bounded per value as a single read is: a fresh envelope of 8 MB planted on
/// Valkey, in a batch with another id, costs Valkey at most one byte over the table's
/// `max_value_bytes` to send, is a counted miss, and the loader's value replaces it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_read_takes_no_more_of_a_huge_value_than_a_single_read() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let t = capped(&valkey.url(), &mut conn, "capped_batch", "huge", 8 << 20).await;

    let sent_before = info_count(&mut conn, "stats", "total_net_output_bytes").await;
    let found = t
        .get_many(["huge".to_string(), "other".to_string()])
        .await
        .expect("a batch");
    let sent = info_count(&mut conn, "stats", "total_net_output_bytes").await - sent_before;
    assert_eq!(found["huge"].as_str(), "small huge");
    assert_eq!(found["other"].as_str(), "small other");
    assert!(
        sent < 1 << 20,
        "Valkey sent {sent} bytes for a batch whose values may be 257 bytes each"
    );
    assert_eq!(t.stats().decode_errors, 1);
    let stored = read_envelope::<String>(&mut conn, "capped_batch:{huge}")
        .await
        .expect("replaced");
    assert_eq!(stored.value, "small huge");
    settled(&t).await;
}

/// A value type whose `Deserialize` panics on one value (13): a user bug that bytes planted on
/// Valkey can reach.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct Grumpy(u64);

impl<'de> Deserialize<'de> for Grumpy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = u64::deserialize(d)?;
        assert_ne!(n, 13, "Grumpy cannot stand 13");
        Ok(Grumpy(n))
    }
}

/// Bytes that make the value type's `Deserialize` panic, planted on Valkey, are bytes the table
/// cannot read, as any other: a counted miss, loaded over. Every caller gets the loaded value
/// (no caller's task panics), the lock is released, and the loaded value replaces the bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deserialize_that_panics_is_a_counted_miss_loaded_over() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let table = grumpy_table(&valkey.url(), "grumpy").await;
    let planted = envelope(unix_ms() + 3_600_000, unix_ms(), &13u64);
    let _: () = conn.set("grumpy:{1}", planted).await.expect("plant");

    let gets: Vec<_> = (0..4)
        .map(|_| {
            let table = table.clone();
            tokio::spawn(async move { table.get(&1).await })
        })
        .collect();
    for get in gets {
        let answer = get.await.expect("the caller's task did not panic");
        assert_eq!(*answer.expect("the loaded value"), Grumpy(1));
    }
    settled(&table).await;
    let s = table.stats();
    assert_eq!(s.source_reads, 1, "one load for every caller");
    assert!(s.decode_errors >= 1, "counted: {s:?}");
    assert!(
        !exists(&mut conn, "lock:grumpy:{1}").await,
        "the lock was released"
    );
    let stored = read_envelope::<u64>(&mut conn, "grumpy:{1}").await;
    assert_eq!(
        stored.map(|s| s.value),
        Some(1),
        "the load replaced the bytes"
    );
}

/// The same bytes met by a batch read: only that id is loaded over, the batch's other ids are
/// answered, and no id's lock is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_loads_over_a_copy_whose_deserialize_panics() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let table = grumpy_table(&valkey.url(), "grumpy_b").await;
    let planted = envelope(unix_ms() + 3_600_000, unix_ms(), &13u64);
    let _: () = conn.set("grumpy_b:{1}", planted).await.expect("plant");

    for (id, answer) in table.fetch_many([1u64, 2, 3]).await {
        let fetched = answer.unwrap_or_else(|e| panic!("id {id}: {e}"));
        assert_eq!((*fetched.value).clone(), Grumpy(id));
    }
    settled(&table).await;
    for id in [1, 2, 3] {
        let lock = format!("lock:grumpy_b:{{{id}}}");
        assert!(!exists(&mut conn, &lock).await, "{lock} was released");
    }
    assert!(table.stats().decode_errors >= 1);
    let stored = read_envelope::<u64>(&mut conn, "grumpy_b:{1}").await;
    assert_eq!(
        stored.map(|s| s.value),
        Some(1),
        "the load replaced the bytes"
    );
}

async fn grumpy_table(url: &str, name: &str) -> Table<u64, Grumpy> {
    store_on(url)
        .await
        .table::<u64, Grumpy>(name)
        .loader(|id: u64| async move { Ok::<_, std::io::Error>(Grumpy(id)) })
        .build()
        .await
        .expect("table")
}

/// A planted envelope whose `fresh_until` is ten years away, written (by Valkey's stamp) ten
/// seconds ago, on a table with a one-second ttl: its life is cut to the ttl from `written_at`,
/// so it is stale, and the read loads from the source instead of serving it (and keeping it in
/// L1) for ten years.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_life_is_cut_to_the_tables_ttl() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let table = store_on(&valkey.url())
        .await
        .table::<u64, String>("planted")
        .ttl(Duration::from_secs(1))
        .loader(|id: u64| async move { Ok::<_, std::io::Error>(format!("loaded {id}")) })
        .build()
        .await
        .expect("table");
    let now = unix_ms();
    let ten_years = 10 * 365 * 24 * 3_600_000;
    let planted = envelope(now + ten_years, now - 10_000, &"planted".to_owned());
    let _: () = conn.set("planted:{1}", &planted).await.expect("plant");

    let read = table.fetch(&1).await.expect("a value");
    assert_eq!(
        (read.origin, read.value.as_str()),
        (Origin::Loaded, "loaded 1"),
        "the planted life is past the ttl: not fresh"
    );
    let stored = read_envelope::<String>(&mut conn, "planted:{1}")
        .await
        .expect("the loaded value replaced it");
    assert_eq!(stored.value, "loaded 1");
    settled(&table).await;
}
