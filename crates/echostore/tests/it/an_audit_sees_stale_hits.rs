//! `.audit_sample(f)`: a sample of L1 hits compared with Valkey's copy off the hit path. With
//! coherence off, a write elsewhere leaves this process's L1 stale and the audit finds it; with
//! coherence on, the push retires the old copy and the audit finds nothing stale.

use crate::common;

use common::{Source, builder_on, coherent_store, table_on, until, valkey};
use echostore::Table;

async fn audited(store: &echostore::Store, source: &Source) -> Table<u64, String> {
    table_on(store, "audited", source, |t| t.audit_sample(1.0)).await
}

/// Coherence off: store A keeps serving its L1 copy after store B's put, and every audited hit
/// of it is stale, by at least the time since the put landed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_coherence_the_audit_finds_stale_hits() {
    let valkey = valkey();
    let source = Source::open();
    let deaf = builder_on(&valkey.url())
        .coherence(false)
        .build()
        .await
        .expect("store");
    let a = audited(&deaf, &source).await;
    let b = audited(&coherent_store(&valkey.url(), None).await, &source).await;
    a.get(&1).await.expect("load");
    b.put(&1, "newer".to_owned()).await.expect("put");
    common::until_async("the audit found stale hits", async || {
        assert_eq!(
            *a.get(&1).await.expect("hit"),
            "value-1-1",
            "L1 is stale: no coherence"
        );
        a.stats().stale_hits > 0
    })
    .await;
    let s = a.stats();
    assert!(s.audited_hits >= s.stale_hits);
}

/// Coherence on: once the push has reached A, its hits are of the new value, and a hundred
/// audited hits find none stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_coherence_the_audit_finds_none() {
    let valkey = valkey();
    let source = Source::open();
    let a = audited(&coherent_store(&valkey.url(), None).await, &source).await;
    let b = audited(&coherent_store(&valkey.url(), None).await, &source).await;
    a.get(&1).await.expect("load");
    b.put(&1, "newer".to_owned()).await.expect("put");
    // Watched without a read (a peek is not audited): A's only read so far was its load.
    until("the push reached A", || a.peek_local(&1).is_none()).await;
    assert_eq!(*a.get(&1).await.expect("read"), "newer");
    // Hits within a few ms of the put may be skipped (Valkey's copy looks written after them on
    // this process's estimate of Valkey's clock): hit until a hundred were audited.
    common::until_async("a hundred hits were audited", async || {
        assert_eq!(*a.get(&1).await.expect("hit"), "newer");
        a.stats().audited_hits >= 100
    })
    .await;
    assert_eq!(a.stats().stale_hits, 0, "no stale hit after the push");
}

/// Set while [`Moody`] refuses to be encoded; how many times it refused.
static MOODY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static REFUSED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A value type whose `Serialize` panics while [`MOODY`] is set: a user bug that the audit's
/// comparison (which encodes both copies) reaches, off the hit path.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
struct Moody(u64);

impl serde::Serialize for Moody {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if MOODY.load(std::sync::atomic::Ordering::SeqCst) {
            REFUSED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            panic!("Moody will not be encoded now");
        }
        self.0.serialize(s)
    }
}

/// A `Serialize` that panics inside the audit's comparison leaves that hit unaudited, and the
/// auditor goes on with the next hits (before, the panic ended the table's auditor task, and no
/// hit was audited again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serialize_that_panics_in_the_audit_leaves_the_auditor_running() {
    use std::sync::atomic::Ordering::SeqCst;
    let valkey = valkey();
    let t = coherent_store(&valkey.url(), None)
        .await
        .table::<u64, Moody>("moody")
        .ttl(std::time::Duration::from_secs(600))
        .audit_sample(1.0)
        .loader(|id: u64| async move { Ok::<_, std::io::Error>(Moody(id)) })
        .build()
        .await
        .expect("table");
    t.get(&1).await.expect("load");
    MOODY.store(true, SeqCst);
    common::until_async("the audit met the panicking Serialize", async || {
        assert_eq!(*t.get(&1).await.expect("hit"), Moody(1));
        REFUSED.load(SeqCst) > 0
    })
    .await;
    MOODY.store(false, SeqCst);
    common::until_async("a later hit was audited", async || {
        assert_eq!(*t.get(&1).await.expect("hit"), Moody(1));
        t.stats().audited_hits > 0
    })
    .await;
    assert_eq!(t.stats().stale_hits, 0);
}
