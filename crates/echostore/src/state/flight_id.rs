//! [`FlightId`]: the name of one flight, which every report of a flight carries, so that a late
//! completion cannot finish a newer flight of the same id.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Names one flight, so a late completion cannot finish a newer flight for the same id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FlightId(u64);

/// The next [`FlightId`], process-wide. A count per flights map would name a restarted owner's
/// flights as the crashed owner named its own, and those are still running: they land on their
/// own tasks, on the board the new owner lists its flights on.
static NEXT: AtomicU64 = AtomicU64::new(1);

impl FlightId {
    /// A name no other flight in this process has.
    pub(crate) fn next() -> Self {
        FlightId(NEXT.fetch_add(1, Relaxed))
    }
}
