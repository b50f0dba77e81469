//! The checker on hand-made histories: each kind of violation is found and named, and a history
//! that keeps the model passes.

use super::*;

const B: u64 = 1_000;

fn bounds() -> Bounds {
    Bounds {
        staleness: B,
        fault_grace: 5_000,
        fresh_for: 1_000_000,
        schemas: 1,
        early: Early {
            beta: [0.0; 3],
            slack: 0,
        },
        short: ShortLives {
            tables: [false; 3],
            fresh_for: 0,
        },
    }
}

fn op(process: u32, action: Action, version: u64, start: u64, end: u64) -> Op {
    Op {
        process,
        table: 0,
        id: 1,
        action,
        version,
        ok: true,
        origin: String::new(),
        batch: false,
        at_least: 0,
        start,
        end,
    }
}

fn put(p: u32, v: u64, start: u64, end: u64) -> Op {
    op(p, Action::Put, v, start, end)
}

fn read(p: u32, v: u64, start: u64, end: u64) -> Op {
    op(p, Action::Read, v, start, end)
}

fn load(p: u32, v: u64, start: u64, end: u64) -> Op {
    op(p, Action::Load, v, start, end)
}

fn invalidate(p: u32, v: u64, start: u64, end: u64) -> Op {
    op(p, Action::Invalidate, v, start, end)
}

fn fault(start: u64, end: u64) -> FaultSpan {
    FaultSpan::new("kill-all", start, end)
}

/// A process that returned v2 and then v1, where v1's write ended before v2's began.
fn going_back() -> [Op; 4] {
    [
        put(0, 1, 10, 20),
        put(1, 2, 30, 40),
        read(2, 2, 50, 51),
        read(2, 1, 52, 53),
    ]
}

fn violations(ops: &[Op], faults: &[FaultSpan]) -> Violations {
    check(ops, faults, bounds()).violations
}

/// Checks `ops` and asserts that the one violation found is counted by `counted` and described
/// under `rule`'s name.
fn only(ops: &[Op], rule: &str, counted: fn(&Violations) -> u64) {
    let found = check(ops, &[], bounds());
    assert_eq!(found.violations.total(), 1, "{:?}", found.examples);
    assert_eq!(
        counted(&found.violations),
        1,
        "{rule}: {:?}",
        found.violations
    );
    assert!(
        found.examples.len() == 1 && found.examples[0].starts_with(&format!("{rule}: ")),
        "named {rule}: {:?}",
        found.examples
    );
}

/// A load, reads of it, a put seen by everyone after `B`, an invalidate and its one reload.
#[test]
fn a_history_that_keeps_the_model_passes() {
    let ops = [
        load(0, 0, 10, 20),
        read(0, 0, 5, 25),
        read(1, 0, 30, 40),
        put(1, 1, 100, 200),
        read(0, 0, 150, 160), // overlaps the put: either version
        read(0, 1, 200 + B + 1, 200 + B + 5),
        read(2, 1, 200 + B + 10, 200 + B + 20),
        invalidate(2, 2, 5_000, 5_100),
        load(0, 2, 5_200, 5_300),
        read(0, 2, 5_150, 5_400),
        read(1, 2, 6_500, 6_600),
    ];
    let found = check(&ops, &[], bounds());
    assert_eq!(
        found.violations,
        Violations::default(),
        "{:?}",
        found.examples
    );
    assert_eq!(found.source_reads, 2);
}

/// A read in another process more than `B` after a write returned that still sees the old
/// version: `stale_after_write`; within `B` it is not.
#[test]
fn an_old_version_after_b_is_stale_after_write() {
    let ops = [
        put(0, 1, 100, 200),
        read(1, 0, 200 + B / 2, 200 + B / 2 + 1),
        read(1, 0, 200 + B + 1, 200 + B + 2),
    ];
    let found = check(&ops, &[], bounds());
    assert_eq!(found.violations.stale_after_write, 1);
    assert_eq!(found.violations.total(), 1);
    assert_eq!(found.worst_staleness_ns, B + 1);
    // The figure names its read, and the write it missed.
    let (process, stalest) = found.stalest_read.expect("the stalest read is described");
    assert_eq!(process, 1);
    assert!(
        stalest.starts_with("read by p1 of t0") && stalest.contains("after p0's newer write"),
        "{stalest}"
    );
    assert!(
        found.examples[0].starts_with("stale_after_write:"),
        "{:?}",
        found.examples
    );
}

/// The writer's own process reading the old version after its put returned: `read_your_writes`,
/// however soon, and whatever fault was going on.
#[test]
fn an_old_version_in_the_writers_process_breaks_read_your_writes() {
    let ops = [put(0, 1, 100, 200), read(0, 0, 201, 202)];
    only(&ops, "read_your_writes", |v| v.read_your_writes);
    assert_eq!(violations(&ops, &[fault(150, 300)]).read_your_writes, 1);
    // An invalidate is a write too: after it, its own process reads the new source version.
    let ops = [invalidate(0, 1, 100, 200), read(0, 0, 201, 202)];
    assert_eq!(violations(&ops, &[]).read_your_writes, 1);
    // So is a delete (an invalidation, on a table without `Option` values).
    let ops = [op(0, Action::Delete, 1, 100, 200), read(0, 0, 201, 202)];
    assert_eq!(violations(&ops, &[]).read_your_writes, 1);
}

