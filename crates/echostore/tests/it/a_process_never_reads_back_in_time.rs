//! A process never reads back in time: once one of its reads answered a version, no later read
//! in it answers an older one, even while another process's push is late.
//!
//! The race: a read of `id` is under way (on the caller's task, or in the owner's flight) when
//! this process `put`s `id` — the put overtakes the read and its value enters L1 — and then
//! another process writes a newer value, whose push has not arrived. If the overtaken read then
//! meets the newer value on Valkey and answers it, the next read answers the put's older value
//! from L1. Found by `echostore check --faults all` (a push lost to a killed tracking connection);
//! here the push is only held at a proxy, and the read is held inside the key's `render`, which
//! runs on whatever task reads Valkey for it.

use crate::common;

use std::borrow::Cow;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use common::{Proxy, coherent_store, on_task, until, valkey};
use echostore::{Key, Store, Table};
use tokio::sync::watch;

/// Holds a read inside the key's `render`: the `from`-th render of a gated key and every later
/// one wait until the test opens the gate.
struct Gate {
    renders: AtomicUsize,
    from: usize,
    arrived: AtomicBool,
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    fn holding_render(from: usize) -> Arc<Gate> {
        Arc::new(Gate {
            renders: AtomicUsize::new(0),
            from,
            arrived: AtomicBool::new(false),
            open: Mutex::new(false),
            opened: Condvar::new(),
        })
    }

    fn pass(&self) {
        if self.renders.fetch_add(1, Ordering::SeqCst) + 1 < self.from {
            return;
        }
        self.arrived.store(true, Ordering::SeqCst);
        // The runtime's worker hands its queued tasks to another thread while this one waits.
        tokio::task::block_in_place(|| {
            let open = self.open.lock().expect("gate");
            drop(self.opened.wait_while(open, |open| !*open).expect("gate"));
        });
    }

    fn open(&self) {
        *self.open.lock().expect("gate") = true;
        self.opened.notify_all();
    }
}

/// An id that equals and hashes by `n` alone; a copy carrying a gate waits there when rendered.
#[derive(Clone)]
struct Id {
    n: u64,
    gate: Option<Arc<Gate>>,
}

impl Id {
    fn plain(n: u64) -> Id {
        Id { n, gate: None }
    }
}

impl PartialEq for Id {
    fn eq(&self, other: &Id) -> bool {
        self.n == other.n
    }
}

impl Eq for Id {}

impl Hash for Id {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.n.hash(state);
    }
}

impl std::fmt::Debug for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.n)
    }
}

impl Key for Id {
    fn render(&self) -> Cow<'_, [u8]> {
        if let Some(gate) = &self.gate {
            gate.pass();
        }
        Cow::Owned(self.n.to_string().into_bytes())
    }
}

/// Table `back` on `store`: a minute's ttl, and a loader that answers 0.
async fn table(store: &Store) -> Table<Id, u64> {
    store
        .table::<Id, u64>("back")
        .ttl(Duration::from_secs(60))
        .jitter(0.0)
        .loader(|_id: Id| async { Ok::<_, std::io::Error>(0) })
        .build()
        .await
        .expect("table")
}

/// Runs the race with the read held at its `from`-th render: 1 is the read a miss makes on the
/// caller's task, 2 the owner's flight it hands an empty value to. Answers the held read's value
/// and the next read's.
async fn race(from: usize) -> (u64, u64) {
    let valkey = valkey();
    let proxy = Proxy::start(&valkey.url()).await;
    let here = table(&coherent_store(&proxy.url(), None).await).await;
    let elsewhere = table(&coherent_store(&valkey.url(), None).await).await;

    let gate = Gate::holding_render(from);
    let held = Id {
        n: 1,
        gate: Some(Arc::clone(&gate)),
    };
    let reader = here.clone();
    let read = tokio::spawn(async move { *reader.get(&held).await.expect("held read") });
    until("the read is held", || gate.arrived.load(Ordering::SeqCst)).await;

    here.put(&Id::plain(1), 1).await.expect("put here");
    proxy.hold_pushes();
    elsewhere
        .put(&Id::plain(1), 2)
        .await
        .expect("put elsewhere");
    gate.open();
    let first = read.await.expect("read task");
    let next = *here.get(&Id::plain(1)).await.expect("next read");
    proxy.release_pushes();
    (first, next)
}

