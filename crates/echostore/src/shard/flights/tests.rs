//! Every transition of the flights map, without Valkey.
use std::sync::Arc;

use futures::FutureExt;

use super::*;
use crate::fetched::Origin;
use crate::state::board::Answered;
use crate::state::board::id_state::MAX_LOADS_PER_ID;

type Map = Flights<u32, u32, &'static str>;

fn new_map() -> Map {
    Flights::new(Arc::new(Board::new()), None)
}

/// What a caller waiting on `cell` has been answered, if anything yet.
fn answered(cell: &Seat<u32>) -> Option<Answered<u32>> {
    cell.wait().now_or_never()
}

fn launched(miss: Miss) -> FlightId {
    match miss {
        Miss::Launch(fid) => fid,
        other => panic!("expected a launch, got {other:?}"),
    }
}

/// The first miss launches and leads; the others join the same cell; every caller of the flight
/// (and every one who took its cell) hears its one answer.
#[test]
fn misses_on_one_id_share_one_flight() {
    let mut map = new_map();
    let (miss, lead) = map.miss(&1);
    let fid = launched(miss);
    let (miss, join) = map.miss(&1);
    assert_eq!(miss, Miss::Coalesced);
    assert!(lead.same_cell(&join), "one cell");
    assert!(matches!(
        Admitted::to(&Miss::Launch(fid), lead.clone()),
        Admitted::Flight { leads: true, .. }
    ));
    assert!(matches!(
        Admitted::to(&Miss::Coalesced, join.clone()),
        Admitted::Flight { leads: false, .. }
    ));
    assert_eq!(map.len(), 1);
    let mut landed = map.land(&1, fid).expect("ours");
    assert!(landed.store);
    assert_eq!(landed.flight.waiters(), 2);
    landed
        .flight
        .answer(&Ok(Fetched::new(Arc::new(7), Origin::Loaded)));
    let answer = answered(&join)
        .expect("answered")
        .expect("some")
        .expect("ok");
    assert_eq!((*answer.value, answer.origin), (7, Origin::Loaded));
    assert_eq!(map.len(), 0);
    assert!(
        !map.board.quiet(&1),
        "landing until the owner is done with it"
    );
    map.landing_done(&1);
    assert!(
        map.board.ids().is_empty(),
        "an idle id leaves no state behind"
    );
}

/// A miss during a write is queued, and launches when the last write has landed.
#[test]
fn a_miss_waits_for_the_writes_of_its_id() {
    let mut map = new_map();
    assert_eq!(map.write(&1, "put a", true), Some("put a"));
    assert_eq!(map.write(&1, "put b", true), None, "one write at a time");
    assert_eq!(map.miss(&1).0, Miss::Queued);
    // Flight names are process-wide: other tests running beside this one take some.
    assert!(
        matches!(map.miss(&2).0, Miss::Launch(_)),
        "other ids are free"
    );
    assert_eq!(
        map.written(&1),
        Next::Write("put b"),
        "writes keep arrival order"
    );
    let Next::Launch(fid) = map.written(&1) else {
        panic!("the queued flight launches after the last write");
    };
    assert!(map.land(&1, fid).expect("current").store);
}

/// A write overtakes a running flight: it lands detached, and a new miss starts afresh.
#[test]
fn a_write_overtakes_a_running_flight() {
    let mut map = new_map();
    let old = launched(map.miss(&1).0);
    assert_eq!(map.write(&1, "invalidate", false), Some("invalidate"));
    assert_eq!(map.written(&1), Next::Idle);
    let new = launched(map.miss(&1).0);
    assert_ne!(old, new);
    let landed = map.land(&1, old).expect("detached, still ours to answer");
    assert!(!landed.store, "an overtaken flight is not stored");
    assert!(map.land(&1, new).expect("current").store);
    assert!(map.land(&1, old).is_none(), "a flight lands once");
}

/// A queued flight is not overtaken: it has read nothing yet.
#[test]
fn a_queued_flight_stays_current_across_writes() {
    let mut map = new_map();
    map.write(&1, "put a", true);
    assert_eq!(map.miss(&1).0, Miss::Queued);
    assert_eq!(map.write(&1, "put b", true), None);
    assert_eq!(map.written(&1), Next::Write("put b"));
    assert!(matches!(map.written(&1), Next::Launch(_)));
    assert_eq!(map.len(), 1);
}