/// A process that returned v2 and then v1, where v1's write ended before v2's began.
#[test]
fn going_back_to_an_older_version_is_non_monotonic() {
    only(&going_back(), "non_monotonic", |v| v.non_monotonic);
    // Reads that overlap are not ordered.
    let ops = [
        put(0, 1, 10, 20),
        put(1, 2, 30, 40),
        read(2, 2, 50, 60),
        read(2, 1, 55, 65),
    ];
    assert_eq!(violations(&ops, &[]).non_monotonic, 0);
}

/// Overlapping puts may land in either order; a process that keeps the one Valkey no longer
/// holds, while the others agree, is `divergent`.
#[test]
fn a_copy_the_fleet_moved_past_is_divergent() {
    let after = 300 + B;
    let ops = [
        put(0, 1, 100, 250),
        put(1, 2, 150, 300),
        read(0, 1, after + 10, after + 20),
        read(1, 2, after + 10, after + 20),
        read(2, 2, after + 30, after + 40),
    ];
    only(&ops, "divergent", |v| v.divergent);
    // Either version is right as long as everyone agrees.
    let ops = [
        put(0, 1, 100, 250),
        put(1, 2, 150, 300),
        read(0, 1, after + 10, after + 20),
        read(1, 1, after + 10, after + 20),
    ];
    assert_eq!(violations(&ops, &[]).total(), 0);
}

/// Reads a fault excuses settle nothing: a process that kept what it took while Valkey was away
/// (most of the stretch's reads) does not make the fleet's later, right answers divergent.
#[test]
fn excused_reads_do_not_decide_what_the_fleet_settled_on() {
    let after = 300 + B;
    let grace_ends = 400 + 5_000;
    let ops = [
        put(0, 1, 100, 200),
        put(1, 2, 250, 300),
        read(2, 1, after + 10, after + 20),
        read(2, 1, after + 30, after + 40),
        read(2, 1, after + 50, after + 60),
        read(2, 2, grace_ends + 10, grace_ends + 20),
    ];
    let found = check(&ops, &[fault(200, 400)], bounds());
    assert_eq!(found.violations.total(), 0, "{:?}", found.examples);
    // Outside any fault, the early reads are stale.
    assert_eq!(violations(&ops, &[]).stale_after_write, 3);
}

/// With schemas side by side, another schema's load of the group's newest version drops this
/// schema's older copy: its reads may move up to that version once (each side of the load
/// agreeing within itself), and a disagreement after the move is still divergent.
#[test]
fn a_schema_moves_up_after_another_schemas_load_of_the_newest_version() {
    let bounds = Bounds {
        schemas: 2,
        ..bounds()
    };
    let after = 300 + B;
    let moved = after + 100;
    // Schema 0 (processes 0 and 2) kept the older put's copy; process 1 (schema 1) loads v2.
    let mut ops = vec![
        put(0, 1, 100, 300),
        invalidate(1, 2, 150, 250),
        read(0, 1, after + 10, after + 20),
        read(2, 1, after + 30, after + 40),
        load(1, 2, moved - 10, moved),
        read(0, 2, moved + B + 10, moved + B + 20),
        read(2, 2, moved + B + 30, moved + B + 40),
    ];
    let found = check(&ops, &[], bounds);
    assert_eq!(found.violations.divergent, 0, "{:?}", found.examples);
    ops.push(read(2, 1, moved + B + 50, moved + B + 60));
    ops.push(read(2, 1, moved + B + 70, moved + B + 80));
    let found = check(&ops, &[], bounds);
    assert!(found.violations.divergent > 0, "{:?}", found.examples);
}

/// The first load of the newest version may have moved nothing: its lock dropped by a write of
/// the group (a put drops every schema's lock), its fenced write was skipped. A later load's write
/// moved the schema instead, and the reads agree around that one. (`echostore check`, three
/// schemas: `read by p2 of t0 id 21 at 61.756 s (l1) returned v474 where the others settled on
/// v475`, schema 1's load of v475 fenced out by p2's late put of v474, schema 0's later load the
/// one that dropped schema 2's copy.)
#[test]
fn a_schema_moves_up_at_whichever_load_of_the_newest_version_wrote() {
    let bounds = Bounds {
        schemas: 2,
        ..bounds()
    };
    let after = 300 + B;
    let (fenced, moved) = (after + 100, after + 3 * B);
    let mut ops = vec![
        put(0, 1, 100, 300),
        invalidate(1, 2, 150, 250),
        load(1, 2, fenced - 10, fenced),
        // Schema 0 (processes 0 and 2) still reads the older copy well after the first load.
        read(0, 1, fenced + B + 10, fenced + B + 20),
        read(2, 1, fenced + B + 30, fenced + B + 40),
        load(3, 2, moved - 10, moved),
        read(0, 2, moved + B + 10, moved + B + 20),
        read(2, 2, moved + B + 30, moved + B + 40),
    ];
    let found = check(&ops, &[], bounds);
    assert_eq!(found.violations.divergent, 0, "{:?}", found.examples);
    // Around no load do these agree: one process back on the older copy after the move.
    ops.push(read(2, 1, moved + B + 50, moved + B + 60));
    ops.push(read(0, 1, moved + B + 70, moved + B + 80));
    let found = check(&ops, &[], bounds);
    assert!(found.violations.divergent > 0, "{:?}", found.examples);
}

