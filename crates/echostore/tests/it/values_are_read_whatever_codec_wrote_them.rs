//! `.codec` and `.compress_above`: the envelope records how a value was coded, so a store set to
//! postcard reads what a JSON + LZ4 store wrote and the other way round; a compressed payload is
//! decompressed within `max_value_bytes`, so a decompression bomb is a counted miss.

use crate::common;

use common::{envelope_header, raw, store_on, unix_ms, valkey};
use echostore::{Codec, Origin, Table};
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};

/// A JSON-ish page: 64 KiB of repetitive text, as an API response cached whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Page {
    id: u64,
    body: String,
}

fn page(id: u64) -> Page {
    let row = format!("{{\"id\":{id},\"name\":\"product\",\"price\":\"12.50\"}},");
    Page {
        id,
        body: row.repeat(64 * 1024 / row.len()),
    }
}

async fn pages(
    url: &str,
    tune: impl Fn(echostore::TableBuilder<u64, Page>) -> echostore::TableBuilder<u64, Page>,
) -> Table<u64, Page> {
    let store = store_on(url).await;
    tune(store.table::<u64, Page>("pages"))
        .loader(|id: u64| async move { Ok::<_, std::io::Error>(page(id)) })
        .build()
        .await
        .expect("table")
}

/// A page put by a JSON + LZ4 store is read by a postcard store from Valkey, and a page put by
/// the postcard store is read by the JSON one: neither calls its loader, neither counts a decode
/// error, and the compressed copy on Valkey is a fraction of the page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_with_different_codecs_read_each_others_values() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let json = pages(&valkey.url(), |t| t.codec(Codec::Json).compress_above(1024)).await;
    let postcard = pages(&valkey.url(), |t| t).await;

    json.put(&1, page(1)).await.expect("put");
    let stored: Vec<u8> = conn.get("pages:{1}").await.expect("GET");
    assert_eq!(
        stored[0] & 0xF0,
        0x30,
        "JSON and LZ4 recorded in the format byte"
    );
    assert!(
        stored.len() < page(1).body.len() / 4,
        "compressed: {} bytes",
        stored.len()
    );
    let read = postcard.fetch(&1).await.expect("read");
    assert_eq!((read.origin, &*read.value), (Origin::L2, &page(1)));

    postcard.put(&2, page(2)).await.expect("put");
    let stored: Vec<u8> = conn.get("pages:{2}").await.expect("GET");
    assert_eq!(stored[0] & 0xF0, 0, "postcard, uncompressed");
    let read = json.fetch(&2).await.expect("read");
    assert_eq!((read.origin, &*read.value), (Origin::L2, &page(2)));

    let small = Page {
        id: 3,
        body: "short".into(),
    };
    json.put(&3, small.clone()).await.expect("put");
    let stored: Vec<u8> = conn.get("pages:{3}").await.expect("GET");
    assert_eq!(
        stored[0] & 0xF0,
        0x10,
        "JSON, not compressed below compress_above"
    );
    assert_eq!(*postcard.get(&3).await.expect("read"), small);

    let (a, b) = (json.stats(), postcard.stats());
    assert_eq!((a.source_reads, b.source_reads), (0, 0));
    assert_eq!((a.decode_errors, b.decode_errors), (0, 0));
}

/// An LZ4 block that decompresses to `total` zero bytes in about `total / 255` bytes: one
/// literal zero, then one match of offset 1 repeating it, then the five literals a block ends
/// with; the decompressed size is prepended, as the codec writes it, and `declared` there.
fn lz4_bomb(total: usize, declared: u32) -> Vec<u8> {
    let mut block = declared.to_le_bytes().to_vec();
    let match_len = total - 1 - 5;
    block.push(0x10 | 0x0F); // one literal; match length 15 + the bytes below, + 4
    block.push(0);
    block.extend_from_slice(&1u16.to_le_bytes());
    let mut left = match_len - 4 - 15;
    while left >= 255 {
        block.push(255);
        left -= 255;
    }
    block.push(left as u8);
    block.push(0x50); // the last five literals
    block.extend_from_slice(&[0; 5]);
    block
}

/// A fresh envelope, LZ4-compressed postcard, whose payload is `bomb`.
fn planted(bomb: &[u8]) -> Vec<u8> {
    let now = unix_ms();
    let mut bytes = envelope_header(now + 3_600_000, now);
    bytes[0] = 2 | 0x20;
    bytes.extend_from_slice(&0u32.to_le_bytes()); // delta
    bytes.extend_from_slice(bomb);
    bytes
}

