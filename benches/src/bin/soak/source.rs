//! The source of truth every store's loader reads: it draws each read's fault (error, panic,
//! slow, past the lock, past the load timeout), logs every read with its start, end and outcome,
//! and keeps the injected panics apart from any other panic (which fails the soak).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::settings::*;

/// What a source read was told to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Fault {
    /// A quick, healthy read (0–2 ms).
    None,
    /// Fails with an error after 0–20 ms.
    Error,
    /// Panics after 0–20 ms.
    Panic,
    /// 20–250 ms: slow, but well inside the lock.
    Slow,
    /// 700–1300 ms: outlives the lock, finishes inside the load timeout.
    PastLock,
    /// 1.7–2.3 s: cut off by the load timeout at 1.5 s.
    PastTimeout,
}

impl Fault {
    pub(crate) const ALL: [Fault; 6] = [
        Fault::None,
        Fault::Error,
        Fault::Panic,
        Fault::Slow,
        Fault::PastLock,
        Fault::PastTimeout,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Fault::None => "healthy",
            Fault::Error => "error",
            Fault::Panic => "panic",
            Fault::Slow => "slow (inside the lock)",
            Fault::PastLock => "slow past lock_ttl",
            Fault::PastTimeout => "slow past load_timeout",
        }
    }
}

/// How a source read ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Returned a value.
    Loaded,
    /// Returned an error.
    Failed,
    /// Panicked.
    Panicked,
    /// Dropped unfinished: the load timeout cut it off.
    CutOff,
}

/// One source read, as the loader saw it; instants are offsets from the start of the run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Read {
    pub(crate) key: u64,
    pub(crate) store: usize,
    pub(crate) fault: Fault,
    pub(crate) start: Duration,
    pub(crate) end: Duration,
    pub(crate) outcome: Outcome,
}

/// The loader's error: an injected failure.
#[derive(Debug)]
pub(crate) struct InjectedError {
    pub(crate) key: u64,
}

impl std::fmt::Display for InjectedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "injected source error for key {}", self.key)
    }
}

impl std::error::Error for InjectedError {}

/// The message every injected panic starts with; the panic hook keeps those quiet.
pub(crate) const INJECTED_PANIC: &str = "soak: injected loader panic";

/// The source of truth every store's loader reads.
pub(crate) struct Source {
    pub(crate) t0: Instant,
    pub(crate) faults: Mutex<StdRng>,
    pub(crate) reads: Mutex<Vec<Read>>,
    pub(crate) versions: AtomicU64,
}

impl Source {
    pub(crate) fn new(t0: Instant, seed: u64) -> Self {
        Source {
            t0,
            faults: Mutex::new(StdRng::seed_from_u64(seed)),
            reads: Mutex::new(Vec::new()),
            versions: AtomicU64::new(0),
        }
    }

    /// Draws the next read's fault and how long it takes before it ends (or is cut off).
    pub(crate) fn draw(&self) -> (Fault, Duration) {
        let mut rng = self.faults.lock().unwrap_or_else(PoisonError::into_inner);
        let between =
            |rng: &mut StdRng, lo: u64, hi: u64| Duration::from_millis(rng.random_range(lo..=hi));
        let lock = LOCK_TTL.as_millis() as u64;
        let cut = LOAD_TIMEOUT.as_millis() as u64;
        let roll: f64 = rng.random();
        if roll < P_ERROR {
            (Fault::Error, between(&mut rng, 0, 20))
        } else if roll < P_ERROR + P_PANIC {
            (Fault::Panic, between(&mut rng, 0, 20))
        } else if roll < P_ERROR + P_PANIC + P_SLOW {
            let kind: f64 = rng.random();
            if kind < SLOW_PAST_TIMEOUT {
                (Fault::PastTimeout, between(&mut rng, cut + 200, cut + 800))
            } else if kind < SLOW_PAST_TIMEOUT + SLOW_PAST_LOCK {
                // Clear of both limits by 100+ ms, so the check can tell which side a read is on.
                (Fault::PastLock, between(&mut rng, lock + 100, cut - 200))
            } else {
                (Fault::Slow, between(&mut rng, 20, 250))
            }
        } else {
            (Fault::None, between(&mut rng, 0, 2))
        }
    }

    /// One source read of `key` by `store`'s loader.
    pub(crate) async fn read(
        self: Arc<Self>,
        store: usize,
        key: u64,
    ) -> Result<Payload, InjectedError> {
        let (fault, takes) = self.draw();
        let mut log = ReadLog::begin(Arc::clone(&self), key, store, fault);
        if !takes.is_zero() {
            tokio::time::sleep(takes).await;
        }
        match fault {
            Fault::Error => {
                log.finish(Outcome::Failed);
                Err(InjectedError { key })
            }
            Fault::Panic => {
                log.finish(Outcome::Panicked);
                panic!("{INJECTED_PANIC} (key {key}, store {store})");
            }
            _ => {
                let version = self.versions.fetch_add(1, Relaxed);
                log.finish(Outcome::Loaded);
                Ok((key, version, store as u64))
            }
        }
    }

    pub(crate) fn reads_so_far(&self) -> usize {
        self.reads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    pub(crate) fn take_reads(&self) -> Vec<Read> {
        std::mem::take(&mut *self.reads.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Logs one read when dropped. A read that did not [`finish`](ReadLog::finish) was dropped by the
/// library mid-load, which only the load timeout does: it is logged as cut off, at that instant.
pub(crate) struct ReadLog {
    pub(crate) source: Arc<Source>,
    pub(crate) read: Read,
}

impl ReadLog {
    pub(crate) fn begin(source: Arc<Source>, key: u64, store: usize, fault: Fault) -> Self {
        let start = source.t0.elapsed();
        ReadLog {
            source,
            read: Read {
                key,
                store,
                fault,
                start,
                end: Duration::ZERO,
                outcome: Outcome::CutOff,
            },
        }
    }

    pub(crate) fn finish(&mut self, outcome: Outcome) {
        self.read.end = self.source.t0.elapsed();
        self.read.outcome = outcome;
    }
}

impl Drop for ReadLog {
    fn drop(&mut self) {
        if self.read.outcome == Outcome::CutOff {
            self.read.end = self.source.t0.elapsed();
        }
        self.source
            .reads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(self.read);
    }
}

// Panics: the injected ones are expected (the library turns them into `LoaderPanicked`) and kept
// quiet; any other one is counted and fails the soak.

pub(crate) static INJECTED_PANICS: AtomicU64 = AtomicU64::new(0);
pub(crate) static OTHER_PANICS: AtomicU64 = AtomicU64::new(0);

pub(crate) fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
        if message.is_some_and(|m| m.starts_with(INJECTED_PANIC)) {
            INJECTED_PANICS.fetch_add(1, Relaxed);
        } else {
            OTHER_PANICS.fetch_add(1, Relaxed);
            default(info);
        }
    }));
}
