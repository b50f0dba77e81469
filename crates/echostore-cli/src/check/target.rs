//! What `echostore check` runs against, from the controller's side: an operator's Valkey
//! (`--valkey URL`), a private embedded Valkey, or a private local cluster (`--cluster`: three
//! primaries with a replica each). It says what URL the workers get, which nodes a fault reaches,
//! and holds the embedded servers until the run ends (dropping them stops them).

use std::time::Duration;

use embedded_valkey::{EmbeddedCluster, EmbeddedValkey};

use super::worker::CLUSTER_PREFIX;
use crate::CliResult;

/// The cluster's primaries, and so its shards.
pub(crate) const PRIMARIES: usize = 3;

/// The cluster's node timeout: a killed primary is noticed, and its replica voted in, within a
/// couple of seconds.
const NODE_TIMEOUT: Duration = Duration::from_secs(1);

/// The Valkey a check runs against.
pub(crate) enum Target {
    /// `--valkey URL`: only what a client may do to a server it does not own.
    Given(String),
    /// A private embedded Valkey, which the `restart` and `outage` faults may stop.
    Embedded(EmbeddedValkey),
    /// A private local cluster, for the cluster faults.
    Cluster(EmbeddedCluster),
}

impl Target {
    /// The server at `url`, or a private one started for the run: a cluster with `cluster`.
    pub(crate) async fn start(url: Option<&str>, cluster: bool) -> CliResult<Target> {
        match (url, cluster) {
            (Some(_), true) => {
                Err("check --cluster starts a local cluster of its own: drop --valkey".into())
            }
            (Some(url), false) => Ok(Target::Given(url.to_owned())),
            (None, false) => {
                let server = tokio::task::spawn_blocking(EmbeddedValkey::start)
                    .await
                    .map_err(|e| format!("starting an embedded Valkey: {e}"))?
                    .map_err(|e| format!("cannot start an embedded Valkey: {e}"))?;
                Ok(Target::Embedded(server))
            }
            (None, true) => {
                // Without full coverage, the shards a fault leaves alone go on serving.
                let builder = EmbeddedCluster::builder()
                    .primaries(PRIMARIES)
                    .replicas(1)
                    .node_timeout(NODE_TIMEOUT)
                    .full_coverage(false);
                let cluster = tokio::task::spawn_blocking(move || builder.start())
                    .await
                    .map_err(|e| format!("starting a local cluster: {e}"))?
                    .map_err(|e| format!("cannot start a local cluster: {e}"))?;
                Ok(Target::Cluster(cluster))
            }
        }
    }

    /// The URL the workers are given: the server's, or `cluster:<seed>,…` with every node.
    pub(crate) fn url(&self) -> String {
        match self {
            Target::Given(url) => url.clone(),
            Target::Embedded(server) => server.url(),
            Target::Cluster(cluster) => format!("{CLUSTER_PREFIX}{}", cluster.urls().join(",")),
        }
    }

    /// Every node's URL: the one server, or each node of the cluster, primaries and replicas.
    pub(crate) fn nodes(&self) -> Vec<String> {
        match self {
            Target::Given(url) => vec![url.clone()],
            Target::Embedded(server) => vec![server.url()],
            Target::Cluster(cluster) => cluster.urls(),
        }
    }

    /// Whether the check may stop and start the server (an embedded one).
    pub(crate) fn is_embedded(&self) -> bool {
        matches!(self, Target::Embedded(_))
    }
}