/// A 1 GiB decompression bomb planted on Valkey (about 4 MiB on the wire, within the table's
/// 16 MiB `max_value_bytes`) is refused, whether it declares its size or lies about it: a counted
/// miss, the loader's value replaces it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decompression_bomb_is_a_counted_miss() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let mib = 1 << 20;
    let small = lz4_flex::block::decompress_size_prepended(&lz4_bomb(mib, mib as u32));
    assert_eq!(
        small.expect("a valid block"),
        vec![0u8; mib],
        "the bomb's shape is real"
    );
    let gib = 1 << 30;
    for (id, declared) in [(1u64, gib as u32), (2, 1 << 20)] {
        let bytes = planted(&lz4_bomb(gib, declared));
        assert!(bytes.len() < 16 << 20, "{} bytes on the wire", bytes.len());
        let _: () = conn
            .set(format!("pages:{{{id}}}"), bytes)
            .await
            .expect("plant");
    }
    let t = pages(&valkey.url(), |t| t).await;
    for id in [1, 2] {
        let f = t.fetch(&id).await.expect("loaded instead");
        assert_eq!((f.origin, &*f.value), (Origin::Loaded, &page(id)));
    }
    let s = t.stats();
    assert_eq!((s.decode_errors, s.source_reads), (2, 2));
}

/// A codec of one's own (here JSON behind a `v1:` prefix): two stores with it share values; a
/// store without it counts those bytes as a decode error (a miss) and loads the value instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_codec_is_read_by_the_stores_that_have_it() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let prefixed = || {
        Codec::custom(
            |tree| Ok([b"v1:".as_slice(), &serde_json::to_vec(tree)?].concat()),
            |bytes| {
                let json = bytes.strip_prefix(b"v1:").ok_or("no v1: prefix")?;
                Ok(serde_json::from_slice(json)?)
            },
        )
    };
    let a = pages(&valkey.url(), |t| t.codec(prefixed())).await;
    let b = pages(&valkey.url(), |t| t.codec(prefixed())).await;
    let plain = pages(&valkey.url(), |t| t).await;

    a.put(&1, page(1)).await.expect("put");
    let stored: Vec<u8> = conn.get("pages:{1}").await.expect("GET");
    assert_eq!(stored[0] & 0xF0, 0x40, "the custom bit in the format byte");
    let read = b.fetch(&1).await.expect("read");
    assert_eq!((read.origin, &*read.value), (Origin::L2, &page(1)));
    let other = plain.fetch(&1).await.expect("loaded instead");
    assert_eq!((other.origin, &*other.value), (Origin::Loaded, &page(1)));
    assert_eq!(plain.stats().decode_errors, 1);
    assert_eq!(b.stats().decode_errors, 0);
}

/// A custom codec that panics: on encoding a value, its write (a `put`'s, or a load's) is an
/// `Error::Codec` and nothing is written, the lock released; on decoding bytes, the copy is a
/// counted miss and the value is loaded instead. No task panics and the table keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_codec_that_panics_is_an_error_or_a_miss() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let prefixed = |touchy: bool| {
        Codec::custom(
            move |tree| {
                assert!(!(touchy && tree["id"] == 2), "encode exploded");
                Ok([b"v1:".as_slice(), &serde_json::to_vec(tree)?].concat())
            },
            move |bytes| {
                let json = bytes.strip_prefix(b"v1:").ok_or("no v1: prefix")?;
                let tree: serde_json::Value = serde_json::from_slice(json)?;
                assert!(!(touchy && tree["id"] == 3), "decode exploded");
                Ok(tree)
            },
        )
    };
    let touchy = pages(&valkey.url(), |t| t.codec(prefixed(true))).await;
    let calm = pages(&valkey.url(), |t| t.codec(prefixed(false))).await;

    let put = touchy.put(&2, page(2)).await.expect_err("encode panicked");
    assert!(
        matches!(&put, echostore::Error::Codec(m) if m.contains("encode panicked")),
        "{put}"
    );
    let load = touchy
        .get(&2)
        .await
        .expect_err("a load that cannot be written");
    assert!(
        matches!(&load, echostore::Error::Codec(m) if m.contains("encode panicked")),
        "{load}"
    );
    assert!(
        !conn.exists::<_, bool>("pages:{2}").await.expect("EXISTS"),
        "nothing written"
    );
    assert!(
        !conn
            .exists::<_, bool>("lock:pages:{2}")
            .await
            .expect("EXISTS"),
        "lock released"
    );

    calm.put(&3, page(3))
        .await
        .expect("put by a store whose codec decodes it");
    let read = touchy.fetch(&3).await.expect("loaded instead");
    assert_eq!((read.origin, &*read.value), (Origin::Loaded, &page(3)));
    let s = touchy.stats();
    assert_eq!((s.decode_errors, s.owner_restarts), (1, 0), "{s:?}");
}
