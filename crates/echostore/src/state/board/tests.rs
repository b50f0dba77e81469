//! The board as callers see it, with a flights map (the owner's hand) changing it: joins, reads,
//! landings on a flight's own task, running writes, and what an owner's going clears.
use super::*;
use crate::fetched::Origin;
use futures::FutureExt;
use std::time::Duration;

use crate::shard::flights::{Flights, Miss, Next};

type Map = Flights<u64, u64, &'static str>;

fn launched(miss: Miss) -> FlightId {
    match miss {
        Miss::Launch(fid) => fid,
        other => panic!("expected a launch, got {other:?}"),
    }
}

/// The clock's first reading after `t`: what was seated by `t` is before it, what is seated
/// after the call is after it.
fn a_tick_after(t: std::time::Instant) -> std::time::Instant {
    loop {
        let now = std::time::Instant::now();
        if now > t {
            return now;
        }
    }
}

fn loaded(value: u64) -> Result<Fetched<u64>> {
    Ok(Fetched::new(Arc::new(value), Origin::Loaded))
}

/// Joiners waiting before and after an early answer get it; a landed flight is not joined.
#[tokio::test]
async fn joiners_get_the_one_answer() {
    let board = Arc::new(Board::new());
    let mut map: Map = Flights::new(Arc::clone(&board), None);
    assert!(board.join(&1).is_none());
    let (miss, lead) = map.miss(&1);
    let fid = launched(miss);
    let early = board.join(&1).expect("current");
    let waiting = tokio::spawn(async move { early.wait().await });
    let mut landed = map.land(&1, fid).expect("ours");
    assert!(board.join(&1).is_none(), "landed");
    landed.flight.answer(&loaded(7));
    for answer in [waiting.await.expect("task"), lead.wait().await] {
        let fetched = answer.expect("an answer").expect("ok");
        assert_eq!(*fetched.value, 7);
    }
    assert_eq!(landed.flight.waiters(), 2);
    map.landing_done(&1);
    assert!(board.ids().is_empty());
}

/// An answer with a cutoff (a fenced-out load's row) reaches the callers who took their seats
/// before it; a caller seated since flies again (`None`).
#[tokio::test]
async fn an_answer_with_a_cutoff_sends_later_callers_to_fly_again() {
    let board = Arc::new(Board::new());
    let mut map: Map = Flights::new(Arc::clone(&board), None);
    let (miss, lead) = map.miss(&1);
    let fid = launched(miss);
    let early = board.join(&1).expect("current");
    let cutoff = a_tick_after(std::time::Instant::now());
    a_tick_after(cutoff);
    let late = board.join(&1).expect("current");
    let mut landed = map.land(&1, fid).expect("ours");
    landed.flight.answer_before(&loaded(7), Some(cutoff));
    for seat in [lead, early] {
        let fetched = seat.wait().await.expect("an answer").expect("ok");
        assert_eq!(*fetched.value, 7);
    }
    assert!(
        late.wait().await.is_none(),
        "seated after the cutoff: fly again"
    );
    map.landing_done(&1);
}

/// An answer given while this process is behind on its pushes (the vouch lapsed) reaches the
/// caller who started the flight; one who joined it later flies again, since the flight may have
/// read before a write that caller began after. With the vouch holding, every caller takes it.
#[tokio::test]
async fn an_answer_given_while_behind_sends_joiners_to_fly_again() {
    for vouched in [false, true] {
        let board = Arc::new(Board::new());
        let mut map: Map = Flights::new(Arc::clone(&board), None);
        let (miss, lead) = map.miss(&1);
        let fid = launched(miss);
        a_tick_after(std::time::Instant::now());
        let joined = board.join(&1).expect("current");
        let mut landed = map.land(&1, fid).expect("ours");
        let cutoff = landed.flight.behind_cutoff(vouched);
        landed.flight.answer_before(&loaded(7), cutoff);
        let fetched = lead.wait().await.expect("an answer").expect("ok");
        assert_eq!(*fetched.value, 7, "the caller who started the flight");
        let joiner = joined.wait().await.map(|a| a.expect("ok").value);
        match vouched {
            true => assert_eq!(joiner.as_deref(), Some(&7)),
            false => assert!(joiner.is_none(), "joined while behind: fly again"),
        }
        map.landing_done(&1);
    }
}

