//! The rule a copy is checked by, and how marks read from Valkey are taken in.

use super::*;

fn marking(generation: u64, tags: &[&str]) -> Marking {
    Marking {
        generation,
        tags: tags.iter().map(|t| t.to_string()).collect(),
    }
}

fn read(marks: &[(&str, u64)]) -> Vec<(Vec<u8>, f64)> {
    marks
        .iter()
        .map(|(m, g)| (m.as_bytes().to_vec(), *g as f64))
        .collect()
}

const NOW: u64 = 1_764_600_000_000_000;

/// A tag's mark makes a copy stamped below it a miss only if the copy carries the tag; a clear
/// makes every copy stamped below it a miss; a stamp at the mark is current.
#[test]
fn a_copy_is_current_unless_a_later_mark_names_it() {
    let marks = Marks::new(b"t:{}marks".to_vec(), None);
    assert!(
        marks.is_current(&marking(0, &["a"])),
        "no marks: everything is current"
    );
    let scope = marks.merge(&read(&[("tag:a", NOW)]), NOW);
    assert_eq!(scope, Some(Scope::Tags(HashSet::from(["a".to_owned()]))));
    assert_eq!(marks.stamp(), NOW);
    assert!(!marks.is_current(&marking(NOW - 1, &["b", "a"])));
    assert!(marks.is_current(&marking(NOW - 1, &["b"])));
    assert!(
        marks.is_current(&marking(NOW, &["a"])),
        "stamped at the mark: read after it"
    );
    assert_eq!(
        marks.merge(&read(&[(CLEAR, NOW + 5)]), NOW),
        Some(Scope::All)
    );
    assert!(!marks.is_current(&marking(NOW + 4, &[])));
    assert!(marks.is_current(&marking(NOW + 5, &["a"])));
}

/// Marks only rise: an older read arriving late changes nothing, and says so; a clear absorbs
/// the tags marked before it.
#[test]
fn marks_only_rise() {
    let marks = Marks::new(b"t:{}marks".to_vec(), None);
    marks.merge(&read(&[("tag:a", NOW + 10), (CLEAR, NOW + 20)]), NOW);
    assert_eq!(
        marks.merge(&read(&[("tag:a", NOW + 10), (CLEAR, NOW)]), NOW),
        None
    );
    assert_eq!(marks.stamp(), NOW + 20);
    let view = marks.view.read().expect("view");
    assert!(view.tags.is_empty(), "tag a was marked before the clear");
}

/// A full read puts back what Valkey lost, and only that: a tag marked since the last clear and
/// missing from the read, not one a timed keep let expire (no copy it covers can be read).
#[test]
fn a_full_read_puts_back_what_valkey_lost_not_what_expired() {
    let keep = Duration::from_secs(1);
    let marks = Marks::new(b"t:{}marks".to_vec(), Some(keep));
    let expired = NOW - 2_000_000;
    let known = [
        ("tag:old", expired),
        ("tag:new", NOW),
        (CLEAR, expired - 10),
    ];
    marks.merge(&read(&known), expired);
    let (scope, lost) = marks.take_in_full(&read(&[]), NOW + 1, marks.stamp());
    assert_eq!(scope, None, "an empty read raises nothing");
    assert_eq!(
        lost,
        vec![
            (CLEAR.to_owned(), expired - 10),
            ("tag:new".to_owned(), NOW)
        ],
        "the expired tag:old is not put back"
    );
    let found = [("tag:new", NOW), (CLEAR, expired - 10)];
    let (_, lost) = marks.take_in_full(&read(&found), NOW + 1, marks.stamp());
    assert!(lost.is_empty(), "nothing lost: {lost:?}");
}

