//! The L1 hit taken apart: what a bare quick_cache lookup costs once it carries what a cache
//! entry must (a deadline) and checks it (a clock), each figure a ratio to the bare lookup of an
//! `Arc` in the same round.
//!
//! The contenders, in the async loop of the `peers` bench's L1 row (100k random `u64` keys,
//! 64-byte values, one task on a runtime worker):
//! - **bare `Arc`**: `quick_cache::sync::Cache<u64, Arc<String>>::get`, the baseline;
//! - **bare `Arc` + coarse clock**: the same, then the coarse monotonic clock compared with a
//!   constant (the clock read alone, as the library reads it on Linux: the vDSO called directly);
//! - **bare `Arc` + coarse clock via libc**: the same clock read through glibc's `clock_gettime`
//!   (as coarsetime reads it, and the library did before);
//! - **the table's `Arc`s, 32-byte entry + coarse clock**: the table's entry's shape holding the
//!   very values the table's L1 holds (where the values sit in memory, controlled for);
//! - **16-byte entry + coarse clock**: `(Arc, deadline)`, the smallest entry that can expire, its
//!   deadline checked on the coarse clock;
//! - **32-byte entry + coarse clock**: the table's entry's shape (`Arc` and three words);
//! - **16-byte entry + cached clock**: the deadline checked against a clock a thread would keep
//!   in an atomic (a plain load: the design the library rejects, since a stalled updater serves
//!   entries past their freshness);
//! - **16-byte entry, no clock**: the deadline compared with a constant (the entry's size alone);
//! - **the table's `peek_local`**: a second table's own L1 read (its quick_cache, its entry, the
//!   freshness check), without the read's future or the hit counter;
//! - **the table's hit**: `Table::get` on an L1 hit.
//!
//! Every contender reads a cache of its own, and values of its own but for the table's `Arc`s
//! row, which reads the table's by design and runs far from the table's hit in the rotation: run
//! right after another on the same data, a contender finds it in the CPU's caches and reads
//! faster for it.
//!
//! Each round runs every contender once in a rotated order; the figures are the medians of the
//! per-round ratios. No Valkey, no criterion: `cargo bench -p echostore-benches --bench l1_parts`.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use echostore::{L1Backend, Store};
use echostore_testkit::fixtures::value_of;
use echostore_testkit::measure::median;
use echostore_testkit::{filled_table, human, random_ids, runtime, size};

/// One contender: `iters` hits in one task, timed.
type Run<'a> = Box<dyn FnMut(usize) -> Duration + 'a>;

/// A bare quick_cache holding `T` for every id.
type Bare<T> = Arc<quick_cache::sync::Cache<u64, T>>;

/// The coarse monotonic clock, read as the library's hit path reads it on Linux: the vDSO called
/// directly.
#[inline(always)]
fn coarse() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
    coarsetime::Duration::new(now.tv_sec as u64, now.tv_nsec as u32).as_ticks()
}

/// The same clock read through glibc's `clock_gettime`, as coarsetime reads it.
#[inline(always)]
fn coarse_via_libc() -> u64 {
    coarsetime::Instant::now_without_cache_update().as_ticks()
}

/// What a clock kept by an updater thread would be read from.
static CACHED: AtomicU64 = AtomicU64::new(0);

/// A contender that runs `$hit` for each id of `$ids` from a moving offset, in one spawned task,
/// with `$state` cloned into it as `$s`.
macro_rules! contender {
    ($rt:expr, $ids:expr, $state:expr, |$s:ident, $id:ident| $hit:expr) => {{
        let (rt, ids, state) = ($rt, Arc::clone($ids), $state);
        Box::new(move |iters: usize| {
            let (ids, $s) = (Arc::clone(&ids), state.clone());
            rt.block_on(async move {
                tokio::spawn(async move {
                    let start = Instant::now();
                    let mut at = iters.wrapping_mul(7919) % ids.len();
                    for _ in 0..iters {
                        let $id = ids[at];
                        black_box($hit);
                        at = if at + 1 == ids.len() { 0 } else { at + 1 };
                    }
                    start.elapsed()
                })
                .await
                .expect("the timed task")
            })
        }) as Run<'_>
    }};
}

/// A bare cache holding `entry(id)` for every id of `0..keys`.
fn bare<T: Clone + Send + Sync + 'static>(keys: u64, entry: impl Fn(u64) -> T) -> Bare<T> {
    let cache = quick_cache::sync::Cache::new(keys as usize * 2);
    for id in 0..keys {
        cache.insert(id, entry(id));
    }
    Arc::new(cache)
}