/// An owner that goes (stops or crashes: its map is dropped) answers its flights' callers
/// `Stopped` and leaves nothing of its ids; but an owner that goes after a newer one took the
/// board over clears nothing of the newer one's.
#[tokio::test]
async fn an_owner_going_clears_only_what_it_held() {
    let board = Arc::new(Board::new());
    let mut first: Map = Flights::new(Arc::clone(&board), None);
    let (_, cell) = first.miss(&1);
    drop(first);
    assert!(matches!(cell.wait().await, Some(Err(Error::Stopped))));
    assert!(board.ids().is_empty(), "the gone owner's ids cleared");

    let mut dead: Map = Flights::new(Arc::clone(&board), None);
    let (_, dead_cell) = dead.miss(&1);
    let mut new: Map = Flights::new(Arc::clone(&board), None);
    assert!(
        matches!(dead_cell.wait().await, Some(Err(Error::Stopped))),
        "taken over: the dead owner's callers stopped"
    );
    let (miss, cell) = new.miss(&2);
    launched(miss);
    drop(dead);
    assert!(board.join(&2).is_some(), "the new owner's flight stays");
    assert!(cell.wait().now_or_never().is_none(), "and is not answered");
}

/// An id whose Valkey copy is unsettled keeps its mark through its owner's going and its
/// successor's taking over (the repair of a crashed owner's failed write is still owed), and the
/// board keeps the id for it alone.
#[tokio::test]
async fn an_unsettled_mark_outlives_its_owner() {
    use super::id_state::{Repair, UnsettledMark};
    let board = Arc::new(Board::new());
    let mut first: Map = Flights::new(Arc::clone(&board), None);
    let (_, cell) = first.miss(&1);
    let names = crate::wire::key::KeyNames::new("ns", "t", &1u64).expect("names");
    let mark = UnsettledMark {
        generation: 7,
        names,
        repair: Repair::Write,
    };
    board.change_or_make(1, |state| state.unsettled = Some(mark));
    drop(first);
    assert!(matches!(cell.wait().await, Some(Err(Error::Stopped))));
    let generation = |board: &Board<u64, u64, &str>| {
        let marked = board.change(&1, |state| state.unsettled.as_ref().map(|m| m.generation));
        marked.flatten()
    };
    assert_eq!(generation(&board), Some(7), "kept when its owner goes");
    let _next: Map = Flights::new(Arc::clone(&board), None);
    assert_eq!(
        generation(&board),
        Some(7),
        "kept when the next owner takes over"
    );
    board.change(&1, |state| state.unsettled = None);
    assert!(board.ids().is_empty(), "forgotten once settled");
}

/// An L1 entry awaiting key tracking's confirmation is kept in its id's state through an owner's
/// going (the next owner takes the confirmation), taken only for the bytes it waits for, and
/// forgotten by a flush or a cap, with the id once nothing else of it holds.
#[tokio::test]
async fn an_entry_awaiting_confirmation_is_the_ids_until_confirmed_or_forgotten() {
    use crate::state::l1::Entry;
    use crate::valkey::envelope::fingerprint;
    let boards: Boards<u64, u64> = Boards::new(1);
    let board = Arc::clone(boards.shard(0));
    let entry = |v| {
        Entry::new(
            Arc::new(v),
            Duration::from_secs(60),
            Duration::ZERO,
            Duration::ZERO,
        )
    };
    let (older, newer) = (fingerprint(b"v1"), fingerprint(b"v2"));
    let owner: Flights<u64, u64, PendingWrite<u64>> = Flights::new(Arc::clone(&board), None);
    board.change_or_make(1, |state| state.unconfirmed = Some((older, entry(1))));
    board.change_or_make(2, |state| state.unconfirmed = Some((newer, entry(2))));
    drop(owner);
    let took = |id, fp| {
        board
            .change(&id, |state| state.take_unconfirmed(fp))
            .flatten()
    };
    assert!(took(1, newer).is_none(), "not the bytes it waits for");
    assert_eq!(
        took(1, older).map(|e| *e.value),
        Some(1),
        "kept through the owner's going"
    );
    assert!(
        board.change(&1, |_| ()).is_none(),
        "confirmed: the id is forgotten"
    );
    let mut capped = false;
    boards.forget_unconfirmed(|| capped = true);
    assert!(capped && board.ids().is_empty(), "a flush forgets the rest");
}

/// A loser's wake-up waits in its id's state: a push of the id wakes it (a permit, if it is not
/// waiting yet), pushes missed wake every one, an owner's going keeps it, and one its loser
/// dropped keeps nothing.
#[tokio::test]
async fn a_losers_wake_up_is_kept_in_its_ids_state() {
    use tokio::sync::Notify;
    let board: Arc<Board<u64, u64, &str>> = Arc::new(Board::new());
    let owner: Map = Flights::new(Arc::clone(&board), None);
    let (one, two) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    board.change_or_make(1, |state| state.watch(&one));
    board.change_or_make(2, |state| state.watch(&two));
    drop(owner);
    board.wake_losers(&1);
    assert!(
        one.notified().now_or_never().is_some(),
        "a push of its id wakes it"
    );
    assert!(two.notified().now_or_never().is_none(), "not another id's");
    board.wake_all_losers();
    assert!(
        two.notified().now_or_never().is_some(),
        "pushes missed wake every one"
    );
    drop(one);
    board.wake_losers(&1);
    assert_eq!(
        board.ids().len(),
        1,
        "a dropped wake-up keeps nothing of its id"
    );
    drop(two);
    board.wake_all_losers();
    assert!(board.ids().is_empty());
}

