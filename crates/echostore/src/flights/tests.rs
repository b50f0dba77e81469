//! Every transition of the flights map, without Valkey.
use std::sync::Arc;

use tokio::sync::oneshot;

use super::*;
use crate::fetched::Origin;

type Map = Flights<u32, u32, &'static str>;

fn port() -> (Reply<u32>, oneshot::Receiver<Result<Fetched<u32>>>) {
    let (tx, rx) = oneshot::channel();
    (tx.into(), rx)
}

fn launched(miss: Miss) -> FlightId {
    match miss {
        Miss::Launch(fid) => fid,
        other => panic!("expected a launch, got {other:?}"),
    }
}

/// The first miss launches; the others join and hear `Coalesced`, the leader the origin.
#[test]
fn misses_on_one_id_share_one_flight() {
    let mut map = Map::new();
    let (lead, mut lead_rx) = port();
    let (join, mut join_rx) = port();
    let fid = launched(map.miss(&1, Some(lead)));
    assert_eq!(map.miss(&1, Some(join)), Miss::Coalesced);
    assert_eq!(map.len(), 1);
    let mut landed = map.land(&1, fid).expect("ours");
    assert!(landed.store);
    landed
        .flight
        .answer(&Ok(Fetched::new(Arc::new(7), Origin::Loaded)));
    assert_eq!(
        lead_rx.try_recv().expect("answered").expect("ok").origin,
        Origin::Loaded
    );
    assert_eq!(
        join_rx.try_recv().expect("answered").expect("ok").origin,
        Origin::Coalesced
    );
    assert_eq!(map.len(), 0);
    assert!(map.ids.is_empty(), "an idle id leaves no state behind");
}

/// A miss during a write is queued, and launches when the last write has landed.
#[test]
fn a_miss_waits_for_the_writes_of_its_id() {
    let mut map = Map::new();
    assert_eq!(map.write(&1, "put a"), Some("put a"));
    assert_eq!(map.write(&1, "put b"), None, "one write at a time");
    assert_eq!(map.miss(&1, None), Miss::Queued);
    assert_eq!(
        map.miss(&2, None),
        Miss::Launch(FlightId(2)),
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
    let mut map = Map::new();
    let old = launched(map.miss(&1, None));
    assert_eq!(map.write(&1, "invalidate"), Some("invalidate"));
    assert_eq!(map.written(&1), Next::Idle);
    let new = launched(map.miss(&1, None));
    assert_ne!(old, new);
    let landed = map.land(&1, old).expect("detached, still ours to answer");
    assert!(!landed.store, "an overtaken flight is not stored");
    assert!(map.land(&1, new).expect("current").store);
    assert!(map.land(&1, old).is_none(), "a flight lands once");
}

/// A queued flight is not overtaken: it has read nothing yet.
#[test]
fn a_queued_flight_stays_current_across_writes() {
    let mut map = Map::new();
    map.write(&1, "put a");
    assert_eq!(map.miss(&1, None), Miss::Queued);
    assert_eq!(map.write(&1, "put b"), None);
    assert_eq!(map.written(&1), Next::Write("put b"));
    assert!(matches!(map.written(&1), Next::Launch(_)));
    assert_eq!(map.len(), 1);
}

/// Any number of writes leave at most `MAX_LOADS_PER_ID` loads of one id running.
#[test]
fn loads_per_id_stay_bounded() {
    let mut map = Map::new();
    let mut running = Vec::new();
    for _ in 0..100 {
        match map.miss(&1, None) {
            Miss::Launch(fid) => running.push(fid),
            Miss::Queued | Miss::Coalesced => {}
        }
        map.write(&1, "invalidate");
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
    let mut map = Map::new();
    let fid = launched(map.miss(&1, None));
    map.overtake(&1);
    map.reading(fid);
    assert!(
        map.land(&1, fid).expect("detached").store,
        "it read after the push"
    );
    let fid = launched(map.miss(&1, None));
    map.overtake(&1);
    map.reading(fid);
    map.overtake(&1);
    assert!(
        !map.land(&1, fid).expect("detached").store,
        "a second push after its read"
    );
    let fid = launched(map.miss(&1, None));
    map.overtake(&1);
    assert_eq!(map.write(&1, "put"), Some("put"));
    map.reading(fid);
    assert!(
        !map.land(&1, fid).expect("detached").store,
        "a local write wins for good"
    );
}

/// A remote invalidation detaches a running flight like a write, without a write to run.
#[test]
fn an_overtake_alone_detaches() {
    let mut map = Map::new();
    let fid = launched(map.miss(&1, None));
    map.overtake(&1);
    assert!(matches!(map.miss(&1, None), Miss::Launch(f) if f != fid));
    assert!(!map.land(&1, fid).expect("detached").store);
}

/// An early answer reaches the flight's waiters; the flight stays for later joiners.
#[test]
fn an_early_answer_leaves_the_flight_running() {
    let mut map = Map::new();
    let (lead, mut lead_rx) = port();
    let fid = launched(map.miss(&1, Some(lead)));
    let flight = map.get_mut(&1, fid).expect("current");
    flight.answer(&Ok(Fetched::new(Arc::new(1), Origin::Stale)));
    assert_eq!(
        lead_rx.try_recv().expect("early").expect("ok").origin,
        Origin::Stale
    );
    assert_eq!(map.miss(&1, None), Miss::Coalesced);
    assert_eq!(map.len(), 1);
}

/// An early refresh starts a flight with no caller only when the id has none and nothing holds
/// it back; a miss joins it, and a second refresh does not start.
#[test]
fn a_refresh_is_the_ids_one_flight() {
    let mut map = Map::new();
    let fid = map.refresh(&1).expect("a refresh starts");
    assert_eq!(map.refresh(&1), None, "one refresh per id at a time");
    let (join, _join_rx) = port();
    assert_eq!(map.miss(&1, Some(join)), Miss::Coalesced);
    let landed = map.land(&1, fid).expect("ours");
    assert_eq!(
        landed.flight.into_callers().count(),
        1,
        "the joiner, to fly again"
    );
    assert_eq!(map.len(), 0);

    // A miss's flight, or a running write, leaves no room for a refresh.
    let (lead, _lead_rx) = port();
    let miss = launched(map.miss(&2, Some(lead)));
    assert_eq!(map.refresh(&2), None);
    assert!(map.land(&2, miss).is_some());
    assert_eq!(map.write(&3, "put"), Some("put"));
    assert_eq!(map.refresh(&3), None);
    assert_eq!(map.written(&3), Next::Idle);
    assert_eq!(map.refresh(&4).map(|_| ()), Some(()));
    assert_eq!(map.refresh(&5).map(|_| ()), Some(()));
    assert_eq!(map.len(), 2);
}
