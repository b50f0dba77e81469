//! The L1 hit counter: bumped on every hit, by every thread that reads the table, so it must cost
//! a hit next to nothing.
//!
//! An atomic add (`lock xadd` on x86) is a full barrier: the CPU may not start the next hit's
//! loads until it is done, which serialises a loop of hits whose cost is overlapping cache
//! misses. So each thread that counts takes a slot of its own, which it alone writes, and bumps it
//! with a plain load and store; a snapshot sums the slots. A slot goes back to a free list when
//! its thread exits and is handed to a later thread with its count (the list's lock orders the
//! two threads' accesses, so nothing is lost). Past [`OWNED`] threads at once, the rest share one
//! slot with atomic adds: slower for them, still exact.

use std::cell::Cell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crossbeam_utils::CachePadded;

/// Slots a thread may own; more than the threads that usually read one process's tables.
const OWNED: usize = 32;

/// The slot of threads past [`OWNED`] (or counting while their thread-local is torn down).
const SHARED: usize = OWNED;

/// Owned slots handed out so far, and those whose threads have exited.
static SLOTS: Mutex<Slots> = Mutex::new(Slots {
    handed: 0,
    free: Vec::new(),
});

struct Slots {
    handed: usize,
    free: Vec<usize>,
}

fn slots() -> std::sync::MutexGuard<'static, Slots> {
    // Nothing panics while the list is held: a poisoned lock's list is whole.
    SLOTS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A slot a thread owns, given back when the thread exits.
struct Slot(usize);

impl Slot {
    /// Takes a free slot for this thread and notes it in [`SLOT`].
    fn take() -> Slot {
        let mut slots = slots();
        let index = match slots.free.pop() {
            Some(free) => free,
            None if slots.handed < OWNED => {
                slots.handed += 1;
                slots.handed - 1
            }
            None => SHARED,
        };
        SLOT.with(|slot| slot.set(index));
        Slot(index)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Hits this thread still counts while it is torn down go to the shared slot: the owned
        // one may belong to another thread from the next line on.
        SLOT.with(|slot| slot.set(SHARED));
        if self.0 != SHARED {
            slots().free.push(self.0);
        }
    }
}

/// Not yet taken: the thread has counted nothing so far.
const UNSET: usize = usize::MAX;

thread_local! {
    /// This thread's slot index: a plain read on the hit path (no destructor, so no state check).
    static SLOT: Cell<usize> = const { Cell::new(UNSET) };
    /// The slot this thread owns, given back by its destructor.
    static OWNER: Slot = Slot::take();
}

/// This thread's slot, taken on its first count.
#[cold]
fn claim() -> usize {
    OWNER.try_with(|owner| owner.0).unwrap_or(SHARED)
}

/// A counter that many threads bump, each on a cache line of its own.
pub(crate) struct HitCounter {
    slots: Box<[CachePadded<AtomicU64>]>,
}

impl HitCounter {
    pub(crate) fn new() -> Self {
        HitCounter {
            slots: (0..=SHARED)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
        }
    }

    /// Adds one to this thread's slot.
    #[inline]
    pub(crate) fn incr(&self) {
        let mut owned = SLOT.with(Cell::get);
        if owned == UNSET {
            owned = claim();
        }
        if owned == SHARED {
            self.slots[SHARED].fetch_add(1, Relaxed);
        } else {
            // This thread alone writes the slot: no atomic add needed.
            let slot = &self.slots[owned];
            slot.store(slot.load(Relaxed).wrapping_add(1), Relaxed);
        }
    }

    /// Every hit counted so far (those being counted right now may be missed).
    pub(crate) fn sum(&self) -> u64 {
        self.slots.iter().map(|s| s.load(Relaxed)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Threads that come and go (more at once than there are slots to own, and more in all than
    /// ever live together) lose no hit: every slot has one writer at a time.
    #[test]
    fn threads_that_come_and_go_lose_no_hit() {
        let counter = HitCounter::new();
        for _wave in 0..3 {
            std::thread::scope(|s| {
                for _ in 0..OWNED + 8 {
                    s.spawn(|| (0..10_000).for_each(|_| counter.incr()));
                }
            });
        }
        assert_eq!(counter.sum(), 3 * (OWNED as u64 + 8) * 10_000);
    }
}
