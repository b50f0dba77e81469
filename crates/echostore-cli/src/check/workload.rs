//! The calls a worker's tasks make, and how each is recorded: reads (one in [`BATCH_EVERY`] a
//! `fetch_many` of a few ids, recorded as a read of each; of the others one in [`PEEK_EVERY`] a
//! cache-only `peek` or `peek_local`, and some with options of their own: a version to see at
//! least, or a loser policy and a bound on the wait), puts, invalidates and deletes of a small
//! hot set of ids, and now and then a group write (a tag, or the whole table). A write moves the
//! source on first, so its version is what a later read must return.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use echostore::{Error, LoserPolicy, Version};
use rand::{Rng, SeedableRng};

use super::history::{ABSENT, Action, BEGUN, LEFT_OUT, Op, Recorder, now_ns};
use super::rows::{GONE, OPTIONAL, is_gone, leaves_out};
use super::source::{Begun, Source};
use super::tables::{PLACEHOLDER, TABLES, TAG_GROUPS, Tables, VERSIONED, declined};
use super::tokens::Tokens;

/// How long one call may take before the worker records it as failed and moves on.
const CALL_LIMIT: Duration = Duration::from_secs(10);

/// One read in this many is a batch (`fetch_many`), the others a single `fetch`.
const BATCH_EVERY: u32 = 4;

/// One single read in this many is a `peek` (cache only, never the loader).
const PEEK_EVERY: u32 = 8;

/// Of the other single reads, one in this many must see at least the source's version when it
/// begins (`ReadOptions::at_least`), as a replica given a session token does.
const AT_LEAST_EVERY: u32 = 8;

/// Of the single reads left, one in this many carries options of its own
/// ([`Tables::read_with`]): a loser policy for the flight it starts, and a bound on its wait.
const OWN_OPTIONS_EVERY: u32 = 8;

/// How many distinct ids a batch read asks for (at most `--keys`).
const BATCH_IDS: std::ops::RangeInclusive<usize> = 2..=8;

/// One batch read in this many is a large one, of [`LARGE_BATCH_IDS`] (at most `--keys`): more
/// misses than a table without a batch loader loads at once (16), so that some wait for a slot.
const LARGE_BATCH_EVERY: u32 = 8;
const LARGE_BATCH_IDS: std::ops::RangeInclusive<usize> = 17..=24;

/// One write in this many invalidates a group: a tag (three times in four), or the whole table.
const GROUP_WRITE_EVERY: u32 = 200;

/// Of every 25 single writes: this many puts, then invalidates up to the second figure, then
/// deletes (64 %, 20 %, 16 % of the writes).
const PUTS_OF_25: u32 = 16;
const INVALIDATES_UP_TO: u32 = 21;

/// What a worker's tasks share: the tables, the source, the history, and the mix.
pub(crate) struct Workload {
    pub(crate) tables: Tables,
    pub(crate) source: Source,
    /// Where puts keep their written tokens for the readers of every worker.
    pub(crate) tokens: Tokens,
    pub(crate) recorder: Recorder,
    /// This worker's number: it picks which of its tables' batch loaders leave gone rows out.
    pub(crate) process: u32,
    /// Ids per table.
    pub(crate) keys: u32,
    /// Percent of calls that are reads.
    pub(crate) reads: u32,
    /// Reads refused rather than answered ([`declined`]), which the history leaves out: counted
    /// for the worker's stderr, to show the run took those paths.
    pub(crate) declined: std::sync::atomic::AtomicU64,
    /// Every call a write from now on: the controller is about to kill this worker
    /// (`kill-worker`), and wants writes on their way when it does.
    pub(crate) writes_only: AtomicBool,
}

impl Workload {
    /// One task's calls until `stop`: `reads` percent reads, the rest writes, over the hot ids.
    pub(crate) async fn calls(self: Arc<Self>, seed: u64, stop: Arc<AtomicBool>) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        while !stop.load(Ordering::SeqCst) {
            let table = rng.random_range(0..TABLES.len() as u8);
            let writing = self.writes_only.load(Ordering::Relaxed);
            if !writing && rng.random_range(0..100) < self.reads {
                if rng.random_range(0..BATCH_EVERY) == 0 {
                    let ids = self.batch_ids(&mut rng);
                    self.read_many(table, &ids).await;
                } else if rng.random_range(0..PEEK_EVERY) == 0 {
                    let local = rng.random_bool(0.5);
                    self.peek(table, rng.random_range(0..self.keys), local)
                        .await;
                } else if rng.random_range(0..AT_LEAST_EVERY) == 0 {
                    self.read_at_least(table, rng.random_range(0..self.keys))
                        .await;
                } else if rng.random_range(0..OWN_OPTIONS_EVERY) == 0 {
                    let losers = own_losers(rng.random_range(0..4));
                    self.read_with(table, rng.random_range(0..self.keys), losers)
                        .await;
                } else {
                    self.read(table, rng.random_range(0..self.keys)).await;
                }
            } else if rng.random_range(0..GROUP_WRITE_EVERY) == 0 {
                let group = (rng.random_range(0..4) > 0).then(|| rng.random_range(0..TAG_GROUPS));
                self.group_write(table, group).await;
            } else {
                let action = match rng.random_range(0..25) {
                    0..PUTS_OF_25 => Action::Put,
                    PUTS_OF_25..INVALIDATES_UP_TO => Action::Invalidate,
                    _ => Action::Delete,
                };
                self.write(table, rng.random_range(0..self.keys), action)
                    .await;
            }
            let pause = rng.random_range(0..=2);
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }

    /// Distinct random ids for one batch read.
    fn batch_ids(&self, rng: &mut impl Rng) -> Vec<u32> {
        let keys = self.keys as usize;
        let n = if rng.random_range(0..LARGE_BATCH_EVERY) == 0 {
            rng.random_range(LARGE_BATCH_IDS)
        } else {
            rng.random_range(BATCH_IDS)
        };
        let n = n.min(keys);
        rand::seq::index::sample(rng, keys, n)
            .into_iter()
            .map(|i| i as u32)
            .collect()
    }

    async fn read(&self, table: u8, id: u32) {
        let start = now_ns();
        let answer = bounded(self.tables.read(table, id)).await;
        self.record_read(table, id, (start, 0), answer);
    }

    /// One read of `id` with options of its own: `losers` for a flight it starts, and
    /// [`OWN_WAIT`](super::tables::OWN_WAIT) at most to wait (past it the flight goes on for its
    /// other callers).
    async fn read_with(&self, table: u8, id: u32, losers: LoserPolicy<u64>) {
        let start = now_ns();
        let answer = bounded(self.tables.read_with(table, id, losers)).await;
        self.record_read(table, id, (start, 0), answer);
    }

    /// One read that must see at least a version of `id`, recorded with it (the model's
    /// `at_least` rule): on a [`VERSIONED`] table the source's version when it began, as a
    /// service that changed the row without a put asks (a plain read while the row is gone);
    /// on the other, a recent put's written token, as a replica handed the writer's token asks
    /// (a plain read if no put kept one).
    async fn read_at_least(&self, table: u8, id: u32) {
        let start = now_ns();
        let wanted = if VERSIONED[usize::from(table)] {
            let Ok(version) = self.source.read(table, id).await else {
                return;
            };
            // A caller carries the token of a write that made the row, never of its deletion.
            if is_gone(table, version) {
                return self.read(table, id).await;
            }
            (version, Version::from_source(version))
        } else {
            let Some(kept) = self.tokens.recent(table, id).await else {
                return self.read(table, id).await;
            };
            kept
        };
        let answer = bounded(self.tables.read_at_least(table, id, wanted.1)).await;
        self.record_read(table, id, (start, wanted.0), answer);
    }

    /// One `peek` (L1, then Valkey), or one in two a `peek_local` (this process's L1 alone),
    /// recorded as a read when it found a copy (what it answers must obey every rule a read's
    /// does); a peek that found nothing promises nothing and is not recorded.
    async fn peek(&self, table: u8, id: u32, local: bool) {
        let start = now_ns();
        if local {
            if let Some(found) = self.tables.peek_local(table, id) {
                self.record_read(table, id, (start, 0), Ok(found));
            }
            return;
        }
        let answer = match bounded(self.tables.peek(table, id)).await {
            Ok(Some(found)) => Ok(found),
            Ok(None) => return,
            Err(e) => Err(e),
        };
        self.record_read(table, id, (start, 0), answer);
    }