/// A read on the caller's task that a put overtook answers nothing newer than L1 then keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_overtaken_read_on_the_callers_task_does_not_answer_ahead_of_l1() {
    let (first, next) = race(1).await;
    assert!(
        next >= first,
        "read version {first}, then the older {next} from L1"
    );
}

/// A flight that a put overtook answers nothing newer than L1 then keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_overtaken_flight_does_not_answer_ahead_of_l1() {
    let (first, next) = race(2).await;
    assert!(
        next >= first,
        "read version {first}, then the older {next} from L1"
    );
}

/// A flight overtaken by a push answers what L1 holds when it lands, not what it read: here the
/// overtaken flight reads a newer row than the one a later flight of the same process put in
/// L1, and answering that row would leave L1 behind what the process had answered (the next read
/// would go back to the older one). Found by `echostore check --faults all` under the `proxy`
/// fault, where a flight stuck on a slow link loaded last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overtaken_flight_that_read_a_newer_row_answers_l1() {
    use std::sync::atomic::AtomicU64;
    let valkey = valkey();
    let row = Arc::new(AtomicU64::new(1));
    let calls = Arc::new(AtomicUsize::new(0));
    let first_load = Arc::new(tokio::sync::Notify::new());
    let store = coherent_store(&valkey.url(), None).await;
    let here = store
        .table::<u64, String>("overtaken")
        .ttl(Duration::from_secs(60))
        .loader({
            let (row, calls, first_load) = (row.clone(), calls.clone(), first_load.clone());
            move |_id: u64| {
                let (row, calls, first_load) = (row.clone(), calls.clone(), first_load.clone());
                async move {
                    if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                        first_load.notified().await;
                    }
                    Ok::<_, std::io::Error>(format!("v{}", row.load(Ordering::SeqCst)))
                }
            }
        })
        .build()
        .await
        .expect("table");
    let other = coherent_store(&valkey.url(), None)
        .await
        .table::<u64, String>("overtaken")
        .ttl(Duration::from_secs(60))
        .loader(|_id: u64| async move { Ok::<_, std::io::Error>("never".to_owned()) })
        .build()
        .await
        .expect("table");

    let overtaken = on_task(&here, |here| async move {
        here.get(&1).await.expect("read").to_string()
    });
    until("the first flight is loading", || {
        calls.load(Ordering::SeqCst) == 1
    })
    .await;
    // The other process writes v1 (the source is at 1): its push overtakes the loading flight.
    other.put(&1, "v1".to_owned()).await.expect("put");
    common::until_stats(&here, "the put's push arrived", |s| s.invalidations >= 1).await;
    assert_eq!(
        here.get(&1).await.expect("read").as_str(),
        "v1",
        "a new flight, from Valkey"
    );
    // The source moves on, and only then does the overtaken flight read it.
    row.store(2, Ordering::SeqCst);
    first_load.notify_one();
    let answered = overtaken.await.expect("task");
    let next = here.get(&1).await.expect("read");
    assert_eq!(
        (answered.as_str(), next.as_str()),
        ("v1", "v1"),
        "the overtaken flight answers what L1 holds, so the next read does not go back"
    );
}

/// When a gated loader reads the source's row: before its first call waits at the gate, or after.
#[derive(Clone, Copy)]
enum Reads {
    BeforeTheGate,
    AfterTheGate,
}

/// One process's view of a source whose row both processes share: its loader's calls, and the
/// gate its first call waits at, reading the row as `reads` says.
#[derive(Clone)]
struct GatedSource {
    row: Arc<std::sync::atomic::AtomicU64>,
    calls: Arc<AtomicUsize>,
    gate: Arc<tokio::sync::Notify>,
    reads: Reads,
}

impl GatedSource {
    fn new(row: &Arc<std::sync::atomic::AtomicU64>, reads: Reads) -> GatedSource {
        GatedSource {
            row: Arc::clone(row),
            calls: Arc::new(AtomicUsize::new(0)),
            gate: Arc::new(tokio::sync::Notify::new()),
            reads,
        }
    }

    /// One loader call: the row as `v<row>`.
    async fn read(&self) -> String {
        let read_now = || format!("v{}", self.row.load(Ordering::SeqCst));
        let early = matches!(self.reads, Reads::BeforeTheGate).then(read_now);
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            self.gate.notified().await;
        }
        early.unwrap_or_else(read_now)
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn open(&self) {
        self.gate.notify_one();
    }
}

