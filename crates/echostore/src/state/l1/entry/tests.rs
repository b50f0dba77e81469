//! Unit tests of `l1::entry`.
use super::*;

/// XFetch's rule at its edges: a draw of 1 never refreshes a value with time left; the
/// chance to refresh at `left` is `e^(-left / (delta·beta))`.
#[test]
fn xfetch_refreshes_with_the_papers_probability() {
    let early = Duration::from_millis(100);
    assert!(!xfetch(Duration::from_millis(1), early, 1.0));
    assert!(xfetch(Duration::ZERO, early, 1.0));
    assert!(!xfetch(Duration::from_millis(1), Duration::ZERO, 1e-12));
    let left = Duration::from_millis(200); // 2·delta·beta: e^-2 ≈ 0.135
    let edge = (-2.0f64).exp();
    assert!(xfetch(left, early, edge * 0.999) && !xfetch(left, early, edge * 1.001));
}

/// Outside the early window a hit is fresh without a draw; inside it an entry with a
/// `delta·beta` may ask for a refresh, and one whose refresh was asked for never does.
#[test]
fn the_window_is_where_refreshes_are_drawn() {
    let hour = Duration::from_secs(3600);
    let far = Entry::new(Arc::new(1u64), hour, hour, Duration::from_millis(10));
    assert!(far.fresh_until.is_surely_ahead());
    assert_eq!(far.freshness(), Freshness::Fresh);
    // delta·beta of an hour: the whole life is in the window, and the draw refreshes with
    // probability e^(-left / early) ≈ 1/e; 200 draws all missing is (1 - 1/e)^200 ≈ 0.
    let hot = Entry::new(Arc::new(1u64), hour, Duration::ZERO, hour);
    assert!(!hot.fresh_until.is_surely_ahead());
    assert!((0..200).any(|_| hot.freshness() == Freshness::Refresh));
    let asked = hot.refresh_asked();
    assert!(!asked.refreshes_early());
    assert!((0..200).all(|_| asked.freshness() == Freshness::Fresh));
    let gone = Entry::new(Arc::new(1u64), Duration::ZERO, Duration::ZERO, hour);
    assert_eq!(gone.freshness(), Freshness::Expired);
}

/// The packed fields saturate instead of wrapping; a capped entry keeps its stale window's
/// end and is not refreshed early.
#[test]
fn packed_fields_saturate_and_caps_keep_the_stale_end() {
    let year = Duration::from_secs(365 * 24 * 3600);
    let e = Entry::new(Arc::new(1u64), year, year, year);
    assert_eq!((e.stale_ms, e.early_us), (u32::MAX, u32::MAX));
    let e = Entry::new(
        Arc::new(1u64),
        Duration::from_secs(60),
        Duration::from_secs(60),
        Duration::from_millis(5),
    );
    let stale_end = e.stale_until();
    let capped = e.capped(Duration::from_secs(1));
    assert!(!capped.refreshes_early());
    let drift = stale_end.since(capped.stale_until()) + capped.stale_until().since(stale_end);
    assert!(drift <= Duration::from_millis(1), "{drift:?}");
}

/// An entry awaiting key tracking's confirmation answers no read, yet keeps its stale window
/// (it may still stand in as a stale copy) and draws no early refresh.
#[test]
fn an_unconfirmed_entry_is_not_fresh_but_keeps_its_stale_window() {
    let minute = Duration::from_secs(60);
    let e = Entry::new(Arc::new(1u64), minute, minute, Duration::from_millis(5));
    let stale_end = e.stale_until();
    let unconfirmed = e.unconfirmed();
    assert!(!unconfirmed.is_fresh());
    assert_eq!(unconfirmed.freshness(), Freshness::Expired);
    assert!(!unconfirmed.refreshes_early());
    assert!(
        unconfirmed.stale_window().is_some(),
        "a stale stand-in still"
    );
    let drift =
        stale_end.since(unconfirmed.stale_until()) + unconfirmed.stale_until().since(stale_end);
    assert!(drift <= Duration::from_millis(1), "{drift:?}");
}