    /// Records one single read of `id`, begun at `from.0` and made at least version `from.1` (0:
    /// a plain read), that answered `answer`.
    fn record_read(
        &self,
        table: u8,
        id: u32,
        from: (u64, u64),
        answer: echostore::Result<(u64, String)>,
    ) {
        if declined(&answer) {
            self.declined.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let (start, at_least) = from;
        let (version, ok, origin) = match answer {
            Ok((version, origin)) => (version, true, origin),
            Err(e) => (0, false, e.to_string()),
        };
        self.recorder.record(Op {
            version,
            ok,
            origin,
            at_least,
            ..call(table, id, Action::Read, (start, now_ns()))
        });
    }

    /// One `fetch_many` of `ids`, recorded as a read of each with the batch's start and end: an
    /// id whose answer is an error, or missing where no id can be absent, or a batch cut off, is
    /// a failed read. Missing where this worker's batch loader leaves gone rows out, it is a read
    /// of [`GONE`] ([`ABSENT`]), which the model holds to the rules a `None` is held to.
    async fn read_many(&self, table: u8, ids: &[u32]) {
        let start = now_ns();
        let answers = tokio::time::timeout(CALL_LIMIT, self.tables.read_many(table, ids)).await;
        let end = now_ns();
        let cut_off = answers.is_err();
        let answers = answers.unwrap_or_default();
        for &id in ids {
            let answer = answers.iter().find(|(a, _)| *a == id).map(|(_, a)| a);
            if answer.is_some_and(declined) {
                self.declined.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let (version, ok, origin) = match answer {
                Some(Ok((version, origin))) => (*version, true, origin.clone()),
                Some(Err(e)) => (0, false, e.to_string()),
                None if cut_off => (0, false, format!("cut off after {CALL_LIMIT:?}")),
                None if leaves_out(self.process, table) => (GONE, true, ABSENT.to_owned()),
                None => (0, false, LEFT_OUT.to_owned()),
            };
            self.recorder.record(Op {
                version,
                ok,
                origin,
                batch: true,
                ..call(table, id, Action::Read, (start, end))
            });
        }
    }

    /// A put, invalidate or delete of one id, after moving the source on (a delete on an
    /// optional table to a version that is a row gone at the source).
    async fn write(&self, table: u8, id: u32, action: Action) {
        let start = now_ns();
        let begun = self.begun(table, action, start);
        let moved = match action {
            Action::Delete if OPTIONAL[usize::from(table)] => {
                self.source.delete(table, id, begun).await
            }
            _ => self.source.bump(table, id, begun).await,
        };
        let Ok(version) = moved else {
            return;
        };
        let done = match action {
            Action::Put => match bounded(self.tables.put(table, id, version)).await {
                Ok(Some(written)) => {
                    self.tokens.keep(table, id, version, written).await;
                    Ok(())
                }
                done => done.map(drop),
            },
            Action::Delete => bounded(self.tables.delete(table, id)).await,
            _ => bounded(self.tables.invalidate(table, id)).await,
        };
        // A put that found a newer version on Valkey (`Superseded`) changed nothing because its
        // version was already overtaken: what it promises (this process reads it or newer)
        // holds, so it is a write that returned, not a failed one.
        let (ok, origin) = match done {
            Ok(()) => (true, String::new()),
            Err(e) if e.is_superseded() => (true, String::new()),
            Err(e) => (false, e.to_string()),
        };
        self.recorder.record(Op {
            version,
            ok,
            origin,
            ..call(table, id, action, (start, now_ns()))
        });
    }

    /// A group write: every id of the group (those tagged `g<group>`, or every id for `None`) is
    /// moved on at the source, then the group is invalidated in one call, recorded as an
    /// invalidate of each id: to the model it is that many writes, made at once.
    async fn group_write(&self, table: u8, group: Option<u32>) {
        let start = now_ns();
        let ids = (0..self.keys).filter(|id| group.is_none_or(|g| id % TAG_GROUPS == g));
        let begun = self.begun(table, Action::Invalidate, start);
        let moved = self.source.bump_many(table, ids.collect(), begun).await;
        let done = bounded(self.tables.invalidate_group(table, group)).await;
        let end = now_ns();
        let error = done.as_ref().err().map(ToString::to_string);
        for (id, version) in moved {
            self.recorder.record(Op {
                version,
                ok: done.is_ok(),
                origin: error.clone().unwrap_or_default(),
                ..call(table, id, Action::Invalidate, (start, end))
            });
        }
    }
}

impl Workload {
    /// What records, for a write begun at `start`, each row it is about to move ([`Begun`]):
    /// recorded before the row moves, so a worker killed at any point after leaves the model
    /// the write ([`BEGUN`]).
    fn begun(&self, table: u8, action: Action, start: u64) -> Begun {
        let recorder = self.recorder.clone();
        Arc::new(move |id, version| {
            recorder.record(Op {
                version,
                origin: BEGUN.to_owned(),
                ..call(table, id, action, (start, start))
            });
        })
    }
}

/// An operation of this worker on one id, from `span.0` to `span.1`, that returned `Ok` with
/// version 0: the caller fills in the rest.
fn call(table: u8, id: u32, action: Action, span: (u64, u64)) -> Op {
    Op {
        process: 0,
        table,
        id,
        action,
        version: 0,
        ok: true,
        origin: String::new(),
        batch: false,
        at_least: 0,
        start: span.0,
        end: span.1,
    }
}

/// A call cut off after [`CALL_LIMIT`] (a black-holed link) counts as failed.
async fn bounded<T>(call: impl Future<Output = echostore::Result<T>>) -> echostore::Result<T> {
    tokio::time::timeout(CALL_LIMIT, call)
        .await
        .unwrap_or(Err(Error::WaitTimeout { waited: CALL_LIMIT }))
}

/// A read's own loser policy, by `pick` (0..4): each of the four.
fn own_losers(pick: u32) -> LoserPolicy<u64> {
    match pick {
        0 => LoserPolicy::ServeStale,
        1 => LoserPolicy::FailFast,
        2 => LoserPolicy::Default(PLACEHOLDER),
        _ => LoserPolicy::Poll {
            every: Duration::from_millis(5),
            up_to: Duration::from_secs(1),
        },
    }
}
