//! The table's shared state, [`TableCore`]: its name, settings, L1, Valkey connection, loader and
//! counters. The handle, the read future, the owner and the fill all read it; it depends on none
//! of them.
//!
//! [`Life`] is one write's life (a fresh span drawn with jitter, then the stale window, and the
//! load's duration for early refresh), and the one place that stamps a value into an envelope and
//! an L1 entry, whoever writes it (a `put` or a fill).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::Notify;

use crate::coherence::Tracker;
use crate::coherence::tracking::keys::Read;
use crate::error::{Result, SharedError};
use crate::state::board::{Board, Boards, IdState};
use crate::state::l1::{Entry, L1, L1Cache};
use crate::state::loser_policy::LoserPolicy;
use crate::state::marks::Marks;
use crate::state::stats::Stats;
use crate::state::unsettled::{Repair, Unsettled};
use crate::valkey::envelope::{self, Envelope, Fingerprint, Marking, Stamp};
use crate::valkey::l2::L2;
use crate::wire::key::KeyNames;
use crate::wire::server_clock::wall_ms;

/// The longest duration any setting accepts (a year): longer ones are refused at `build()`.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

pub(crate) use crate::state::board::shard_of;

/// Every shard's owner of a table, as a shard that read a new mark reaches them all (the owners'
/// handle implements it; the table's core only holds it).
pub(crate) trait EveryOwner: Send + Sync {
    /// Has every shard drop what a mark of `scope` covers.
    fn marked(&self, scope: crate::state::marks::Scope) -> futures::future::BoxFuture<'_, ()>;
}

/// The source of truth for one table: called once per id per expiry.
pub(crate) type Loader<K, V> =
    Arc<dyn Fn(K) -> BoxFuture<'static, Result<V, SharedError>> + Send + Sync>;

/// A table's batch loader: every id of a batch in one source call, answered as a map (an id it
/// leaves out is absent at the source).
pub(crate) type BatchLoader<K, V> = Arc<
    dyn Fn(Vec<K>) -> BoxFuture<'static, Result<std::collections::HashMap<K, V>, SharedError>>
        + Send
        + Sync,
>;

/// Settings of a started table, checked by `build()` (see [`crate::TableBuilder`]).
pub(crate) struct TableConfig<V> {
    pub(crate) ttl: Duration,
    pub(crate) jitter: f64,
    pub(crate) stale_for: Duration,
    pub(crate) lock_ttl: Duration,
    pub(crate) losers: LoserPolicy<Arc<V>>,
    pub(crate) load_timeout: Option<Duration>,
    pub(crate) soft_timeout: Option<Duration>,
    pub(crate) fail_safe: bool,
    pub(crate) max_value_bytes: usize,
    /// XFetch's beta: how early, in loads, a read may refresh a value; 0 = never.
    pub(crate) early_beta: f64,
    /// The value's own version from the source (`.version_by`), which orders writes.
    pub(crate) version_by: Option<VersionBy<V>>,
    /// The value type has a "not found" of its own (`None`): a `None` is a tombstone, ordered
    /// by its arrival on Valkey, never by a version (`crate::handle::delete`).
    pub(crate) has_none: bool,
    /// A value's own ttl (`.ttl_for`), else `ttl`.
    pub(crate) ttl_for: Option<TtlFor<V>>,
    /// How long an L1 entry may go unread (`.l1_idle`).
    pub(crate) l1_idle: Option<Duration>,
    /// How values are coded on Valkey (`.codec`, `.compress_above`).
    pub(crate) coding: crate::valkey::codec::Coding,
}

/// A table's `.tags`: the tags of an entry, for `invalidate_tag`.
pub(crate) type TagsOf<K, V> = Arc<dyn Fn(&K, &V) -> Vec<String> + Send + Sync>;

/// A table's `.ttl_for`: the logical life of a value, chosen from the value.
pub(crate) type TtlFor<V> = Arc<dyn Fn(&V) -> Duration + Send + Sync>;

/// A table's `.version_by`: the version of a value, from the source of truth.
pub(crate) type VersionBy<V> = Arc<dyn Fn(&V) -> u64 + Send + Sync>;