/// Any number of writes leave at most `MAX_LOADS_PER_ID` loads of one id running.
#[test]
fn loads_per_id_stay_bounded() {
    let mut map = new_map();
    let mut running = Vec::new();
    for _ in 0..100 {
        match map.miss(&1).0 {
            Miss::Launch(fid) => running.push(fid),
            Miss::Queued | Miss::Coalesced => {}
        }
        map.write(&1, "invalidate", false);
        assert_eq!(map.written(&1), Next::Idle);
        assert!(running.len() <= MAX_LOADS_PER_ID, "{} loads", running.len());
    }
    assert_eq!(running.len(), MAX_LOADS_PER_ID);
    // An overtaken flight landing lets the queued one go.
    let landed = map.land(&1, running[0]).expect("detached");
    assert!(!landed.store);
    assert!(landed.launch.is_some(), "the queued flight launches");
}

/// A flight detached by a push keeps its value only if it read Valkey again after the push; one
/// detached by this process's own write never does.
#[test]
fn a_push_detached_flight_that_reads_again_may_store() {
    let mut map = new_map();
    let fid = launched(map.miss(&1).0);
    map.overtake(&1);
    map.reading(&1, fid);
    assert!(
        map.land(&1, fid).expect("detached").store,
        "it read after the push"
    );
    let fid = launched(map.miss(&1).0);
    map.overtake(&1);
    map.reading(&1, fid);
    map.overtake(&1);
    assert!(
        !map.land(&1, fid).expect("detached").store,
        "a second push after its read"
    );
    let fid = launched(map.miss(&1).0);
    map.overtake(&1);
    assert_eq!(map.write(&1, "put", true), Some("put"));
    map.reading(&1, fid);
    assert!(
        !map.land(&1, fid).expect("detached").store,
        "a local write wins for good"
    );
}

/// Only a flight a local `put` overtook sends its callers to fly again: L1 keeps the put's
/// value, and what the flight read may be newer. One a push or an `invalidate` overtook answers
/// them (L1 then holds nothing older than its value).
#[test]
fn only_a_put_makes_an_overtaken_flights_callers_fly_again() {
    for (overtake, fly_again) in [("put", true), ("invalidate", false), ("push", false)] {
        let mut map = new_map();
        let fid = launched(map.miss(&1).0);
        match overtake {
            "push" => map.overtake(&1),
            write => {
                map.write(&1, write, write == "put");
            }
        }
        let landed = map.land(&1, fid).expect("detached");
        assert_eq!(landed.fly_again, fly_again, "overtaken by a {overtake}");
        assert!(!landed.store, "overtaken by a {overtake}");
    }
}

/// A remote invalidation detaches a running flight like a write, without a write to run.
#[test]
fn an_overtake_alone_detaches() {
    let mut map = new_map();
    let fid = launched(map.miss(&1).0);
    map.overtake(&1);
    assert!(matches!(map.miss(&1).0, Miss::Launch(f) if f != fid));
    assert!(!map.land(&1, fid).expect("detached").store);
}

/// An early answer reaches the flight's waiters; the flight stays for later joiners.
#[test]
fn an_early_answer_leaves_the_flight_running() {
    let mut map = new_map();
    let (miss, lead) = map.miss(&1);
    let fid = launched(miss);
    map.answer_early(&1, fid, Fetched::new(Arc::new(1), Origin::Stale));
    let early = answered(&lead).expect("early").expect("some").expect("ok");
    assert_eq!(early.origin, Origin::Stale);
    assert_eq!(map.miss(&1).0, Miss::Coalesced);
    assert_eq!(map.len(), 1);
}

/// An early refresh starts a flight with no caller only when the id has none and nothing holds
/// it back; a miss joins it, and a second refresh does not start.
#[test]
fn a_refresh_is_the_ids_one_flight() {
    let mut map = new_map();
    let fid = map.refresh(&1).expect("a refresh starts");
    assert_eq!(map.refresh(&1), None, "one refresh per id at a time");
    let (miss, join) = map.miss(&1);
    assert_eq!(miss, Miss::Coalesced);
    let landed = map.land(&1, fid).expect("ours");
    assert_eq!(landed.flight.waiters(), 1, "the joiner");
    landed.flight.fly_again();
    assert!(answered(&join).expect("answered").is_none(), "to fly again");
    assert_eq!(map.len(), 0);

    // A miss's flight, or a running write, leaves no room for a refresh.
    let miss = launched(map.miss(&2).0);
    assert_eq!(map.refresh(&2), None);
    assert!(map.land(&2, miss).is_some());
    assert_eq!(map.write(&3, "put", true), Some("put"));
    assert_eq!(map.refresh(&3), None);
    assert_eq!(map.written(&3), Next::Idle);
    assert_eq!(map.refresh(&4).map(|_| ()), Some(()));
    assert_eq!(map.refresh(&5).map(|_| ()), Some(()));
    assert_eq!(map.len(), 2);
}

