//! The circuit breaker in front of Valkey.
//!
//! When Valkey cannot be reached, every miss would otherwise pay a connect attempt or a timeout.
//! After a connection-level failure the breaker opens for a cooldown: L2 calls fail at once
//! without touching the network, and the tables serve from L1 and the loader. When the cooldown
//! ends, exactly one call is let through as a trial (the others keep failing fast); its success
//! closes the breaker, its failure opens it again for twice as long, up to the store's
//! `breaker_cooldown`. The first cooldown is short ([`FIRST_COOLDOWN`]): a connection that was
//! reset (a killed client, a proxy that restarted) reconnects at once, and should cost a few
//! milliseconds of in-process loads, not a whole cooldown's. Only the trial's success closes
//! it: a call that was already in flight when the breaker opened may still succeed, and that says
//! nothing about whether Valkey is back, so under partial failure the breaker does not flap. A
//! dead Valkey therefore costs one trial per cooldown, and a returning one is picked up by the
//! first trial after it is back (on one server each trial is made on a new connection:
//! [`crate::wire::healing`]), without restarting anything.
//!
//! **A timeout is not a dead connection.** A refused, reset or dropped connection opens the
//! breaker at once. A call that timed out says only that this call was slow: it opens the breaker
//! when it is the second timeout in a row with no call through the breaker succeeding since the
//! first began ([`Breaker::timed_out`]). Under load, when some calls are slow and others are
//! answered, the breaker stays closed; a node that has gone silent (an address that no longer
//! answers) opens it at its second timeout.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The first cooldown after the breaker was closed (at most the store's `breaker_cooldown`).
pub(crate) const FIRST_COOLDOWN: Duration = Duration::from_millis(50);

/// What [`Breaker::allow`] let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Permit {
    /// The breaker was closed.
    Closed,
    /// The one trial after a cooldown: its success closes the breaker.
    Trial,
}

fn nanos(span: Duration) -> u64 {
    u64::try_from(span.as_nanos()).unwrap_or(u64::MAX)
}

/// A breaker shared by every table of one store.
pub(crate) struct Breaker {
    /// The longest cooldown (`breaker_cooldown`).
    cooldown: Duration,
    /// The cooldown of the open breaker now, in nanoseconds: doubled by each failed trial.
    step: AtomicU64,
    epoch: Instant,
    /// 0 when closed; otherwise nanoseconds since `epoch` (plus one) until the next trial.
    open_until: AtomicU64,
    /// Nanoseconds since `epoch` (plus one) of the last call that succeeded.
    last_success: AtomicU64,
    /// Timeouts since the last success, each of a call that began after that success.
    timeouts: AtomicU32,
}

/// When a call through the breaker began, for [`Breaker::timed_out`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Began(u64);

impl Breaker {
    pub(crate) fn new(cooldown: Duration) -> Self {
        Breaker {
            cooldown,
            step: AtomicU64::new(nanos(FIRST_COOLDOWN.min(cooldown))),
            epoch: Instant::now(),
            open_until: AtomicU64::new(0),
            last_success: AtomicU64::new(0),
            timeouts: AtomicU32::new(0),
        }
    }

    /// Marks the start of a call, for [`Self::timed_out`].
    pub(crate) fn begin(&self) -> Began {
        Began(self.now())
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64 + 1
    }

