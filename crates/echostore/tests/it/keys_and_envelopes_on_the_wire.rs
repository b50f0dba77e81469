//! What EchoStore leaves on Valkey: DESIGN.md's key names, the envelope, the physical life, and
//! what `put`, `invalidate` and undecodable bytes do there.

use crate::common;

use common::{
    SET_ID, SET_LOCK as LOCK, SET_VALUE as VALUE, Source, exists, raw, set_table, settled, unix_ms,
    until, valkey,
};
use echostore::Origin;
use redis::AsyncCommands;

/// The lock is `lock:set:{id}` holding a 128-bit token during the fill; the value is `set:{id}`
/// with a PTTL of ttl + stale_for and an envelope whose logical life is the ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_tokens_and_lifetimes_follow_the_design() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::gated();
    let t = set_table(&valkey.url(), &source, |t| t).await;
    let id = SET_ID.to_string();

    let started_ms = unix_ms();
    let fill = tokio::spawn({
        let t = t.clone();
        let id = id.clone();
        async move { t.get(&id).await }
    });
    until("the winner reads the source", || source.calls() == 1).await;
    let token: String = conn
        .get(LOCK)
        .await
        .expect("the lock is held under DESIGN.md's name");
    assert_eq!(token.len(), 32, "128 bits as hex: {token}");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
    let lock_pttl: i64 = conn.pttl(LOCK).await.expect("PTTL");
    assert!(
        lock_pttl > 0 && lock_pttl <= 5000,
        "lock PX is lock_ttl: {lock_pttl}"
    );
    source.release();
    fill.await.expect("task").expect("value");

    assert!(!exists(&mut conn, LOCK).await, "released");
    let pttl: i64 = conn.pttl(VALUE).await.expect("PTTL");
    let physical = 360_000;
    assert!(
        pttl <= physical && pttl > physical - 5_000,
        "PTTL {pttl} ≈ ttl + stale_for"
    );

    let bytes: Vec<u8> = conn.get(VALUE).await.expect("GET");
    assert_eq!(bytes[0], 2, "envelope format byte");
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let (fresh_until, written_at) = (word(1), word(9));
    assert!(
        (started_ms + 60_000..=unix_ms() + 60_000).contains(&fresh_until),
        "logical life = ttl from the fill, on the writer's clock"
    );
    assert!(
        (started_ms..=unix_ms()).contains(&written_at),
        "written_at: Valkey's clock as the write landed (one host here)"
    );
    settled(&t).await;
}

/// `put` writes through with the same envelope and life; `invalidate` removes value and lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_writes_through_and_invalidate_removes_both_keys() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::open();
    let t = set_table(&valkey.url(), &source, |t| t).await;
    let id = SET_ID.to_string();

    t.put(&id, "written".into()).await.expect("put");
    let pttl: i64 = conn.pttl(VALUE).await.expect("PTTL");
    assert!(pttl > 355_000, "{pttl}");
    // Another store sees it as an L2 hit, without a source read.
    let other = set_table(&valkey.url(), &source, |t| t).await;
    let seen = other.fetch(&id).await.expect("L2");
    assert_eq!((seen.origin, seen.value.as_str()), (Origin::L2, "written"));
    assert_eq!(source.calls(), 0);
    settled(&other).await;

    let _: () = conn.set_ex(LOCK, "someone", 30).await.expect("SET lock");
    t.invalidate(&id).await.expect("invalidate");
    assert!(!exists(&mut conn, VALUE).await);
    assert!(
        !exists(&mut conn, LOCK).await,
        "an in-flight fill cannot write back"
    );
    assert_eq!(t.fetch(&id).await.expect("reload").origin, Origin::Loaded);
    settled(&t).await;
}

/// A `put` during another store's fill wins: the fill's fenced write is refused, and the fill
/// answers the put's value, which Valkey holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_beats_a_fill_in_flight_on_valkey() {
    let valkey = valkey();
    let source = Source::gated();
    let filler = set_table(&valkey.url(), &source, |t| t).await;
    let writer = set_table(&valkey.url(), &Source::open(), |t| t).await;
    let id = SET_ID.to_string();

    let fill = tokio::spawn({
        let filler = filler.clone();
        let id = id.clone();
        async move { filler.get(&id).await }
    });
    until("the fill reads the source", || source.calls() == 1).await;
    writer.put(&id, "newer".into()).await.expect("put");
    source.release();
    assert_eq!(*fill.await.expect("task").expect("own answer"), "newer");
    assert_eq!(filler.stats().fenced_write_skipped, 1);
    settled(&filler).await;
    let fresh = set_table(&valkey.url(), &Source::open(), |t| t).await;
    assert_eq!(
        *fresh.get(&id).await.expect("L2"),
        "newer",
        "the put's value stands"
    );
    settled(&fresh).await;
}

