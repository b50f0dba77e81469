//! What a tracking connection subscribes: by prefix, each table's value and lock prefixes
//! (`CLIENT TRACKING ON BCAST PREFIX …`), or by key, tracking on and each table's marks key read
//! so that Valkey pushes its changes.

use std::collections::HashSet;

use redis::PushInfo;

use crate::coherence::Tracker;
use crate::wire::key::{KeyKind, marks_key_under, parse_key};

/// How a connection tracks: the store's namespace, and whether by keys or by prefixes.
#[derive(Clone, Copy)]
pub(super) struct Mode<'a> {
    pub(super) namespace: &'a str,
    pub(super) by_keys: bool,
}

/// Makes the connection track exactly the `wanted` tables.
///
/// By prefixes, `CLIENT TRACKING ON BCAST` adds the new tables' value and lock prefixes. BCAST
/// prefixes cannot be removed one by one, so when a table is gone tracking is turned off and on
/// again with the rest, in one `MULTI`: no other client's write runs in between, so no push for a
/// table still wanted is missed.
///
/// By keys, tracking is on from the first call, and each new table's marks key (a sorted set)
/// is read with `EXISTS` so that Valkey pushes its changes (a gone table's key stays tracked until it changes, harmlessly). On
/// a cluster only the primary that holds the key answers that read; the others refuse it.
pub(super) async fn subscribe(
    conn: &mut redis::aio::MultiplexedConnection,
    mode: Mode<'_>,
    wanted: &[String],
    subscribed: &mut HashSet<String>,
) -> redis::RedisResult<()> {
    if mode.by_keys {
        if subscribed.is_empty() {
            let mut on = redis::cmd("CLIENT");
            on.arg("TRACKING").arg("ON");
            on.query_async::<()>(conn).await?;
        }
        for table in wanted.iter().filter(|t| !subscribed.contains(*t)) {
            let key = marks_key_under(mode.namespace, table);
            let _: redis::RedisResult<redis::Value> =
                redis::cmd("EXISTS").arg(key).query_async(conn).await;
        }
        *subscribed = wanted.iter().cloned().collect();
        return Ok(());
    }
    let namespace = mode.namespace;
    if subscribed.iter().any(|t| !wanted.contains(t)) {
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("CLIENT")
            .arg("TRACKING")
            .arg("OFF")
            .ignore();
        if !wanted.is_empty() {
            pipe.add_command(tracking_on(namespace, wanted)).ignore();
        }
        pipe.query_async::<()>(conn).await?;
        *subscribed = wanted.iter().cloned().collect();
        return Ok(());
    }
    let new: Vec<&String> = wanted.iter().filter(|t| !subscribed.contains(*t)).collect();
    if new.is_empty() {
        return Ok(());
    }
    tracking_on(namespace, new.iter().copied())
        .query_async::<()>(conn)
        .await?;
    subscribed.extend(new.into_iter().cloned());
    Ok(())
}

/// `CLIENT TRACKING ON BCAST` with the value and lock prefixes of `tables`.
fn tracking_on<'a>(namespace: &str, tables: impl IntoIterator<Item = &'a String>) -> redis::Cmd {
    let mut cmd = redis::cmd("CLIENT");
    cmd.arg("TRACKING").arg("ON").arg("BCAST");
    for table in tables {
        cmd.arg("PREFIX")
            .arg(format!("{namespace}{table}:"))
            .arg("PREFIX")
            .arg(format!("{namespace}lock:{table}:"));
    }
    cmd
}

/// Under key tracking, a pushed marks key is no longer tracked: read it again before the table
/// hears of the change, so that the table's own read of its marks comes after Valkey tracks the
/// key once more, and no later mark goes unpushed.
pub(super) async fn reread_marks(
    conn: &mut redis::aio::MultiplexedConnection,
    tracker: &Tracker,
    push: &PushInfo,
) {
    let Some(redis::Value::Array(keys)) = push.data.first() else {
        return;
    };
    for key in keys {
        if let redis::Value::BulkString(key) = key
            && matches!(
                parse_key(tracker.namespace(), key),
                Some((KeyKind::Marks, ..))
            )
        {
            let _: redis::RedisResult<redis::Value> =
                redis::cmd("EXISTS").arg(key).query_async(conn).await;
        }
    }
}
