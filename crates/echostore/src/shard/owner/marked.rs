//! How the owner takes a clear or a tag invalidation (`crate::state::marks`), and a flush: what they
//! make stale leaves L1, and nothing read before them can come back.
//!
//! Ordered like a push: every running flight is overtaken first (it may be loading an entry the
//! change covers, and its tags are not known until it lands), so no read settles and no flight
//! stores after it; every write on its way to Valkey is marked as overtaken, so that its entry does
//! not enter L1 when it lands (Valkey may hold another value by then, or, for a mark, a copy
//! stamped before it); then L1 drops the entries: at once for a clear or a flush, and for a tag
//! once every shard has done the rest (`owner_ref::EveryShard::mark`).

use std::sync::Weak;

use super::*;
use crate::shard::owner::owner_ref::{EveryShard, OwnerRef};
use crate::valkey::l2::L2;

impl<K: Key, V: Value> OwnerState<K, V> {
    /// A mark of `scope` is known: drop what it makes stale.
    pub(super) fn marked(&mut self, scope: &Scope) {
        match scope {
            Scope::All => self.drop_all(),
            // L1 is swept once for the table, by the last shard's share of the mark
            // (`EveryShard::mark`): each shard only sees that nothing of its own stores after it.
            Scope::Tags(_) => {
                self.flights.overtake_all();
                self.overtake_writes();
            }
        }
    }

    /// A flush (tracking back, or the database flushed): drop everything, and, on one shard for
    /// all, read the marks (one set while pushes were lost would otherwise be heard of only at
    /// the next). Counted once every shard is done: whoever sees the count finds L1 flushed.
    pub(super) fn flushed(
        &mut self,
        myself: &ActorRef<OwnerMsg<K, V>>,
        flushed: Arc<EveryShard<K, V>>,
    ) {
        self.drop_all();
        self.own.clear(&self.flights);
        if self.shard == 0 {
            self.read_marks(myself, true);
        }
        drop(flushed);
    }

    /// A mark taken: drop what it covers, counted once every shard is done and before this
    /// shard answers, so that whoever sees the count, or has its `clear` answered, finds L1
    /// without what the mark covers.
    pub(super) fn took_mark(
        &mut self,
        scope: &Scope,
        reply: Option<RpcReplyPort<Result<()>>>,
        counted: Arc<EveryShard<K, V>>,
    ) {
        self.marked(scope);
        drop(counted);
        if let Some(reply) = reply {
            let _ = reply.send(Ok(()));
        }
    }

    /// Every entry may be stale (pushes lost, or the table cleared): drop all of L1.
    pub(super) fn drop_all(&mut self) {
        self.flights.overtake_all(); // before L1 changes: no read settles after
        self.core.l1.clear();
        self.core.boards.forget_unconfirmed(|| {});
        self.overtake_writes();
    }

    /// A tracking connection was lost: no running flight or write on the wire stores what it
    /// read or wrote (a push may have been missed); L1 itself is capped once for the table.
    pub(super) fn overtake_for_cap(&mut self, capped: Arc<EveryShard<K, V>>) {
        self.flights.overtake_all();
        self.overtake_writes();
        drop(capped); // the last shard's share caps L1
    }

    /// This owner replaced one that crashed: nothing it held is known, and a mark may have
    /// come meanwhile.
    pub(super) fn restarted(&mut self, myself: &ActorRef<OwnerMsg<K, V>>) {
        self.drop_all();
        self.read_marks(myself, true);
    }

    /// The writes on their way to Valkey keep nothing in L1 when they land.
    fn overtake_writes(&mut self) {
        self.flights.overtake_writes();
    }

    /// Reads the table's marks from Valkey off the owner: [`read_marks`].
    pub(super) fn read_marks(&self, myself: &ActorRef<OwnerMsg<K, V>>, full: bool) {
        read_marks(&self.core, myself.clone(), full);
    }
}