/// The board lists exactly the current flights: published by the miss that starts one (queued or
/// running), withdrawn when it lands or a write or push overtakes it; a queued flight stays.
#[test]
fn the_board_lists_the_current_flights_only() {
    let board = Arc::new(Board::new());
    let mut map: Map = Flights::new(Arc::clone(&board), None);
    let fid = launched(map.miss(&1).0);
    let joined = board.join(&1).expect("a running flight is listed");
    map.overtake(&1);
    assert!(board.join(&1).is_none(), "a push withdrew it");
    // The detached flight still answers the caller who joined it on the board.
    let mut landed = map.land(&1, fid).expect("ours");
    landed
        .flight
        .answer(&Ok(Fetched::new(Arc::new(3), Origin::Loaded)));
    let answer = joined.wait().now_or_never().expect("answered");
    let fetched = answer.expect("an answer").expect("ok");
    assert_eq!((*fetched.value, fetched.origin), (3, Origin::Loaded));

    assert_eq!(map.write(&2, "put", true), Some("put"));
    assert_eq!(map.miss(&2).0, Miss::Queued);
    assert!(board.join(&2).is_some(), "a queued flight is listed");
    assert_eq!(map.write(&2, "put again", true), None);
    assert!(
        board.join(&2).is_some(),
        "a write does not overtake a queued flight"
    );
    assert_eq!(map.written(&2), Next::Write("put again"));
    let fid = match map.written(&2) {
        Next::Launch(fid) => fid,
        other => panic!("expected the queued flight to launch, got {other:?}"),
    };
    map.land(&2, fid).expect("ours");
    assert!(board.join(&2).is_none(), "a landed flight is withdrawn");
    assert_eq!(board.flights(), 0);
}

/// An early answer reaches the board's joiners so far; later joiners wait for the final one.
#[test]
fn an_early_answer_leaves_a_fresh_cell_for_later_joiners() {
    let board = Arc::new(Board::new());
    let mut map: Map = Flights::new(Arc::clone(&board), None);
    let fid = launched(map.miss(&1).0);
    let first = board.join(&1).expect("listed");
    map.answer_early(&1, fid, Fetched::new(Arc::new(1), Origin::Stale));
    let second = board.join(&1).expect("still listed");
    let early = first.wait().now_or_never().expect("answered early");
    assert_eq!(early.expect("some").expect("ok").origin, Origin::Stale);
    assert!(second.wait().now_or_never().is_none(), "waits for the load");
    let mut landed = map.land(&1, fid).expect("ours");
    landed
        .flight
        .answer(&Ok(Fetched::new(Arc::new(2), Origin::Loaded)));
    let last = second.wait().now_or_never().expect("answered");
    assert_eq!(*last.expect("some").expect("ok").value, 2);
}

/// An early answer that reaches the owner after the flight landed on its own task changes
/// nothing: its callers keep the landed answer, no fresh cell is listed, and ending the flight
/// answers nobody `Stopped`.
#[test]
fn an_early_answer_after_a_landing_on_the_flights_task_is_moot() {
    let board = Arc::new(Board::new());
    let mut map: Map = Flights::new(Arc::clone(&board), None);
    let (miss, lead) = map.miss(&1);
    let fid = launched(miss);
    let mut flight = board
        .land_current(&1, fid, |_| ())
        .expect("current and alone");
    flight.answer(&Ok(Fetched::new(Arc::new(2), Origin::Loaded)));
    map.answer_early(&1, fid, Fetched::new(Arc::new(1), Origin::Stale));
    assert!(
        board.join(&1).is_none(),
        "an early answer listed a fresh cell"
    );
    assert!(map.land(&1, fid).is_none(), "it left the map as it landed");
    drop(flight);
    let answer = answered(&lead)
        .expect("answered")
        .expect("some")
        .expect("ok");
    assert_eq!((*answer.value, answer.origin), (2, Origin::Loaded));
}