/// A mark heard while a full read is on its way (another process's, pushed, or this one's own
/// `clear`) was set after the read ran: its absence from the read is no loss, and it is not put
/// back (a put-back rewrites the key and pushes every process). One known before is.
#[test]
fn a_mark_heard_while_the_full_read_ran_is_not_lost() {
    let marks = Marks::new(b"t:{}marks".to_vec(), None);
    marks.merge(&read(&[("tag:a", NOW)]), NOW);
    let known = marks.stamp();
    marks.merge(&read(&[("tag:b", NOW + 5)]), NOW + 5);
    let (_, lost) = marks.take_in_full(&read(&[("tag:a", NOW)]), NOW + 6, known);
    assert!(lost.is_empty(), "tag:b came after the read: {lost:?}");
    let (_, lost) = marks.take_in_full(&read(&[]), NOW + 6, known);
    assert_eq!(
        lost,
        vec![("tag:a".to_owned(), NOW)],
        "Valkey lost tag:a; tag:b it may never have had when the read ran"
    );
}

/// Planted members and scores are ignored: no mark far ahead of the server's clock, and
/// nothing that is not a mark.
#[test]
fn planted_marks_are_ignored() {
    let marks = Marks::new(b"t:{}marks".to_vec(), None);
    let mut planted = read(&[("tag:a", NOW + MAX_AHEAD_US + 1), ("junk", NOW)]);
    planted.push((b"tag:\xff".to_vec(), NOW as f64));
    planted.push((b"clear".to_vec(), f64::NAN));
    planted.push((b"clear".to_vec(), -1.0));
    assert_eq!(marks.merge(&planted, NOW), None);
    assert_eq!(marks.stamp(), 0);
    assert!(marks.is_current(&marking(0, &["a"])));
}

/// Without a Valkey a mark is set here only, above the latest.
#[tokio::test]
async fn a_mark_without_valkey_is_local_and_above_the_latest() {
    let marks = Marks::new(b"t:{}marks".to_vec(), None);
    let scope = marks
        .mark(None, Some(&["x".to_owned()]))
        .await
        .expect("marked");
    assert_eq!(scope, Scope::Tags(HashSet::from(["x".to_owned()])));
    let first = marks.stamp();
    assert!(!marks.is_current(&marking(first - 1, &["x"])));
    assert_eq!(marks.mark(None, None).await.expect("cleared"), Scope::All);
    assert!(marks.stamp() > first);
    assert!(!marks.is_current(&marking(first, &[])));
}

/// A read above the latest mark known finds its member gone or lower only when Valkey lost it:
/// not when the member was marked again (higher), nor when a clear at or above it removed the
/// tags below it, nor, for marks kept a while only, once the table has been quiet past the keep
/// (the key then lapses whole, as designed).
#[test]
fn only_a_latest_mark_valkey_should_hold_is_lost() {
    let marks = Marks::new(b"t:{}marks".to_vec(), None);
    assert!(
        !marks.lost_latest(&[], 0, None, NOW),
        "no mark known: none lost"
    );
    let _ = marks.merge(&read(&[("tag:a", NOW - 2), ("tag:b", NOW)]), NOW);
    assert_eq!(marks.latest_known(), (NOW, b"tag:b".to_vec()));
    assert!(marks.lost_latest(&[], NOW, None, NOW), "the key gone");
    assert!(
        marks.lost_latest(&read(&[("tag:c", NOW + 9)]), NOW, None, NOW),
        "the key gone, then another mark"
    );
    assert!(!marks.lost_latest(&[], NOW, Some(NOW as f64), NOW));
    assert!(
        !marks.lost_latest(
            &read(&[("tag:b", NOW + 3)]),
            NOW,
            Some((NOW + 3) as f64),
            NOW
        ),
        "marked again"
    );
    assert!(
        !marks.lost_latest(&read(&[(CLEAR, NOW + 3)]), NOW, None, NOW),
        "a clear removed it"
    );

    let keep = Duration::from_secs(60);
    let timed = Marks::new(b"t:{}marks".to_vec(), Some(keep));
    let _ = timed.merge(&read(&[("tag:a", NOW)]), NOW);
    assert!(timed.lost_latest(&[], NOW, None, NOW + 1_000_000));
    assert!(
        !timed.lost_latest(&[], NOW, None, NOW + 61_000_000),
        "quiet past its keep: the key lapsed"
    );
}
