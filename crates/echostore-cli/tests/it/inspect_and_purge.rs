//! `echostore inspect` and `purge` end to end: the built binary against a real embedded Valkey,
//! on keys the library wrote, locks planted the way a fill takes them, and bytes that are no
//! envelope at all.

use crate::common;

use std::process::{Command, Output};
use std::time::Duration;

use echostore::{Origin, Store, Table};
use embedded_valkey::EmbeddedValkey;
use redis::Commands;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What the tests cache: a small record, as a service would.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct User {
    id: u64,
    name: String,
}

/// Runs `echostore --valkey <url> <args>`.
fn echostore(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_echostore"))
        .arg("--valkey")
        .arg(url)
        .args(args)
        .output()
        .expect("the echostore binary runs")
}

/// Runs a command with `--json`; it must succeed and print one JSON object.
fn json(url: &str, args: &[&str]) -> Value {
    let all: Vec<&str> = ["--valkey", url]
        .into_iter()
        .chain(args.iter().copied())
        .chain(["--json"])
        .collect();
    common::readout(&all)
}

fn server() -> EmbeddedValkey {
    EmbeddedValkey::start().expect("an embedded Valkey starts")
}

fn valkey(server: &EmbeddedValkey) -> redis::Connection {
    redis::Client::open(server.url())
        .and_then(|c| c.get_connection())
        .expect("a connection to the embedded Valkey")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A `users` table on `url` (optionally namespaced) whose loader makes a user from the id.
async fn users(url: &str, namespace: Option<&str>) -> (Store, Table<u64, User>) {
    let mut builder = Store::builder().valkey(url).require_valkey(true);
    if let Some(ns) = namespace {
        builder = builder.namespace(ns);
    }
    let store = builder.build().await.expect("a store");
    let table = store
        .table::<u64, User>("users")
        .ttl(Duration::from_secs(600))
        .stale_for(Duration::from_secs(600))
        .loader(|id: u64| async move {
            Ok::<_, std::io::Error>(User {
                id,
                name: format!("user {id}"),
            })
        })
        .build()
        .await
        .expect("a table");
    (store, table)
}

fn alice() -> User {
    User {
        id: 1,
        name: "alice".into(),
    }
}

/// A value the library put: its format, size, payload size and PTTL, fresh, no lock; the human
/// readout says the same in words.
#[test]
fn inspect_shows_a_value_the_library_wrote() {
    let server = server();
    let rt = runtime();
    let (_store, table) = rt.block_on(users(&server.url(), None));
    rt.block_on(table.put(&1, alice())).expect("put");
    let size: u64 = valkey(&server).strlen("users:{1}").expect("STRLEN");

    let v = json(&server.url(), &["inspect", "users", "1"]);
    assert_eq!(v["command"], "inspect", "{v}");
    let value = &v["value"];
    assert_eq!(value["key"], "users:{1}", "{v}");
    assert_eq!(value["exists"], true, "{v}");
    assert_eq!(value["valkey_type"], "string", "{v}");
    assert_eq!(value["decodable"], true, "{v}");
    assert_eq!(value["size_bytes"], size, "{v}");
    assert!(value["pttl_ms"].as_u64().is_some_and(|ms| ms > 0), "{v}");
    let envelope = &value["envelope"];
    let format = envelope["format"].as_u64().expect("a format");
    assert!(format == 1 || format == 2, "{v}");
    let header = envelope["header_bytes"].as_u64().expect("header bytes");
    assert_eq!(header, if format == 1 { 17 } else { 21 }, "{v}");
    let payload = postcard_len(&alice());
    assert_eq!(envelope["payload_bytes"], payload, "{v}");
    assert_eq!(size, header + payload, "{v}");
    assert_eq!(envelope["fresh"], true, "{v}");
    assert!(envelope["fresh_for_ms"].is_u64(), "{v}");
    assert!(envelope["stale_for_ms"].is_null(), "{v}");
    let (fresh_until, written_at) = (
        envelope["fresh_until_ms"].as_u64().expect("fresh_until"),
        envelope["written_at_ms"].as_u64().expect("written_at"),
    );
    assert!(fresh_until > written_at, "{v}");
    assert_eq!(v["lock"]["held"], false, "{v}");

    let out = echostore(&server.url(), &["inspect", "users", "1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for expected in ["users:{1}", "format", "fresh for", "PTTL", "held       no"] {
        assert!(text.contains(expected), "{expected:?} in:\n{text}");
    }
}

/// A format-2 envelope whose load took 40.3 ms (recorded as 40,300 µs, as the library writes
/// it): `inspect` shows 40.3 ms, not 40 s (it used to read the µs as ms).
#[test]
fn inspect_shows_the_recorded_load_time_in_its_unit() {
    let server = server();
    let now = 1_900_000_000_000u64;
    let mut planted = vec![2u8];
    planted.extend_from_slice(&(now + 60_000).to_le_bytes());
    planted.extend_from_slice(&now.to_le_bytes());
    planted.extend_from_slice(&40_300u32.to_le_bytes());
    planted.extend_from_slice(b"payload");
    let _: () = valkey(&server).set("users:{7}", &planted).expect("SET");

    let v = json(&server.url(), &["inspect", "users", "7"]);
    let delta = v["value"]["envelope"]["delta_ms"]
        .as_f64()
        .expect("delta_ms");
    assert!((delta - 40.3).abs() < 1e-9, "{v}");
    let out = echostore(&server.url(), &["inspect", "users", "7"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("load time  40.3 ms"), "{text}");
}

/// The payload's length as the library encodes it (postcard: a varint id, a length-prefixed name).
fn postcard_len(user: &User) -> u64 {
    (1 + 1 + user.name.len()) as u64
}

/// A lock planted as a fill takes it (`SET … NX PX`) shows as held, with its token and PTTL.
#[test]
fn inspect_shows_a_held_lock_with_its_token() {
    let server = server();
    let mut conn = valkey(&server);
    let token = echostore::protocol::new_token();
    let set: Option<String> = redis::cmd("SET")
        .arg("lock:users:{1}")
        .arg(&token)
        .arg("NX")
        .arg("PX")
        .arg(60_000)
        .query(&mut conn)
        .expect("SET NX PX");
    assert_eq!(set.as_deref(), Some("OK"));

    let v = json(&server.url(), &["inspect", "users", "1"]);
    assert_eq!(v["value"]["exists"], false, "{v}");
    let lock = &v["lock"];
    assert_eq!(lock["key"], "lock:users:{1}", "{v}");
    assert_eq!(lock["held"], true, "{v}");
    assert_eq!(lock["token"], token.as_str(), "{v}");
    assert!(lock["pttl_ms"].as_u64().is_some_and(|ms| ms > 0), "{v}");
    assert_eq!(lock["persistent"], false, "{v}");
}

/// `purge` deletes the value and the lock (what `invalidate` sends), says which were there, and a
/// second `inspect` finds neither; a second purge finds nothing and is no error.
#[test]
fn purge_deletes_the_value_and_the_lock() {
    let server = server();
    let rt = runtime();
    let (_store, table) = rt.block_on(users(&server.url(), None));
    rt.block_on(table.put(&1, alice())).expect("put");
    let mut conn = valkey(&server);
    let _: () = conn
        .set_ex("lock:users:{1}", "someone-elses-token", 60)
        .expect("SET lock");

    let v = json(&server.url(), &["purge", "users", "1"]);
    assert_eq!(v["value_deleted"], true, "{v}");
    assert_eq!(v["lock_deleted"], true, "{v}");
    assert_eq!(v["deleted"], 2, "{v}");
    let exists: u64 = conn
        .exists(&["users:{1}", "lock:users:{1}"])
        .expect("EXISTS");
    assert_eq!(exists, 0);

    let after = json(&server.url(), &["inspect", "users", "1"]);
    assert_eq!(after["value"]["exists"], false, "{after}");
    assert!(after["value"]["envelope"].is_null(), "{after}");
    assert_eq!(after["lock"]["held"], false, "{after}");
    let text =
        String::from_utf8_lossy(&echostore(&server.url(), &["inspect", "users", "1"]).stdout)
            .into_owned();
    assert!(text.contains("no value"), "{text}");

    let again = json(&server.url(), &["purge", "users", "1"]);
    assert_eq!(again["deleted"], 0, "{again}");
}

/// A table run in a schema of its own (`.schema(2)`, a rolling deploy) keeps its copies under its
/// schema's names: `purge` reads the table's live schemas and deletes the id's copy in each.
#[test]
fn purge_reaches_every_live_schema() {
    let server = server();
    let rt = runtime();
    let (_store, table) = rt.block_on(async {
        let store = Store::builder()
            .valkey(server.url())
            .build()
            .await
            .expect("a store");
        let table = store
            .table::<u64, User>("users")
            .schema(2)
            .loader(|id: u64| async move {
                Ok::<_, std::io::Error>(User {
                    id,
                    name: format!("user {id}"),
                })
            })
            .build()
            .await
            .expect("a table of schema 2");
        (store, table)
    });
    rt.block_on(table.put(&3, alice())).expect("put");
    let key = String::from_utf8(table.key_names(&3).expect("names").value).expect("UTF-8");
    assert!(key.starts_with("users:{3}#2."), "{key}");
    let mut conn = valkey(&server);
    assert!(conn.exists::<_, bool>(&key).expect("EXISTS"));

    let v = json(&server.url(), &["purge", "users", "3"]);
    assert_eq!(v["schema_keys"][0], key.as_str(), "{v}");
    assert_eq!(v["deleted"], 1, "{v}");
    assert!(!conn.exists::<_, bool>(&key).expect("EXISTS"), "purged");
}

/// With coherence on, a purge reaches the store's L1 through Valkey's push: the next read of the
/// id is not an L1 hit but a new load.
#[test]
fn purge_reaches_a_coherent_stores_l1() {
    let server = server();
    let rt = runtime();
    let (store, table) = rt.block_on(users(&server.url(), None));
    let first = rt.block_on(table.fetch(&5)).expect("a load");
    assert_eq!(first.origin, Origin::Loaded);
    assert_eq!(
        rt.block_on(table.fetch(&5)).expect("a hit").origin,
        Origin::L1
    );
    wait_for(
        || store.is_coherent(),
        "the store's tracking connection is up",
    );

    let v = json(&server.url(), &["purge", "users", "5"]);
    assert_eq!(v["value_deleted"], true, "{v}");
    // L1 held the id until the purge's push dropped it (the fill's own write came back as a
    // push too, but that one is checked against Valkey and keeps the entry).
    wait_for(
        || table.stats().l1_len == 0,
        "the purge's push dropped the id from L1",
    );
    let after = rt.block_on(table.fetch(&5)).expect("a reload");
    assert_eq!(after.origin, Origin::Loaded, "L1 dropped the id");
    assert_eq!(table.stats().source_reads, 2);
}

/// Polls `done` until it holds (at most 10 s, then fails saying what did not happen).
fn wait_for(done: impl Fn() -> bool, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `--namespace` finds the keys of a namespaced store, and only with it; purge takes it too.
#[test]
fn a_namespace_is_part_of_the_keys() {
    let server = server();
    let rt = runtime();
    let (_store, table) = rt.block_on(users(&server.url(), Some("app")));
    let user = rt.block_on(table.get(&7)).expect("a load");
    assert_eq!(user.name, "user 7");

    let v = json(
        &server.url(),
        &["inspect", "--namespace", "app", "users", "7"],
    );
    assert_eq!(v["namespace"], "app", "{v}");
    assert_eq!(v["value"]["key"], "app:users:{7}", "{v}");
    assert_eq!(v["lock"]["key"], "app:lock:users:{7}", "{v}");
    assert_eq!(v["value"]["decodable"], true, "{v}");
    let bare = json(&server.url(), &["inspect", "users", "7"]);
    assert_eq!(bare["value"]["exists"], false, "{bare}");

    let purged = json(
        &server.url(),
        &["purge", "users", "7", "--namespace", "app"],
    );
    assert_eq!(purged["value_key"], "app:users:{7}", "{purged}");
    assert_eq!(purged["value_deleted"], true, "{purged}");
}

/// Bytes that are no envelope — foreign, too short, another Valkey type — are reported as
/// undecodable, with exit code 0: that is information about the key, not a failure to read it.
#[test]
fn undecodable_bytes_are_reported_not_failed() {
    let server = server();
    let mut conn = valkey(&server);
    let _: () = conn
        .set("users:{1}", "hello, not an envelope")
        .expect("SET garbage");
    let _: () = conn.set("users:{2}", &[1u8, 2, 3][..]).expect("SET short");
    let _: () = conn.rpush("users:{3}", "a list").expect("RPUSH");
    let _: () = conn.rpush("lock:users:{3}", "a list").expect("RPUSH");

    let foreign = json(&server.url(), &["inspect", "users", "1"]);
    let value = &foreign["value"];
    assert_eq!(value["exists"], true, "{foreign}");
    assert_eq!(value["decodable"], false, "{foreign}");
    assert!(value["envelope"].is_null(), "{foreign}");
    let why = value["undecodable"].as_str().expect("a reason");
    assert!(why.contains("unknown envelope format 104"), "{why}");
    assert_eq!(
        value["first_bytes_hex"],
        "68 65 6c 6c 6f 2c 20 6e 6f 74 20 61 6e 20 65 6e 76 65 6c 6f 70 65"
    );
    assert_eq!(value["size_bytes"], 22, "{foreign}");

    let short = json(&server.url(), &["inspect", "users", "2"]);
    let why = short["value"]["undecodable"].as_str().expect("a reason");
    assert!(why.contains("3 bytes is shorter than the 17-byte"), "{why}");

    let list = json(&server.url(), &["inspect", "users", "3"]);
    let why = list["value"]["undecodable"].as_str().expect("a reason");
    assert!(why.contains("holds a list"), "{why}");
    assert_eq!(list["value"]["valkey_type"], "list", "{list}");
    assert_eq!(
        list["lock"]["held"], true,
        "a list there blocks SET NX: {list}"
    );
    assert!(list["lock"]["token"].is_null(), "{list}");
    assert_eq!(list["lock"]["persistent"], true, "{list}");

    let out = echostore(&server.url(), &["inspect", "users", "1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("UNDECODABLE"), "{text}");
}

/// A table or namespace name the library would refuse is a usage error, before any connection.
#[test]
fn invalid_names_are_errors() {
    for args in [
        &["inspect", "bad name", "1"][..],
        &["purge", "users:x", "1"],
        &["inspect", "--namespace", "a{b", "users", "1"],
    ] {
        let out = echostore("redis://127.0.0.1:1/", args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr.contains("[A-Za-z0-9_.-]"), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// An unreachable Valkey is a one-line error naming it, exit code 1, for both commands.
#[test]
fn unreachable_valkey_is_a_clear_error() {
    for command in ["inspect", "purge"] {
        let out = echostore("redis://127.0.0.1:1/", &[command, "users", "1"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.starts_with("error: cannot reach Valkey at redis://127.0.0.1:1/"),
            "{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}
