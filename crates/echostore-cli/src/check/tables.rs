//! A worker's three tables, one per kind of key, and their one call surface: each table reads the
//! run's shared [`Source`] through a loader and a batch loader that record every source read as
//! a `Load`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use echostore::{
    Fetched, Key, L1Backend, LoserPolicy, ReadOptions, Reload, Store, Table, TableBuilder, Version,
};

use super::history::{ABSENT, Action, Op, Recorder, now_ns};
use super::rows::{GONE, Row, is_gone, leaves_out, policy_for};
use super::source::{Source, is_failing};
use crate::CliResult;

/// The tables of a run, by index: a `u64` key, a `String` key, and a struct key that keeps the
/// default `from_rendered` (so every push for it flushes the table's L1).
pub(crate) const TABLES: [&str; 3] = ["check-u64", "check-string", "check-struct"];

/// The struct table's ids from here up have an `Eq` that panics when two callers' copies of one
/// meet: the `crash` fault, a fresh id each time (an id crashed once may be cached since).
pub(crate) const CRASH_IDS: u32 = u32::MAX - 10_000;

/// Every id carries one tag, `g<id % TAG_GROUPS>`, for the group writes (`invalidate_tag`).
pub(crate) const TAG_GROUPS: u32 = 4;

/// The struct key: a plain user type with the default `from_rendered`. `copy` tells two
/// callers' copies apart; it takes no part in the id.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub(crate) n: u32,
    pub(crate) copy: u8,
}

impl PartialEq for Item {
    fn eq(&self, other: &Self) -> bool {
        // The crash fault: a user `Key` bug, met where the owner compares two callers' ids.
        assert!(
            !(self.n >= CRASH_IDS && self.n == other.n && self.copy != other.copy),
            "{CRASH_PANIC}"
        );
        self.n == other.n
    }
}

impl Eq for Item {}

impl Hash for Item {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.n.hash(state);
    }
}

impl Key for Item {
    fn render(&self) -> Cow<'_, [u8]> {
        Cow::Owned(self.n.to_string().into_bytes())
    }
}

/// Id `id` of table `table`, rendered as its Valkey key's hash tag: what decides its slot.
pub(crate) fn rendered(table: u8, id: u32) -> Vec<u8> {
    match table {
        0 => u64::from(id).render().into_owned(),
        1 => name(id).render().into_owned(),
        _ => item(id).render().into_owned(),
    }
}

/// A read's answer: the version, and where it came from (`Origin`'s name).
pub(crate) type Answer = echostore::Result<(u64, String)>;

/// The three tables, one call surface. A cheap `Clone`, as a `Table` is. The `u64` table caches
/// `Option` values ([`OPTIONAL`](super::rows::OPTIONAL)): a read of `None` answers
/// [`GONE`](super::rows::GONE).
#[derive(Clone)]
pub(crate) struct Tables {
    pub(crate) numbers: Table<u64, Option<u64>>,
    pub(crate) names: Table<String, u64>,
    pub(crate) items: Table<Item, u64>,
}

impl Tables {
    /// Opens the three tables on `store`.
    pub(crate) async fn open(store: &Store, loading: &Loading) -> CliResult<Tables> {
        Ok(Tables {
            numbers: open(store, loading, 0, |id: &u64| *id as u32).await?,
            names: open(store, loading, 1, |id: &String| id_of_name(id)).await?,
            items: open(store, loading, 2, |id: &Item| id.n).await?,
        })
    }

    pub(crate) async fn read(&self, table: u8, id: u32) -> Answer {
        match table {
            0 => answer(self.numbers.fetch(&u64::from(id)).await),
            1 => answer(self.names.fetch(name(id).as_str()).await),
            _ => answer(self.items.fetch(&item(id)).await),
        }
    }

    /// One read of `id` that must see at least `version` (`ReadOptions::at_least`): a source
    /// version on the [`VERSIONED`] tables, a put's written token on the other.
    pub(crate) async fn read_at_least(&self, table: u8, id: u32, version: Version) -> Answer {
        fn wanted<V>(version: Version) -> ReadOptions<V> {
            ReadOptions::new().at_least(version)
        }
        match table {
            0 => answer(
                self.numbers
                    .fetch_with(&u64::from(id), wanted(version))
                    .await,
            ),
            1 => answer(
                self.names
                    .fetch_with(name(id).as_str(), wanted(version))
                    .await,
            ),
            _ => answer(self.items.fetch_with(&item(id), wanted(version)).await),
        }
    }