impl<V> TableConfig<V> {
    /// The ttl of `value`: `.ttl_for`'s, or the table's. A `ttl_for` that panics gives the
    /// table's ttl (logged); its answer is held within `1 ms..=MAX_DURATION`.
    pub(crate) fn ttl_of(&self, value: &V) -> Duration {
        let Some(ttl_for) = &self.ttl_for else {
            return self.ttl;
        };
        let ttl = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ttl_for(value)));
        match ttl {
            Ok(ttl) => ttl.clamp(Duration::from_millis(1), MAX_DURATION),
            Err(_) => {
                tracing::warn!("ttl_for panicked: the value gets the table's ttl");
                self.ttl
            }
        }
    }

    /// The longest logical life a write of `value` gets: its ttl plus the jitter. A copy read
    /// from Valkey is held to it ([`Envelope::capped`]).
    pub(crate) fn longest_life(&self, value: &V) -> Duration {
        self.ttl_of(value).mul_f64(1.0 + self.jitter)
    }

    /// The life of `value` written at `now_ms` ([`TableCore::now_ms`]): its ttl (`.ttl_for`, or
    /// the table's) `± ttl·jitter`, drawn afresh for every write.
    pub(crate) fn life(&self, value: &V, now_ms: u64) -> Life {
        let spread = if self.jitter > 0.0 {
            rand::random_range(-self.jitter..=self.jitter)
        } else {
            0.0
        };
        Life {
            fresh_for: self.ttl_of(value).mul_f64(1.0 + spread),
            stale_for: self.stale_for,
            written_at_ms: now_ms,
            delta: Duration::ZERO,
            early_beta: self.early_beta,
        }
    }

    /// The version `value` is written with: `.version_by`'s, or none. A tombstone (`None`) has
    /// none: it wins over every write before it and loses to every write after it, whatever
    /// version either carries. A `version_by` that panics leaves the write unversioned (ordered
    /// by Valkey's clock), logged.
    pub(crate) fn version_of(&self, value: &V) -> Option<u64>
    where
        V: serde::Serialize,
    {
        match self.versioned(value) {
            Versioned::At(version) => Some(version),
            Versioned::Absent | Versioned::Unknown => None,
        }
    }

    /// What `.version_by` tells of `value`: its version, an absence, or nothing (no
    /// `.version_by`, or it panicked, logged).
    pub(crate) fn versioned(&self, value: &V) -> Versioned
    where
        V: serde::Serialize,
    {
        let Some(version_by) = self.version_by.as_ref() else {
            return Versioned::Unknown;
        };
        if self.has_none && crate::state::absence::is_none(value) {
            return Versioned::Absent;
        }
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| version_by(value))) {
            Ok(version) => Versioned::At(version),
            Err(_) => {
                tracing::warn!("version_by panicked: the value's version is unknown");
                Versioned::Unknown
            }
        }
    }

    /// How early XFetch may refresh a value whose load took `delta`: `delta·beta`.
    pub(crate) fn early(&self, delta: Duration) -> Duration {
        scaled(delta, self.early_beta)
    }
}

/// What `.version_by` tells of one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Versioned {
    /// Its version.
    At(u64),
    /// A tombstone (`None`): no version (it wins over every write before it and loses to every
    /// write after it).
    Absent,
    /// Not to be told: no `.version_by`, or it panicked.
    Unknown,
}

/// The life of one value being written now.
pub(crate) struct Life {
    /// `ttl`, jittered.
    pub(crate) fresh_for: Duration,
    /// Kept past `fresh_for` as a stale copy.
    pub(crate) stale_for: Duration,
    /// When the write happens, unix ms: the start of the logical life. The envelope's
    /// `written_at` on Valkey is the server's clock instead, stamped by the write scripts.
    pub(crate) written_at_ms: u64,
    /// How long the load took (zero for a `put`: no load, so never refreshed early).
    pub(crate) delta: Duration,
    /// The table's XFetch beta.
    early_beta: f64,
}

impl Life {
    /// The same life, for a value whose load took `delta`.
    pub(crate) fn loaded_in(self, delta: Duration) -> Self {
        Life { delta, ..self }
    }

    /// The L1 entry of a value stored now.
    pub(crate) fn entry<V>(&self, value: Arc<V>) -> Entry<V> {
        let early = scaled(self.delta, self.early_beta);
        Entry::new(value, self.fresh_for, self.stale_for, early)
    }

