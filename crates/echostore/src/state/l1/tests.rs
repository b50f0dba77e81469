//! L1's backends while a cap runs beside the owners' writes.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use super::*;

const LONG: Duration = Duration::from_secs(3600);

fn entry(version: u64) -> Entry<u64> {
    Entry::new(Arc::new(version), LONG, Duration::ZERO, Duration::ZERO)
}

/// An L1 of each backend and bound.
fn every_backend() -> Vec<(&'static str, L1<u64, u64>)> {
    let events = Arc::new(Events::new());
    let bytes = Bound::Bytes {
        capacity: 4096,
        weigher: Arc::new(|_: &u64, _: &u64| 8),
    };
    #[allow(unused_mut)]
    let mut l1s = vec![
        (
            "entries",
            L1::new(L1Backend::QuickCache, Bound::Entries(64), None, &events),
        ),
        (
            "bytes",
            L1::new(L1Backend::QuickCache, bytes, None, &events),
        ),
        (
            "idle",
            L1::new(
                L1Backend::QuickCache,
                Bound::Entries(64),
                Some(LONG),
                &events,
            ),
        ),
    ];
    #[cfg(feature = "moka")]
    l1s.push((
        "moka",
        L1::new(L1Backend::Moka, Bound::Entries(64), None, &events),
    ));
    l1s
}

/// A tracking connection's loss caps L1 from whichever task drops the last shard's share,
/// while the owners go on writing: the cap may shorten an entry's life or drop it, never put
/// back a copy that a write replaced or removed meanwhile (L1 would go back in time).
#[test]
fn a_cap_never_puts_back_what_a_write_replaced_or_removed() {
    for (backend, l1) in every_backend() {
        let l1 = Arc::new(l1);
        // Other entries, so that each pass of the cap takes a while.
        for other in 1..32 {
            l1.insert(other, entry(other));
        }
        let done = Arc::new(AtomicBool::new(false));
        let capper = {
            let (l1, done) = (Arc::clone(&l1), Arc::clone(&done));
            std::thread::spawn(move || {
                while !done.load(Relaxed) {
                    l1.cap(LONG / 2);
                }
            })
        };
        for version in 1..=20_000 {
            l1.insert(0, entry(version));
            let read = l1.get(&0).map(|e| *e.value);
            assert!(
                read.is_none_or(|read| read >= version),
                "{backend}: read v{read:?} after v{version} was stored"
            );
            l1.remove(&0);
            let read = l1.get(&0).map(|e| *e.value);
            assert_eq!(read, None, "{backend}: v{version}, removed, came back");
        }
        done.store(true, Relaxed);
        capper.join().expect("the cap panicked");
    }
}
