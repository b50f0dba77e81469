//! What a read returns: the value and where it came from.

use std::sync::Arc;
use std::time::Duration;

/// Where the answer to a read came from, like the Elixir EchoStore's `:hit | :l2 | :fill`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[non_exhaustive]
pub enum Origin {
    /// This process's L1, on the caller's task.
    L1,
    /// A fresh copy on Valkey, read by this caller's flight.
    L2,
    /// The loader: this caller's flight read the source.
    Loaded,
    /// Another caller's flight, already running for the same id, which this caller joined.
    /// Stale and default answers keep their own origin, so a joined caller still learns that.
    Coalesced,
    /// A stale copy: another process held the lock and the table serves stale, or the loader
    /// failed and the table is fail-safe. [`Fetched::stale_by`] says how stale.
    Stale,
    /// The loser policy's placeholder; it was written to no cache.
    Default,
}

impl Origin {
    /// The origin as a lowercase word: `"l1"`, `"l2"`, `"loaded"`, `"coalesced"`, `"stale"`,
    /// `"default"` (what `Display` prints: ready for a log field or a metrics label).
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::L1 => "l1",
            Origin::L2 => "l2",
            Origin::Loaded => "loaded",
            Origin::Coalesced => "coalesced",
            Origin::Stale => "stale",
            Origin::Default => "default",
        }
    }
}

/// The lowercase word of [`Origin::as_str`].
///
/// ```
/// assert_eq!(echostore::Origin::Coalesced.to_string(), "coalesced");
/// ```
impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A value with its [`Origin`], from [`Table::fetch`](crate::Table::fetch).
#[derive(Debug)]
pub struct Fetched<V> {
    /// The value, shared with every other caller that received the same answer.
    pub value: Arc<V>,
    /// Where it came from.
    pub origin: Origin,
    /// For a stale answer: how long past its freshness the copy was when served.
    pub stale_by: Option<Duration>,
}

impl<V> Clone for Fetched<V> {
    fn clone(&self) -> Self {
        Fetched {
            value: Arc::clone(&self.value),
            origin: self.origin,
            stale_by: self.stale_by,
        }
    }
}

impl<V> Fetched<V> {
    pub(crate) fn new(value: Arc<V>, origin: Origin) -> Self {
        Fetched {
            value,
            origin,
            stale_by: None,
        }
    }

    /// The same answer as seen by a caller that joined the flight instead of leading it.
    fn for_joiner(mut self) -> Self {
        if matches!(self.origin, Origin::L2 | Origin::Loaded | Origin::L1) {
            self.origin = Origin::Coalesced;
        }
        self
    }
}

/// A flight's answer as one of its callers received it: the flight's own, and whether this
/// caller joined the flight rather than leading it. The caller is shown [`Answered::shown`]
/// (`Coalesced` for a joiner); a read that must know where the flight took its answer from (a
/// read at least a version: `crate::handle::at_least`) looks at `flight`'s origin.
pub(crate) struct Answered<V> {
    pub(crate) flight: Fetched<V>,
    pub(crate) joined: bool,
}

impl<V> Answered<V> {
    /// The answer of a flight this caller led, or of no flight (an L1 or L2 hit of its own).
    pub(crate) fn own(flight: Fetched<V>) -> Self {
        Answered {
            flight,
            joined: false,
        }
    }

    /// What the caller is shown.
    pub(crate) fn shown(self) -> Fetched<V> {
        match self.joined {
            true => self.flight.for_joiner(),
            false => self.flight,
        }
    }
}
