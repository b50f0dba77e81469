//! The store: the Valkey connection and the supervisor that every table of a process shares.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorRef};

use crate::coherence::tracking;
use crate::coherence::{DOWN_L1_LIFE, Tracker, Tracking};
use crate::error::{Error, Result};
use crate::shard::supervisor::{Supervisor, SupervisorMsg};
use crate::state::core::MAX_DURATION;
use crate::valkey::l2::L2;
use crate::wire::connect::{Endpoint, Kind};
use crate::wire::key::{LOCK_PREFIX, validate_table_name};

struct StoreInner {
    /// `""`, or `"<namespace>:"`.
    namespace: String,
    l2: Option<L2>,
    timeout: Duration,
    unconfirmed_l1_life: Duration,
    tracker: Option<Arc<Tracker>>,
    supervisor: ActorRef<SupervisorMsg>,
}

impl Drop for StoreInner {
    fn drop(&mut self) {
        // Every table holds the store, so no owner is left to supervise.
        self.supervisor.stop(None);
    }
}

/// One process's EchoStore: an optional Valkey connection and a supervisor for the table owners.
///
/// `Store` is `Clone` and cheap to clone (an `Arc`). Build one per process with
/// [`Store::builder`], then start tables with [`Store::table`].
#[derive(Clone)]
pub struct Store {
    inner: Arc<StoreInner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("valkey", &self.inner.l2.is_some())
            .field("coherence", &self.inner.tracker.is_some())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Starts configuring a store.
    pub fn builder() -> StoreBuilder {
        StoreBuilder {
            valkey: None,
            ca: None,
            timeout: Duration::from_secs(1),
            cooldown: Duration::from_secs(1),
            unconfirmed_l1_life: DOWN_L1_LIFE,
            require: false,
            coherence: true,
            tracking: Tracking::Broadcast,
            namespace: None,
            native_lock_commands: true,
        }
    }

    /// `true` when a Valkey is configured but currently unreachable (the breaker is open): tables
    /// serve from L1 and their loaders, with single-flight per process only.
    pub fn is_degraded(&self) -> bool {
        self.inner.l2.as_ref().is_some_and(L2::is_degraded)
    }

    pub(crate) fn l2(&self) -> Option<&L2> {
        self.inner.l2.as_ref()
    }

    /// Waits until what this store has under way on Valkey has finished — its tables' fills
    /// (each holds its id's lock until its write lands; a fill whose callers stopped waiting goes
    /// on), their writes, and the retried releases of locks and returns of source-budget leases —
    /// or `within` has passed. Call it as a process leaves (a deploy, a scale-down), once it has
    /// stopped making calls, before it exits: the locks it holds are handed back, where an exit
    /// would leave every other process's readers of those ids waiting out their `lock_ttl`.
    /// Calls made meanwhile still work, and are waited for too. Without a Valkey there is
    /// nothing to hand back, and it returns at once.
    ///
    /// Fails with [`Error::WaitTimeout`] if work was still under way at `within`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// let store = echostore::Store::builder().build().await?;
    /// // … serve; then, on SIGTERM, once the server has stopped taking requests:
    /// store.shutdown(std::time::Duration::from_secs(5)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn shutdown(&self, within: Duration) -> Result<()> {
        let Some(l2) = self.l2() else {
            return Ok(());
        };
        match tokio::time::timeout(within, l2.under_way().idle()).await {
            Ok(()) => Ok(()),
            Err(_) => Err(Error::WaitTimeout { waited: within }),
        }
    }

    /// `true` while this store's coherence is working: its tracking connection is up and
    /// subscribed, so other processes' writes reach its L1. `false` without Valkey, with
    /// [`StoreBuilder::coherence`] off, and while the connection is being (re)established.
    pub fn is_coherent(&self) -> bool {
        self.inner.tracker.as_ref().is_some_and(|t| t.is_up())
    }

    /// The key namespace, as it prefixes keys: `""` or `"<namespace>:"`.
    pub(crate) fn namespace(&self) -> &str {
        &self.inner.namespace
    }

    /// The store's Valkey timeout.
    pub(crate) fn valkey_timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// How long L1 keeps what Valkey could not confirm.
    pub(crate) fn unconfirmed_l1_life(&self) -> Duration {
        self.inner.unconfirmed_l1_life
    }

    /// The store's coherence (tracking connection), when it has a Valkey and coherence is on.
    pub(crate) fn tracker(&self) -> Option<&Arc<Tracker>> {
        self.inner.tracker.as_ref()
    }

    pub(crate) fn supervisor(&self) -> &ActorRef<SupervisorMsg> {
        &self.inner.supervisor
    }
}

