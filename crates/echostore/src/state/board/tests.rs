//! The board without an owner: cells, joins, reads, write marks.
use super::*;
use crate::fetched::Origin;

/// Joiners waiting before and after the answer all get it; the withdrawn id is not joined.
#[tokio::test]
async fn joiners_get_the_one_answer() {
    let board = Board::<u64, u64>::new();
    let answerer = Answerer::new();
    assert!(board.join(&1).is_none());
    board.publish(1, FlightId::new(1), &answerer);
    let early = board.join(&1).expect("published");
    let waiting = tokio::spawn(async move { early.wait().await });
    let value = Arc::new(7);
    answerer.answer(Some(Ok(Fetched::new(
        Arc::clone(&value),
        Origin::Coalesced,
    ))));
    let late = board.join(&1).expect("still published");
    for answer in [waiting.await.expect("task"), late.wait().await] {
        let fetched = answer.expect("an answer").expect("ok");
        assert!(Arc::ptr_eq(&fetched.value, &value));
    }
    assert_eq!(answerer.joined(), 2);
    board.withdraw(&1, &answerer);
    assert!(board.join(&1).is_none());
    assert_eq!(board.len(), 0);
}

/// Withdrawing an older cell leaves the newer one listed.
#[test]
fn withdraw_removes_only_its_own_cell() {
    let board = Board::<u64, u64>::new();
    let (old, new) = (Answerer::new(), Answerer::new());
    board.publish(1, FlightId::new(1), &old);
    board.publish(1, FlightId::new(1), &new);
    board.withdraw(&1, &old);
    assert_eq!(board.len(), 1);
    board.withdraw(&1, &new);
    assert_eq!(board.len(), 0);
}

/// A read is listed for the first miss; the next miss goes to the owner (a read is never
/// joined); the read settles only while listed; a write marks the id (withdrawing the read,
/// refusing new ones) until it is done; a flush withdraws every read and no flight; a flight
/// replaces a read.
#[test]
fn reads_are_listed_settled_and_withdrawn() {
    let board = Board::<u64, u64>::new();
    let Entered::Read(read) = board.enter(&1, true, || 1) else {
        panic!("the first miss reads");
    };
    assert!(matches!(board.enter(&1, true, || 1), Entered::Owner));
    let mut kept = false;
    assert!(board.settle(&1, read, || kept = true));
    assert!(kept && board.len() == 0, "settled and withdrawn");

    let Entered::Read(read) = board.enter(&2, true, || 2) else {
        panic!("a read");
    };
    board.writing(&2, true);
    assert!(!board.settle(&2, read, || panic!("a withdrawn read keeps nothing")));
    assert!(
        matches!(board.enter(&2, true, || 2), Entered::Owner),
        "being written"
    );
    board.writing(&2, false);
    let Entered::Read(read) = board.enter(&2, true, || 2) else {
        panic!("a read once the write is done");
    };
    board.withdraw_read(&2, read);
    assert_eq!(board.len(), 0, "given up");

    let flight = Answerer::new();
    board.publish(3, FlightId::new(3), &flight);
    assert!(matches!(board.enter(&6, true, || 6), Entered::Read(_)));
    board.overtake_reads();
    assert_eq!(board.len(), 1, "the flight stays; the read of 6 went");
    let Entered::Read(read) = board.enter(&4, true, || 4) else {
        panic!("a read");
    };
    board.publish(4, FlightId::new(4), &flight);
    assert!(!board.settle(&4, read, || panic!("replaced by a flight")));
    board.withdraw_read(&4, read);
    assert!(
        board.join(&4).is_some(),
        "a read's end leaves the flight listed"
    );
    assert!(
        matches!(board.enter(&5, false, || 5), Entered::Owner),
        "no Valkey"
    );
}

/// A cell whose owner went away unanswered answers `Stopped`.
#[tokio::test]
async fn a_dropped_answerer_answers_stopped() {
    let board = Board::<u64, u64>::new();
    let answerer = Answerer::new();
    board.publish(1, FlightId::new(1), &answerer);
    let cell = board.join(&1).expect("published");
    drop(answerer);
    assert!(matches!(cell.wait().await, Some(Err(Error::Stopped))));
}

