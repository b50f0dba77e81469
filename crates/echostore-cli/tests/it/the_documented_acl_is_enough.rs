//! `docs/operations.md` gives an ACL for an application's Valkey user: its namespace's keys and
//! the commands EchoStore sends, nothing else. This runs a store through that user — a load, the
//! lock, the fenced write and release, a put, an invalidate, and coherence's tracking — and checks
//! that no call was refused; then that the user cannot touch a key outside its namespace.

use std::time::Duration;

use echostore::{Origin, Store};
use embedded_valkey::EmbeddedValkey;

/// The ACL of `docs/operations.md`, "Auth and TLS", for namespace `app`.
const ACL: &[&str] = &[
    "ACL",
    "SETUSER",
    "app",
    "on",
    ">secret",
    "resetkeys",
    "~app:*",
    "resetchannels",
    "-@all",
    "+ping",
    "+hello",
    "+client|setname",
    "+client|setinfo",
    "+client|tracking",
    "+info",
    "+getrange",
    "+get",
    "+set",
    "+del",
    "+delifeq",
    "+exists",
    "+pexpire",
    "+time",
    "+evalsha",
    "+eval",
];

/// A store under the documented ACL works end to end, and the user is held to its namespace.
#[test]
fn a_store_runs_under_the_documented_acl() {
    let server = EmbeddedValkey::start().expect("an embedded Valkey starts");
    let mut admin = redis::Client::open(server.url())
        .and_then(|c| c.get_connection())
        .expect("an admin connection");
    let mut acl = redis::cmd(ACL[0]);
    acl.arg(&ACL[1..]);
    let _: () = acl.query(&mut admin).expect("ACL SETUSER");
    let url = server.url().replacen("redis://", "redis://app:secret@", 1);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let store = Store::builder()
            .valkey(url.as_str())
            .namespace("app")
            .require_valkey(true)
            .build()
            .await
            .expect("a store as the app user");
        let users = store
            .table::<u64, String>("users")
            .ttl(Duration::from_secs(60))
            .loader(|id: u64| async move { Ok::<_, std::io::Error>(format!("user {id}")) })
            .build()
            .await
            .expect("a table");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !store.is_coherent() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "tracking never came up under the ACL"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(
            users.fetch(&1).await.expect("a load").origin,
            Origin::Loaded
        );
        users
            .put(&2, "bob".to_owned())
            .await
            .expect("a put under the ACL");
        users
            .invalidate(&1)
            .await
            .expect("an invalidate under the ACL");
        let stats = users.stats();
        assert_eq!(
            (
                stats.lock_won,
                stats.released,
                stats.l2_errors,
                stats.errors
            ),
            (1, 1, 0, 0),
            "{stats:?}"
        );
        assert!(
            store.is_coherent(),
            "tracking stayed up (no refused command)"
        );
    });

    let mut app = redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection())
        .expect("a connection as the app user");
    let outside: redis::RedisResult<()> =
        redis::cmd("SET").arg("users:{1}").arg("x").query(&mut app);
    assert!(outside.is_err(), "a key outside the namespace is refused");
    let inside: Option<Vec<u8>> = redis::cmd("GETRANGE")
        .arg("app:users:{2}")
        .arg(0)
        .arg(-1)
        .query(&mut app)
        .ok();
    assert!(
        inside.is_some_and(|v| !v.is_empty()),
        "the put's value is there"
    );
}
