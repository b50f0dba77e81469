//! [`FlightId`]: the name of one flight, which every report of a flight carries, so that a late
//! completion cannot finish a newer flight of the same id.

/// Names one flight, so a late completion cannot finish a newer flight for the same id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FlightId(u64);

impl FlightId {
    /// The flight numbered `n` by the flights map that admits it.
    pub(crate) fn new(n: u64) -> Self {
        FlightId(n)
    }
}