/// With one schema too: a put that landed after the invalidate it raced leaves the older
/// version, until a read that must see at least the newest drops it and loads; the fleet then
/// moves up to what it loaded.
#[test]
fn the_fleet_moves_up_after_a_load_of_the_newest_version() {
    let after = 300 + B;
    let moved = after + 100;
    let ops = [
        put(0, 1, 100, 300),
        invalidate(1, 2, 150, 250),
        read(0, 1, after + 10, after + 20),
        read(2, 1, after + 30, after + 40),
        load(1, 2, moved - 10, moved),
        read(0, 2, moved + B + 10, moved + B + 20),
        read(2, 2, moved + B + 30, moved + B + 40),
    ];
    assert_eq!(violations(&ops, &[]).total(), 0);
}

/// The read that made that load (it had to see at least the newest version) began before the
/// load and ended after it: it answers what it loaded, the fleet having settled on the older
/// version, and is no divergence; nor is a read that joined the load. (`echostore check`, three
/// schemas: `read by p3 of t2 id 1 at 1.773 s (loaded) returned v15 where the others settled on
/// v14`, the read's own load of v15 ending inside it.)
#[test]
fn the_read_that_loads_the_newest_version_is_no_divergence() {
    let after = 300 + B;
    let moved = after + 100;
    let mut must_see = read(1, 2, moved - 20, moved + 5);
    must_see.at_least = 2;
    let ops = [
        put(0, 1, 100, 300),
        invalidate(1, 2, 150, 250),
        read(0, 1, after + 10, after + 20),
        read(2, 1, after + 30, after + 40),
        must_see,
        load(1, 2, moved - 10, moved),
        read(1, 2, moved - 5, moved + 2),
        read(0, 2, moved + B + 10, moved + B + 20),
        read(2, 2, moved + B + 30, moved + B + 40),
    ];
    let found = check(&ops, &[], bounds());
    assert_eq!(found.violations.total(), 0, "{:?}", found.examples);
    // Ending before the load, it had no newest version to take.
    let ops = [
        put(0, 1, 100, 300),
        invalidate(1, 2, 150, 250),
        read(0, 1, after + 10, after + 20),
        read(2, 1, after + 30, after + 40),
        read(1, 2, moved - 30, moved - 20),
        load(1, 2, moved - 10, moved),
    ];
    assert_eq!(violations(&ops, &[]).divergent, 1);
}

/// A version no write made, or one whose write began after the read ended.
#[test]
fn a_version_never_written_is_a_phantom() {
    let ops = [read(0, 7, 10, 20)];
    only(&ops, "phantom", |v| v.phantom);
    let ops = [read(0, 1, 10, 20), put(1, 1, 30, 40)];
    assert_eq!(violations(&ops, &[]).phantom, 1);
}

/// A second load while the first one's value is fresh, with nothing that dropped it, is an extra
/// source read; an invalidate between them, or the value's expiry, justifies it.
#[test]
fn a_second_load_within_a_fresh_life_is_an_extra_source_read() {
    let ops = [load(0, 0, 10, 20), load(1, 0, 500, 510)];
    only(&ops, "extra_source_reads", |v| v.extra_source_reads);
    // Two loads at once in two processes: the lock should have elected one.
    let ops = [load(0, 0, 10, 200), load(1, 0, 50, 210)];
    assert_eq!(violations(&ops, &[]).extra_source_reads, 1);
    // A put's value is as fresh as a load's, once it has surely landed (`B` after it returned).
    let ops = [put(0, 1, 10, 20), load(1, 1, 20 + B + 1, 30 + B)];
    assert_eq!(violations(&ops, &[]).extra_source_reads, 1);
    let ops = [put(0, 1, 10, 20), load(1, 1, 20 + B / 2, 30 + B / 2)];
    assert_eq!(violations(&ops, &[]).extra_source_reads, 0);
    let ops = [
        load(0, 0, 10, 20),
        invalidate(2, 1, 100, 200),
        load(1, 1, 500, 510),
    ];
    assert_eq!(violations(&ops, &[]).extra_source_reads, 0);
    let ops = [
        load(0, 0, 10, 20),
        op(2, Action::Delete, 1, 100, 200),
        load(1, 1, 500, 510),
    ];
    assert_eq!(
        violations(&ops, &[]).extra_source_reads,
        0,
        "a delete drops the copy"
    );
    let expired = 20 + bounds().fresh_for + 1;
    let ops = [load(0, 0, 10, 20), load(1, 0, expired, expired + 10)];
    assert_eq!(violations(&ops, &[]).extra_source_reads, 0);
    // The example names the write before the value that covered the load: a mark heard late
    // shows as an invalidate there.
    let set = 20 + B + 10;
    let ops = [
        invalidate(2, 1, 10, 20),
        put(0, 2, set, set + 10),
        load(1, 2, set + 10 + B + 1, set + 20 + B),
    ];
    let example = the_extra_read(&ops);
    assert!(
        example.contains("was fresh (after p2's Invalidate ended at"),
        "{example}"
    );
}