    /// The envelope of a value stored now, with its version if the table orders by one and its
    /// `marking` (its generation and tags); over
    /// the table's `max_value_bytes` it is refused with `TooLarge`.
    pub(crate) fn encode<V: serde::Serialize>(
        &self,
        value: &V,
        config: &TableConfig<V>,
        marking: &Marking,
    ) -> Result<Vec<u8>> {
        let fresh_until_ms = self.written_at_ms.saturating_add(millis(self.fresh_for));
        envelope::encode(
            value,
            &Stamp {
                fresh_until_ms,
                written_at_ms: self.written_at_ms,
                delta: self.delta,
                version: config.version_of(value),
            },
            marking,
            &config.coding,
            config.max_value_bytes,
        )
    }

    /// Valkey's `PX`: the physical life, fresh plus stale.
    pub(crate) fn physical_ms(&self) -> u64 {
        millis(self.fresh_for.saturating_add(self.stale_for)).max(1)
    }
}

/// `delta·beta`, saturating (beta is checked at `build()`: finite, within `0..=MAX_EARLY_BETA`).
fn scaled(delta: Duration, beta: f64) -> Duration {
    Duration::try_from_secs_f64(delta.as_secs_f64() * beta).unwrap_or(Duration::MAX)
}

/// A duration in whole milliseconds, saturating (settings are bounded at `build()`).
pub(crate) fn millis(span: Duration) -> u64 {
    u64::try_from(span.as_millis()).unwrap_or(u64::MAX)
}

/// What a table's handles, its owner and its flights share.
pub(crate) struct TableCore<K, V> {
    pub(crate) name: Arc<str>,
    /// The store's key namespace: `""`, or `"<namespace>:"` before every key.
    pub(crate) namespace: Arc<str>,
    pub(crate) config: TableConfig<V>,
    pub(crate) l1: L1<K, V>,
    /// The staleness audit of a sample of hits (`.audit_sample`).
    pub(crate) audit: Option<crate::state::audit::Audit<K, V>>,
    /// What happened to the table's ids, for its subscribers (`Table::events`).
    pub(crate) events: Arc<crate::events::Events<K>>,
    pub(crate) l2: Option<L2>,
    /// `.schema`: this table's schema and the other live ones.
    pub(crate) schemas: Arc<crate::state::schemas::Schemas>,
    /// `.source_budget`: the leases every source read of the table holds.
    pub(crate) budget: Option<crate::state::budget::Budget>,
    /// The per-id loader; when only a batch loader is set, a one-id batch stands in for it.
    pub(crate) loader: Option<Loader<K, V>>,
    /// `.reloader`: called instead of the loader with a copy in its stale window.
    pub(crate) reloader: Option<crate::state::reload::Reloader<K, V>>,
    pub(crate) batch_loader: Option<BatchLoader<K, V>>,
    pub(crate) stats: Stats,
    /// The store's coherence, when on.
    pub(crate) tracker: Option<Arc<Tracker>>,
    /// How long L1 may answer before the store's tracking connections are heard again (the
    /// tracker's; one that never lapses without tracking).
    pub(crate) vouch: Arc<crate::coherence::Vouch>,
    /// How long L1 keeps what Valkey could not confirm (the store's setting).
    pub(crate) unconfirmed_l1_life: Duration,
    /// The current flights, one board per shard, where a miss joins one without a message to
    /// the owner.
    pub(crate) boards: Boards<K, V>,
    /// Ids whose last write failed, until their Valkey copy is repaired.
    pub(crate) unsettled: Arc<Unsettled<K, V>>,
    /// The entry's tags (`.tags`).
    pub(crate) tags: Option<TagsOf<K, V>>,
    /// The table's clears and tag invalidations, as this process knows them.
    pub(crate) marks: Marks,
    /// How many owners share the table's ids (`.shards`).
    pub(crate) shards: usize,
    /// The owners, once started: where a mark one shard read reaches every shard.
    pub(crate) owners: std::sync::OnceLock<std::sync::Weak<dyn EveryOwner>>,
}

impl<K: crate::wire::key::Key, V> TableCore<K, V> {
    /// Whether L1's `entry` may answer a read: fresh, and vouched for by the tracking
    /// connections (`crate::coherence::vouch`).
    pub(crate) fn trusts(&self, entry: &crate::state::l1::Entry<V>) -> bool {
        self.vouch.holds() && entry.is_fresh()
    }