    /// May a call go to Valkey now? While open, only the first caller after the cooldown gets a
    /// permit (the [`Permit::Trial`]); it pushes the window forward for everyone else.
    pub(crate) fn allow(&self) -> Option<Permit> {
        let until = self.open_until.load(Ordering::Acquire);
        if until == 0 {
            return Some(Permit::Closed);
        }
        let now = self.now();
        let trial = now >= until
            && self
                .open_until
                .compare_exchange(
                    until,
                    now.saturating_add(self.step.load(Ordering::Acquire)),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok();
        trial.then_some(Permit::Trial)
    }

    /// A call reached Valkey: a trial's success closes the breaker; any other success leaves it
    /// as it is.
    pub(crate) fn succeeded(&self, permit: Permit) {
        self.last_success.store(self.now(), Ordering::Release);
        self.timeouts.store(0, Ordering::Release);
        if permit == Permit::Trial {
            self.open_until.store(0, Ordering::Release);
        }
    }

    /// A call that began at `began`, let through with `permit`, timed out: it opens the breaker
    /// only as the second timeout in a row of calls that saw no success while they waited (see
    /// the module's header).
    pub(crate) fn timed_out(&self, began: Began, permit: Permit) {
        if self.last_success.load(Ordering::Acquire) >= began.0 {
            return; // the connection answered others meanwhile: this call was only slow
        }
        if self.timeouts.fetch_add(1, Ordering::AcqRel) >= 1 {
            self.failed(permit);
        }
    }

    /// A call let through with `permit` could not reach Valkey. A closed breaker opens for the
    /// first cooldown; a failed trial doubles it (up to `breaker_cooldown`); a call that was in
    /// flight when the breaker opened changes nothing.
    pub(crate) fn failed(&self, permit: Permit) {
        let step = match permit {
            Permit::Trial => {
                let doubled = self.step.load(Ordering::Acquire).saturating_mul(2);
                doubled.min(nanos(self.cooldown))
            }
            Permit::Closed if self.is_open() => return,
            Permit::Closed => nanos(FIRST_COOLDOWN.min(self.cooldown)),
        };
        self.step.store(step, Ordering::Release);
        let until = self.now().saturating_add(step);
        self.open_until.store(until, Ordering::Release);
    }

    /// `true` while calls fail fast.
    pub(crate) fn is_open(&self) -> bool {
        self.open_until.load(Ordering::Acquire) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Closed lets everything through; open lets nothing through before the cooldown.
    #[test]
    fn open_refuses_until_the_cooldown_ends() {
        let b = Breaker::new(Duration::from_secs(3600));
        assert_eq!(
            (b.allow(), b.allow()),
            (Some(Permit::Closed), Some(Permit::Closed))
        );
        b.failed(Permit::Closed);
        assert!(b.is_open());
        assert_eq!(b.allow(), None);
    }

    /// A call let through while closed that succeeds after the breaker opened does not close it;
    /// the trial's success does.
    #[test]
    fn only_the_trial_closes() {
        let b = Breaker::new(Duration::ZERO);
        let early = b.allow().expect("closed");
        b.failed(early);
        b.succeeded(early);
        assert!(
            b.is_open(),
            "a call from before the failure closed the breaker"
        );
        let trial = b.allow().expect("the cooldown has passed");
        assert_eq!(trial, Permit::Trial);
        b.succeeded(trial);
        assert!(!b.is_open());
    }

    /// A timeout while other calls succeed opens nothing; two in a row with nothing answered
    /// open the breaker.
    #[test]
    fn only_timeouts_in_silence_open() {
        let b = Breaker::new(Duration::from_secs(3600));
        let slow = b.begin();
        b.succeeded(b.allow().expect("closed"));
        b.timed_out(slow, Permit::Closed);
        b.timed_out(slow, Permit::Closed);
        assert!(
            !b.is_open(),
            "a slow call while others were answered opened the breaker"
        );
        let (first, second) = (b.begin(), b.begin());
        b.timed_out(first, Permit::Closed);
        assert!(!b.is_open(), "one timeout opened the breaker");
        b.timed_out(second, Permit::Closed);
        assert!(
            b.is_open(),
            "two timeouts with nothing answered left it closed"
        );
    }

    /// The first cooldown is short; each failed trial doubles it up to the store's cooldown; a
    /// call in flight when the breaker opened changes nothing; the trial's success starts over.
    #[test]
    fn the_cooldown_doubles_from_a_short_first_one() {
        let b = Breaker::new(Duration::from_secs(1));
        let in_flight = b.allow().expect("closed");
        b.failed(Permit::Closed);
        assert_eq!(b.step.load(Ordering::Acquire), nanos(FIRST_COOLDOWN));
        b.failed(in_flight);
        assert_eq!(b.step.load(Ordering::Acquire), nanos(FIRST_COOLDOWN));
        let mut steps = Vec::new();
        for _ in 0..6 {
            b.failed(Permit::Trial);
            steps.push(b.step.load(Ordering::Acquire) / 1_000_000);
        }
        assert_eq!(steps, [100, 200, 400, 800, 1000, 1000]);
        b.open_until.store(1, Ordering::Release);
        let trial = b.allow().expect("a trial");
        b.succeeded(trial);
        b.failed(Permit::Closed);
        assert_eq!(b.step.load(Ordering::Acquire), nanos(FIRST_COOLDOWN));
    }

    /// After the cooldown exactly one trial goes through.
    #[test]
    fn one_trial_after_the_cooldown() {
        let b = Breaker::new(Duration::ZERO);
        b.failed(Permit::Closed);
        // A zero cooldown has passed by now; the first caller takes the trial.
        let allowed = (0..10).filter(|_| b.allow().is_some()).count();
        assert!(allowed >= 1, "the trial was never let through");
        let b = Breaker::new(Duration::from_secs(3600));
        b.open_until.store(1, Ordering::Release); // a window that ended long ago
        let allowed = (0..10).filter(|_| b.allow().is_some()).count();
        assert_eq!(allowed, 1, "exactly one trial per cooldown");
    }
}
