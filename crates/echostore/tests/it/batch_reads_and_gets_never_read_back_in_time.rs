//! Six stores on one Valkey read four hot ids with gets and batch reads mixed, while puts move the
//! ids on from every store and short lives keep flights, losers and pushes busy: no store ever
//! answers a version older than one it answered to a read that had already returned. (Found by an
//! adversarial run: a polling loser overtaken by a push stored its older value over a newer copy
//! a caller had read, and an overtaken flight answered a newer value while the current flight,
//! which had read before, went on answering the older one.)

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::valkey;
use echostore::{Store, Table, Tracking};

const STORES: usize = 6;
const IDS: u64 = 4;
/// How long a load takes after it read the source: long enough for puts and pushes to overtake
/// it, and for other stores to lose its lock and poll.
const LOAD_TAKES: Duration = Duration::from_millis(5);
/// Puts before the run ends: a count, not a time (a put every few milliseconds).
const WRITES: u64 = 3_000;

/// The source: each id's current version.
#[derive(Clone, Default)]
struct Versions(Arc<[AtomicU64; IDS as usize]>);

impl Versions {
    fn of(&self, id: u64) -> u64 {
        self.0[id as usize].load(SeqCst)
    }

    fn bump(&self, id: u64) -> u64 {
        self.0[id as usize].fetch_add(1, SeqCst) + 1
    }
}

async fn table(store: &Store, source: &Versions) -> Table<u64, u64> {
    let (one, many) = (source.clone(), source.clone());
    store
        .table::<u64, u64>("mono")
        .ttl(Duration::from_millis(150))
        .batch_loader(move |ids: Vec<u64>| {
            let source = many.clone();
            async move {
                let read: HashMap<u64, u64> =
                    ids.into_iter().map(|id| (id, source.of(id))).collect();
                tokio::time::sleep(LOAD_TAKES).await;
                Ok::<_, std::io::Error>(read)
            }
        })
        .loader(move |id: u64| {
            let source = one.clone();
            async move {
                let read = source.of(id);
                tokio::time::sleep(LOAD_TAKES).await;
                Ok::<_, std::io::Error>(read)
            }
        })
        .build()
        .await
        .expect("table")
}

/// One read's answer: when it started and ended, and the version it returned.
type Seen = (Instant, Instant, u64);

/// Reads of every id in `table`, gets and batch reads in turn, a millisecond apart, until the
/// writes are `done`.
async fn reader(
    table: Table<u64, u64>,
    turn: u64,
    done: Arc<AtomicBool>,
) -> HashMap<u64, Vec<Seen>> {
    let mut seen: HashMap<u64, Vec<Seen>> = HashMap::new();
    let mut n = turn;
    while !done.load(SeqCst) {
        tokio::time::sleep(Duration::from_millis(1)).await;
        n += 1;
        let start = Instant::now();
        if n.is_multiple_of(3) {
            let ids: Vec<u64> = (0..IDS).collect();
            if let Ok(found) = table.get_many(&ids).await {
                let end = Instant::now();
                for (id, v) in found {
                    seen.entry(id).or_default().push((start, end, *v));
                }
            }
        } else if let Ok(v) = table.get(&(n % IDS)).await {
            seen.entry(n % IDS)
                .or_default()
                .push((start, Instant::now(), *v));
        }
    }
    seen
}

/// Reads of one id in one store that went back: a read that began after another had ended, and
/// answered an older version.
fn back_in_time(reads: &[Seen]) -> usize {
    let mut sorted: Vec<&Seen> = reads.iter().collect();
    sorted.sort_by_key(|(start, _, _)| *start);
    let mut went_back = 0;
    for (i, (start, _, version)) in sorted.iter().enumerate() {
        let newest_before = sorted[..i]
            .iter()
            .filter(|(_, end, _)| end < start)
            .map(|(_, _, v)| *v)
            .max();
        if newest_before.is_some_and(|newest| *version < newest) {
            went_back += 1;
        }
    }
    went_back
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_reads_and_gets_never_read_back_in_time() {
    let _turn = common::heavy().await;
    let valkey = valkey();
    let source = Versions::default();
    let mut tables = Vec::new();
    for i in 0..STORES {
        // Half the stores track the keys they read, half every key of the table.
        let tracking = if i % 2 == 0 {
            Tracking::Keys
        } else {
            Tracking::Broadcast
        };
        let store = common::builder_on(&valkey.url())
            .require_valkey(true)
            .tracking(tracking)
            .build()
            .await
            .expect("store");
        common::until("tracking is up", || store.is_coherent()).await;
        tables.push(table(&store, &source).await);
    }
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = tables
        .iter()
        .enumerate()
        .map(|(i, t)| tokio::spawn(reader(t.clone(), i as u64, Arc::clone(&done))))
        .collect();
    for n in 0..WRITES {
        let id = n % IDS;
        let version = source.bump(id);
        let _ = tables[(n as usize) % STORES].put(&id, version).await;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    done.store(true, SeqCst);
    let mut went_back = 0;
    for reader in readers {
        let seen = reader.await.expect("a reader");
        went_back += seen
            .values()
            .map(|reads| back_in_time(reads))
            .sum::<usize>();
    }
    assert_eq!(went_back, 0, "reads that went back in time");
}
