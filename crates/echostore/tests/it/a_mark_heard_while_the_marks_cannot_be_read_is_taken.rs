//! A mark heard while the marks cannot be read in full is taken once they can: what it covers
//! leaves L1. A push of the marks key is followed by a read of the marks above the latest known;
//! when that read finds the latest mark lost (the key evicted or deleted, a replica that missed
//! it promoted), the marks are read in full, which puts back what Valkey lost. Before, the read
//! took in the new marks it had found first: when the full read then failed, those marks were
//! known here but what they cover was dropped by no one, and the full read that landed later
//! found nothing new, so L1 answered a retired entry for the rest of its life.

use crate::common;

use std::time::Duration;

use common::{Source, coherent_store, raw, table_on, until_stats, valkey};
use echostore::{Origin, TableBuilder};

/// A minute's life, no jitter, every entry under tag `t`.
fn tagged(t: TableBuilder<u64, String>) -> TableBuilder<u64, String> {
    t.ttl(Duration::from_secs(60))
        .jitter(0.0)
        .tags(|_: &u64, _: &String| ["t"])
}

/// One change of the marks key, one push: the key lost with the latest mark the store knows,
/// and tag `t` marked at Valkey's clock, above it.
const LOSE_AND_MARK: &str = r"
redis.call('DEL', KEYS[1])
local now = redis.call('TIME')
redis.call('ZADD', KEYS[1], now[1] * 1000000 + now[2], 'tag:t')
";

/// The store knows a mark (`other`) and holds id 1 (tag `t`) in L1. Its user may no longer run
/// `ZRANGE` (a full read of the marks fails; a read above the latest, `ZRANGEBYSCORE`, does not)
/// when the marks key is lost and `t` marked in one change. Once `ZRANGE` is allowed again and
/// the full read lands, `t`'s mark is taken and id 1 is no longer answered from L1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_found_beside_a_lost_one_is_taken_when_the_full_read_lands() {
    let valkey = valkey();
    let mut admin = raw(&valkey.url()).await;
    common::acl_setuser(
        &mut admin,
        "reader",
        &["on", ">secret", "~*", "&*", "+@all"],
    )
    .await;
    let url = valkey
        .url()
        .replacen("redis://", "redis://reader:secret@", 1);
    let source = Source::open();
    let table = table_on(&coherent_store(&url, None).await, "unread", &source, tagged).await;
    table
        .invalidate_tag("other")
        .await
        .expect("a mark, which Valkey is about to lose");
    table.get(&1).await.expect("id 1 loaded");

    common::acl_setuser(&mut admin, "reader", &["-zrange"]).await;
    let _: () = redis::cmd("EVAL")
        .arg(LOSE_AND_MARK)
        .arg(1)
        .arg("unread:{}marks")
        .query_async(&mut admin)
        .await
        .expect("the marks key lost and t marked");
    until_stats(&table, "the full read of the marks failed", |s| {
        s.marks_read_failures >= 1
    })
    .await;
    let taken = table.stats().marks_taken;
    common::acl_setuser(&mut admin, "reader", &["+zrange"]).await;

    until_stats(&table, "t's mark taken", |s| s.marks_taken > taken).await;
    let read = table.fetch(&1).await.expect("a read of id 1");
    assert_ne!(read.origin, Origin::L1, "L1 answered what t's mark retired");
}
