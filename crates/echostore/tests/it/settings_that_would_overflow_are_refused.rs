//! `start()` refuses every setting that later arithmetic could overflow — a duration over
//! `MAX_DURATION` (a year), a count out of its range — with `Error::InvalidConfig` naming the
//! setting; and the largest accepted settings work end to end on Valkey, leaving no lock behind.

use crate::common;

use std::time::Duration;

use common::{Source, exists, raw, settled, store_on, valkey};
use echostore::{Error, LoserPolicy, MAX_DURATION, Origin, TableBuilder};
use redis::AsyncCommands;

type Tune = fn(TableBuilder<u64, String>) -> TableBuilder<u64, String>;

/// Each over-the-limit setting, and the name its error must give.
const REFUSED: [(&str, Tune); 9] = [
    ("stale_for", |t| t.stale_for(Duration::MAX)),
    ("ttl", |t| t.ttl(Duration::MAX)),
    ("lock_ttl", |t| t.lock_ttl(Duration::MAX)),
    ("load_timeout", |t| t.load_timeout(Duration::MAX)),
    ("soft_timeout", |t| {
        t.soft_timeout(MAX_DURATION + Duration::from_secs(1))
    }),
    ("Poll.up_to", |t| {
        t.losers(LoserPolicy::Poll {
            every: Duration::from_millis(10),
            up_to: Duration::MAX,
        })
    }),
    ("Poll.every", |t| {
        t.losers(LoserPolicy::Poll {
            every: Duration::MAX,
            up_to: Duration::from_secs(1),
        })
    }),
    ("l1_capacity", |t| t.l1_capacity(usize::MAX)),
    ("max_value_bytes", |t| t.max_value_bytes(usize::MAX)),
];

/// Every setting that would overflow is refused at `start()`, naming itself (issue #9:
/// `stale_for(Duration::MAX)` and `Poll { up_to: Duration::MAX }` were accepted, then panicked
/// mid-fill and left a lock held); the largest accepted settings work end to end on Valkey.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_over_their_limits_are_refused_and_the_limits_work() {
    let valkey = valkey();
    let store = store_on(&valkey.url()).await;
    let source = Source::open();
    for (setting, tune) in REFUSED {
        let builder = store.table::<u64, String>("big").loader(source.loader());
        let err = tune(builder).build().await.expect_err(setting);
        assert!(
            matches!(&err, Error::InvalidConfig(m) if m.contains(setting)),
            "{setting}: {err}"
        );
    }
    assert_eq!(source.calls(), 0);

    // The largest accepted settings — MAX_DURATION for the ttl, stale_for, load_timeout and the
    // poll's up_to — fill, put and invalidate without a panic: the value's physical life is
    // ttl + stale_for (two years) and the lock is released.
    let mut conn = raw(&valkey.url()).await;
    let t = store
        .table::<u64, String>("big")
        .ttl(MAX_DURATION)
        .stale_for(MAX_DURATION)
        .jitter(0.5)
        .load_timeout(MAX_DURATION)
        .losers(LoserPolicy::Poll {
            every: Duration::from_millis(10),
            up_to: MAX_DURATION,
        })
        .loader(source.loader())
        .build()
        .await
        .expect("the limits themselves are accepted");

    let f = t.fetch(&1).await.expect("a fill");
    assert_eq!((f.origin, f.value.as_str()), (Origin::Loaded, "value-1-1"));
    assert!(
        !exists(&mut conn, "lock:big:{1}").await,
        "the lock was released"
    );
    let pttl: i64 = conn.pttl("big:{1}").await.expect("PTTL");
    let (least, most) = (MAX_DURATION.mul_f64(1.5), MAX_DURATION.mul_f64(2.5));
    assert!(
        (least.as_millis() as i64 - 60_000..=most.as_millis() as i64).contains(&pttl),
        "physical life is the jittered ttl plus stale_for: {pttl} ms"
    );
    assert_eq!(t.fetch(&1).await.expect("L1").origin, Origin::L1);
    t.put(&2, "written".into()).await.expect("put");
    t.invalidate(&1).await.expect("invalidate");
    assert!(!exists(&mut conn, "big:{1}").await);
    let s = t.stats();
    assert_eq!((s.source_reads, s.released, s.errors), (1, 1, 0));
    settled(&t).await;
}
