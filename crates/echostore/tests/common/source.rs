//! The test double on the source side: it counts reads and can hold them at a gate.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;
use tokio::sync::watch;

/// What a `u64 -> String` loader built from a [`Source`] is.
pub type SourceLoader =
    Box<dyn Fn(u64) -> BoxFuture<'static, Result<String, std::io::Error>> + Send + Sync>;

/// A loader's test double on the *source* side only: it counts calls and can hold every call
/// until the test opens the gate. Everything between the caller and this source is real.
#[derive(Clone)]
pub struct Source {
    calls: Arc<AtomicUsize>,
    gate: watch::Sender<bool>,
}

impl Source {
    /// A source whose gate starts open.
    pub fn open() -> Self {
        Self::with_gate(true)
    }

    /// A source whose calls wait until [`Source::release`].
    pub fn gated() -> Self {
        Self::with_gate(false)
    }

    fn with_gate(open: bool) -> Self {
        let (gate, _) = watch::channel(open);
        Source {
            calls: Arc::new(AtomicUsize::new(0)),
            gate,
        }
    }

    /// How many times the source was read.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Lets every waiting and future call through.
    pub fn release(&self) {
        self.gate.send_replace(true);
    }

    /// Closes the gate again.
    pub fn hold(&self) {
        self.gate.send_replace(false);
    }

    /// Counts a call and waits at the gate; returns the call's number (1-based).
    pub async fn read(&self) -> usize {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let mut open = self.gate.subscribe();
        let _ = open.wait_for(|open| *open).await;
        n
    }

    /// A loader for `u64 -> String` tables: `"value-<id>-<reads so far>"` once the gate opens.
    pub fn loader(&self) -> SourceLoader {
        let source = self.clone();
        Box::new(move |id| {
            let source = source.clone();
            Box::pin(async move {
                source.read().await;
                Ok(format!("value-{id}-{}", source.calls()))
            })
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