/// The one violation `ops` hold, an extra source read: its example.
fn the_extra_read(ops: &[Op]) -> String {
    let found = check(ops, &[], bounds());
    assert_eq!(found.violations.total(), 1, "{:?}", found.examples);
    assert_eq!(found.violations.extra_source_reads, 1);
    found.examples[0].clone()
}

/// A load whose process was held up between its lock and its loader began more than `B` after
/// a put ended, but a read of its own process that was waiting when it began started before the
/// put ended: its flight may have taken the lock before the put landed (a put drops the lock,
/// then fences the flight's write out), so the load is no extra source read. A read of another
/// process, or one that began `B` after the put ended, gives no such doubt.
#[test]
fn a_load_held_up_after_its_lock_is_judged_from_the_read_that_waited_for_it() {
    let held_up = 20 + B + 50;
    let ops = [
        put(0, 1, 10, 20),
        read(1, 1, 15, held_up + 20),
        load(1, 1, held_up, held_up + 10),
    ];
    assert_eq!(violations(&ops, &[]).extra_source_reads, 0);
    let ops = [
        put(0, 1, 10, 20),
        read(2, 1, 15, held_up + 20),
        load(1, 1, held_up, held_up + 10),
    ];
    assert_eq!(violations(&ops, &[]).extra_source_reads, 1);
    let late = held_up + B;
    let ops = [
        put(0, 1, 10, 20),
        read(1, 1, 20 + B + 1, late + 20),
        load(1, 1, late, late + 10),
    ];
    // The example says when the flight may have begun: a log with no history left still tells
    // the two apart.
    let example = the_extra_read(&ops);
    assert!(example.contains("p1's read waiting since"), "{example}");
}

/// A fault near the write excuses staleness until its grace runs out, and excuses the reload it
/// caused; it never excuses going back in one process.
#[test]
fn faults_excuse_staleness_and_reloads_but_never_going_back() {
    let stale = [
        put(0, 1, 100, 200),
        read(1, 0, 200 + 3 * B, 200 + 3 * B + 1),
    ];
    let found = check(&stale, &[fault(150, 400)], bounds());
    assert_eq!(found.violations.total(), 0);
    assert_eq!(found.excused_reads, 1);
    assert_eq!(found.worst_staleness_under_faults_ns, 3 * B);
    // A fault long after the write excuses nothing: the push should have arrived before it.
    let later = 200 + 10 * B;
    let late = [put(0, 1, 100, 200), read(1, 0, later + 1, later + 2)];
    assert_eq!(
        violations(&late, &[fault(later, later + 5)]).stale_after_write,
        1
    );
    // A fault past its grace excuses nothing either.
    let long_after = 400 + bounds().fault_grace + 1;
    let past = [put(0, 1, 100, 200), read(1, 0, long_after, long_after + 1)];
    assert_eq!(violations(&past, &[fault(150, 400)]).stale_after_write, 1);

    let reload = [load(0, 0, 10, 20), load(1, 0, 500, 510)];
    let found = check(&reload, &[fault(100, 200)], bounds());
    assert_eq!(found.violations.extra_source_reads, 0);
    assert_eq!(found.excused_source_reads, 1);

    assert_eq!(violations(&going_back(), &[fault(0, 100)]).non_monotonic, 1);
}

/// Every fault is excused the same grace: one that empties Valkey no longer (its schemas keep
/// their generations, so no process hears nothing while it settles on a new one).
#[test]
fn a_fault_that_empties_valkey_is_excused_no_longer_than_another() {
    let past_grace = 400 + bounds().fault_grace + 1;
    let stale = [put(0, 1, 100, 200), read(1, 0, past_grace, past_grace + 1)];
    for name in ["outage", "restart", "crash"] {
        let fault = FaultSpan::new(name, 150, 400);
        let found = check(&stale, &[fault], bounds());
        assert_eq!(found.violations.stale_after_write, 1, "{name}");
    }
    let within = [
        put(0, 1, 100, 200),
        read(1, 0, past_grace - 2, past_grace - 1),
    ];
    let outage = FaultSpan::new("outage", 150, 400);
    assert_eq!(
        check(&within, &[outage], bounds())
            .violations
            .stale_after_write,
        0
    );
}

/// Every rule is found on one key while another key of the same history stays clean: the
/// rules are per id.
#[test]
fn each_id_is_checked_on_its_own() {
    let mut other = put(0, 1, 100, 200);
    other.id = 2;
    let ops = [other, read(1, 0, 200 + 2 * B, 200 + 2 * B + 1)];
    assert_eq!(violations(&ops, &[]).total(), 0);
}