/// A read is listed for the first miss; the next miss goes to the owner (a read is never
/// joined); the read settles only while listed; a write withdraws it and refuses new ones until
/// it is done; a flush withdraws every read; a flight replaces a read.
#[test]
fn reads_are_listed_settled_and_withdrawn() {
    let board = Arc::new(Board::new());
    let mut map: Map = Flights::new(Arc::clone(&board), None);
    let Entered::Read(read) = board.enter(&1, true, || 1) else {
        panic!("the first miss reads");
    };
    assert!(matches!(board.enter(&1, true, || 1), Entered::Owner));
    let mut kept = false;
    assert!(board.settle(&1, read, |_| kept = true));
    assert!(kept && board.ids().is_empty(), "settled and withdrawn");

    let Entered::Read(read) = board.enter(&2, true, || 2) else {
        panic!("a read");
    };
    assert_eq!(map.write(&2, "put", true), Some("put"));
    assert!(!board.settle(&2, read, |_| panic!("a withdrawn read keeps nothing")));
    assert!(
        matches!(board.enter(&2, true, || 2), Entered::Owner),
        "being written"
    );
    assert_eq!(map.written(&2), Next::Idle);
    let Entered::Read(read) = board.enter(&2, true, || 2) else {
        panic!("a read once the write is done");
    };
    board.withdraw_read(&2, read);
    assert!(board.ids().is_empty(), "given up");

    let Entered::Read(read) = board.enter(&6, true, || 6) else {
        panic!("a read");
    };
    map.overtake_all();
    assert!(!board.settle(&6, read, |_| panic!("a flush withdrew it")));
    let Entered::Read(read) = board.enter(&4, true, || 4) else {
        panic!("a read");
    };
    launched(map.miss(&4).0);
    assert!(!board.settle(&4, read, |_| panic!("replaced by a flight")));
    board.withdraw_read(&4, read);
    assert!(
        board.join(&4).is_some(),
        "a read's end leaves the flight current"
    );
    assert!(
        matches!(board.enter(&5, false, || 5), Entered::Owner),
        "no Valkey"
    );
}

/// A running write's mark outlives the owner's state: a new owner's take-over leaves it, no read
/// of its id starts until it is dropped, and `landed` returns once every mark of the id is gone.
#[tokio::test]
async fn running_writes_outlive_a_take_over() {
    let board = Arc::new(Board::<u64, u64, ()>::new());
    let (first, second) = (board.running_write(1), board.running_write(1));
    board.take_over(None);
    assert_eq!(board.running_writes(), vec![1]);
    assert!(matches!(board.enter(&1, true, || 1), Entered::Owner));
    let landed = tokio::spawn({
        let board = Arc::clone(&board);
        async move { board.landed(&1).await }
    });
    drop(first);
    assert!(
        matches!(board.enter(&1, true, || 1), Entered::Owner),
        "one still runs"
    );
    drop(second);
    landed.await.expect("landed once both are gone");
    assert!(board.running_writes().is_empty());
    assert!(matches!(board.enter(&1, true, || 1), Entered::Read(_)));
}

/// A flight lands on its own task only while it is its id's current flight, loading, and
/// nothing else of the id is in motion (an overtaken flight running or being landed by the
/// owner, a write task running): then its store runs under the board's lock, it leaves the id's
/// state and answers the callers who joined it; otherwise nothing runs and the owner lands it.
#[tokio::test]
async fn a_flight_lands_on_its_own_task_only_while_current_and_alone() {
    let board = Arc::new(Board::new());
    let mut map: Map = Flights::new(Arc::clone(&board), None);
    let first = launched(map.miss(&1).0);
    map.overtake(&1);
    let (miss, joined) = map.miss(&1);
    let second = launched(miss);
    let mut stored = 0;
    let mut land = |fid| board.land_current(&1, fid, |_| stored += 1);
    assert!(land(first).is_none(), "an overtaken flight");
    assert!(land(second).is_none(), "an overtaken flight running");
    map.land(&1, first).expect("detached");
    assert!(land(second).is_none(), "the owner landing an overtaken one");
    map.landing_done(&1);
    let running = board.running_write(1);
    assert!(land(second).is_none(), "a write task running");
    drop(running);
    let mut flight = land(second).expect("current and alone");
    assert!(land(second).is_none(), "landed once");
    assert_eq!(stored, 1, "stored once, and only when it landed");
    assert!(board.join(&1).is_none(), "a landed flight is not joined");
    assert!(map.land(&1, second).is_none(), "nothing left for the owner");
    flight.answer(&loaded(7));
    let fetched = joined.wait().await.expect("an answer").expect("ok");
    assert_eq!(*fetched.value, 7);
    assert!(board.ids().is_empty());
}