    /// One read of `id` with options of its own (`ReadOptions`): the loser policy `losers` for a
    /// flight it starts, and [`OWN_WAIT`] at most to wait.
    pub(crate) async fn read_with(&self, table: u8, id: u32, losers: LoserPolicy<u64>) -> Answer {
        fn own<V: Row>(losers: &LoserPolicy<u64>, table: u8) -> ReadOptions<V> {
            let losers = policy_for(losers, table);
            ReadOptions::new().losers(losers).wait_at_most(OWN_WAIT)
        }
        let losers = &losers;
        match table {
            0 => answer(
                (self.numbers)
                    .fetch_with(&u64::from(id), own(losers, table))
                    .await,
            ),
            1 => answer(
                (self.names)
                    .fetch_with(name(id).as_str(), own(losers, table))
                    .await,
            ),
            _ => answer((self.items).fetch_with(&item(id), own(losers, table)).await),
        }
    }

    /// One `peek` of `id` (cache only): its version and origin, or `None` when no cache holds it.
    pub(crate) async fn peek(
        &self,
        table: u8,
        id: u32,
    ) -> echostore::Result<Option<(u64, String)>> {
        fn found<V: Row>(peeked: echostore::Result<Option<Fetched<V>>>) -> Option<Answer> {
            peeked.transpose().map(answer)
        }
        let peeked = match table {
            0 => found(self.numbers.peek(&u64::from(id)).await),
            1 => found(self.names.peek(name(id).as_str()).await),
            _ => found(self.items.peek(&item(id)).await),
        };
        peeked.transpose()
    }

    /// One `peek_local` of `id` (this process's L1 alone): its version, with the origin `l1`.
    pub(crate) fn peek_local(&self, table: u8, id: u32) -> Option<(u64, String)> {
        let found = match table {
            0 => self.numbers.peek_local(&u64::from(id)).map(|v| v.shown()),
            1 => self.names.peek_local(name(id).as_str()).map(|v| v.shown()),
            _ => self.items.peek_local(&item(id)).map(|v| v.shown()),
        };
        found.map(|version| (version, echostore::Origin::L1.to_string()))
    }

    /// One `fetch_many` of `ids`: each id's own answer, in the order given (an id the table left
    /// out of its answer is missing here too).
    pub(crate) async fn read_many(&self, table: u8, ids: &[u32]) -> Vec<(u32, Answer)> {
        // The keys are collected before the call: a future holding a borrowing iterator's
        // closures is not `Send` enough for `tokio::spawn`.
        match table {
            0 => {
                let keys: Vec<u64> = ids.iter().copied().map(u64::from).collect();
                let answers = self.numbers.fetch_many(keys).await;
                answers
                    .into_iter()
                    .map(|(k, a)| (k as u32, answer(a)))
                    .collect()
            }
            1 => {
                let keys: Vec<String> = ids.iter().copied().map(name).collect();
                let answers = self.names.fetch_many(keys).await;
                answers
                    .into_iter()
                    .map(|(k, a)| (id_of_name(&k), answer(a)))
                    .collect()
            }
            _ => {
                let keys: Vec<Item> = ids.iter().copied().map(item).collect();
                let answers = self.items.fetch_many(keys).await;
                answers.into_iter().map(|(k, a)| (k.n, answer(a))).collect()
            }
        }
    }

    /// A put of `version` of `id`: on the table ordered by Valkey's clock (not [`VERSIONED`]),
    /// `put_versioned`, which answers the written token a reader elsewhere can ask for.
    pub(crate) async fn put(
        &self,
        table: u8,
        id: u32,
        version: u64,
    ) -> echostore::Result<Option<Version>> {
        let value = Row::of(table, version);
        Ok(match table {
            0 => self
                .numbers
                .put(&u64::from(id), value)
                .await
                .map(|_| None)?,
            1 => self
                .names
                .put(name(id).as_str(), version)
                .await
                .map(|_| None)?,
            _ => Some(self.items.put_versioned(&item(id), version).await?.version),
        })
    }