/// A read that had to see at least version 2 (the source's when it began) and returned 1:
/// `at_least`, whatever the other rules say of version 1 (still current to them).
#[test]
fn a_read_below_its_at_least_version_breaks_at_least() {
    let mut below = read(1, 1, 300, 310);
    below.at_least = 2;
    let mut met = read(1, 2, 320, 330);
    met.at_least = 2;
    let ops = vec![put(0, 1, 100, 110), put(0, 2, 290, 400), below, met];
    only(&ops, "at_least", |v| v.at_least);
}

/// Random histories of one id: reads, loads and writes of three processes, some long, some
/// failed, many overlapping; the same for every run of the test.
fn random_histories() -> impl Iterator<Item = Vec<Op>> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(33);
    (0..400).map(move |_| {
        // Sparse histories too, where an old, long setter can still cover a load.
        let n = rng.random_range(5..150);
        (0..n)
            .map(|v| {
                let action = [
                    Action::Read,
                    Action::Read,
                    Action::Load,
                    Action::Put,
                    Action::Invalidate,
                    Action::Delete,
                ][rng.random_range(0..6)];
                let start = rng.random_range(0..20_000);
                let long = rng.random_bool(0.1);
                let took = match rng.random_range(0..10) {
                    0 => 0, // within one tick of the clock
                    _ => rng.random_range(0..if long { 8_000 } else { 800 }),
                };
                let mut made = op(rng.random_range(0..3), action, v, start, start + took);
                made.ok = rng.random_bool(0.9);
                made
            })
            .collect()
    })
}

/// The one-read rule's search by bisection finds, for every load, the very setter the scan it
/// replaced found (the scan, kept here as the oracle: every earlier setter, every write).
#[test]
fn the_covering_search_finds_what_a_full_scan_finds() {
    for schemas in [1, 2] {
        let bounds = Bounds {
            staleness: 300,
            fresh_for: 3_000,
            schemas,
            ..bounds()
        };
        for history in random_histories() {
            let ops: Vec<&Op> = history.iter().collect();
            let setters = covering::Setters::new(&ops);
            for load in ops.iter().filter(|o| o.action == Action::Load) {
                let found = setters.covering(load, &bounds);
                let scanned = covering_by_scan(&ops, load, &bounds);
                assert!(
                    found.map(|o| o as *const Op) == scanned.map(|o| o as *const Op),
                    "{load:?}: {found:?} against {scanned:?}"
                );
            }
        }
    }
}

fn covering_by_scan<'a>(ops: &[&'a Op], load: &Op, bounds: &Bounds) -> Option<&'a Op> {
    let mut setters: Vec<&Op> = ops
        .iter()
        .copied()
        .filter(|o| o.ok && matches!(o.action, Action::Load | Action::Put))
        .collect();
    setters.sort_by_key(|s| s.start);
    let writes: Vec<&Op> = ops.iter().copied().filter(|o| o.is_write()).collect();
    let (schemas, b) = (bounds.schemas.max(1), bounds.staleness);
    let waiting = ops.iter().filter(|r| {
        r.action == Action::Read
            && r.process == load.process
            && r.start <= load.start
            && load.start <= r.end
    });
    let decided = waiting.map(|r| r.start).min().unwrap_or(u64::MAX);
    let decided = decided.min(load.start);
    let earlier = setters.partition_point(|s| s.start < load.start);
    setters[..earlier]
        .iter()
        .rev()
        .find(|set| {
            !std::ptr::eq(**set, load)
                && set.process % schemas == load.process % schemas
                && (set.action == Action::Load || set.end.saturating_add(b) < decided)
                && load.start
                    < (set.end.saturating_add(bounds.fresh_for))
                        .saturating_sub(bounds.early_by(set))
                && !writes.iter().any(|w| {
                    !std::ptr::eq(*w, **set)
                        && w.start < load.start
                        && w.end.saturating_add(b) > set.start
                })
        })
        .copied()
}

/// The quiet stretch's reads found by bisection are exactly those a scan of every read finds.
#[test]
fn a_quiet_stretch_holds_every_read_a_full_scan_finds() {
    for history in random_histories() {
        let mut reads: Vec<&Op> = history.iter().collect();
        reads.sort_by_key(|r| r.end);
        // Stretches whose bounds fall on reads' own starts and ends, and one past them.
        let points: Vec<u64> = reads
            .iter()
            .take(6)
            .flat_map(|r| [r.start, r.start + 1, r.end, r.end + 1])
            .collect();
        let stretches = points
            .iter()
            .flat_map(|&from| points.iter().map(move |&to| (from, to)));
        for (from, to) in stretches {
            let quiet = |r: &&Op| r.start > from && r.end < to;
            let scanned: Vec<usize> = (0..reads.len()).filter(|&r| quiet(&reads[r])).collect();
            let bisected: Vec<usize> = ending_within(&reads, from, to)
                .filter(|&r| quiet(&reads[r]))
                .collect();
            assert_eq!(bisected, scanned, "from {from} to {to}");
        }
    }
}

