//! A cluster's tracking: one [`node`](super::node) task per primary, restarted (with a flush)
//! when the set of primaries changes, which a watcher re-reads from `CLUSTER SLOTS` every
//! [`TOPOLOGY_EVERY`](super::TOPOLOGY_EVERY).

use std::sync::Weak;

use super::{TOPOLOGY_EVERY, node};
use crate::coherence::Tracker;
use crate::connect::Endpoint;

/// Tracks a cluster: one [`node`] task per primary, restarted when the primaries change.
pub(super) async fn track(tracker: Weak<Tracker>, endpoint: Endpoint, seeds: Vec<String>) {
    let mut running: Vec<(String, tokio::task::JoinHandle<()>)> = Vec::new();
    loop {
        let primaries = primaries(&endpoint, &seeds).await;
        let current: Vec<&String> = running.iter().map(|(url, _)| url).collect();
        if let Some(primaries) = primaries
            && primaries.iter().collect::<Vec<_>>() != current
        {
            let Some(this) = tracker.upgrade() else {
                return;
            };
            for (_, task) in running.drain(..) {
                task.abort();
            }
            this.expect_nodes(primaries.len());
            this.flush_all("the cluster's primaries changed");
            drop(this);
            for url in primaries {
                let task = tokio::spawn(node(tracker.clone(), endpoint.clone(), url.clone()));
                running.push((url, task));
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

/// The URLs of the cluster's primaries (sorted), from the first seed that answers `CLUSTER SLOTS`.
async fn primaries(endpoint: &Endpoint, seeds: &[String]) -> Option<Vec<String>> {
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
        let mut urls: Vec<String> = slots
            .iter()
            .filter_map(|range| match range {
                redis::Value::Array(fields) => fields.get(2).and_then(node_address),
                _ => None,
            })
            .map(|(host, port)| with_host(seed, &host, port))
            .collect();
        urls.sort();
        urls.dedup();
        return Some(urls);
    }
    None
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