    pub(crate) async fn invalidate(&self, table: u8, id: u32) -> echostore::Result<()> {
        match table {
            0 => self.numbers.invalidate(&u64::from(id)).await,
            1 => self.names.invalidate(name(id).as_str()).await,
            _ => self.items.invalidate(&item(id)).await,
        }
    }

    /// `Table::delete`: a tombstone on the optional table, an invalidation on the others.
    pub(crate) async fn delete(&self, table: u8, id: u32) -> echostore::Result<()> {
        match table {
            0 => self.numbers.delete(&u64::from(id)).await,
            1 => self.names.delete(name(id).as_str()).await,
            _ => self.items.delete(&item(id)).await,
        }
    }

    /// Invalidates every entry tagged `g<group>`, or the whole table (`None`).
    pub(crate) async fn invalidate_group(
        &self,
        table: u8,
        group: Option<u32>,
    ) -> echostore::Result<()> {
        let Some(group) = group else {
            return match table {
                0 => self.numbers.clear().await,
                1 => self.names.clear().await,
                _ => self.items.clear().await,
            };
        };
        let tag = format!("g{group}");
        match table {
            0 => self.numbers.invalidate_tag(&tag).await,
            1 => self.names.invalidate_tag(&tag).await,
            _ => self.items.invalidate_tag(&tag).await,
        }
    }
}

/// A read's answer as the model takes it: the version shown, and the origin's name. An
/// `Error::Absent` (a batch loader left the row out: gone) is a read of [`GONE`].
fn answer<V: Row>(fetched: echostore::Result<Fetched<V>>) -> Answer {
    match fetched {
        Ok(f) => Ok((f.value.shown(), f.origin.to_string())),
        Err(e) if e.is_absent() => Ok((GONE, ABSENT.to_owned())),
        Err(e) => Err(e),
    }
}

fn name(id: u32) -> String {
    format!("id-{id}")
}

fn id_of_name(name: &str) -> u32 {
    name.strip_prefix("id-")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

pub(crate) fn item(n: u32) -> Item {
    Item { n, copy: 0 }
}

/// What every table's loaders share: the source, where their reads are recorded, how long a
/// source read takes, and the tables' ttl.
#[derive(Clone)]
pub(crate) struct Loading {
    pub(crate) source: Source,
    pub(crate) recorder: Recorder,
    pub(crate) latency: Duration,
    pub(crate) ttl: Duration,
    /// The tables' `.schema(n)`.
    pub(crate) schema: u32,
    /// This worker's number: with the table's, it picks the table's [`L1`] here.
    pub(crate) process: u32,
}

/// The kinds of L1 a table can keep. Each worker's table keeps one, a different one per worker
/// and table, so that a run of three workers meets all four: coherence, expiry and the landing
/// rules are each backend's own code, and a run on one backend would leave the others unchecked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum L1 {
    /// quick_cache bounded by a count of entries: the default.
    Entries,
    /// moka (`L1Backend::Moka`).
    Moka,
    /// quick_cache bounded by bytes, with a weigher.
    Weighed,
    /// quick_cache whose entries leave once not read for a quarter of the ttl (`l1_idle`).
    Idle,
}

impl L1 {
    /// The L1 worker `process` keeps for table `table`.
    pub(crate) fn of(process: u32, table: u8) -> L1 {
        match (process + u32::from(table)) % 4 {
            0 => L1::Entries,
            1 => L1::Moka,
            2 => L1::Weighed,
            _ => L1::Idle,
        }
    }

    /// Its name in the check's readout.
    pub(crate) fn name(self) -> &'static str {
        match self {
            L1::Entries => "entries",
            L1::Moka => "moka",
            L1::Weighed => "weighed",
            L1::Idle => "idle",
        }
    }

    /// `builder` keeping this L1.
    fn keep<K: Key, V: Row>(
        self,
        builder: TableBuilder<K, V>,
        ttl: Duration,
    ) -> TableBuilder<K, V> {
        match self {
            L1::Entries => builder,
            L1::Moka => builder.l1_backend(L1Backend::Moka),
            // Room for thousands of ids: the check's reads are meant to hit, not be evicted.
            L1::Weighed => builder
                .l1_capacity_bytes(1 << 20)
                .l1_weigher(|_: &K, _: &V| 64),
            L1::Idle => builder.l1_idle((ttl / 4).max(Duration::from_millis(1))),
        }
    }
}