/// On a table that refreshes early, a load inside the early window of a load's value (4·delta·beta
/// before its shortest life ends, and the slack) is by design; sooner, or after a put (whose value
/// is never refreshed early), or on a table that does not refresh early, it is an extra read.
#[test]
fn an_early_refresh_is_no_extra_source_read_where_the_table_refreshes_early() {
    let bounds = Bounds {
        early: Early {
            beta: [0.0, 1.0, 0.0],
            slack: 50,
        },
        ..bounds()
    };
    let on = |table: u8, mut op: Op| {
        op.table = table;
        op
    };
    // A load of 100: its window opens 4·100 + 50 before its shortest life ends.
    let refresh_at = 1_100 + bounds.fresh_for - 400 - 50;
    let extra = |table: u8, first: Op, at: u64| {
        let ops = [on(table, first), on(table, load(1, 0, at, at + 10))];
        check(&ops, &[], bounds).violations.extra_source_reads
    };
    assert_eq!(extra(1, load(0, 0, 1_000, 1_100), refresh_at), 0);
    assert_eq!(extra(1, load(0, 0, 1_000, 1_100), refresh_at - 1), 1);
    assert_eq!(extra(0, load(0, 0, 1_000, 1_100), refresh_at), 1);
    assert_eq!(extra(1, put(0, 0, 1_000, 1_100), refresh_at), 1);
}

/// On a table whose values choose their own life, a load after an odd version's shorter life
/// ended is no extra read; before it, or after an even version's, or on another table, it is.
#[test]
fn a_load_after_a_values_own_shorter_life_is_no_extra_source_read() {
    let bounds = Bounds {
        short: ShortLives {
            tables: [true, false, false],
            fresh_for: 400_000,
        },
        ..bounds()
    };
    let on = |table: u8, mut op: Op| {
        op.table = table;
        op
    };
    let expired = 20 + 400_000 + 1;
    let extra = |table: u8, version: u64, at: u64| {
        let ops = [
            on(table, load(0, version, 10, 20)),
            on(table, load(1, version, at, at + 10)),
        ];
        check(&ops, &[], bounds).violations.extra_source_reads
    };
    assert_eq!(extra(0, 1, expired), 0, "its own life ended");
    assert_eq!(extra(0, 1, expired - 2), 1, "still within it");
    assert_eq!(extra(0, 2, expired), 1, "an even version lives the ttl");
    assert_eq!(extra(0, 5, expired), 1, "a gone row's None lives the ttl");
    assert_eq!(extra(1, 1, expired), 1, "the table's values live the ttl");
}

/// An id a batch read's answer left out is a lost answer, whatever fault was on: every id of the
/// check exists at the source, and a fault may fail an answer, never drop it.
#[test]
fn an_id_left_out_of_a_batchs_answer_is_a_lost_answer() {
    let left_out = Op {
        ok: false,
        batch: true,
        origin: super::LEFT_OUT.to_owned(),
        ..read(0, 0, 50, 60)
    };
    let ops = [put(1, 1, 10, 20), read(0, 1, 30, 40), left_out.clone()];
    only(&ops, "lost_answer", |v| v.lost_answer);
    let failed = Op {
        origin: "the owner stopped".to_owned(),
        ..left_out
    };
    let found = violations(&[put(1, 1, 10, 20), failed], &[fault(0, 100)]);
    assert_eq!(found.total(), 0, "a failed answer under a fault is excused");
    let under_fault = violations(&ops, &[fault(0, 100)]);
    assert_eq!(under_fault.lost_answer, 1, "no fault excuses it");
}

/// A call that failed with no fault on is a `failed_call`: every id exists at the source, the
/// source never fails, and a declined answer is not recorded, so a healthy Valkey leaves a call
/// no reason to fail. Under a fault, or within its grace, it is excused; `skew` excuses nothing.
#[test]
fn a_call_that_fails_with_no_fault_on_is_a_failed_call() {
    let failed = |op: Op| Op {
        ok: false,
        origin: "the owner stopped".to_owned(),
        ..op
    };
    let ops = [put(1, 1, 10, 20), failed(read(0, 0, 30, 40))];
    only(&ops, "failed_call", |v| v.failed_call);
    let ops = [failed(put(1, 1, 10, 20)), read(0, 1, 30, 40)];
    only(&ops, "failed_call", |v| v.failed_call);
    let ops = [put(1, 1, 10, 20), failed(read(0, 0, 30, 40))];
    assert_eq!(
        violations(&ops, &[fault(25, 35)]).total(),
        0,
        "under a fault"
    );
    assert_eq!(
        violations(&ops, &[fault(0, 5)]).total(),
        0,
        "within the fault's grace"
    );
    let late = [put(1, 1, 10, 20), failed(read(0, 0, 6_000, 6_010))];
    assert_eq!(violations(&late, &[fault(0, 5)]).failed_call, 1, "past it");
    let skew = FaultSpan {
        excuses: Excuses::Nothing,
        ..fault(25, 35)
    };
    assert_eq!(
        violations(&ops, &[skew]).failed_call,
        1,
        "skew excuses nothing"
    );
}

