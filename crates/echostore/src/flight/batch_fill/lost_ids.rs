//! A batch's lost ids, waiting as one: the ids whose locks another process holds (most often
//! another batch loading the same page) take the table's loser policy together, and those left to
//! wait poll as one group: one poll-many per slot group each round, woken by a push for any of
//! their keys, never one poll loop per id. An id whose value turns up fresh lands as an L2 hit;
//! when some ids' locks go with no fresh value (their holder died or gave up), the group goes back
//! to contend again, as a batch, in the next round; those still waiting at the policy's deadline
//! (set when the batch first lost) answer `WaitTimeout`.

use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;

use super::on_valkey;
use super::{BatchFill, Member};
use crate::error::{Error, Result};
use crate::state::flight_id::FlightId;
use crate::state::loser_policy::Lost;
use crate::state::stale::{Landing, Signal};
use crate::state::stats::bump;
use crate::valkey::l2::L2;
use crate::wire::key::{Key, KeyNames, Value};

/// The longest pause between rounds after a failed poll.
const MAX_BACKOFF: Duration = Duration::from_millis(500);

/// How one round's look ended for one member.
enum Seen<V> {
    /// Its value is fresh: land it.
    Fresh(crate::valkey::envelope::Envelope<V>),
    /// Its lock is gone with no fresh value: contend again.
    Free,
    /// Still held: wait on.
    Held,
}