impl Loading {
    /// One loader call: the row of `id`, recorded as a `Load`.
    async fn one(&self, table: u8, id: u32) -> std::io::Result<u64> {
        if id >= CRASH_IDS {
            // The crash fault's flight: long enough for its second caller to meet it.
            tokio::time::sleep(Duration::from_millis(500)).await;
            return Ok(0);
        }
        let start = now_ns();
        // The row is read first and the answer comes after the latency: a write that lands
        // meanwhile makes this load's value old, as a slow query's would be.
        let version = self.source.read(table, id).await;
        let version = panic_on_odd_failures(version, &[id])?;
        tokio::time::sleep(self.latency).await;
        self.record(table, id, version, (start, false));
        Ok(version)
    }

    /// One batch loader call: every row of `ids`, read as one query (each row first, then one
    /// latency for them all), each recorded as a `Load` of its own. `None`: a gone row this
    /// worker's batch loader leaves out ([`leaves_out`]), recorded as an [`ABSENT`] load.
    async fn many(&self, table: u8, ids: &[u32]) -> std::io::Result<Vec<Option<u64>>> {
        let start = now_ns();
        let versions = self.source.read_many(table, ids.to_vec()).await;
        let versions = panic_on_odd_failures(versions, ids)?;
        tokio::time::sleep(self.latency).await;
        let left_out = |version| leaves_out(self.process, table) && is_gone(table, version);
        let mut found = Vec::with_capacity(ids.len());
        for (&id, &version) in ids.iter().zip(&versions) {
            let load = self.load(table, id, version, (start, true));
            found.push(match left_out(version) {
                true => {
                    self.recorder.record(Op {
                        origin: ABSENT.to_owned(),
                        ..load
                    });
                    None
                }
                false => {
                    self.recorder.record(load);
                    Some(version)
                }
            });
        }
        Ok(found)
    }

    /// One reloader call: the row of `id` read as [`Self::one`] reads it (the same source read,
    /// recorded as a `Load`), answered `Unchanged` when its value is still `old` (a row still
    /// gone is unchanged, whatever its version).
    async fn again<V: Row>(&self, table: u8, id: u32, old: &V) -> std::io::Result<Reload<V>> {
        let value = V::of(table, self.one(table, id).await?);
        Ok(if value == *old {
            Reload::Unchanged
        } else {
            Reload::Changed(value)
        })
    }

    /// Records a load of `version` that began at `from.0`, by the batch loader if `from.1`.
    fn record(&self, table: u8, id: u32, version: u64, from: (u64, bool)) {
        self.recorder.record(self.load(table, id, version, from));
    }

    /// A load of `version` that began at `from.0` and ends now, by the batch loader if `from.1`.
    fn load(&self, table: u8, id: u32, version: u64, from: (u64, bool)) -> Op {
        Op {
            process: 0,
            table,
            id,
            action: Action::Load,
            version,
            ok: true,
            origin: String::new(),
            batch: from.1,
            at_least: 0,
            start: from.0,
            end: now_ns(),
        }
    }
}

/// How the panics the check causes on purpose begin: a key's `Eq` (the `crash` fault) and a
/// loader's bug (the `failing-source` fault).
const CRASH_PANIC: &str = "Item::eq on the crash id";
const LOADER_PANIC: &str = "a loader's bug, met while the source fails";

/// Prints the panics the check causes on purpose as one line each. The default hook, with
/// `RUST_BACKTRACE` set, captures and prints a backtrace for each, holding a runtime thread for
/// as long as the symbols take: a loader panicking on every read for 2 s then starves the
/// worker's other tasks (its tracking task's pushes wait), a cost of the host's settings, not of
/// the cache. Every other panic goes to the default hook.
pub(crate) fn quiet_deliberate_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = (payload.downcast_ref::<String>().map(String::as_str))
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if [CRASH_PANIC, LOADER_PANIC]
            .iter()
            .any(|p| message.starts_with(p))
        {
            eprintln!("a deliberate panic: {message}");
        } else {
            default(info);
        }
    }));
}

