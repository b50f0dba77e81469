//! The table's own closures beside the loader (`ttl_for`, `tags`, `version_by`) panicking on one
//! value, or answering out of range: that value gets what the builder's documentation promises
//! (the table's ttl or one held in range, a refused write, an unversioned write), every other
//! value is unaffected, and the table keeps serving.

use crate::common;

use std::time::Duration;

use common::{Source, exists, raw, read_envelope, valkey, valkey_table};
use echostore::{Error, MAX_DURATION, Origin};

const TTL: Duration = Duration::from_secs(600);
/// What `ttl_for` gives the values it does not panic on.
const OWN_TTL: Duration = Duration::from_secs(2);

/// The fresh life a value's copy on Valkey was written with.
fn fresh_life<V>(copy: &common::OnValkey<V>) -> Duration {
    Duration::from_millis(copy.fresh_until_ms - copy.written_at_ms)
}

/// A `ttl_for` that panics on a value: that value, loaded or put, lives the table's ttl; the
/// others their own; no read or write fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_for_that_panics_gives_the_value_the_tables_ttl() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::open();
    let t = valkey_table(&valkey.url(), "lives", &source, |t| {
        t.ttl(TTL)
            .jitter(0.0)
            .loader(source.answering(|id, _| Ok(if id == 1 { "bad" } else { "good" }.into())))
            .ttl_for(|value: &String| {
                assert!(value != "bad", "ttl_for exploded");
                OWN_TTL
            })
    })
    .await;

    assert_eq!(*t.get(&1).await.expect("loaded"), "bad");
    assert_eq!(*t.get(&2).await.expect("loaded"), "good");
    t.put(&3, "bad".to_owned()).await.expect("put");
    for (id, life) in [(1, TTL), (2, OWN_TTL), (3, TTL)] {
        let key = format!("lives:{{{id}}}");
        let copy = read_envelope::<String>(&mut conn, &key)
            .await
            .expect("a copy");
        assert_eq!(fresh_life(&copy), life, "id {id}");
    }
    assert_eq!(t.stats().errors, 0);
}

/// A `ttl_for` answering out of range: zero is held to 1 ms and `Duration::MAX` to
/// `MAX_DURATION`; both values are written and read, nothing overflows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_for_out_of_range_is_held_within_its_bounds() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::open();
    let t = valkey_table(&valkey.url(), "bounded", &source, |t| {
        // Stale for a while, so that a copy fresh for 1 ms is still there to read.
        t.jitter(0.0)
            .stale_for(Duration::from_secs(60))
            .ttl_for(|value: &String| match value.as_str() {
                "none" => Duration::ZERO,
                _ => Duration::MAX,
            })
    })
    .await;

    t.put(&1, "none".to_owned()).await.expect("put");
    t.put(&2, "forever".to_owned()).await.expect("put");
    for (id, life) in [(1, Duration::from_millis(1)), (2, MAX_DURATION)] {
        let key = format!("bounded:{{{id}}}");
        let copy = read_envelope::<String>(&mut conn, &key).await;
        let copy = copy.unwrap_or_else(|| panic!("no copy of id {id}"));
        assert_eq!(fresh_life(&copy), life, "id {id}");
    }
    assert_eq!(*t.get(&2).await.expect("an L1 hit"), "forever");
    assert_eq!(t.stats().errors, 0);
}