/// A new owner clears only its own shard's ids: another shard's flight stays listed.
#[test]
fn a_clear_leaves_other_shards_ids() {
    let board = Board::<u64, u64>::new();
    let (mine, theirs) = (Answerer::new(), Answerer::new());
    board.publish(1, FlightId::new(1), &mine);
    board.publish(2, FlightId::new(2), &theirs);
    board.clear(|id| *id == 1);
    assert!(board.join(&1).is_none(), "this shard's flight withdrawn");
    assert!(
        board.join(&2).is_some(),
        "the other shard's flight still listed"
    );
}

/// A running write's mark outlives the owner's marks: `clear` (a new owner) leaves it, no read of
/// its id starts until it is dropped, and `landed` returns once every mark of the id is gone.
#[tokio::test]
async fn running_writes_outlive_a_clear() {
    let board = Arc::new(Board::<u64, u64>::new());
    let (first, second) = (board.running_write(1), board.running_write(1));
    board.clear(|_| true);
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

/// A flight lands on its own task only while it is its id's current flight and nothing else of
/// the id is in motion: then its store runs under the board's lock and it answers the cell its
/// callers joined; otherwise nothing runs and the owner lands it.
#[tokio::test]
async fn a_flight_lands_on_its_own_task_only_while_current_and_alone() {
    let board = Board::<u64, u64>::new();
    let (first, second) = (FlightId::new(1), FlightId::new(2));
    let answerer = Answerer::new();
    board.publish(1, first, &answerer);
    let joined = board.join(&1).expect("published");
    let mut stored = 0;
    assert!(
        board.land_current(&1, second, || stored += 1).is_none(),
        "another flight landed"
    );
    for (mark, clear) in [
        (
            Board::writing as fn(&Board<u64, u64>, &u64, bool),
            "a write on its way",
        ),
        (Board::detached, "an overtaken flight running"),
    ] {
        mark(&board, &1, true);
        assert!(
            board.land_current(&1, first, || stored += 1).is_none(),
            "{clear}"
        );
        mark(&board, &1, false);
    }
    assert_eq!(stored, 0, "a refused landing stored");
    let cell = board
        .land_current(&1, first, || stored += 1)
        .expect("current and alone");
    assert_eq!(stored, 1);
    assert!(
        board.join(&1).is_none(),
        "a landed flight is no longer joined"
    );
    cell.answer(Some(Ok(Fetched::new(Arc::new(7), Origin::Loaded))));
    let fetched = joined.wait().await.expect("an answer").expect("ok");
    assert_eq!(*fetched.value, 7);
    board.withdraw(&1, &answerer);
    assert!(
        board.land_current(&1, first, || stored += 1).is_none(),
        "withdrawn"
    );
    assert_eq!(stored, 1);
}

/// What the board knows of an id is one entry, gone once nothing of it holds: a read, a flight,
/// a write's mark, an overtaken flight's mark and a running write's mark each keep it, and the id
/// is quiet again (a peek may read Valkey) only once every one of them is lifted.
#[tokio::test]
async fn an_id_leaves_the_board_once_nothing_of_it_holds() {
    let board = Arc::new(Board::<u64, u64>::new());
    let answerer = Answerer::new();
    board.publish(1, FlightId::new(1), &answerer);
    board.writing(&1, true);
    board.detached(&1, true);
    let running = board.running_write(1);
    board.withdraw(&1, &answerer);
    assert!(
        !board.quiet(&1),
        "a write's mark, an overtaken flight and a running write hold it"
    );
    board.writing(&1, false);
    assert!(
        !board.quiet(&1),
        "an overtaken flight and a running write hold it"
    );
    board.detached(&1, false);
    assert!(!board.quiet(&1), "a running write holds it");
    assert!(board.ids().contains_key(&1));
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