/// A load's read of the source, or, when the source fails (`failing-source`) for a read that
/// asked for an odd id first, a panic: a loader's own bug, which the library must turn into an
/// error for its callers, leaving no lock, lease or flight behind.
fn panic_on_odd_failures<T>(read: std::io::Result<T>, ids: &[u32]) -> std::io::Result<T> {
    match read {
        Err(e) if is_failing(&e) && ids.first().is_some_and(|id| id % 2 == 1) => {
            panic!("{LOADER_PANIC}: {e}")
        }
        read => read,
    }
}

/// Each table's early refresh (XFetch's `beta`): the library's default on `check-string`, so that
/// its refreshes meet every write, fault, L1 and batch read; off on the other two, whose one-read
/// rule stays at its strictest (a refresh loads before expiry on purpose: the model allows it
/// the early window, [`Bounds::early_by`](super::model::Bounds::early_by)).
pub(crate) const EARLY_REFRESH: [f64; 3] = [0.0, 1.0, 0.0];

/// The tables whose odd versions live half the ttl (`ttl_for`, a value's own life): every copy
/// of such a version, on Valkey and in each L1, its stale window and its early refresh follow
/// its life, not the table's.
pub(crate) const SHORT_ODD: [bool; 3] = [true, false, false];

/// The life of `version` in table `table`: half the ttl for an odd version of a
/// [`SHORT_ODD`] table, unless the row is gone (`None`, which names no version, lives the ttl).
pub(crate) fn life(table: u8, version: u64, ttl: Duration) -> Duration {
    if SHORT_ODD[usize::from(table)] && version % 2 == 1 && !is_gone(table, version) {
        ttl / 2
    } else {
        ttl
    }
}

/// The tables whose writes are ordered by the value's version (`.version_by`); on the others the
/// last write to land on Valkey wins, the library's default. A read there carries no version
/// (`at_least` needs one the source gave), so its reads are all plain ones.
pub(crate) const VERSIONED: [bool; 3] = [true, true, false];

/// Source reads of one table at once across the workers (`source_budget`).
const SOURCE_BUDGET: u32 = 4;

/// The tables' `lock_ttl`: a lock whose release a fault failed (its connection killed) is held
/// until its `PX`, and every reader of the id waits that long, so a fault's effects last this
/// long at least; short enough to lapse within a fault's grace (`CheckArgs::grace`).
pub(crate) const LOCK_TTL: Duration = Duration::from_secs(2);

/// One table of the run: every loader and batch loader call reads the source and is recorded.
async fn open<K: Key, V: Row>(
    store: &Store,
    loading: &Loading,
    table: u8,
    id_of: fn(&K) -> u32,
) -> CliResult<Table<K, V>> {
    let (one, many) = (loading.clone(), loading.clone());
    let builder = store.table::<K, V>(TABLES[usize::from(table)]);
    let builder = L1::of(loading.process, table)
        .keep(builder, loading.ttl)
        .ttl(loading.ttl)
        .stale_for(loading.ttl)
        .schema(loading.schema)
        .early_refresh(EARLY_REFRESH[usize::from(table)])
        .tags(move |key: &K, _: &V| [format!("g{}", id_of(key) % TAG_GROUPS)])
        .losers(policy_for(&losers(loading.process, table), table))
        // Small enough that a clear's or a tag's reloads spend it: reads then wait for a lease
        // (or take their stale copy), under every fault.
        .source_budget(SOURCE_BUDGET)
        .fail_safe(fail_safe(loading.process, table))
        .lock_ttl(LOCK_TTL)
        .loader(move |key: K| {
            let one = one.clone();
            async move { Ok::<_, std::io::Error>(V::of(table, one.one(table, id_of(&key)).await?)) }
        });
    let builder = own_lives_and_reloads(builder, loading, table, id_of);
    let builder = if VERSIONED[usize::from(table)] {
        // The value is the source's version: writes are ordered by it, whatever order they
        // land in (docs/consistency.md, rule 6). A `None` is a tombstone, which names no
        // version and is ordered by when it lands: the library never asks it for one.
        builder.version_by(|value: &V| value.shown())
    } else {
        builder
    };
    if !batch_loads(loading.process, table) {
        return Ok(builder.build().await?);
    }
    // Batch misses take the batch path (acquire-many, one call, write-many) on the same ids
    // the single reads load one by one: the two paths meet on every id.
    let builder = builder.batch_loader(move |keys: Vec<K>| {
        let many = many.clone();
        async move {
            let ids: Vec<u32> = keys.iter().map(id_of).collect();
            let versions = many.many(table, &ids).await?;
            // A gone row is answered `None` (cached as "not found"), or left out (absent).
            let values = keys.into_iter().zip(versions);
            let found = values.filter_map(|(key, version)| Some((key, V::of(table, version?))));
            Ok::<_, std::io::Error>(found.collect::<HashMap<_, _>>())
        }
    });
    Ok(builder.build().await?)
}