/// Tags that panic on a value: a write of it, a `put`'s or a load's, fails with `Error::Codec`,
/// as one too large does: nothing is written, the copy before it is left, the lock is released,
/// and the next read loads again; `invalidate_tag` still finds the other entries, and a batch
/// read fails only that id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tags_that_panic_refuse_a_put_and_leave_a_load_uncached() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::open();
    let url = valkey.url();
    let tagged =
        || {
            valkey_table(&url, "tagged", &source, |t| {
                t.loader(source.answering(|id, n| {
                    Ok(format!("{}-{n}", if id == 2 { "boom" } else { "fine" }))
                }))
                .tags(|_id: &u64, value: &String| {
                    assert!(!value.starts_with("boom"), "tags exploded");
                    ["kept"]
                })
            })
        };
    let (t, elsewhere) = (tagged().await, tagged().await);

    t.put(&1, "fine".to_owned()).await.expect("put");
    let err = t.put(&1, "boom".to_owned()).await.expect_err("refused");
    assert!(
        matches!(&err, Error::Codec(m) if m.contains("tags panicked")),
        "{err}"
    );
    let copy = elsewhere.peek(&1).await.expect("peek on another store");
    let copy = copy.map(|c| c.value.to_string());
    assert_eq!(copy.as_deref(), Some("fine"), "the copy is left");
    assert_eq!(*t.get(&1).await.expect("served"), "fine");

    for _ in 0..2 {
        let err = t.get(&2).await.expect_err("a load that cannot be written");
        assert!(
            matches!(&err, Error::Codec(m) if m.contains("tags panicked")),
            "{err}"
        );
        assert!(!exists(&mut conn, "tagged:{2}").await, "nothing on Valkey");
        assert!(
            !exists(&mut conn, "lock:tagged:{2}").await,
            "the lock was released"
        );
    }
    assert_eq!(
        source.calls(),
        2,
        "each read loaded again: nothing was kept"
    );

    t.invalidate_tag("kept").await.expect("invalidate_tag");
    let after = t.fetch(&1).await.expect("read after the tag");
    assert_eq!(
        (after.value.as_str(), after.origin),
        ("fine-3", Origin::Loaded),
        "the tagged entry was invalidated"
    );

    // In a batch read, only the id whose tags panic fails.
    let answers = t.fetch_many([2_u64, 4]).await;
    for (id, answer) in answers {
        match id {
            2 => assert!(
                matches!(&answer, Err(Error::Codec(m)) if m.contains("tags panicked")),
                "{answer:?}"
            ),
            _ => assert!(answer.expect("loaded").value.starts_with("fine-")),
        }
        assert!(
            !exists(&mut conn, format!("lock:tagged:{{{id}}}")).await,
            "id {id}'s lock"
        );
    }
    assert!(
        exists(&mut conn, "tagged:{4}").await,
        "the other id was written"
    );
    assert_eq!(t.stats().owner_restarts, 0);
}

/// A `version_by` that panics on a value: its `put` is written unversioned (ordered by Valkey's
/// clock, as without `version_by`) and read back; versioned writes go on around it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_by_that_panics_leaves_the_write_unversioned() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::open();
    let t = valkey_table(&valkey.url(), "versioned", &source, |t| {
        t.version_by(|value: &String| {
            value
                .strip_prefix('v')
                .and_then(|n| n.parse().ok())
                .expect("version_by exploded")
        })
    })
    .await;

    t.put(&1, "v5".to_owned()).await.expect("put v5");
    let copy = read_envelope::<String>(&mut conn, "versioned:{1}")
        .await
        .expect("a copy");
    assert_eq!((copy.value.as_str(), copy.version), ("v5", Some(5)));

    t.put(&1, "boom".to_owned())
        .await
        .expect("an unversioned put");
    let copy = read_envelope::<String>(&mut conn, "versioned:{1}")
        .await
        .expect("a copy");
    assert_eq!((copy.value.as_str(), copy.version), ("boom", None));
    assert_eq!(*t.get(&1).await.expect("served"), "boom");

    t.put(&1, "v6".to_owned()).await.expect("put v6");
    assert_eq!(*t.get(&1).await.expect("served"), "v6");
    assert_eq!(t.stats().errors, 0);
}

/// A value type whose `Serialize` panics on one value (13): a user bug that a load or a put can
/// reach.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
struct Prickly(u64);

impl serde::Serialize for Prickly {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        assert_ne!(self.0, 13, "Prickly cannot stand 13");
        self.0.serialize(s)
    }
}

/// A `Serialize` that panics on a value: a write of it, a `put`'s or a load's, fails with
/// `Error::Codec`, as tags that panic do (no caller's task panics): nothing is written, the lock
/// is released, and the other values are unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serialize_that_panics_refuses_that_write_alone() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let t = common::store_on(&valkey.url())
        .await
        .table::<u64, Prickly>("prickly")
        .ttl(TTL)
        .loader(|id: u64| async move { Ok::<_, std::io::Error>(Prickly(id)) })
        .build()
        .await
        .expect("table");

    let refused = t
        .put(&1, Prickly(13))
        .await
        .expect_err("a put it cannot encode");
    assert!(
        matches!(&refused, Error::Codec(m) if m.contains("Serialize panicked")),
        "{refused}"
    );
    let refused = t.get(&13).await.expect_err("a load it cannot encode");
    assert!(
        matches!(&refused, Error::Codec(m) if m.contains("Serialize panicked")),
        "{refused}"
    );
    common::settled(&t).await;
    assert!(
        !exists(&mut conn, "prickly:{13}").await,
        "nothing on Valkey"
    );
    assert!(
        !exists(&mut conn, "lock:prickly:{13}").await,
        "the lock was released"
    );
    assert_eq!(*t.get(&2).await.expect("served"), Prickly(2));
    let s = t.stats();
    assert_eq!(
        (s.errors, s.owner_restarts),
        (1, 0),
        "the failed load counted: {s:?}"
    );
}
