//! A tracking connection, as a store's would be: RESP3, tracking in one mode, holding its keys;
//! what it receives (each invalidated key with the moment its push arrived), and the refills of
//! the held keys an invalidation drops.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use redis::aio::MultiplexedConnection;
use redis::{ProtocolVersion, PushInfo, PushKind, Value};
use tokio::sync::{mpsc, watch};

use crate::writes::now_ns;
use crate::{Mode, patient};

/// The table prefix the keys live under, as a table named `t` would.
pub(crate) const PREFIX: &str = "t:";

pub(crate) fn key(id: u32) -> String {
    format!("{PREFIX}{id}")
}

/// What a tracking connection saw: each invalidated key with the moment its push arrived.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    /// Key id and arrival, ns since the epoch (the wall clock, which every process here shares).
    pub(crate) arrivals: Vec<(u32, u64)>,
    pub(crate) pushes: u64,
    pub(crate) push_bytes: u64,
    pub(crate) refills: u64,
}

/// A connection and the pushes it receives, each stamped with its arrival.
pub(crate) type Tracking = (
    MultiplexedConnection,
    mpsc::UnboundedReceiver<(u64, PushInfo)>,
);

/// A RESP3 connection tracking in `mode`, having read its held keys. Each push is stamped with
/// its arrival as redis-rs parses it, before any task switch.
pub(crate) async fn connect(
    client: &redis::Client,
    mode: Mode,
    held: &HashSet<u32>,
    arrived: Arc<AtomicU64>,
) -> redis::RedisResult<Tracking> {
    let info = client.get_connection_info().clone();
    let resp3 = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let client = redis::Client::open(info.set_redis_settings(resp3))?;
    let (tx, rx) = mpsc::unbounded_channel();
    let config = patient().set_push_sender(move |push: PushInfo| {
        arrived.fetch_add(1, Ordering::Relaxed);
        tx.send((now_ns(), push))
    });
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let mut tracking = redis::cmd("CLIENT");
    tracking.arg("TRACKING").arg("ON");
    if mode == Mode::Bcast {
        tracking
            .arg("BCAST")
            .arg("PREFIX")
            .arg(PREFIX)
            .arg("PREFIX")
            .arg(format!("lock:{PREFIX}"));
    }
    tracking.query_async::<()>(&mut conn).await?;
    let ids: Vec<u32> = held.iter().copied().collect();
    for chunk in ids.chunks(500) {
        let mut mget = redis::cmd("MGET");
        for &id in chunk {
            mget.arg(key(id));
        }
        mget.query_async::<Value>(&mut conn).await?;
    }
    Ok((conn, rx))
}

/// A tracking connection's life in a cell: record each invalidated key's arrival, and refill
/// the held ones, until told to stop.
pub(crate) async fn receive(
    (mut conn, mut pushes): Tracking,
    held: HashSet<u32>,
    mut stop: watch::Receiver<bool>,
) -> Seen {
    let mut seen = Seen::default();
    loop {
        let (at, push) = tokio::select! {
            push = pushes.recv() => match push {
                Some(push) => push,
                None => break,
            },
            _ = stop.changed() => break,
        };
        if push.kind != PushKind::Invalidate {
            continue;
        }
        let Some(Value::Array(keys)) = push.data.first() else {
            continue;
        };
        seen.pushes += 1;
        seen.push_bytes += push_bytes(keys);
        let mut refill = redis::cmd("MGET");
        let mut refills = 0;
        for k in keys {
            let Some(id) = id_of(k) else { continue };
            seen.arrivals.push((id, at));
            if held.contains(&id) {
                refill.arg(key(id));
                refills += 1;
            }
        }
        if refills > 0 {
            seen.refills += refills;
            let _ = refill.query_async::<Value>(&mut conn).await;
        }
    }
    seen
}

/// The id of a pushed key `t:<id>` (`None` for a lock key or anything else).
fn id_of(k: &Value) -> Option<u32> {
    match k {
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()?
            .strip_prefix(PREFIX)?
            .parse()
            .ok(),
        _ => None,
    }
}

/// The bytes of an invalidation push on the wire: `>2`, `invalidate`, then the array of keys.
fn push_bytes(keys: &[Value]) -> u64 {
    let bulk = |len: usize| (1 + len.to_string().len() + 2 + len + 2) as u64;
    let mut bytes = 4 + bulk("invalidate".len()) + 1 + keys.len().to_string().len() as u64 + 2;
    for k in keys {
        if let Value::BulkString(b) = k {
            bytes += bulk(b.len());
        }
    }
    bytes
}