impl<K: Key, V: Value> BatchFill<'_, K, V> {
    /// The members another process holds the locks of: the loser policy answers them, or they
    /// wait as one group; returns the ids to contend for again.
    pub(super) async fn lost(
        &self,
        l2: &L2,
        lost: Vec<Member<K, V>>,
        deadline: &mut Option<Instant>,
    ) -> Vec<(K, FlightId)> {
        let config = &self.core.config;
        let mut waiting = Vec::new();
        let mut wait_for = (Duration::ZERO, Duration::ZERO);
        for m in lost {
            bump(&self.core.stats.counters.lock_lost);
            match config
                .losers
                .on_lost(&self.core.stats, m.stale.as_ref(), config.lock_ttl)
            {
                Lost::Answer(answer) => {
                    self.report
                        .landed(m.id, m.flight, answer.map(Landing::Filled))
                }
                Lost::Poll { every, up_to } => {
                    wait_for = (every, up_to);
                    waiting.push(m);
                }
            }
        }
        if waiting.is_empty() {
            return Vec::new();
        }
        let (every, up_to) = wait_for;
        let until = *deadline.get_or_insert_with(|| Instant::now() + up_to);
        self.wait(l2, waiting, every, (until, up_to)).await
    }

    /// Polls `waiting` as one group every `every` (or at a push) until each has landed or the
    /// deadline (`until`, `up_to` after the first loss) has passed, or some are free to contend
    /// again: then every one left goes back to contend (those still held lose again, at the
    /// cost of one acquire-many per slot group).
    async fn wait(
        &self,
        l2: &L2,
        mut waiting: Vec<Member<K, V>>,
        every: Duration,
        (until, up_to): (Instant, Duration),
    ) -> Vec<(K, FlightId)> {
        let wake = self.core.watch(waiting.iter().map(|m| (&m.id, &m.names)));
        let mut pause = every;
        while !waiting.is_empty() {
            let now = Instant::now();
            if now >= until {
                for m in waiting {
                    let timed_out = Err(Error::WaitTimeout { waited: up_to });
                    self.report.landed(m.id, m.flight, timed_out);
                }
                return Vec::new();
            }
            self.pause(pause.min(until - now), wake.as_deref()).await;
            if wake.is_some() {
                for m in &waiting {
                    self.report.signal(&m.id, m.flight, Signal::Reading);
                }
            }
            let (still, free, failed) = self.look(l2, waiting).await;
            pause = if failed {
                (pause * 2).min(MAX_BACKOFF.max(every))
            } else {
                every
            };
            if !free.is_empty() {
                return free
                    .into_iter()
                    .chain(still)
                    .map(|m| (m.id, m.flight))
                    .collect();
            }
            waiting = still;
        }
        Vec::new()
    }

    /// Sleeps `pause`, or less if a push for one of the group's keys arrives; counted once.
    async fn pause(&self, pause: Duration, wake: Option<&tokio::sync::Notify>) {
        let counters = &self.core.stats.counters;
        let pushed = match wake {
            Some(wake) => tokio::select! {
                () = wake.notified() => true,
                () = tokio::time::sleep(pause) => false,
            },
            None => {
                tokio::time::sleep(pause).await;
                false
            }
        };
        bump(if pushed {
            &counters.push_wakeups
        } else {
            &counters.poll_waits
        });
    }

    /// One round's look at every waiting member: lands the fresh ones; returns those still held,
    /// those free to contend again, and whether a group's poll failed (those stay, to retry).
    /// A breaker that is open sends its group to the single fill, which loads in-process.
    async fn look(
        &self,
        l2: &L2,
        waiting: Vec<Member<K, V>>,
    ) -> (Vec<Member<K, V>>, Vec<Member<K, V>>, bool) {
        let names: Vec<&KeyNames> = waiting.iter().map(|m| &m.names).collect();
        let groups = on_valkey::groups(l2, &names);
        let max = self.core.config.max_value_bytes;
        let polled = join_all(groups.iter().map(|group| {
            let keys: Vec<&KeyNames> = group.iter().map(|&i| names[i]).collect();
            async move { on_valkey::poll_many(l2, &keys, max).await }
        }))
        .await;
        let mut seen: Vec<Option<Result<Seen<V>>>> = waiting.iter().map(|_| None).collect();
        let mut failed = false;
        for (group, polled) in groups.iter().zip(polled) {
            match polled {
                Ok(each) => {
                    for (&i, (bytes, locked)) in group.iter().zip(each) {
                        seen[i] = Some(Ok(self.judge(bytes, locked)));
                    }
                }
                Err(e) => {
                    failed |= !matches!(e, Error::ValkeyUnavailable);
                    bump(&self.core.stats.counters.l2_errors);
                    for &i in group {
                        seen[i] = Some(Err(e.clone()));
                    }
                }
            }
        }
        self.sort(waiting, seen, failed).await
    }

    /// What one member's value and lock say.
    fn judge(&self, bytes: Option<Vec<u8>>, locked: bool) -> Seen<V> {
        match self.decode(bytes) {
            Some(env) if env.is_fresh(self.core.now_ms()) => Seen::Fresh(env),
            _ if !locked => Seen::Free,
            _ => Seen::Held,
        }
    }

    /// Lands the fresh members and sends those whose Valkey is unreachable to their own fill;
    /// returns the held ones (and those whose poll failed), the free ones, and `failed`.
    async fn sort(
        &self,
        waiting: Vec<Member<K, V>>,
        seen: Vec<Option<Result<Seen<V>>>>,
        failed: bool,
    ) -> (Vec<Member<K, V>>, Vec<Member<K, V>>, bool) {
        let (mut still, mut free, mut alone) = (Vec::new(), Vec::new(), Vec::new());
        for (m, seen) in waiting.into_iter().zip(seen) {
            match seen {
                Some(Ok(Seen::Fresh(env))) => {
                    bump(&self.core.stats.counters.l2_hits);
                    let hit = self.core.l2_filled(env);
                    self.report.landed(m.id, m.flight, Ok(Landing::Filled(hit)));
                }
                Some(Ok(Seen::Free)) => free.push(m),
                Some(Err(Error::ValkeyUnavailable)) => alone.push(m),
                _ => still.push(m),
            }
        }
        join_all(alone.into_iter().map(|m| self.alone(m.id, m.flight))).await;
        (still, free, failed)
    }
}