/// A slow source excuses the calls that fail while it lasts (readers wait past their bounds),
/// and nothing else: what a read answers and how often the source is read hold through it.
#[test]
fn a_slow_source_excuses_failed_calls_only() {
    let slow = FaultSpan {
        excuses: Excuses::FailedCalls,
        ..FaultSpan::new("slow-source", 150, 400)
    };
    let waited = Op {
        ok: false,
        origin: "waited past its bound".to_owned(),
        ..read(0, 0, 160, 170)
    };
    let failing = [put(1, 1, 10, 20), waited];
    let slow = [slow];
    assert_eq!(violations(&failing, &slow).total(), 0);
    let stale = [
        put(0, 1, 100, 200),
        read(1, 0, 200 + 3 * B, 200 + 3 * B + 1),
    ];
    assert_eq!(violations(&stale, &slow).stale_after_write, 1);
    let reload = [load(0, 0, 10, 20), load(1, 0, 300, 310)];
    assert_eq!(violations(&reload, &slow).extra_source_reads, 1);
}

/// A fault done to some processes only (a freeze, a replacement, the proxied link) excuses a
/// read by one of them, or a read that missed a write by one of them, and nothing between two
/// processes it left alone.
#[test]
fn a_fault_done_to_one_process_excuses_only_what_involves_it() {
    let late = 200 + 3 * B;
    let stale = [put(0, 1, 100, 200), read(1, 0, late, late + 1)];
    let frozen = |p: u32| [fault(150, 400).on(vec![p])];
    assert_eq!(
        violations(&stale, &frozen(1)).total(),
        0,
        "the reader froze"
    );
    assert_eq!(
        violations(&stale, &frozen(0)).total(),
        0,
        "the writer froze"
    );
    assert_eq!(
        violations(&stale, &frozen(2)).stale_after_write,
        1,
        "neither did"
    );
    assert_eq!(
        violations(&stale, &[fault(150, 400)]).total(),
        0,
        "everyone's"
    );
}

/// The same for a copy the fleet moved past: a process that differs from the rest is excused
/// by a fault done to it, or to a writer of the group, and by nothing done elsewhere.
#[test]
fn a_fault_done_to_one_process_excuses_only_its_divergence() {
    let after = 300 + B;
    let ops = [
        put(0, 1, 100, 250),
        put(1, 2, 150, 300),
        read(2, 1, after + 10, after + 20),
        read(3, 2, after + 10, after + 20),
        read(4, 2, after + 30, after + 40),
    ];
    let done_to = |p: u32| [fault(200, 300).on(vec![p])];
    for (p, who) in [(2, "the reader"), (0, "a writer"), (1, "the other writer")] {
        assert_eq!(violations(&ops, &done_to(p)).total(), 0, "done to {who}");
    }
    assert_eq!(
        violations(&ops, &done_to(5)).divergent,
        1,
        "done to a process that neither read nor wrote"
    );
    assert_eq!(
        violations(&ops, &[fault(200, 300)]).total(),
        0,
        "everyone's"
    );
}

fn delete(p: u32, v: u64, start: u64, end: u64) -> Op {
    op(p, Action::Delete, v, start, end)
}

/// A load whose row the batch loader left out cached nothing: the next load within its life is
/// no extra source read, and itself is one if a fresh value covered it.
#[test]
fn an_absent_load_covers_no_later_load() {
    let absent = |p, v, start, end| Op {
        origin: ABSENT.to_owned(),
        batch: true,
        ..load(p, v, start, end)
    };
    let again = [
        delete(1, 2, 1, 5),
        absent(0, 2, 10, 20),
        load(1, 2, 500, 510),
    ];
    assert_eq!(violations(&again, &[]).total(), 0);
    let covered = [load(0, 2, 10, 20), absent(1, 2, 500, 510)];
    only(&covered, "extra_source_reads", |v| v.extra_source_reads);
}

/// A read that answered `None` (on table 0, versions 2, 5, 8… are rows gone at the source) is
/// held to the rules as the gone version most in its favour: after a delete it is right; once a
/// later write of a live row has returned (past `B`) it is stale; before any row was gone it is
/// phantom; and it raises no floor for the reads after it.
#[test]
fn a_none_is_judged_as_the_gone_version_most_in_its_favour() {
    let after_delete = [
        put(0, 1, 10, 20),
        delete(1, 2, 30, 40),
        read(2, GONE, 50, 60),
    ];
    assert_eq!(violations(&after_delete, &[]).total(), 0);
    let stale = [
        delete(1, 2, 30, 40),
        put(0, 3, 50, 60),
        read(2, GONE, 2_000, 2_010),
    ];
    only(&stale, "stale_after_write", |v| v.stale_after_write);
    let never_gone = [put(0, 1, 10, 20), read(2, GONE, 50, 60)];
    only(&never_gone, "phantom", |v| v.phantom);
    // Either delete may be the tombstone it read: the later one keeps it fresh.
    let two = [
        delete(1, 2, 10, 20),
        put(0, 3, 30, 40),
        delete(1, 5, 50, 60),
        read(2, GONE, 2_000, 2_010),
    ];
    assert_eq!(violations(&two, &[]).total(), 0);
    // A read that had to see v3 cannot take the tombstone of v2.
    let at_least = Op {
        at_least: 3,
        ..read(2, GONE, 100, 110)
    };
    let before_it = [delete(1, 2, 10, 20), put(0, 3, 30, 40), at_least.clone()];
    only(&before_it, "at_least", |v| v.at_least);
    let after_it = [
        delete(1, 2, 10, 20),
        put(0, 3, 30, 40),
        delete(0, 5, 50, 60),
        at_least,
    ];
    assert_eq!(violations(&after_it, &[]).total(), 0);
    // A None judged as v5 sets no floor: v3 after it, while v5's delete may not have landed, is
    // no going back.
    let no_floor = [
        put(0, 3, 10, 20),
        delete(1, 5, 30, 40),
        read(2, GONE, 35, 45),
        read(2, 3, 50, 60),
    ];
    assert_eq!(violations(&no_floor, &[]).total(), 0);
}

