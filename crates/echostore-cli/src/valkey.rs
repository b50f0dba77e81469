//! Where the readouts find their Valkey: the `--valkey URL` the user gave, checked with a PING, or
//! a private embedded Valkey started for the run and stopped when the [`Target`] is dropped; and
//! the wait until a table's pushes arrive from it ([`until_pushed`]). Also the `valkey`
//! subcommand, which keeps an embedded Valkey running until Ctrl-C.

use std::time::Duration;

use embedded_valkey::EmbeddedValkey;
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;

use crate::CliResult;

/// How long connecting to, and each answer from, Valkey may take before the readout gives up.
const TIMEOUT: Duration = Duration::from_secs(2);

/// The Valkey a readout runs against.
pub(crate) struct Target {
    url: String,
    /// Kept alive for the readout; dropping it stops the server.
    embedded: Option<EmbeddedValkey>,
    /// A local cluster (`race --cluster`), kept alive for the readout; `url` is then
    /// `cluster:<seed>,…`.
    cluster: Option<embedded_valkey::EmbeddedCluster>,
}

impl Target {
    /// Checks `url` with a PING, or starts an embedded Valkey when there is none.
    pub(crate) async fn open(url: Option<&str>) -> CliResult<Target> {
        let target = match url {
            Some(url) => Target {
                url: url.to_owned(),
                embedded: None,
                cluster: None,
            },
            None => {
                let server = tokio::task::spawn_blocking(EmbeddedValkey::start)
                    .await
                    .map_err(|e| format!("starting an embedded Valkey: {e}"))?
                    .map_err(|e| format!("cannot start an embedded Valkey: {e}"))?;
                Target {
                    url: server.url(),
                    embedded: Some(server),
                    cluster: None,
                }
            }
        };
        let mut conn = target.connect().await?;
        let _: String = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .map_err(|e| format!("Valkey at {} does not answer PING: {e}", target.shown_url()))?;
        Ok(target)
    }

    /// A private three-primary Valkey Cluster on loopback, for `race --cluster`.
    pub(crate) async fn cluster() -> CliResult<Target> {
        let cluster = tokio::task::spawn_blocking(|| embedded_valkey::EmbeddedCluster::start(3))
            .await
            .map_err(|e| format!("starting a local cluster: {e}"))?
            .map_err(|e| format!("cannot start a local cluster: {e}"))?;
        Ok(Target {
            url: format!("cluster:{}", cluster.urls().join(",")),
            embedded: None,
            cluster: Some(cluster),
        })
    }

    /// The URL the target was opened with (`cluster:<seed>,…` for a cluster).
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// A store builder on this target: `valkey(url)`, or `valkey_cluster(seeds)`.
    pub(crate) fn store_builder(&self) -> echostore::StoreBuilder {
        match self.url.strip_prefix("cluster:") {
            Some(seeds) => echostore::Store::builder().valkey_cluster(seeds.split(',')),
            None => echostore::Store::builder().valkey(self.url.as_str()),
        }
    }

    /// The URL with any password hidden, and whether the server is embedded.
    pub(crate) fn describe(&self) -> String {
        if let Some(cluster) = &self.cluster {
            return format!(
                "a local Valkey Cluster of {} primaries",
                cluster.primaries()
            );
        }
        match &self.embedded {
            Some(_) => format!("embedded Valkey at {}", self.shown_url()),
            None => format!("Valkey at {}", self.shown_url()),
        }
    }

    /// The URL with the password (if any) replaced by `***`.
    pub(crate) fn shown_url(&self) -> String {
        redact(&self.url)
    }

    /// A new multiplexed connection, with connect and response timeouts.
    pub(crate) async fn connect(&self) -> CliResult<MultiplexedConnection> {
        let client = redis::Client::open(self.url.as_str())
            .map_err(|e| format!("invalid Valkey URL {}: {e}", self.shown_url()))?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(TIMEOUT))
            .set_response_timeout(Some(TIMEOUT));
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| format!("cannot reach Valkey at {}: {e}", self.shown_url()))?;
        Ok(conn)
    }
}

/// Hides the password of `redis://user:password@host`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.split_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => format!("{scheme}://***@{host}"),
        },
        None => url.to_owned(),
    }
}

/// `echostore valkey`: start an embedded Valkey (on `port`, if given), print its URL, wait for
/// Ctrl-C and stop it; if the server exits by itself first, say so and fail, so that whatever
/// supervises this command sees the Valkey gone.
pub(crate) async fn serve(port: Option<u16>) -> CliResult<()> {
    let builder = match port {
        Some(port) => EmbeddedValkey::builder().port(port),
        None => EmbeddedValkey::builder(),
    };
    let mut server = tokio::task::spawn_blocking(move || builder.start())
        .await
        .map_err(|e| format!("starting an embedded Valkey: {e}"))?
        .map_err(|e| format!("cannot start an embedded Valkey: {e}"))?;
    println!("{}", server.url());
    let pid = server
        .pid()
        .map_or_else(|| "?".to_owned(), |p| p.to_string());
    eprintln!(
        "embedded Valkey running (pid {pid}, {}); Ctrl-C stops it",
        server.binary().display()
    );
    let interrupted = crate::interrupted();
    tokio::pin!(interrupted);
    let mut watch = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            done = &mut interrupted => {
                done.map_err(|e| format!("waiting for Ctrl-C: {e}"))?;
                break;
            }
            _ = watch.tick() => {
                if server.exited() {
                    return Err(format!("valkey-server (pid {pid}) exited by itself").into());
                }
            }
        }
    }
    drop(server);
    eprintln!("stopped");
    Ok(())
}

/// Waits until Valkey's invalidation pushes reach a table: writes `probe` (a key under the
/// table's prefix) until `pushes()` (the table's count of pushes received) rises — its store's
/// tracking connection is up and the table's prefix subscribed — or 30 s pass.
pub(crate) async fn until_pushed(
    url: &str,
    probe: &str,
    pushes: impl Fn() -> u64,
) -> CliResult<()> {
    let mut conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let give_up = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut reached = false;
    while !reached && tokio::time::Instant::now() < give_up {
        let before = pushes();
        let _: () = redis::cmd("SET")
            .arg(probe)
            .arg("probe")
            .query_async(&mut conn)
            .await?;
        let retry = tokio::time::Instant::now() + Duration::from_millis(100);
        while !reached && tokio::time::Instant::now() < retry {
            tokio::time::sleep(Duration::from_millis(1)).await;
            reached = pushes() > before;
        }
    }
    let _: () = redis::cmd("DEL").arg(probe).query_async(&mut conn).await?;
    match reached {
        true => Ok(()),
        false => Err(format!("no invalidation push for {probe} arrived within 30 s").into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A password in the URL never reaches the output.
    #[test]
    fn redacts_passwords() {
        assert_eq!(redact("redis://u:secret@h:1/"), "redis://u:***@h:1/");
        assert_eq!(redact("redis://secret@h:1/"), "redis://***@h:1/");
        assert_eq!(redact("redis://127.0.0.1:6379/"), "redis://127.0.0.1:6379/");
    }
}