/// A flight that changed nothing tells its callers to fly again; one dropped with the owner
/// answers `Stopped`.
#[test]
fn board_joiners_fly_again_or_hear_stopped() {
    let board = Arc::new(Board::new());
    let mut map: Map = Flights::new(Arc::clone(&board), None);
    let fid = launched(map.miss(&1).0);
    let skipped = board.join(&1).expect("listed");
    let landed = map.land(&1, fid).expect("ours");
    landed.flight.fly_again();
    assert!(skipped.wait().now_or_never().expect("answered").is_none());

    launched(map.miss(&2).0);
    let orphaned = board.join(&2).expect("listed");
    drop(map);
    let answer = orphaned.wait().now_or_never().expect("answered");
    assert!(matches!(answer, Some(Err(crate::error::Error::Stopped))));
}

/// A change pushed while writes of an id are on their way covers every write queued then: none
/// of them keeps its entry, the last included; the id's next write keeps its own.
#[test]
fn an_overtaking_change_covers_the_writes_queued_when_it_came() {
    let mut map = new_map();
    assert_eq!(map.write(&1, "first", true), Some("first"));
    assert_eq!(map.write(&1, "second", true), None);
    map.overtake_write(&1);
    assert!(!map.landing_keeps(&1), "a later write waits");
    assert_eq!(map.written(&1), Next::Write("second"));
    assert!(!map.landing_keeps(&1), "overtaken while it was queued");
    assert_eq!(map.written(&1), Next::Idle);
    assert_eq!(map.write(&1, "third", true), Some("third"));
    assert!(map.landing_keeps(&1), "nothing overtook it");
    assert_eq!(map.written(&1), Next::Idle);
}

/// A write the previous owner left running heads its id's queue: a miss and a write wait behind
/// it, and start once it lands.
#[test]
fn an_inherited_write_heads_its_ids_queue() {
    let mut map = new_map();
    map.inherit_write(&1);
    assert_eq!(map.miss(&1).0, Miss::Queued);
    assert_eq!(
        map.write(&1, "mine", true),
        None,
        "behind the inherited write"
    );
    assert_eq!(map.written(&1), Next::Write("mine"));
    assert!(matches!(map.written(&1), Next::Launch(_)));
}

/// Once a flight of an id lands, no overtaken flight of the id that was running then stores
/// after it, even one that read Valkey again after the push that overtook it: what it read may
/// be older than what landed.
#[test]
fn an_overtaken_flight_is_outrun_by_a_later_landing() {
    let mut map = new_map();
    let first = launched(map.miss(&1).0);
    map.overtake(&1);
    map.reading(&1, first);
    let second = launched(map.miss(&1).0);
    assert!(map.land(&1, second).expect("current").store);
    let landed = map.land(&1, first).expect("detached");
    assert!(!landed.store, "an outrun flight stored");
    assert!(landed.detached);
}

/// While an overtaken flight of an id runs, the board starts no read of it: a miss goes to the
/// owner, which orders what each flight stores.
#[test]
fn an_overtaken_flight_holds_the_board_reads_of_its_id() {
    let board = Arc::new(Board::new());
    let mut map: Map = Flights::new(Arc::clone(&board), None);
    let fid = launched(map.miss(&1).0);
    map.overtake(&1);
    let enter = |board: &Board<u32, u32, &str>| board.enter(&1, true, || 1);
    assert!(matches!(enter(&board), crate::state::board::Entered::Owner));
    map.land(&1, fid).expect("detached");
    // Landed, but not yet stored by the owner: still no read.
    assert!(matches!(enter(&board), crate::state::board::Entered::Owner));
    map.landing_done(&1);
    assert!(matches!(
        enter(&board),
        crate::state::board::Entered::Read(_)
    ));
}