/// In a quiet stretch after a delete that overlapped a put (either may land last), the fleet
/// settles on `None`: a process still answering the put's row diverges, and `None`s agree with
/// each other.
#[test]
fn a_quiet_stretch_after_a_delete_settles_on_none() {
    let settled = |late: u64| {
        let ops = [
            put(0, 1, 10, 40),
            delete(1, 2, 30, 50),
            read(1, GONE, 2_000, 2_010),
            read(2, GONE, 2_100, 2_110),
            read(3, late, 2_200, 2_210),
            read(4, GONE, 2_300, 2_310),
        ];
        check(&ops, &[], bounds())
    };
    assert_eq!(settled(GONE).violations.total(), 0);
    let kept = settled(1);
    assert_eq!(kept.violations.divergent, 1, "{:?}", kept.examples);
    assert!(
        kept.examples.iter().any(|e| e.contains("settled on None")),
        "{:?}",
        kept.examples
    );
}

/// A `None` shows no version, so a read that must see at least one drops Valkey's copy and asks
/// the source for it: a load of its schema within the read is no extra source read, though an
/// earlier load's `None` was still fresh, whichever process made it (the first to take the lock
/// after the drop). A load of another schema, whose copy the drop left, is; and so is one after
/// the read answered.
#[test]
fn a_load_made_by_a_read_at_least_that_answered_none_is_no_extra_source_read() {
    let asking = Op {
        at_least: 1,
        ..read(2, GONE, 2_100, 2_200)
    };
    let extra = |by: u32, at: u64, schemas: u32| {
        let ops = [
            delete(1, 2, 10, 20),
            load(0, 2, 2_000, 2_010),
            load(1, 2, 2_000, 2_010),
            asking.clone(),
            load(by, 2, at, at + 10),
        ];
        let bounds = Bounds {
            schemas,
            ..bounds()
        };
        check(&ops, &[], bounds).violations.extra_source_reads
    };
    assert_eq!(extra(2, 2_150, 1), 0, "the asking read's own load");
    assert_eq!(
        extra(3, 2_150, 1),
        0,
        "another process's load, after the drop"
    );
    assert_eq!(
        extra(4, 2_150, 2),
        0,
        "another process of the reader's schema"
    );
    assert_eq!(extra(3, 2_150, 2), 1, "a process of another schema");
    assert_eq!(extra(3, 2_250, 1), 1, "a load after the read answered");
}

/// On a table ordered by Valkey's clock (t2), a read at least a put's written token may return
/// a lower version whose put overlapped it (either may land last), never one whose put ended
/// before the token's began.
#[test]
fn a_written_token_is_ordered_by_the_puts_not_by_their_versions() {
    let on_t2 = |mut op: Op| {
        op.table = 2;
        op
    };
    let wanting = |got: u64| {
        on_t2(Op {
            at_least: 3,
            ..read(1, got, 100, 110)
        })
    };
    let overlapping = [
        on_t2(put(0, 2, 10, 50)),
        on_t2(put(1, 3, 20, 40)),
        wanting(2),
    ];
    assert_eq!(violations(&overlapping, &[]).total(), 0);
    let before = [
        on_t2(put(0, 2, 10, 15)),
        on_t2(put(1, 3, 20, 40)),
        wanting(2),
    ];
    only(&before, "at_least", |v| v.at_least);
}

/// A frozen process's own reads begun after it woke have no excuse in the freeze: its L1
/// answers nothing until its tracking task has caught up. Reads it began while frozen, and the
/// others' reads of what it wrote, keep the grace.
#[test]
fn a_frozen_process_is_judged_once_it_woke() {
    let freeze = |p: u32| [FaultSpan::new(FREEZE, 150, 2_000).on(vec![p])];
    let late = 200 + 3 * B;
    let woke = [put(0, 1, 100, 200), read(1, 0, late, late + 1)];
    assert_eq!(
        violations(&woke, &freeze(1)).stale_after_write,
        1,
        "read after waking"
    );
    let while_frozen = [put(0, 1, 100, 200), read(1, 0, 1_500, late + 1)];
    assert_eq!(
        violations(&while_frozen, &freeze(1)).total(),
        0,
        "begun while frozen"
    );
    assert_eq!(violations(&woke, &freeze(0)).total(), 0, "the writer froze");
}