/// A table `overtaken` on its own store at `url`, loading from `source`: id by id, or with
/// `batch` one call for every id.
async fn gated_table(url: &str, source: &GatedSource, batch: bool) -> Table<u64, String> {
    let builder = coherent_store(url, None)
        .await
        .table::<u64, String>("overtaken")
        .ttl(Duration::from_secs(60));
    let source = source.clone();
    let table = if batch {
        builder
            .batch_loader(move |ids: Vec<u64>| {
                let source = source.clone();
                async move {
                    let read = source.read().await;
                    let rows = ids.into_iter().map(|id| (id, read.clone()));
                    Ok::<_, std::io::Error>(rows.collect::<std::collections::HashMap<_, _>>())
                }
            })
            .build()
            .await
    } else {
        builder
            .loader(move |_id: u64| {
                let source = source.clone();
                async move { Ok::<_, std::io::Error>(source.read().await) }
            })
            .build()
            .await
    };
    table.expect("table")
}

/// The race of the two tests below: this process's read of id 1 (with `batch`, of ids 1 and 2
/// in one batch) holds the lock and loads; another process writes the id (dropping that lock;
/// its push overtakes the flight) and invalidates it, and its own read takes the lock and reads
/// the source's row 1; the source moves to row 2, and this process's load reads it, finds its
/// lock gone and nothing on Valkey, and answers (or waits for the lock's new holder); only then
/// does the other process write row 1. Answers what this process's read answered for id 1, its
/// next read's, and each process's loader calls.
async fn lost_lock_race(batch: bool) -> (String, String, usize, usize) {
    let valkey = valkey();
    let row = Arc::new(std::sync::atomic::AtomicU64::new(1));
    let (here_source, there_source) = (
        GatedSource::new(&row, Reads::AfterTheGate),
        GatedSource::new(&row, Reads::BeforeTheGate),
    );
    let here = gated_table(&valkey.url(), &here_source, batch).await;
    let there = gated_table(&valkey.url(), &there_source, false).await;

    let overtaken = on_task(&here, move |here| async move {
        if batch {
            let found = here.get_many([1, 2]).await.expect("batch read");
            found[&1].to_string()
        } else {
            here.get(&1).await.expect("read").to_string()
        }
    });
    until("this process's load runs", || here_source.calls() == 1).await;
    there.put(&1, "v0".to_owned()).await.expect("put");
    common::until_stats(&here, "the put's push arrived", |s| s.invalidations >= 1).await;
    there.invalidate(&1).await.expect("invalidate");
    let other = on_task(&there, |there| async move {
        there.get(&1).await.expect("read there").to_string()
    });
    until("the other process's load runs", || {
        there_source.calls() == 1
    })
    .await;
    row.store(2, Ordering::SeqCst);
    here_source.open();
    until("this process's read answered or waits", || {
        let s = here.stats();
        overtaken.is_finished() || s.poll_waits + s.push_wakeups >= 1
    })
    .await;
    there_source.open();
    assert_eq!(other.await.expect("task"), "v1");
    let answered = overtaken.await.expect("task");
    let next = here.get(&1).await.expect("read").to_string();
    (answered, next, here_source.calls(), there_source.calls())
}

/// A flight whose lock was taken over while it loaded answers the new holder's copy, not what it
/// read: the holder read an older row first and writes it after this flight's load, and
/// answering the newer row would make the next read, which finds the older one on Valkey, go
/// back. Found by `echostore check --faults all`, where a flight detached by a restart's flush
/// loaded while a batch flight that had read the source before it held the new lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flight_that_lost_its_lock_answers_the_new_holders_value() {
    assert_eq!(
        lost_lock_race(false).await,
        ("v1".to_owned(), "v1".to_owned(), 1, 1),
        "the flight answers the holder's copy (so the next read does not go back), read from Valkey"
    );
}

/// The same for a member of a batch read, whose batch loaded it with another id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_member_that_lost_its_lock_answers_the_new_holders_value() {
    assert_eq!(
        lost_lock_race(true).await,
        ("v1".to_owned(), "v1".to_owned(), 1, 1),
        "the member answers the holder's copy (so the next read does not go back), read from Valkey"
    );
}

/// A source whose n-th read (1-based) answers n, the first two once the test opens their gates.
#[derive(Clone)]
struct Held {
    calls: Arc<AtomicUsize>,
    gates: Arc<[watch::Sender<bool>; 2]>,
}

