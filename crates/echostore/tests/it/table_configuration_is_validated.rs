//! `start()` refuses names and settings that cannot work, with a clear error.

use std::time::Duration;

use echostore::{Error, LoserPolicy, Store};

async fn ok(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

/// Names outside `[A-Za-z0-9_.-]{1,64}` are `InvalidName`, naming the culprit.
#[tokio::test]
async fn invalid_table_names_are_refused() {
    let store = Store::builder().build().await.expect("store");
    let long = "n".repeat(65);
    for bad in [
        "",
        "with space",
        "brace{",
        "colon:x",
        "lock:x",
        long.as_str(),
        "ü",
    ] {
        let err = store
            .table::<u64, u64>(bad)
            .loader(ok)
            .build()
            .await
            .expect_err("refused");
        assert!(
            matches!(&err, Error::InvalidName(n) if n == bad),
            "{bad:?}: {err}"
        );
        assert!(err.to_string().contains("[A-Za-z0-9_.-]"));
    }
    for good in ["users", "a.b-c_d", "0"] {
        store
            .table::<u64, u64>(good)
            .loader(ok)
            .build()
            .await
            .expect(good);
    }
}

/// A table without a loader, with jitter outside 0.0..=0.5, or with a zero ttl, capacity, poll
/// interval or timeout, or a soft timeout not under the load timeout, does not start; the error
/// names the setting.
#[tokio::test]
async fn missing_loader_and_bad_settings_are_refused() {
    let store = Store::builder().build().await.expect("store");
    let err = store
        .table::<u64, u64>("t")
        .build()
        .await
        .expect_err("no loader");
    assert!(
        matches!(&err, Error::InvalidConfig(m) if m.contains("no loader")),
        "{err}"
    );

    for jitter in [-0.1, 0.51, f64::NAN] {
        let err = store
            .table::<u64, u64>("t")
            .jitter(jitter)
            .loader(ok)
            .build()
            .await
            .expect_err("bad jitter");
        assert!(
            matches!(&err, Error::InvalidConfig(m) if m.contains("jitter")),
            "{err}"
        );
    }
    let zero_poll = LoserPolicy::Poll {
        every: Duration::ZERO,
        up_to: Duration::from_secs(1),
    };
    let second = Duration::from_secs(1);
    for (builder, setting) in [
        (store.table::<u64, u64>("t").ttl(Duration::ZERO), "ttl"),
        (store.table::<u64, u64>("t").l1_capacity(0), "l1_capacity"),
        (store.table::<u64, u64>("t").losers(zero_poll), "every"),
        (
            store.table::<u64, u64>("t").load_timeout(Duration::ZERO),
            "load_timeout",
        ),
        (
            store.table::<u64, u64>("t").soft_timeout(Duration::ZERO),
            "soft_timeout",
        ),
        (
            store
                .table::<u64, u64>("t")
                .load_timeout(second)
                .soft_timeout(second),
            "soft_timeout",
        ),
    ] {
        let err = builder.loader(ok).build().await.expect_err(setting);
        assert!(
            matches!(&err, Error::InvalidConfig(m) if m.contains(setting)),
            "{setting}: {err}"
        );
    }
}