/// Configures a [`Store`].
#[derive(Debug, Clone)]
#[must_use = "a store is made by build().await"]
pub struct StoreBuilder {
    valkey: Option<Kind>,
    ca: Option<PathBuf>,
    timeout: Duration,
    cooldown: Duration,
    unconfirmed_l1_life: Duration,
    require: bool,
    coherence: bool,
    tracking: Tracking,
    namespace: Option<String>,
    native_lock_commands: bool,
}

impl StoreBuilder {
    /// The default of [`unconfirmed_l1_life`](Self::unconfirmed_l1_life): how long a value
    /// Valkey could not confirm stays in L1 (tracking down, or the data connection failing).
    pub const DEFAULT_UNCONFIRMED_L1_LIFE: std::time::Duration = DOWN_L1_LIFE;

    /// Use the Valkey at `url` as L2 and for the regeneration lock:
    /// `redis://[user:password@]host:port[/db]`, or `rediss://…` for TLS (the `tls` feature; see
    /// [`valkey_ca`](Self::valkey_ca)). The ACL user and password come from the URL. Without a
    /// Valkey, tables are L1 + owner + loader.
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> echostore::Result<()> {
    /// let store = echostore::Store::builder().valkey("redis://127.0.0.1:1").build().await?;
    /// assert!(store.is_degraded(), "nothing answers on port 1: the store serves degraded");
    /// # Ok(()) }
    /// ```
    pub fn valkey(mut self, url: impl Into<String>) -> Self {
        self.valkey = Some(Kind::Single(url.into()));
        self
    }

    /// Use a Valkey Cluster, given some of its nodes' URLs (the `cluster` feature). The client
    /// finds every primary, follows `MOVED`/`ASK` and reconnects; every key of one id shares the
    /// `{id}` hash tag, so each script runs on one shard; coherence tracks every primary. Unlike a
    /// single server, a cluster must answer at `build()`.
    pub fn valkey_cluster<I, S>(mut self, nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.valkey = Some(Kind::Cluster(nodes.into_iter().map(Into::into).collect()));
        self
    }

    /// Trust only the CA certificates in this PEM file for `rediss://` connections (the `tls`
    /// feature), instead of the platform's roots: for a Valkey whose certificate a private CA
    /// signed.
    pub fn valkey_ca(mut self, pem_file: impl Into<PathBuf>) -> Self {
        self.ca = Some(pem_file.into());
        self
    }

    /// Connect and response timeout for Valkey calls (default 1 s).
    pub fn valkey_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// After Valkey fails to answer, how long calls skip it before one trial (default 1 s).
    pub fn breaker_cooldown(mut self, cooldown: Duration) -> Self {
        self.cooldown = cooldown;
        self
    }

    /// How long L1 keeps a value that Valkey could not confirm (default [`DEFAULT_UNCONFIRMED_L1_LIFE`](Self::DEFAULT_UNCONFIRMED_L1_LIFE), 1 s):
    /// one loaded while the data connection fails (it was never written to Valkey, so no push
    /// will retire it when another process writes the id), or kept while the tracking connection
    /// is down (other processes' writes are not pushed). Healthy again, values live their ttl.
    ///
    /// The trade: while Valkey is unhealthy, each process reads the source about once per hot id
    /// per this life (a 5 s outage costs `keys × 5 s / life` source reads per process; see
    /// `docs/failure-semantics.md`), and serves a value at most this old that another process
    /// may have changed. Zero keeps nothing unconfirmed: every read loads (still once per id at
    /// a time in a process).
    pub fn unconfirmed_l1_life(mut self, life: Duration) -> Self {
        self.unconfirmed_l1_life = life;
        self
    }

    /// Keep every process's L1 coherent through Valkey's invalidation pushes (default on when a
    /// Valkey is configured): a `put`, `invalidate` or any other change of a value key in one
    /// process reaches every other process's L1 within milliseconds, and losers wake on the
    /// winner's write instead of polling. Costs one more connection per store. Off, L1 entries
    /// live their full ttl whatever other processes write, and losers poll. See
    /// `docs/coherence.md`.
    pub fn coherence(mut self, on: bool) -> Self {
        self.coherence = on;
        self
    }

    /// How coherence learns of changes (default [`Tracking::Broadcast`]): every change under the
    /// store's tables pushed to every store, or with [`Tracking::Keys`] only the changes of keys
    /// this store read. Choose by fleet size and by the share of the keys each process holds, as
    /// `docs/scale.md` measures it; the guarantees are the same.
    pub fn tracking(mut self, mode: Tracking) -> Self {
        self.tracking = mode;
        self
    }

    /// Prefix every key this store writes with `<namespace>:` (values, locks and the coherence
    /// prefixes), so that two applications can share one Valkey without their tables' keys
    /// meeting. Without it, keys are as `docs/lock-protocol.md` shows them. Validated like table
    /// names (`[A-Za-z0-9_.-]{1,64}`), and never `lock`, which would make its value keys another
    /// store's lock keys (a namespace holds no `:`, so no other name can).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Release locks with `DELIFEQ` and extend them with `SET … IFEQ … PX` where the server has
    /// them (Valkey 9.0 and 8.1; found from `INFO server` when the store connects), instead of
    /// the Lua scripts that do the same (default `true`). Off, every lock command is a script, as
    /// on redis-server and older Valkey.
    pub fn native_lock_commands(mut self, on: bool) -> Self {
        self.native_lock_commands = on;
        self
    }

    /// Fail `build()` when Valkey does not answer a PING, instead of starting degraded.
    pub fn require_valkey(mut self, require: bool) -> Self {
        self.require = require;
        self
    }

    /// Connects (lazily, unless required) and starts the supervisor.
    ///
    /// With an unreachable Valkey this succeeds in degraded mode (logged) unless
    /// [`require_valkey`](Self::require_valkey) is set; a malformed URL is always an error.
    pub async fn build(self) -> Result<Store> {
        self.check()?;
        let namespace = self.namespace_prefix()?;
        let endpoint = self.endpoint()?;
        let l2 = match &endpoint {
            Some(endpoint) => Some(
                L2::connect(
                    endpoint,
                    self.cooldown,
                    self.require,
                    self.native_lock_commands,
                )
                .await?,
            ),
            None => None,
        };
        let tracker = match &endpoint {
            Some(endpoint) if self.coherence => {
                let tracker = Tracker::new(&namespace, self.tracking);
                tracking::start(Arc::downgrade(&tracker), endpoint.clone());
                Some(tracker)
            }
            _ => None,
        };
        let (supervisor, _) = Actor::spawn(None, Supervisor, ())
            .await
            .map_err(|_| Error::Stopped)?;
        Ok(Store {
            inner: Arc::new(StoreInner {
                namespace,
                l2,
                timeout: self.timeout,
                unconfirmed_l1_life: self.unconfirmed_l1_life,
                tracker,
                supervisor,
            }),
        })
    }

    /// The durations within their ranges.
    fn check(&self) -> Result<()> {
        let invalid = |what: &str| Err(Error::InvalidConfig(format!("store: {what}")));
        if self.timeout.is_zero() || self.timeout > MAX_DURATION {
            return invalid("valkey_timeout must be above zero and at most MAX_DURATION");
        }
        if self.cooldown > MAX_DURATION {
            return invalid("breaker_cooldown must be at most MAX_DURATION");
        }
        if self.unconfirmed_l1_life > MAX_DURATION {
            return invalid("unconfirmed_l1_life must be at most MAX_DURATION");
        }
        Ok(())
    }

    /// What precedes every key: `""`, or the namespace and a colon.
    fn namespace_prefix(&self) -> Result<String> {
        let Some(ns) = &self.namespace else {
            return Ok(String::new());
        };
        validate_table_name(ns).map_err(|_| {
            Error::InvalidConfig(format!(
                "store: namespace {ns:?} must be 1 to 64 characters from [A-Za-z0-9_.-]"
            ))
        })?;
        if ns == LOCK_PREFIX {
            return Err(Error::InvalidConfig(
                "store: namespace \"lock\" would make this store's value keys \
                 (lock:<table>:{id}) the lock keys of a store without a namespace"
                    .into(),
            ));
        }
        Ok(format!("{ns}:"))
    }

    /// Where the Valkey is, with the CA its TLS connections trust; `None` without one.
    fn endpoint(&self) -> Result<Option<Endpoint>> {
        let ca = match &self.ca {
            Some(path) => Some(std::fs::read(path).map_err(|e| {
                Error::InvalidConfig(format!("store: valkey_ca {}: {e}", path.display()))
            })?),
            None => None,
        };
        Ok(self.valkey.clone().map(|kind| Endpoint {
            kind,
            ca,
            timeout: self.timeout,
        }))
    }
}
