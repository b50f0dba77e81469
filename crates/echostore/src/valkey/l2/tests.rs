use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use embedded_valkey::EmbeddedValkey;

use super::L2;
use crate::error::Error;
use crate::wire::connect::{Endpoint, Kind};

async fn ping(l2: &L2) -> crate::error::Result<String> {
    l2.run("PING", None, |mut c| async move {
        redis::cmd("PING").query_async::<String>(&mut c).await
    })
    .await
}

/// Polls `cond` until it holds (panics, naming `what`, after a minute).
async fn until(what: &str, cond: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A dead endpoint on `port`: accepts each connection and hangs up at once, counting them, until
/// the returned flag is set (and one last connection wakes it).
fn dead_endpoint(
    port: u16,
) -> (
    Arc<AtomicUsize>,
    Arc<AtomicBool>,
    std::thread::JoinHandle<()>,
) {
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("the stopped server's port");
    let (accepted, done) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let thread = std::thread::spawn({
        let (accepted, done) = (Arc::clone(&accepted), Arc::clone(&done));
        move || {
            for conn in listener.incoming() {
                if done.load(SeqCst) {
                    return;
                }
                accepted.fetch_add(1, SeqCst);
                drop(conn);
            }
        }
    });
    (accepted, done, thread)
}

/// The breaker's first trial after Valkey came back succeeds. redis-rs's connection manager
/// answers the call after a failed reconnect with that reconnect's outcome, tried while Valkey
/// was away; a trial made on that connection failed for a Valkey already back and kept the
/// breaker open one cooldown more (up to `breaker_cooldown`, a second by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_trial_after_valkey_returns_closes_the_breaker() {
    let mut valkey = EmbeddedValkey::start().expect("valkey");
    let endpoint = Endpoint {
        kind: Kind::Single(valkey.url()),
        ca: None,
        timeout: Duration::from_secs(5),
    };
    let l2 = L2::connect(&endpoint, Duration::from_secs(3600), true, false)
        .await
        .expect("connected");
    valkey.stop();
    let (accepted, done, thread) = dead_endpoint(valkey.port());

    let lost = ping(&l2).await;
    assert!(
        matches!(lost, Err(Error::Valkey { .. })),
        "the dead endpoint answered {lost:?}"
    );
    assert!(
        l2.is_degraded(),
        "a lost connection left the breaker closed"
    );
    // The client's reconnect after that loss: one attempt (no retry), hung up on, so its outcome
    // is settled (a failure) before Valkey comes back.
    until("the client tried to reconnect", || {
        accepted.load(SeqCst) >= 1
    })
    .await;
    done.store(true, SeqCst);
    let _ = std::net::TcpStream::connect(("127.0.0.1", valkey.port()));
    thread.join().expect("the dead endpoint's thread");
    valkey.restart().expect("valkey is back on its port");

    let trial = loop {
        match ping(&l2).await {
            Err(Error::ValkeyUnavailable) => tokio::task::yield_now().await,
            trial => break trial,
        }
    };
    assert_eq!(
        trial.expect("the first trial after Valkey came back"),
        "PONG"
    );
    assert!(!l2.is_degraded());
}