/// What the board holds of an id is one state, gone once nothing of it holds: a flight, a
/// write, an overtaken flight being landed and a running write each keep it, and the id is quiet
/// again (a peek may read Valkey) only once every one of them is done.
#[tokio::test]
async fn an_id_leaves_the_board_once_nothing_of_it_holds() {
    let board = Arc::new(Board::new());
    let mut map: Map = Flights::new(Arc::clone(&board), None);
    let fid = launched(map.miss(&1).0);
    assert!(!board.quiet(&1), "a flight holds it");
    assert_eq!(map.write(&1, "put", true), Some("put"));
    let running = board.running_write(1);
    map.land(&1, fid).expect("detached");
    assert!(
        !board.quiet(&1),
        "a write, an overtaken flight's landing and a running write hold it"
    );
    map.landing_done(&1);
    assert!(!board.quiet(&1), "a write and a running write hold it");
    assert_eq!(map.written(&1), Next::Idle);
    assert!(!board.quiet(&1), "a running write holds it");
    drop(running);
    assert!(board.quiet(&1));
    assert!(
        board.ids().is_empty(),
        "nothing of the id holds: the id is forgotten"
    );
    let Entered::Read(read) = board.enter(&1, true, || 1) else {
        panic!("a quiet id is read");
    };
    board.withdraw_read(&1, read);
    assert!(board.ids().is_empty());
}

/// A caller admits itself exactly as the owner would: it joins the current flight, takes L1's
/// entry when it has one by now, starts and leads a loading flight (in place of a read listed)
/// when nothing of the id is in motion, and leaves everything else to the owner: an id being
/// written or landed, or a board its owner does not hold (gone, or another actor's).
#[test]
fn a_caller_admits_itself_only_as_the_owner_would() {
    const OWNER: u64 = 41;
    let board = Arc::new(Board::new());
    let mut map: Map = Flights::new(Arc::clone(&board), Some(OWNER));
    let admit = |id: u64, hit: Option<u64>| {
        let hit = || hit.map(|v| Fetched::new(Arc::new(v), Origin::L1));
        board.admit(&id, OWNER, || id, hit)
    };
    assert!(matches!(admit(1, Some(5)), Admission::Hit(_)));
    assert!(board.ids().is_empty(), "a hit starts nothing");

    let Entered::Read(read) = board.enter(&1, true, || 1) else {
        panic!("a read");
    };
    let Admission::Launch(fid, lead) = admit(1, None) else {
        panic!("nothing in motion: the caller starts the flight");
    };
    assert!(!board.settle(&1, read, |_| panic!("the flight replaced the read")));
    let Admission::Joined(joined) = admit(1, Some(5)) else {
        panic!("a current flight is joined, whatever L1 holds");
    };
    assert!(lead.same_cell(&joined), "one cell");
    assert_eq!(
        map.miss(&1).0,
        Miss::Coalesced,
        "the owner sees the same flight"
    );
    let mut landed = map.land(&1, fid).expect("the owner lands it");
    assert!(landed.store, "it was current");
    assert!(
        matches!(admit(1, None), Admission::Owner),
        "being landed by the owner"
    );
    landed.flight.answer(&loaded(7));
    map.landing_done(&1);

    assert_eq!(map.write(&2, "put", true), Some("put"));
    assert!(matches!(admit(2, None), Admission::Owner), "being written");
    assert!(
        matches!(board.admit(&3, OWNER + 1, || 3, || None), Admission::Owner),
        "another actor's board"
    );
    drop(map);
    assert!(matches!(admit(3, None), Admission::Owner), "its owner went");
    assert!(board.ids().is_empty(), "nothing started");
}

/// Two pending repairs of one id cover both: a failed write's drops the lock too, whatever came
/// with it; two loads' keep only a copy recent enough for both, and nothing when either row had
/// no version (a gone row, or a table without versions).
#[test]
fn pending_repairs_cover_both() {
    use super::id_state::Repair;
    let load = |version| Repair::Load { version };
    assert_eq!(load(Some(3)).and(Repair::Write), Repair::Write);
    assert_eq!(Repair::Write.and(load(Some(3))), Repair::Write);
    assert_eq!(load(Some(3)).and(load(Some(5))), load(Some(5)));
    assert_eq!(load(Some(5)).and(load(Some(3))), load(Some(5)));
    assert_eq!(load(Some(5)).and(load(None)), load(None));
    assert_eq!(load(None).and(load(Some(5))), load(None));
}
