//! Two stores (as two processes would) `put` one id at the same instant, round after round. When
//! both puts have returned and every push has arrived, neither store's L1 may hold a value that
//! differs from Valkey's: a copy that did would be served for the rest of its minute-long ttl.
//!
//! The owner keeps a put's entry out of L1 when a push for the id arrived while the put was on
//! the wire (`owner.rs`, `overtaken_writes`): the other store's write may have landed after it.

mod common;

use std::time::Duration;

use common::{raw, store_on, until, valkey};
use echostore::{Origin, Table};
use redis::AsyncCommands;

/// A `String -> u64` table `pr` with a minute's ttl on a store of its own.
async fn table(url: &str) -> Table<String, u64> {
    store_on(url)
        .await
        .table::<String, u64>("pr")
        .ttl(Duration::from_secs(60))
        .jitter(0.0)
        .loader(|_id: String| async { Ok::<_, std::io::Error>(0) })
        .start()
        .await
        .expect("table")
}

/// Waits until a push for a fresh probe key has reached both tables: every push Valkey sent
/// before it has then been handled by their owners (one tracking connection, one mailbox each).
async fn pushes_drained(conn: &mut common::RawConn, tables: &[&Table<String, u64>]) {
    let before: Vec<u64> = tables.iter().map(|t| t.stats().invalidations).collect();
    let _: () = conn.set("pr:{probe}", "x").await.expect("SET probe");
    until("the probe's push reached both tables", || {
        tables
            .iter()
            .zip(&before)
            .all(|(t, b)| t.stats().invalidations > *b)
    })
    .await;
}

/// Concurrent puts of one id from two stores: afterwards, an L1 hit in either store answers
/// what Valkey holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_racing_a_foreign_write_leaves_no_stale_l1() {
    let valkey = valkey();
    let url = valkey.url();
    let (a, b) = (table(&url).await, table(&url).await);
    let mut conn = raw(&url).await;
    pushes_drained(&mut conn, &[&a, &b]).await; // both tracked before the first round
    let id = "x".to_owned();
    let mut stale = Vec::new();
    for round in 0..300u64 {
        let (pa, pb) = tokio::join!(a.put(&id, round * 2), b.put(&id, round * 2 + 1));
        pa.expect("put a");
        pb.expect("put b");
        pushes_drained(&mut conn, &[&a, &b]).await;
        let bytes: Vec<u8> = conn.get("pr:{x}").await.expect("GET");
        let held = payload(&bytes);
        for (name, t) in [("a", &a), ("b", &b)] {
            let f = t.fetch(&id).await.expect("fetch");
            if matches!(f.origin, Origin::L1) && *f.value != held {
                stale.push((round, name, *f.value, held));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "L1 copies that differ from Valkey (round, store, L1, Valkey): {stale:?}"
    );
}

/// The `u64` of an envelope: postcard's varint after the header, 17 bytes in format 1 and 21 in
/// format 2 (docs/lock-protocol.md).
fn payload(envelope: &[u8]) -> u64 {
    let header = if envelope[0] == 1 { 17 } else { 21 };
    let mut value = 0u64;
    for (i, byte) in envelope[header..].iter().enumerate() {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            break;
        }
    }
    value
}