    /// The board of `id`'s shard.
    pub(crate) fn board<Q: std::hash::Hash + ?Sized>(&self, id: &Q) -> &Arc<Board<K, V>> {
        self.boards.of(id)
    }

    /// The Valkey names of `id`'s value and lock in this table's schema.
    pub(crate) fn names(&self, id: &K) -> Result<crate::wire::key::KeyNames> {
        let names = crate::wire::key::KeyNames::new(&self.namespace, &self.name, id)?;
        Ok(self.schemas.names(names, false))
    }

    /// The other live schemas' value and lock keys of `id` (none with one schema live): a fill's
    /// fenced write is refused by a newer copy among them, and drops the older ones.
    pub(crate) fn other_copies(&self, id: &K) -> Vec<Vec<u8>> {
        crate::wire::key::KeyNames::new(&self.namespace, &self.name, id)
            .map_or_else(|_| Vec::new(), |names| self.schemas.others_of(names))
    }

    /// [`Self::names`] for a put or an invalidation, which drops every other live schema's copy:
    /// the live schemas heard again first if what this process knows of them may be out of date.
    pub(crate) async fn write_names(&self, id: &K) -> Result<crate::wire::key::KeyNames> {
        let names = crate::wire::key::KeyNames::new(&self.namespace, &self.name, id)?;
        if let Some(l2) = &self.l2 {
            self.schemas.hear_before_writing(l2).await;
        }
        Ok(self.schemas.names(names, true))
    }

    /// Times the store's data connection was replaced ([`crate::wire::healing`]).
    pub(crate) fn connections_replaced(&self) -> u64 {
        self.l2.as_ref().map_or(0, L2::connections_replaced)
    }

    /// `work` (a fill, a write), counted among what the store has under way on Valkey until it
    /// ends: what `Store::shutdown` waits for. Without a Valkey, nothing is counted.
    pub(crate) fn under_way<F: Future>(
        &self,
        work: F,
    ) -> impl Future<Output = F::Output> + use<K, V, F> {
        crate::wire::under_way::tracked(self.l2.as_ref().map(L2::under_way), work)
    }

    /// Now, in unix ms, as this table compares it with an envelope's `fresh_until`: Valkey's
    /// clock as estimated here, never this process's own wall clock once Valkey has answered.
    pub(crate) fn now_ms(&self) -> u64 {
        self.l2.as_ref().map_or_else(wall_ms, L2::now_ms)
    }

    /// The life of `value`, loaded now in `delta`.
    pub(crate) fn loaded_life(&self, value: &V, delta: Duration) -> Life {
        self.config.life(value, self.now_ms()).loaded_in(delta)
    }

    /// The tags of `value` as the entry of `id`: `.tags`', or none. Tags that panic, or one
    /// longer than [`crate::MAX_TAG_BYTES`], are an [`Error::Codec`](crate::Error::Codec): such
    /// a value cannot be written, since `invalidate_tag` could not find it.
    pub(crate) fn tags_of(&self, id: &K, value: &V) -> Result<Vec<String>> {
        let Some(tags_of) = &self.tags else {
            return Ok(Vec::new());
        };
        let tags = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tags_of(id, value)))
            .map_err(|_| crate::Error::Codec("the table's tags panicked".into()))?;
        for tag in &tags {
            crate::state::marks::validate_tag(tag)
                .map_err(|e| crate::Error::Codec(format!("the table's tags: {e}").into()))?;
        }
        Ok(tags)
    }

    /// The marking of a write of `value` as `id`'s, whose data was read at generation `stamp`.
    pub(crate) fn marking(&self, id: &K, value: &V, stamp: u64) -> Result<Marking> {
        Ok(Marking {
            generation: stamp,
            tags: self.tags_of(id, value)?,
        })
    }

    /// `true` if no clear or tag invalidation since `env` was written makes it a miss.
    pub(crate) fn is_current(&self, env: &Envelope<V>) -> bool {
        self.marks.is_current(&env.marking)
    }

    /// The L1 entry of a fresh value read from Valkey: fresh until the envelope's own
    /// `fresh_until`, refreshed early by its recorded load time.
    pub(crate) fn l2_entry(&self, env: Envelope<V>) -> Entry<V> {
        self.l2_entry_at(env, self.now_ms())
    }

    /// A flight's answer with a fresh value read from Valkey, kept in L1 as [`Self::l2_entry`].
    pub(crate) fn l2_filled(&self, env: Envelope<V>) -> crate::state::stale::Filled<V> {
        let read_as = env.read_as;
        crate::state::stale::Filled::fresh(self.l2_entry(env), crate::fetched::Origin::L2)
            .made_from(read_as)
    }

    /// [`Self::l2_entry`] with "now" already read.
    pub(crate) fn l2_entry_at(&self, env: Envelope<V>, now_ms: u64) -> Entry<V> {
        let left = Duration::from_millis(env.fresh_until_ms.saturating_sub(now_ms));
        let early = self.config.early(env.delta);
        Entry::new(Arc::new(env.value), left, self.config.stale_for, early)
    }

    /// `entry` as L1 may keep it now: for at most the unconfirmed life while either connection
    /// is unhealthy — tracking down (other processes' writes would not be pushed), or the data
    /// connection's breaker open (what is loaded now is not written to Valkey, and writes made
    /// elsewhere meanwhile may not reach it).
    pub(crate) fn keepable(&self, entry: Entry<V>) -> Entry<V> {
        let tracking_down = self.tracker.as_ref().is_some_and(|t| !t.is_up());
        let breaker_open = self.l2.as_ref().is_some_and(L2::is_degraded);
        if tracking_down || breaker_open {
            entry.capped(self.unconfirmed_l1_life)
        } else {
            entry
        }
    }
}

