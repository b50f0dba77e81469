//! A cluster's tracking: one [`node`](super::node) task per primary, restarted (with a cap)
//! when the set of primaries changes, which a watcher re-reads from `CLUSTER SLOTS` every
//! [`TOPOLOGY_EVERY`](super::TOPOLOGY_EVERY). Under key tracking a slot that moves restarts them
//! too: the keys its old primary tracked for the store are not tracked by the new one.

use std::sync::Weak;

use super::{TOPOLOGY_EVERY, node};
use crate::coherence::Tracker;
use crate::wire::connect::Endpoint;

/// Tracks a cluster: one [`node`] task per primary, restarted when the primaries change.
pub(super) async fn track(tracker: Weak<Tracker>, endpoint: Endpoint, seeds: Vec<String>) {
    let by_keys = tracker.upgrade().is_some_and(|t| t.keys().is_some());
    let mut running: Vec<(Primary, tokio::task::JoinHandle<()>)> = Vec::new();
    loop {
        let primaries = primaries(&endpoint, &seeds).await;
        let same = |now: &[Primary]| {
            now.len() == running.len()
                && now
                    .iter()
                    .zip(&running)
                    .all(|(a, (b, _))| a.url == b.url && (!by_keys || a.slots == b.slots))
        };
        if let Some(primaries) = primaries
            && !same(&primaries)
        {
            let Some(this) = tracker.upgrade() else {
                return;
            };
            // An aborted task says nothing: its node is gone from the registry of key
            // tracking's reads here, or reads of a moved slot would keep going to it.
            for (primary, task) in running.drain(..) {
                task.abort();
                this.node_lost(&primary.url);
            }
            this.cap_all("the cluster's primaries changed", std::time::Instant::now());
            // The old connections bound the vouch until the owners have capped L1
            // (`Tracker::unvouch`); gone from the topology, they are let go after a PING's time
            // at the most, since none of them will vouch again.
            let _ = tokio::time::timeout(super::limit(&endpoint), this.caught_up()).await;
            this.expect_nodes(primaries.len());
            drop(this);
            for primary in primaries {
                let (url, slots) = (primary.url.clone(), primary.slots.clone());
                let task = tokio::spawn(node(tracker.clone(), endpoint.clone(), url, slots));
                running.push((primary, task));
            }
        }
        tokio::time::sleep(TOPOLOGY_EVERY).await;
        if tracker.strong_count() == 0 {
            for (_, task) in running {
                task.abort();
            }
            return;
        }
    }
}

/// A cluster primary: its URL and the slot ranges it serves (sorted).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Primary {
    url: String,
    slots: Vec<(u16, u16)>,
}

/// The cluster's primaries (sorted by URL), from the first seed that answers `CLUSTER SLOTS`.
async fn primaries(endpoint: &Endpoint, seeds: &[String]) -> Option<Vec<Primary>> {
    for seed in seeds {
        let Ok(client) = endpoint.client(seed) else {
            continue;
        };
        let Ok(Ok(mut conn)) =
            tokio::time::timeout(endpoint.timeout, client.get_multiplexed_async_connection()).await
        else {
            continue;
        };
        let slots: redis::RedisResult<Vec<redis::Value>> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut conn)
            .await;
        let Ok(slots) = slots else { continue };
        let mut primaries: Vec<Primary> = Vec::new();
        for range in &slots {
            let redis::Value::Array(fields) = range else {
                continue;
            };
            let (Some(from), Some(to), Some((host, port))) = (
                fields.first().and_then(slot_number),
                fields.get(1).and_then(slot_number),
                fields.get(2).and_then(node_address),
            ) else {
                continue;
            };
            let url = with_host(seed, &host, port);
            match primaries.iter_mut().find(|p| p.url == url) {
                Some(primary) => primary.slots.push((from, to)),
                None => primaries.push(Primary {
                    url,
                    slots: vec![(from, to)],
                }),
            }
        }
        for primary in &mut primaries {
            primary.slots.sort_unstable();
        }
        primaries.sort_by(|a, b| a.url.cmp(&b.url));
        return Some(primaries);
    }
    None
}

/// A slot number in a `CLUSTER SLOTS` range.
fn slot_number(value: &redis::Value) -> Option<u16> {
    match value {
        redis::Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    }
}

/// `host` and `port` of a `CLUSTER SLOTS` node entry.
fn node_address(node: &redis::Value) -> Option<(String, u16)> {
    let redis::Value::Array(parts) = node else {
        return None;
    };
    let host = match parts.first()? {
        redis::Value::BulkString(b) => String::from_utf8(b.clone()).ok()?,
        redis::Value::SimpleString(s) => s.clone(),
        _ => return None,
    };
    let port = match parts.get(1)? {
        redis::Value::Int(p) => u16::try_from(*p).ok()?,
        _ => return None,
    };
    Some((host, port))
}

/// `seed` with its host and port replaced: same scheme, same credentials.
pub(super) fn with_host(seed: &str, host: &str, port: u16) -> String {
    let (scheme, rest) = seed.split_once("://").unwrap_or(("redis", seed));
    let authority = rest.split('/').next().unwrap_or(rest);
    let login = authority
        .rsplit_once('@')
        .map(|(login, _)| format!("{login}@"));
    format!("{scheme}://{}{host}:{port}", login.unwrap_or_default())
}