/// Bytes that are not an envelope of this table are a counted miss, overwritten by the fill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_bytes_are_a_counted_miss_and_get_overwritten() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::open();
    let id = SET_ID.to_string();

    // Foreign text, a truncated header, a header with a payload of another type, nothing.
    let mut other_type = vec![1u8];
    other_type.extend_from_slice(&u64::MAX.to_le_bytes());
    other_type.extend_from_slice(&0u64.to_le_bytes());
    other_type.extend_from_slice(&[0xff; 3]);
    for garbage in [&b"garbage"[..], &[1u8; 5][..], &other_type[..], &[][..]] {
        let _: () = conn.set(VALUE, garbage).await.expect("SET garbage");
        let t = set_table(&valkey.url(), &source, |t| t).await; // a fresh L1
        let f = t.fetch(&id).await.expect("loaded instead");
        assert_eq!(f.origin, Origin::Loaded, "{garbage:?}");
        // An empty string reads as no value at all (GETRANGE cannot tell the two apart).
        let counted = t.stats().decode_errors >= 1;
        assert!(counted || garbage.is_empty(), "{garbage:?}: counted");
        let bytes: Vec<u8> = conn.get(VALUE).await.expect("GET");
        assert_eq!(bytes[0], 2, "overwritten by a real envelope (format 2)");
        assert_ne!(bytes, garbage);
        settled(&t).await;
    }
    assert_eq!(source.calls(), 4);
}

/// Ids that would leave the hash tag empty (empty, or starting with `}`), and ids starting with
/// the escape byte, are written with one `\` before them: every path (the fill's lock, put,
/// invalidate, another store's read) works for them, on a cluster too, where an empty tag would
/// hash the value and its lock to different slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_that_would_leave_the_hash_tag_empty_work() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::open();
    let t = set_table(&valkey.url(), &source, |t| t).await;
    let other = set_table(&valkey.url(), &source, |t| t).await;
    for (id, key) in [
        ("", r"set:{\}"),
        ("}", r"set:{\}}"),
        ("}x{y}", r"set:{\}x{y}}"),
        (r"\a", r"set:{\\a}"),
    ] {
        let id = id.to_owned();
        let calls = source.calls();
        let loaded = t.fetch(&id).await.expect("filled through the lock");
        assert_eq!(loaded.origin, Origin::Loaded, "{id:?}");
        assert_eq!(source.calls(), calls + 1, "{id:?}");
        assert!(exists(&mut conn, key).await, "{key}");
        t.put(&id, format!("put {id}")).await.expect("put");
        let seen = other.fetch(&id).await.expect("read elsewhere");
        assert_eq!(
            (seen.origin, seen.value.as_str()),
            (Origin::L2, &*format!("put {id}"))
        );
        t.invalidate(&id).await.expect("invalidate");
        assert!(!exists(&mut conn, key).await, "{key}");
    }
    settled(&t).await;
    settled(&other).await;
}

/// A server that forgot EchoStore's scripts (`SCRIPT FLUSH`, as a restart does) is sent each one
/// with the call that needs it (`EVAL`, to that call's node only), never `SCRIPT LOAD`, which a
/// cluster client sends to every node: a fill and a put go on working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_forgot_the_scripts_is_sent_them_by_the_calls() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::open();
    let t = set_table(&valkey.url(), &source, |t| t).await;
    t.put(&"warm".to_string(), "up".into())
        .await
        .expect("a put loads the put script");
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .expect("FLUSH");
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .expect("RESETSTAT");

    assert_eq!(
        t.fetch(&SET_ID.to_string()).await.expect("a fill").origin,
        Origin::Loaded
    );
    t.put(&"other".to_string(), "value".into())
        .await
        .expect("a put");
    assert_eq!(
        common::command_calls(&mut conn, "script|load").await,
        0,
        "SCRIPT LOAD was sent"
    );
    assert!(
        common::command_calls(&mut conn, "eval").await >= 2,
        "the scripts went by EVAL"
    );
}