impl<K: crate::wire::key::Key, V: crate::wire::key::Value> TableCore<K, V> {
    /// What an in-process load of `row` (`None`: the row was found gone) leaves owed on Valkey
    /// ([`crate::state::unsettled`]): its copy goes unless it shows the row's version.
    pub(crate) fn load_repair(&self, row: Option<&V>) -> Repair {
        Repair::Load {
            version: row.and_then(|value| self.config.version_of(value)),
        }
    }

    /// A snapshot of the table's counters and gauges.
    pub(crate) fn stats_now(&self) -> crate::TableStats {
        let mut stats = self
            .stats
            .snapshot(self.l1.len(), self.connections_replaced());
        // Counted where the entries leave: in L1, on the reader's task or moka's upkeep.
        stats.l1_idle_evictions = self.l1.idled();
        stats.in_flight = self.boards.flights() as u64;
        stats
    }

    /// Drops from L1 every entry that carries one of `tags`; an entry whose tags cannot be told
    /// (`.tags` panics) is dropped too: it may carry one.
    pub(crate) fn drop_tagged(&self, tags: &std::collections::HashSet<String>) {
        self.l1.retain(|id, value| {
            self.tags_of(id, value)
                .is_ok_and(|carried| !carried.iter().any(|tag| tags.contains(tag)))
        });
    }

    /// Coherence is lost, and was last known good at `since`: every entry of L1 is kept for at
    /// most the unconfirmed life from then (a push missed since is at most that old when its
    /// entry goes), and none waiting for key tracking's confirmation will get it.
    ///
    /// Under the board's lock: a read's settle, a flight's landing on its own task, an early
    /// refresh's mark and a confirmation (which restores an entry's full life) each come wholly
    /// before the cap or after it, never astride.
    pub(crate) fn cap_l1(&self, since: std::time::Instant) {
        self.boards.forget_unconfirmed(|| {
            let left = self.unconfirmed_l1_life.saturating_sub(since.elapsed());
            self.l1.cap(left);
        });
    }

    /// Whether anything of this table is held here (entries in L1, flights): what a flush drops.
    pub(crate) fn holds_anything(&self) -> bool {
        self.l1.len() > 0 || self.boards.flights() > 0
    }

    /// Puts `entry` into L1 as `id`'s, for as long as L1 may keep it ([`Self::keepable`]).
    /// `fingerprint`: the bytes it was read from or written as, when known.
    ///
    /// Under key tracking the entry lives at most the unconfirmed life until the tracking
    /// connection has read the key and found those bytes (`crate::coherence::tracking::keys`): before that
    /// read, Valkey would push no change of the key to this store. An entry with no fingerprint
    /// never lives longer.
    pub(crate) fn keep(&self, id: K, entry: Entry<V>, fingerprint: Option<Fingerprint>) {
        match self.keeping(&id, entry, fingerprint) {
            Keeping::Now(entry) => self.l1.insert(id, entry),
            Keeping::Unconfirmed(waiting) => {
                let board = self.board(&id);
                board.change_or_make(id.clone(), |state| self.wait(state, id, waiting));
            }
        }
    }

