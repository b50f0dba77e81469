//! Chaos and its traces: a plain thread (restarting Valkey blocks) that kills Valkey every 3–8 s,
//! keeps it down 0.5–2 s and brings it back empty on the same port; and, sampled from inside the
//! run, the windows in which each store could not use Valkey.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use embedded_valkey::EmbeddedValkey;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::load::Node;
use crate::settings::SAMPLE_EVERY;

/// One time Valkey was down: from the kill to the moment the new, empty server answered PING
/// (`None`: it never came back).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outage {
    pub(crate) down: Duration,
    pub(crate) up: Option<Duration>,
}

/// What the chaos thread did.
#[derive(Debug, Default)]
pub(crate) struct Chaos {
    pub(crate) outages: Vec<Outage>,
    /// Why Valkey could not be brought back, if it could not.
    pub(crate) failure: Option<String>,
}

/// What the chaos thread and the soak share.
pub(crate) struct Shared {
    pub(crate) t0: Instant,
    /// Set when the run is over: the chaos thread brings Valkey back (if down) and ends.
    pub(crate) stop_chaos: AtomicBool,
    pub(crate) restarts: AtomicU64,
}

pub(crate) fn run_chaos(valkey: &mut EmbeddedValkey, shared: &Shared, seed: u64) -> Chaos {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xC4A0_5C4A_05C4_A05C);
    let mut done = Chaos::default();
    loop {
        let calm = Duration::from_millis(rng.random_range(3000..=8000));
        if !nap(calm, &shared.stop_chaos) {
            return done;
        }
        let down_for = Duration::from_millis(rng.random_range(500..=2000));
        let down = shared.t0.elapsed();
        valkey.stop();
        // Cut short when the run ends; Valkey comes back either way.
        nap(down_for, &shared.stop_chaos);
        match bring_back(valkey) {
            Ok(()) => {
                shared.restarts.fetch_add(1, Relaxed);
                let up = Some(shared.t0.elapsed());
                done.outages.push(Outage { down, up });
            }
            Err(why) => {
                done.outages.push(Outage { down, up: None });
                done.failure = Some(why);
                return done;
            }
        }
    }
}

/// Sleeps `span` in short steps; `false` if the run ended meanwhile.
pub(crate) fn nap(span: Duration, stop: &AtomicBool) -> bool {
    let until = Instant::now() + span;
    while Instant::now() < until {
        if stop.load(Relaxed) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10).min(until - Instant::now()));
    }
    !stop.load(Relaxed)
}

/// `restart()`, a few times if need be.
pub(crate) fn bring_back(valkey: &mut EmbeddedValkey) -> Result<(), String> {
    let mut last = String::new();
    for _ in 0..5 {
        match valkey.restart() {
            Ok(()) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(last)
}

// When could a store not use Valkey? Sampled from outside: its breaker open, or its Valkey error
// counter grown since the previous sample. Every degraded read counts an error just before it
// starts, so these windows hold every degraded read, whatever caused it (a chaos kill, or a call
// that timed out on a busy machine).

/// A span of the run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    pub(crate) from: Duration,
    pub(crate) to: Duration,
}

/// Sorted, disjoint spans.
#[derive(Debug, Default)]
pub(crate) struct Windows(pub(crate) Vec<Span>);

impl Windows {
    /// Widens every span by `margin` on both sides, sorts and merges them.
    pub(crate) fn new(mut spans: Vec<Span>, margin: Duration) -> Self {
        spans.sort_by_key(|s| s.from);
        let mut merged: Vec<Span> = Vec::with_capacity(spans.len());
        for s in spans {
            let wide = Span {
                from: s.from.saturating_sub(margin),
                to: s.to.saturating_add(margin),
            };
            match merged.last_mut() {
                Some(last) if wide.from <= last.to => last.to = last.to.max(wide.to),
                _ => merged.push(wide),
            }
        }
        Windows(merged)
    }

    /// `true` if some window meets `[from, to]`.
    pub(crate) fn meets(&self, from: Duration, to: Duration) -> bool {
        let first_not_before = self.0.partition_point(|w| w.to < from);
        self.0.get(first_not_before).is_some_and(|w| w.from <= to)
    }

    /// Time covered, clipped to `[0, end]`.
    pub(crate) fn covered(&self, end: Duration) -> Duration {
        self.0
            .iter()
            .map(|w| w.to.min(end).saturating_sub(w.from))
            .sum()
    }
}

/// Per store, the raw spans in which it could not use Valkey.
pub(crate) async fn watch_valkey(
    nodes: Vec<Node>,
    t0: Instant,
    stop: Arc<AtomicBool>,
) -> Vec<Vec<Span>> {
    let mut spans = vec![Vec::<Span>::new(); nodes.len()];
    let mut errors_seen: Vec<u64> = nodes.iter().map(|n| n.table.stats().l2_errors).collect();
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut previous = t0.elapsed();
    while !stop.load(Relaxed) {
        tick.tick().await;
        let now = t0.elapsed();
        for (i, node) in nodes.iter().enumerate() {
            let errors = node.table.stats().l2_errors;
            if node.store.is_degraded() || errors != errors_seen[i] {
                // The trouble began after the previous sample at the earliest.
                push_span(
                    &mut spans[i],
                    Span {
                        from: previous,
                        to: now,
                    },
                );
            }
            errors_seen[i] = errors;
        }
        previous = now;
    }
    spans
}

pub(crate) fn push_span(spans: &mut Vec<Span>, span: Span) {
    match spans.last_mut() {
        Some(last) if span.from <= last.to => last.to = span.to,
        _ => spans.push(span),
    }
}
