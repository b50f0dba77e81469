//! Bad input gets a clear error and loses nothing: odd ids work end to end, ids and values over
//! their limits are refused before anything is written, and Valkey's error replies surface as
//! `Error::Valkey` with what EchoStore was doing.

use crate::common;

use common::{config_set, exists, raw, settled, store_on, valkey};
use echostore::{Error, MAX_ID_BYTES, Origin, Table};
use redis::AsyncCommands;

/// A table whose values are `v:<id>`, limited to 4 KiB encoded.
async fn text_table(url: &str, name: &str) -> Table<String, String> {
    store_on(url)
        .await
        .table::<String, String>(name)
        .max_value_bytes(4096)
        .loader(|id: String| async move { Ok::<_, std::io::Error>(format!("v:{id}")) })
        .build()
        .await
        .expect("table")
}

/// Braces, colons, spaces, newlines: stored under `<table>:{<id>}` byte for byte; an empty id and
/// one starting with `}` with one `\` before them (docs/lock-protocol.md: the hash tag is never
/// empty).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_ids_are_stored_under_their_exact_names() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let t = text_table(&valkey.url(), "odd").await;
    for (id, key) in [
        ("a{b}c", "odd:{a{b}c}"),
        ("x:y:z", "odd:{x:y:z}"),
        ("with space", "odd:{with space}"),
        ("new\nline", "odd:{new\nline}"),
        ("}leading", r"odd:{\}leading}"),
        ("", r"odd:{\}"),
        ("ünïcödé", "odd:{ünïcödé}"),
    ] {
        let id = id.to_string();
        assert_eq!(*t.get(&id).await.expect("loaded"), format!("v:{id}"));
        assert!(exists(&mut conn, &key).await, "{key:?} on the wire");
        let other = text_table(&valkey.url(), "odd").await;
        assert_eq!(
            other.fetch(&id).await.expect("L2").origin,
            Origin::L2,
            "{id:?}"
        );
        settled(&other).await;
    }
    settled(&t).await;
}

/// An id over `MAX_ID_BYTES` is refused with `IdTooLong` by get, put and invalidate; at the
/// limit it works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_over_the_limit_are_refused() {
    let valkey = valkey();
    let t = text_table(&valkey.url(), "long").await;
    let at_limit = "i".repeat(MAX_ID_BYTES);
    assert_eq!(
        *t.get(&at_limit).await.expect("at the limit"),
        format!("v:{at_limit}")
    );
    // That flight answered on its own task; its owner ends it a moment later.
    settled(&t).await;
    let over = "i".repeat(MAX_ID_BYTES + 1);
    let expect_too_long = |r: echostore::Result<()>| {
        assert!(
            matches!(r, Err(Error::IdTooLong { len, max }) if len == MAX_ID_BYTES + 1 && max == MAX_ID_BYTES)
        );
    };
    expect_too_long(t.get(&over).await.map(drop));
    expect_too_long(t.put(&over, "x".into()).await.map(drop));
    expect_too_long(t.invalidate(&over).await);
    assert_eq!(t.stats().in_flight, 0, "a refused id starts no flight");
}

/// A value whose encoding is over `max_value_bytes` is `TooLarge` with nothing written: not by a
/// put, not by a fill (whose lock is released).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_over_the_limit_are_refused_and_nothing_is_written() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let t = text_table(&valkey.url(), "big").await;
    let id = "k".to_string();

    let err = t.put(&id, "x".repeat(5000)).await.expect_err("too large");
    assert!(
        matches!(err, Error::TooLarge { max: 4096, size } if size > 5000),
        "{err}"
    );
    assert!(!exists(&mut conn, "big:{k}").await, "nothing on Valkey");
    assert_eq!(t.stats().l1_len, 0, "nothing in L1");

    let huge = store_on(&valkey.url())
        .await
        .table::<String, String>("big")
        .max_value_bytes(256)
        .loader(|_id: String| async move { Ok::<_, std::io::Error>("y".repeat(1000)) })
        .build()
        .await
        .expect("table");
    let err = huge.get(&id).await.expect_err("too large");
    assert!(matches!(err, Error::TooLarge { .. }), "{err}");
    assert!(!exists(&mut conn, "big:{k}").await);
    assert!(!exists(&mut conn, "lock:big:{k}").await, "lock released");
    assert_eq!(huge.stats().released, 1);
    settled(&huge).await;
}

/// Valkey's error replies reach the caller of a write as `Error::Valkey` with context; a read
/// degrades to the loader instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_error_replies_surface_with_context() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let t = text_table(&valkey.url(), "oom").await;
    config_set(&mut conn, "maxmemory-policy", "noeviction").await;
    config_set(&mut conn, "maxmemory", 1).await;

    let err = t.put(&"k".to_string(), "v".into()).await.expect_err("OOM");
    let Error::Valkey { context, source } = &err else {
        panic!("not a Valkey error: {err}");
    };
    assert!(context.starts_with("put"), "{context}");
    assert!(source.to_string().contains("OOM"), "{source}");
    assert!(err.to_string().contains("valkey: put"), "{err}");

    let f = t
        .fetch(&"other".to_string())
        .await
        .expect("a read still answers");
    assert_eq!(f.origin, Origin::Loaded);
    assert!(t.stats().l2_errors >= 1);
    settled(&t).await;
}

/// Another Valkey type under the value key (a hash) is a counted miss, overwritten by the fill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_valkey_type_under_the_key_is_a_miss_and_gets_overwritten() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let _: () = conn
        .hset("typed:{k}", "field", "value")
        .await
        .expect("HSET");
    let t = text_table(&valkey.url(), "typed").await;

    let f = t.fetch(&"k".to_string()).await.expect("loaded");
    assert_eq!((f.origin, f.value.as_str()), (Origin::Loaded, "v:k"));
    let s = t.stats();
    assert_eq!((s.decode_errors, s.source_reads, s.lock_won), (1, 1, 1));
    let bytes: Vec<u8> = conn.get("typed:{k}").await.expect("now a string");
    assert_eq!(bytes[0], 2, "overwritten with an envelope (format 2)");
    settled(&t).await;
}

/// A wrong password (the URL's ACL login) is a clear error at build, naming the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_a_clear_error() {
    let valkey = embedded_valkey::EmbeddedValkey::builder()
        .password("the-right-one")
        .start()
        .expect("a valkey with a password");
    let port = valkey.port();
    let err = echostore::Store::builder()
        .valkey(format!("redis://:not-the-right-one@127.0.0.1:{port}/"))
        .require_valkey(true)
        .build()
        .await
        .expect_err("refused");
    let text = err.to_string();
    assert!(err.is_valkey(), "{text}");
    assert!(
        text.contains("WRONGPASS") || text.to_lowercase().contains("password"),
        "the cause is named: {text}"
    );
}