    /// [`keep`](Self::keep), under the board's lock: `state` is `id`'s.
    pub(crate) fn keep_in<W>(
        &self,
        state: &mut IdState<V, W>,
        id: K,
        entry: Entry<V>,
        fingerprint: Option<Fingerprint>,
    ) {
        match self.keeping(&id, entry, fingerprint) {
            Keeping::Now(entry) => self.l1.insert(id, entry),
            Keeping::Unconfirmed(waiting) => self.wait(state, id, waiting),
        }
    }

    /// How L1 may keep `entry` now: at its full life, or not fresh until key tracking confirms it.
    fn keeping(&self, id: &K, entry: Entry<V>, fingerprint: Option<Fingerprint>) -> Keeping<V> {
        let entry = self.keepable(entry);
        let Some(registry) = self.tracker.as_ref().and_then(|t| t.keys()) else {
            return Keeping::Now(entry);
        };
        let (Some(fingerprint), Ok(names)) = (fingerprint, self.names(id)) else {
            return Keeping::Now(entry.capped(self.unconfirmed_l1_life));
        };
        if registry.holds(&names.value, fingerprint) {
            return Keeping::Now(entry);
        }
        let read = Read {
            key: names.value,
            expect: Some(fingerprint),
        };
        Keeping::Unconfirmed(Waiting {
            fingerprint,
            full: entry,
            read,
        })
    }

    /// L1 keeps `waiting`'s entry as not fresh (a stale stand-in at most), and `id`'s state its
    /// full life until the tracking connection's read confirms it: until then Valkey would push
    /// no change of the key, so a read that took the entry could go on past a write anywhere
    /// for as long as the confirmation takes. With no tracking connection up to ask, L1 keeps it
    /// capped instead, as it keeps everything while tracking is down.
    fn wait<W>(&self, state: &mut IdState<V, W>, id: K, waiting: Waiting<V>) {
        // Waiting before the read is asked: its answer may reach the owner at once.
        self.l1
            .insert(id.clone(), waiting.full.clone().unconfirmed());
        state.unconfirmed = Some((waiting.fingerprint, waiting.full));
        let asked = self.tracker.as_ref().and_then(|t| t.keys());
        if !asked.is_some_and(|registry| registry.read(waiting.read))
            // No tracking connection up to read it.
            && let Some((_, full)) = state.unconfirmed.take()
        {
            self.l1.insert(id, full.capped(self.unconfirmed_l1_life));
        }
    }

    /// A wake-up for a loser of `ids` (with their key names): notified when a push says one of
    /// their value or lock keys changed, and whenever pushes may have been missed; kept in each
    /// id's state until the loser drops it. `None` while tracking is down: no push would come.
    pub(crate) fn watch<'a>(
        &self,
        ids: impl IntoIterator<Item = (&'a K, &'a KeyNames)>,
    ) -> Option<Arc<Notify>>
    where
        K: 'a,
    {
        let tracker = self.tracker.as_ref().filter(|t| t.is_up())?;
        let wake = Arc::new(Notify::new());
        for (id, names) in ids {
            // Watched before its keys are tracked: no push after the track is missed.
            self.board(id)
                .change_or_make(id.clone(), |state| state.watch(&wake));
            tracker.track(&[&names.value, &names.lock]);
        }
        Some(wake)
    }

    /// `true` under key tracking: what L1 keeps needs its bytes' fingerprint.
    pub(crate) fn tracks_keys(&self) -> bool {
        self.tracker.as_ref().is_some_and(|t| t.keys().is_some())
    }
}

/// How L1 keeps an entry ([`TableCore::keep`]).
enum Keeping<V> {
    /// As it is: no key tracking, or Valkey already tracks those bytes (or none are known).
    Now(Entry<V>),
    /// Not fresh, until the tracking connection confirms the bytes.
    Unconfirmed(Waiting<V>),
}

/// An entry waiting for key tracking's confirmation: L1 keeps it not fresh meanwhile, `full`
/// once confirmed, capped if no tracking connection is up to confirm it.
struct Waiting<V> {
    fingerprint: Fingerprint,
    full: Entry<V>,
    read: Read,
}