/// Runs `rounds` rotated rounds of `batch` hits per contender; prints each one's median time per
/// hit and its median ratio to the first.
fn interleaved(contenders: &mut [(&str, Run<'_>)], batch: usize, rounds: usize) {
    let n = contenders.len();
    for (_, run) in contenders.iter_mut() {
        run(batch / 4);
    }
    let mut per_hit: Vec<Vec<f64>> = vec![Vec::new(); n];
    for round in 0..rounds {
        for k in 0..n {
            let at = (round + k) % n;
            let elapsed = (contenders[at].1)(batch);
            per_hit[at].push(elapsed.as_nanos() as f64 / batch as f64);
        }
    }
    println!("\nthe L1 hit taken apart ({rounds} rotated rounds of {batch} hits):");
    for (k, (name, _)) in contenders.iter().enumerate() {
        let ratios: Vec<f64> = per_hit[k]
            .iter()
            .zip(&per_hit[0])
            .map(|(this, base)| this / base)
            .collect();
        let (lo, hi) = ratios
            .iter()
            .fold((f64::INFINITY, 0.0_f64), |(lo, hi), &r| {
                (lo.min(r), hi.max(r))
            });
        println!(
            "  {name:36} {:>9}  {:.2}× (rounds {lo:.2}–{hi:.2}×)",
            human(median(&per_hit[k])),
            median(&ratios)
        );
    }
}

fn main() {
    let rt = runtime();
    let keys = size(100_000, 10_000) as u64;
    let ids = Arc::new(random_ids(keys, size(1 << 20, 1 << 16)));
    let store = rt.block_on(Store::builder().build()).expect("store");
    let all: Vec<u64> = (0..keys).collect();
    let table = rt
        .block_on(filled_table(
            &store,
            "parts",
            L1Backend::QuickCache,
            &all,
            value_of,
        ))
        .expect("a filled table");
    let far = coarse() + coarsetime::Duration::from_secs(3600).as_ticks();
    CACHED.store(coarse(), Ordering::Relaxed);
    // Each contender reads data of its own: one that ran right before on the same data would find
    // it in the CPU's caches and run faster for it, whatever its code.
    let arc = || bare(keys, |id| Arc::new(value_of(id)));
    let small = || bare(keys, |id| (Arc::new(value_of(id)), far));
    let shaped = bare(keys, |id| (Arc::new(value_of(id)), far, far, far));
    let peeked = rt
        .block_on(filled_table(
            &store,
            "parts-peeked",
            L1Backend::QuickCache,
            &all,
            value_of,
        ))
        .expect("a filled table");
    let its_own: Vec<Arc<String>> = all
        .iter()
        .map(|id| rt.block_on(table.get(id)).expect("an L1 hit"))
        .collect();
    let own_shaped = bare(keys, |id| {
        let value = Arc::clone(&its_own[id as usize]);
        (value, far, far, far)
    });
    let mut contenders: Vec<(&str, Run<'_>)> = vec![
        (
            "bare Arc",
            contender!(&rt, &ids, arc(), |c, id| c.get(&id).expect("in")),
        ),
        (
            "bare Arc + coarse clock",
            contender!(&rt, &ids, arc(), |c, id| {
                let hit = c.get(&id).expect("in");
                assert!(coarse() < far);
                hit
            }),
        ),
        (
            "bare Arc + coarse clock via libc",
            contender!(&rt, &ids, arc(), |c, id| {
                let hit = c.get(&id).expect("in");
                assert!(coarse_via_libc() < far);
                hit
            }),
        ),
        (
            "the table's Arcs, 32-byte + coarse",
            contender!(&rt, &ids, own_shaped, |c, id| {
                let (hit, until, _, _) = c.get(&id).expect("in");
                assert!(coarse() < until);
                hit
            }),
        ),
        (
            "16-byte entry + coarse clock",
            contender!(&rt, &ids, small(), |c, id| {
                let (hit, until) = c.get(&id).expect("in");
                assert!(coarse() < until);
                hit
            }),
        ),
        (
            "32-byte entry + coarse clock",
            contender!(&rt, &ids, shaped, |c, id| {
                let (hit, until, _, _) = c.get(&id).expect("in");
                assert!(coarse() < until);
                hit
            }),
        ),
        (
            "16-byte entry + cached clock",
            contender!(&rt, &ids, small(), |c, id| {
                let (hit, until) = c.get(&id).expect("in");
                assert!(CACHED.load(Ordering::Relaxed) < until);
                hit
            }),
        ),
        (
            "16-byte entry, no clock",
            contender!(&rt, &ids, small(), |c, id| {
                let (hit, until) = c.get(&id).expect("in");
                assert!(until > far / 2);
                hit
            }),
        ),
        (
            "the table's peek_local",
            contender!(&rt, &ids, peeked, |t, id| {
                t.peek_local(&id).expect("an L1 hit")
            }),
        ),
        (
            "the table's hit",
            contender!(&rt, &ids, table.clone(), |t, id| {
                t.get(&id).await.expect("an L1 hit")
            }),
        ),
    ];
    interleaved(&mut contenders, size(400_000, 20_000), 11);
}