/// `builder` with table `table`'s choice of a value's own life ([`SHORT_ODD`]) and, in worker
/// `loading.process`, its reloader ([`reloads`]).
fn own_lives_and_reloads<K: Key, V: Row>(
    builder: TableBuilder<K, V>,
    loading: &Loading,
    table: u8,
    id_of: fn(&K) -> u32,
) -> TableBuilder<K, V> {
    let ttl = loading.ttl;
    let builder = if SHORT_ODD[usize::from(table)] {
        builder.ttl_for(move |value: &V| life(table, value.shown(), ttl))
    } else {
        builder
    };
    if !reloads(loading.process, table) {
        return builder;
    }
    let again = loading.clone();
    // A copy in its stale window is handed to the reloader: "unchanged" renews it in place
    // (a fenced restamp of its life), the path a load that changed nothing takes.
    builder.reloader(move |key: K, old: std::sync::Arc<V>| {
        let again = again.clone();
        async move { again.again(table, id_of(&key), &*old).await }
    })
}

/// What a read of worker `process`'s table `table` does when another process holds the id's
/// lock: one pair in two serves its stale copy at once (`ServeStale`, the fail-safe path); of
/// the others, most wait for the winner's copy (`Poll`), one answers a placeholder (`Default`,
/// in a run of three workers or more) and one fails at once (`FailFast`, five or more). A stale
/// copy is the id's newest version only until a write retires it, and the model holds it to
/// every rule an answer obeys; a placeholder or a `LockBusy` promises nothing ([`declined`]).
pub(crate) fn losers(process: u32, table: u8) -> LoserPolicy<u64> {
    match (process + u32::from(table)) % 8 {
        1 | 3 | 5 | 7 => LoserPolicy::ServeStale,
        4 => LoserPolicy::Default(PLACEHOLDER),
        6 => LoserPolicy::FailFast,
        _ => LoserPolicy::Poll {
            every: Duration::from_millis(20),
            up_to: Duration::from_secs(5),
        },
    }
}

/// The `Default` loser policy's placeholder: a version no write ever makes, so that the model
/// finds it `phantom` anywhere but in the answer it was made for.
pub(crate) const PLACEHOLDER: u64 = u64::MAX;

/// How long a read with options of its own waits at most ([`Tables::read_with`]): short enough
/// that some give up while their flight goes on, and a bound no other wait in the run has.
pub(crate) const OWN_WAIT: Duration = Duration::from_millis(30);

/// Whether `answer` is a refusal instead of a value: the placeholder as the `Default` origin gave
/// it, the `FailFast` error (another process holds the lock, or the source budget is spent: a
/// table that fails fast waits for neither), or a read's own bound on its wait ([`OWN_WAIT`])
/// running out. It promises nothing, and is not recorded (as a peek that found nothing); the
/// tables' stats count the first two (`defaults_served`, `failed_fast`).
pub(crate) fn declined(answer: &Answer) -> bool {
    use echostore::Error::{BudgetExhausted, LockBusy, WaitTimeout};
    match answer {
        Ok((version, origin)) => *version == PLACEHOLDER && origin == "default",
        Err(LockBusy) => true,
        Err(BudgetExhausted { waited }) => waited.is_zero() || *waited == OWN_WAIT,
        Err(WaitTimeout { waited }) => *waited == OWN_WAIT,
        Err(_) => false,
    }
}

/// Whether worker `process`'s table `table` has a reloader: one pair in two, so that its
/// renewals meet the other workers' loads of the same copies.
pub(crate) fn reloads(process: u32, table: u8) -> bool {
    (process + 2 * u32::from(table)) % 4 < 2
}