impl Held {
    fn new() -> Held {
        Held {
            calls: Arc::default(),
            gates: Arc::new([watch::Sender::new(false), watch::Sender::new(false)]),
        }
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn open(&self, n: usize) {
        self.gates[n - 1].send_replace(true);
    }

    async fn read(self) -> Result<u64, std::io::Error> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(gate) = self.gates.get(n - 1) {
            let _ = gate.subscribe().wait_for(|open| *open).await;
        }
        Ok(n as u64)
    }
}

/// Table `kept` on `store`, loaded from `source`.
async fn held_table(store: &Store, source: &Held) -> Table<u64, u64> {
    let source = source.clone();
    store
        .table::<u64, u64>("kept")
        .ttl(Duration::from_secs(60))
        .jitter(0.0)
        .loader(move |_id: u64| source.clone().read())
        .build()
        .await
        .expect("table")
}

/// Table `kept` on `store`, whose loader fails once `gate` opens.
async fn failing_table(store: &Store, gate: &watch::Sender<bool>) -> Table<u64, u64> {
    let gate = gate.clone();
    store
        .table::<u64, u64>("kept")
        .ttl(Duration::from_secs(60))
        .loader(move |_id: u64| {
            let mut open = gate.subscribe();
            async move {
                let _ = open.wait_for(|open| *open).await;
                Err::<u64, _>(std::io::Error::other("the source is down"))
            }
        })
        .build()
        .await
        .expect("table")
}

/// A flight whose write was fenced out, and which found nothing on Valkey to take instead, answers
/// what L1 holds when L1 holds a fresh value: that is what this process's next read answers, and
/// the change that dropped the flight's lock may not have been pushed here yet (so L1 still holds
/// what came before it). Answering its own row instead, the next read went back to L1's. Found by
/// `echostore check --faults all` (120 s, six processes): `read by p0 of t1 (moka L1) id 1 at
/// 29.333 s (l1) returned v2637` just after p0's batch had answered v2639, its write fenced out by
/// a delete whose push had not arrived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flight_kept_nowhere_answers_what_l1_holds() {
    let valkey = valkey();
    let proxy = Proxy::start(&valkey.url()).await;
    let source = Held::new();
    let here = held_table(&coherent_store(&proxy.url(), None).await, &source).await;
    let there = held_table(&coherent_store(&valkey.url(), None).await, &source).await;

    // The first read's flight loads, held; another process's put and invalidate drop its lock
    // and leave nothing on Valkey, and their pushes detach it; a second read's flight takes the
    // lock and loads, held too.
    let first = on_task(&here, |t| async move { *t.get(&1).await.expect("first") });
    until("the first flight loads", || source.calls() == 1).await;
    there.put(&1, 50).await.expect("put");
    there.invalidate(&1).await.expect("invalidate");
    common::until_stats(&here, "both pushes are handled", |s| s.invalidations >= 2).await;
    let second = on_task(&here, |t| async move { *t.get(&1).await.expect("second") });
    until("the second flight loads", || source.calls() == 2).await;

    // The first flight, fenced out (the second holds the lock), waits for the holder's copy.
    source.open(1);
    common::until_stats(&here, "the first flight polls", |s| s.poll_waits >= 1).await;
    // This process's pushes held from now on: a put elsewhere drops the second flight's lock,
    // and the first flight takes its copy from Valkey, which L1 keeps.
    proxy.hold_pushes();
    there.put(&1, 100).await.expect("put");
    assert_eq!(first.await.expect("task"), 100);
    assert_eq!(
        here.peek_local(&1).as_deref(),
        Some(&100),
        "L1 holds the put's"
    );
    // Another invalidate leaves nothing on Valkey, and a third process takes the lock for a load
    // that will fail: the second flight, fenced out too, waits for that holder's copy (reading
    // Valkey again, which lets it keep what it loaded), and finds nothing when the lock goes.
    there.invalidate(&1).await.expect("invalidate");
    let failing = watch::Sender::new(false);
    let third = failing_table(&coherent_store(&valkey.url(), None).await, &failing).await;
    let third_read = on_task(&third, |t| async move { t.get(&1).await.is_err() });
    common::until_stats(&third, "the third process loads", |s| s.lock_won >= 1).await;
    let polls = here.stats().poll_waits;
    source.open(2);
    common::until_stats(&here, "the second flight polls", |s| s.poll_waits > polls).await;
    failing.send_replace(true);
    assert!(
        third_read.await.expect("task"),
        "the third process's load failed"
    );
    let answered = second.await.expect("task");
    let next = *here.get(&1).await.expect("next");
    assert_eq!(
        next, answered,
        "the next read answers what the one before did"
    );
    proxy.release_pushes();
}
