//! The circuit breaker in front of Valkey.
//!
//! When Valkey cannot be reached, every miss would otherwise pay a connect attempt or a timeout.
//! After a connection-level failure the breaker opens for one cooldown: L2 calls fail at once
//! without touching the network, and the tables serve from L1 and the loader. When the cooldown
//! ends, exactly one call is let through as a trial (the others keep failing fast); its success
//! closes the breaker, its failure opens it for another cooldown. A dead Valkey therefore costs at
//! most one attempt per cooldown, and a returning one is picked up without restarting anything.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A breaker shared by every table of one store.
pub(crate) struct Breaker {
    cooldown: Duration,
    epoch: Instant,
    /// 0 when closed; otherwise nanoseconds since `epoch` (plus one) until the next trial.
    open_until: AtomicU64,
}

impl Breaker {
    pub(crate) fn new(cooldown: Duration) -> Self {
        Breaker {
            cooldown,
            epoch: Instant::now(),
            open_until: AtomicU64::new(0),
        }
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64 + 1
    }

    /// `true` if a call may go to Valkey now. While open, only the first caller after the
    /// cooldown gets `true` (the trial); it pushes the window forward for everyone else.
    pub(crate) fn allow(&self) -> bool {
        let until = self.open_until.load(Ordering::Acquire);
        if until == 0 {
            return true;
        }
        let now = self.now();
        now >= until
            && self
                .open_until
                .compare_exchange(
                    until,
                    now + self.cooldown.as_nanos() as u64,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// A call reached Valkey: close the breaker.
    pub(crate) fn succeeded(&self) {
        if self.open_until.load(Ordering::Relaxed) != 0 {
            self.open_until.store(0, Ordering::Release);
        }
    }

    /// A call could not reach Valkey: open the breaker for one cooldown.
    pub(crate) fn failed(&self) {
        let until = self.now() + self.cooldown.as_nanos() as u64;
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
        assert!(b.allow() && b.allow());
        b.failed();
        assert!(b.is_open());
        assert!(!b.allow());
        b.succeeded();
        assert!(b.allow());
    }

    /// After the cooldown exactly one trial goes through.
    #[test]
    fn one_trial_after_the_cooldown() {
        let b = Breaker::new(Duration::ZERO);
        b.failed();
        // A zero cooldown has passed by now; the first caller takes the trial.
        let allowed = (0..10).filter(|_| b.allow()).count();
        assert!(allowed >= 1, "the trial was never let through");
        let b = Breaker::new(Duration::from_secs(3600));
        b.open_until.store(1, Ordering::Release); // a window that ended long ago
        let allowed = (0..10).filter(|_| b.allow()).count();
        assert_eq!(allowed, 1, "exactly one trial per cooldown");
    }
}