/// An owner that crashes leaves its flights running, and they still land on their own tasks. The
/// owner that replaces it must name its flights apart from theirs: else a dead owner's flight,
/// landing late with what it read before newer writes, finds a new flight of its id listed under
/// its own name, stores its value in L1 and answers that flight's callers with it.
#[test]
fn a_restarted_owner_names_its_flights_apart_from_the_dead_ones() {
    let board = Arc::new(Board::new());
    let mut dead: Map = Flights::new(Arc::clone(&board), None);
    let old = launched(dead.miss(&1).0);
    drop(dead);
    let mut new: Map = Flights::new(Arc::clone(&board), None);
    let (miss, cell) = new.miss(&1);
    let current = launched(miss);
    assert_ne!(old, current);
    let landed = board.land_current(&1, old, |_| panic!("a dead owner's flight stored in L1"));
    assert!(
        landed.is_none(),
        "a dead owner's flight landed on a new one"
    );
    assert!(
        answered(&cell).is_none(),
        "the new flight's callers still wait for it"
    );
}

/// A flight's `Standing` is the four flags it replaced (`stale_read`, `overwritten`, `outrun`,
/// `replaced`) folded into one value: after every sequence of up to five events (a push, an
/// invalidate or a put of this process, a new read, another flight's landing), whether it stores
/// and whether its callers fly again are what the flags said.
#[test]
fn a_standing_is_the_flags_it_folds() {
    #[derive(Clone, Copy)]
    enum Event {
        Overtaken(Overtaker),
        ReadAgain,
        Outrun,
    }
    let events = [
        Event::Overtaken(Overtaker::Push),
        Event::Overtaken(Overtaker::Write { replaces: false }),
        Event::Overtaken(Overtaker::Write { replaces: true }),
        Event::ReadAgain,
        Event::Outrun,
    ];
    let mut sequences: Vec<Vec<Event>> = vec![vec![]];
    for _ in 0..5 {
        let longer = sequences.iter().flat_map(|s| {
            events
                .iter()
                .map(move |e| s.iter().copied().chain([*e]).collect::<Vec<_>>())
        });
        sequences = sequences.clone().into_iter().chain(longer).collect();
    }
    for sequence in &sequences {
        let (mut stale_read, mut overwritten, mut outrun, mut replaced) =
            (false, false, false, false);
        let mut standing = Standing::Keeps;
        for event in sequence {
            match *event {
                Event::Overtaken(by) => {
                    stale_read = true;
                    if let Overtaker::Write { replaces } = by {
                        overwritten = true;
                        replaced |= replaces;
                    }
                    standing = standing.overtaken(by);
                }
                Event::ReadAgain => {
                    stale_read = false;
                    standing = standing.read_again();
                }
                Event::Outrun => {
                    outrun = true;
                    standing = standing.outrun();
                }
            }
        }
        let stores = !stale_read && !overwritten && !outrun;
        assert_eq!(standing == Standing::Keeps, stores, "{standing:?}");
        assert_eq!(standing == Standing::FliesAgain, replaced, "{standing:?}");
    }
}

/// What a process expects of its own writes' pushes is in the id's state: it keeps the id on the
/// board (but quiet: a peek may still read it), a push takes the oldest, a write that changed no
/// key is withdrawn, lost pushes forget all, and under key tracking nothing is expected.
#[test]
fn own_writes_are_kept_in_the_ids_state() {
    use crate::coherence::Tracking;
    use crate::shard::own_writes::OwnWrites;
    use crate::valkey::envelope::fingerprint;
    let map = new_map();
    let own = OwnWrites::new(Tracking::Broadcast);
    let (first, second) = (fingerprint(b"first"), fingerprint(b"second"));
    own.expect(&map, &1, first);
    own.expect(&map, &1, second);
    own.expect(&map, &2, first);
    assert!(map.board.quiet(&1), "an expectation is not in motion");
    assert_eq!(own.take(&map, &1), Some(first), "the oldest first");
    assert_eq!(own.take(&map, &1), Some(second));
    assert_eq!(own.take(&map, &1), None);
    assert!(!map.board.ids().contains_key(&1), "nothing left of id 1");
    own.expect(&map, &2, second);
    own.withdraw(&map, &2, first);
    assert_eq!(
        own.take(&map, &2),
        Some(second),
        "a write withdrawn (it changed no key) is not taken for the next one's push"
    );
    own.expect(&map, &4, first);
    own.withdraw(&map, &4, first);
    assert!(!map.board.ids().contains_key(&4), "nothing left of id 4");
    own.expect(&map, &2, first);
    own.clear(&map);
    assert!(map.board.ids().is_empty(), "lost pushes: nothing expected");
    let keys = OwnWrites::new(Tracking::Keys);
    keys.expect(&map, &3, first);
    assert_eq!(keys.take(&map, &3), None, "key tracking expects none");
}