/// Reads the table's marks from Valkey on a task of its own (`full`: all of them, else those
/// above the latest known), and has every shard drop what a new one makes stale (`myself`: the
/// owner told when the table's owners are gone). Called where the need arises, a push or a
/// poll, not behind an owner's mailbox: until the read lands, what this process stamps or
/// judges waits for it (`crate::state::heard_marks`). A read that fails is retried in full,
/// quickly at first, until one lands ([`Marks::owes_full_read`]): a mark missed meanwhile is
/// heard of within `unconfirmed_l1_life` of Valkey answering again.
///
/// [`Marks::owes_full_read`]: crate::state::marks::Marks::owes_full_read
pub(crate) fn read_marks<K: Key, V: Value>(
    core: &Arc<TableCore<K, V>>,
    myself: ActorRef<OwnerMsg<K, V>>,
    full: bool,
) {
    let Some(l2) = core.l2.clone() else {
        return;
    };
    let core = Arc::downgrade(core);
    tokio::spawn(async move {
        let Some(table) = core.upgrade() else {
            return;
        };
        match table.marks.refresh(&l2, full).await {
            Ok(scope) => return take_marks(&table, &myself, scope).await,
            Err(e) => read_failed(&table, &e),
        }
        // One retry loop per table: a read that fails while one runs leaves it the retries.
        if table.marks.claim_retries() {
            drop(table);
            retry_marks(core, l2, myself).await;
        }
    });
}

/// Reads the marks in full again after 10 ms, 20 ms, … up to `unconfirmed_l1_life`, until a read
/// lands, none is owed (another landed), or the table is gone. (A read that fails just as this
/// ends is retried by `poll_marks`.)
async fn retry_marks<K: Key, V: Value>(
    core: Weak<TableCore<K, V>>,
    l2: L2,
    myself: ActorRef<OwnerMsg<K, V>>,
) {
    let mut pause = MARKS_RETRY_FIRST;
    while let Some(table) = core.upgrade() {
        if !table.marks.owes_full_read() {
            return table.marks.end_retries();
        }
        let longest = table.unconfirmed_l1_life;
        drop(table);
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(longest);
        let Some(table) = core.upgrade() else {
            return;
        };
        match table.marks.refresh(&l2, true).await {
            Ok(scope) => {
                table.marks.end_retries();
                return take_marks(&table, &myself, scope).await;
            }
            Err(e) => read_failed(&table, &e),
        }
    }
}

fn read_failed<K: Key, V: Value>(table: &TableCore<K, V>, error: &crate::error::Error) {
    bump(&table.stats.counters.marks_read_failures);
    tracing::debug!(table = %table.name, %error, "reading the marks failed: retried");
}

/// How soon a failed read of the marks is tried again; each retry waits twice as long, up to
/// `unconfirmed_l1_life`.
const MARKS_RETRY_FIRST: std::time::Duration = std::time::Duration::from_millis(10);

/// Every shard drops what a mark just read covers (one shard's read found it).
async fn take_marks<K: Key, V: Value>(
    core: &Arc<TableCore<K, V>>,
    myself: &ActorRef<OwnerMsg<K, V>>,
    scope: Option<Scope>,
) {
    let Some(scope) = scope else {
        return;
    };
    match core.owners.get().and_then(Weak::upgrade) {
        Some(owners) => owners.marked(scope).await,
        None => {
            let counted = EveryShard::mark(Arc::clone(core), &scope);
            let _ = myself.cast(OwnerMsg::Marked {
                scope,
                reply: None,
                counted,
            });
        }
    }
}

/// Has the owner of `owner` read the table's marks every `unconfirmed_l1_life` (at least every
/// [`MARKS_RETRY_FIRST`]: a zero life keeps nothing unconfirmed, but a mark still has to be
/// heard of) while no push would tell it of a new one (coherence off, or tracking down), so that
/// a mark set elsewhere is heard of within that time there too, and in full while a full read is
/// owed. Ends with the table.
pub(crate) fn poll_marks<K: Key, V: Value>(
    core: &Arc<TableCore<K, V>>,
    owner: Weak<OwnerRef<K, V>>,
) {
    if core.l2.is_none() {
        return;
    }
    let every = core.unconfirmed_l1_life.max(MARKS_RETRY_FIRST);
    let tracker = core.tracker.clone();
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await; // the first tick is at once, and the table has just read them all
        loop {
            ticks.tick().await;
            let Some(owner) = owner.upgrade() else {
                return;
            };
            // A full read still owed (the table's first failed, and no retry is left) is made
            // here too.
            let full = owner.core().marks.owes_full_read();
            if full || tracker.as_ref().is_none_or(|t| !t.is_up()) {
                read_marks(owner.core(), owner.current(0), full);
            }
        }
    });
}
