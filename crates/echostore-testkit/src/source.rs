//! The counting source: the one test double on the source side that the integration tests, the
//! benches' herds and the `race` readout read. It counts every read (and how many ran at once),
//! can take a latency, and can hold every read at a gate until the caller opens it. Everything
//! between a caller and this source is real.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::watch;

/// What a `u64 -> String` loader built from a [`Source`] is.
pub type SourceLoader =
    Box<dyn Fn(u64) -> BoxFuture<'static, Result<String, std::io::Error>> + Send + Sync>;

/// The source of truth behind a loader, counted. Clones share the counts and the gate, so one
/// source can stand behind several tables, stores or nodes.
#[derive(Clone)]
pub struct Source {
    counts: Arc<Counts>,
    gate: watch::Sender<bool>,
    latency: Duration,
}

#[derive(Default)]
struct Counts {
    calls: AtomicUsize,
    running: AtomicUsize,
    most_at_once: AtomicUsize,
}

/// Counts a read as running until it ends or is dropped (a load cut off by its timeout).
struct Running<'a>(&'a Counts);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Source {
    /// A source whose gate starts open and whose reads answer at once.
    pub fn open() -> Self {
        Self::with_gate(true)
    }

    /// A source whose reads wait until [`Source::release`].
    pub fn gated() -> Self {
        Self::with_gate(false)
    }

    /// An open source whose every read takes `latency` (the herds' few milliseconds).
    pub fn taking(latency: Duration) -> Self {
        Self::open().with_latency(latency)
    }

    /// This source, its reads taking `latency` before they wait at the gate.
    pub fn with_latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }

    fn with_gate(open: bool) -> Self {
        let (gate, _) = watch::channel(open);
        Source {
            counts: Arc::default(),
            gate,
            latency: Duration::ZERO,
        }
    }

    /// How many times the source was read.
    pub fn calls(&self) -> usize {
        self.counts.calls.load(Ordering::SeqCst)
    }

    /// The most reads that were running at one time.
    pub fn most_at_once(&self) -> usize {
        self.counts.most_at_once.load(Ordering::SeqCst)
    }

    /// Lets every waiting and future read through.
    pub fn release(&self) {
        self.gate.send_replace(true);
    }

    /// Closes the gate again.
    pub fn hold(&self) {
        self.gate.send_replace(false);
    }

    /// Counts a read, takes the latency and waits at the gate; returns the read's number
    /// (1-based, counted when it starts).
    pub async fn read(&self) -> usize {
        self.read_many(1).await
    }

    /// Counts `ids` reads at once (one batch load), takes the latency once and waits at the gate;
    /// returns the number of the batch's last read.
    pub async fn read_many(&self, ids: usize) -> usize {
        let counts = &*self.counts;
        let n = counts.calls.fetch_add(ids, Ordering::SeqCst) + ids;
        let now = counts.running.fetch_add(1, Ordering::SeqCst) + 1;
        counts.most_at_once.fetch_max(now, Ordering::SeqCst);
        let _running = Running(counts);
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        let mut open = self.gate.subscribe();
        // A closed channel cannot happen (the source holds the sender): read on either way.
        let _ = open.wait_for(|open| *open).await;
        n
    }

    /// One read of `id`: `"value-<id>-<reads so far>"`, once the gate opens.
    pub async fn value(&self, id: u64) -> String {
        self.read().await;
        format!("value-{id}-{}", self.calls())
    }

    /// A loader for `u64 -> String` tables that reads [`Source::value`].
    pub fn loader(&self) -> SourceLoader {
        let source = self.clone();
        Box::new(move |id| {
            let source = source.clone();
            Box::pin(async move { Ok(source.value(id).await) })
        })
    }

    /// A loader for `u64 -> String` tables that answers its n-th read (1-based, counted when it
    /// starts) with `script(id, n)` once the gate opens; a panic in `script` is the loader's.
    pub fn answering(
        &self,
        script: impl Fn(u64, usize) -> Result<String, std::io::Error> + Send + Sync + 'static,
    ) -> SourceLoader {
        let source = self.clone();
        let script = Arc::new(script);
        Box::new(move |id| {
            let source = source.clone();
            let script = Arc::clone(&script);
            Box::pin(async move {
                let n = source.read().await;
                script(id, n)
            })
        })
    }
}