/// Whether worker `process`'s table `table` answers a load that failed with its stale copy
/// (`fail_safe`): one pair in three, so that under the `failing-source` fault some reads get
/// their last known version and the others the error, both held to the rules.
pub(crate) fn fail_safe(process: u32, table: u8) -> bool {
    (2 * process + u32::from(table)).is_multiple_of(3)
}

/// Whether worker `process`'s table `table` has a batch loader: one pair in three has none, and
/// its batch reads call the per-id loader for each miss (at most 16 at a time), on the same ids
/// other workers load as a batch.
pub(crate) fn batch_loads(process: u32, table: u8) -> bool {
    (process + u32::from(table)) % 3 != 2
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default run (three workers, three tables) keeps every kind of L1 somewhere.
    #[test]
    fn a_run_of_three_workers_meets_every_l1() {
        let mut met: Vec<L1> = (0..3)
            .flat_map(|process| (0..3).map(move |table| L1::of(process, table)))
            .collect();
        met.sort_by_key(|l1| *l1 as u8);
        met.dedup();
        assert_eq!(met, [L1::Entries, L1::Moka, L1::Weighed, L1::Idle]);
    }

    /// The default run polls and serves stale on every table, and answers a placeholder
    /// somewhere; a run of six workers fails fast somewhere too.
    #[test]
    fn the_runs_meet_every_loser_policy() {
        let name = |policy: LoserPolicy<u64>| match policy {
            LoserPolicy::Poll { .. } => "poll",
            LoserPolicy::ServeStale => "stale",
            LoserPolicy::Default(_) => "default",
            _ => "fail fast",
        };
        let met = |workers: u32, table: u8| -> Vec<&str> {
            (0..workers).map(|p| name(losers(p, table))).collect()
        };
        for table in 0..3 {
            let three = met(3, table);
            assert!(
                three.contains(&"poll") && three.contains(&"stale"),
                "table {table}: {three:?}"
            );
        }
        let all: Vec<&str> = (0..3).flat_map(|t| met(3, t)).collect();
        assert!(all.contains(&"default"), "{all:?}");
        let six: Vec<&str> = (0..3).flat_map(|t| met(6, t)).collect();
        assert!(six.contains(&"fail fast"), "{six:?}");
    }

    /// The default run reloads every table's copies in some worker and loads them in another.
    #[test]
    fn a_run_of_three_workers_meets_both_refresh_paths_on_every_table() {
        for table in 0..3 {
            let reloads: Vec<bool> = (0..3).map(|process| reloads(process, table)).collect();
            assert!(
                reloads.contains(&true) && reloads.contains(&false),
                "table {table}: {reloads:?}"
            );
        }
    }

    /// A refusal is only the policy's own: the placeholder with the `Default` origin, `LockBusy`
    /// or a spent budget where it fails fast, a wait that ran out at a read's own bound. The
    /// placeholder from anywhere else is an answer (the model finds it phantom), and so is any
    /// other failure (a failed read).
    #[test]
    fn only_a_policys_own_refusal_is_declined() {
        use echostore::Error;
        let placeholder = |origin: &str| Ok((PLACEHOLDER, origin.to_owned()));
        let timed_out = |waited| Err(Error::WaitTimeout { waited });
        assert!(declined(&placeholder("default")));
        assert!(declined(&Err(Error::LockBusy)));
        assert!(declined(&timed_out(OWN_WAIT)));
        assert!(!declined(&placeholder("l1")));
        assert!(!declined(&Ok((3, "default".to_owned()))));
        assert!(!declined(&timed_out(Duration::from_secs(5))));
        assert!(!declined(&Err(Error::Absent)));
        let spent = |waited| Err(Error::BudgetExhausted { waited });
        assert!(declined(&spent(Duration::ZERO)), "failing fast");
        assert!(declined(&spent(OWN_WAIT)));
        assert!(!declined(&spent(Duration::from_secs(5))));
    }

    /// The default run loads every table's batch misses both ways: with a batch loader in some
    /// workers, with the per-id loader in another.
    #[test]
    fn a_run_of_three_workers_meets_both_batch_paths_on_every_table() {
        for table in 0..3 {
            let loads: Vec<bool> = (0..3).map(|process| batch_loads(process, table)).collect();
            assert!(
                loads.contains(&true) && loads.contains(&false),
                "table {table}: {loads:?}"
            );
        }
    }
}
