//! L1 answers on the tracking connection's word (the vouch, docs/coherence.md): every push
//! Valkey sent before a health PING's answer has been dealt with. A push is dealt with once the
//! id's owner has dropped what it changed, not once it was handed to that owner: an owner behind
//! on its messages (a loaded runtime; here, a weigher that blocks it) would otherwise leave L1
//! answering a value another process's write replaced, for as long as it stays behind, with the
//! vouch renewed every health tick. Reads then go to Valkey instead, as past a lapsed vouch.
//! And a copy read there is judged by the marks read first: a push of the marks waits unread
//! behind such an owner too.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use common::{
    Source, Valkey, coherent_store, config_set, kill_tracking_connections, raw, table_on, until,
    until_async, valkey,
};
use echostore::{L1Backend, Store, Table};

/// A gate a weigher waits at for one id, closed until the test opens it.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
    /// Someone is waiting at it.
    met: AtomicBool,
}

impl Gate {
    fn wait(&self) {
        self.met.store(true, Ordering::SeqCst);
        let open = self.open.lock().expect("gate");
        let _open = self.opened.wait_while(open, |open| !*open).expect("gate");
    }

    fn open(&self) {
        *self.open.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.opened.notify_all();
    }
}

/// Opens the gate when dropped, a failed assertion's unwinding included: a runtime whose worker
/// still waits at the gate would never shut down.
struct Opens(Arc<Gate>);

impl Drop for Opens {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// `jam` on a store of its own, one shard, whose weigher waits at `gate` for id 2; every value
/// is tagged `all`.
async fn table(store: &Store, source: &Source, gate: &Arc<Gate>) -> Table<u64, String> {
    let gate = Arc::clone(gate);
    table_on(store, "jam", source, move |t| {
        // moka weighs an entry before it takes any lock a read of another id needs.
        t.shards(1)
            .l1_backend(L1Backend::Moka)
            .l1_capacity_bytes(1 << 20)
            .l1_weigher(move |id: &u64, _: &String| {
                if *id == 2 {
                    gate.wait();
                }
                64
            })
            .tags(|_: &u64, _: &String| ["all"])
    })
    .await
}

/// Two stores' `jam` on one Valkey: `here`, whose weigher waits at `gate`, and `there`. The gate
/// opens when this is dropped (`_opens` first), a failed assertion's unwinding included.
struct Fleet {
    _opens: Opens,
    gate: Arc<Gate>,
    here: Table<u64, String>,
    there: Table<u64, String>,
    /// `here`'s store.
    store: Store,
    valkey: Valkey,
}

async fn fleet() -> Fleet {
    let valkey = valkey();
    let url = valkey.url();
    let source = Source::open();
    let gate = Arc::new(Gate::default());
    let store = coherent_store(&url, None).await;
    let elsewhere = coherent_store(&url, None).await;
    Fleet {
        _opens: Opens(Arc::clone(&gate)),
        here: table(&store, &source, &gate).await,
        there: table(&elsewhere, &source, &Arc::new(Gate::default())).await,
        store,
        gate,
        valkey,
    }
}

/// Holds `here`'s one owner in its weigher (it stores a put's value in L1 once written) until
/// the gate opens; the put's task, to be awaited then.
async fn jam(fleet: &Fleet) -> tokio::task::JoinHandle<echostore::Result<()>> {
    let here = fleet.here.clone();
    let stuck = tokio::spawn(async move { here.put(&2, "jammed".to_owned()).await.map(drop) });
    until("the owner is stuck in the weigher", || {
        fleet.gate.met.load(Ordering::SeqCst)
    })
    .await;
    stuck
}

/// Another process's put of id 1 while this process's owner of id 1 is stuck: this process's
/// reads of id 1 soon answer the put's value, not L1's older one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_owner_behind_on_its_pushes_leaves_no_old_value_answered() {
    let fleet = fleet().await;
    let (here, there) = (&fleet.here, &fleet.there);
    let old = here.get(&1).await.expect("load");
    let stuck = jam(&fleet).await;
    there
        .put(&1, format!("{old} and after"))
        .await
        .expect("put");
    until_async("this process answers the put's value", async || {
        here.get(&1).await.expect("read").as_str() != old.as_str()
    })
    .await;
    fleet.gate.open();
    stuck.await.expect("the put's task").expect("put");
}

/// Another process's put of id 1 while this process's owner of id 1 is stuck, then this
/// process's tracking connection lost, kept from coming back (Valkey takes no new client), then
/// back: its reads of id 1 answer the put's value throughout. A connection that is down holds
/// the vouch up no longer, but only once the owners have capped L1 (before, it let go at once,
/// and L1 answered its older value until the cap reached the stuck owner); one that comes up
/// vouches once the owners have flushed L1 (before, as it came up).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_connection_lost_while_behind_leaves_no_old_value_answered() {
    let fleet = fleet().await;
    let (here, there) = (&fleet.here, &fleet.there);
    let mut admin = raw(&fleet.valkey.url()).await;
    // Each read of id 1 or 4 from Valkey would replace L1's older value: each is read once.
    let old = [
        here.get(&1).await.expect("load"),
        here.get(&4).await.expect("load"),
    ];
    here.get(&3).await.expect("load");
    let stuck = jam(&fleet).await;
    let new = old.map(|old| format!("{old} and after"));
    there.put(&1, new[0].clone()).await.expect("put");
    there.put(&4, new[1].clone()).await.expect("put");
    until_async("this process's L1 answers nothing", async || {
        let hits = here.stats().l1_hits;
        here.get(&3).await.expect("read");
        here.stats().l1_hits == hits
    })
    .await;

    let clients = common::info_count(&mut admin, "clients", "connected_clients").await;
    config_set(&mut admin, "maxclients", clients - 2).await; // no new client
    assert_eq!(kill_tracking_connections(&mut admin).await, 2);
    until("the loss is noticed", || !fleet.store.is_coherent()).await;
    let read = here.get(&1).await.expect("read while tracking is down");
    assert_eq!(*read, new[0], "L1's older value, with tracking down");

    config_set(&mut admin, "maxclients", 10_000).await;
    until("tracking is back", || fleet.store.is_coherent()).await;
    let read = here.get(&4).await.expect("read once tracking is back");
    assert_eq!(*read, new[1], "L1's older value, once tracking is back");
    fleet.gate.open();
    stuck.await.expect("the put's task").expect("put");
}

/// Another process's invalidation of a tag while this process's owner is stuck, so that the push
/// of the mark waits unread: the copy on Valkey that the mark made a miss is soon no longer
/// answered here (a `peek`, which never waits on the owner, finds nothing), where this process
/// went on taking it for current for as long as the owner stayed behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_owner_behind_on_its_pushes_takes_no_copy_a_mark_made_a_miss() {
    let fleet = fleet().await;
    let (here, there) = (&fleet.here, &fleet.there);
    let old = there.get(&1).await.expect("load");
    let seen = here.peek(&1).await.expect("peek").map(|f| f.value);
    assert_eq!(seen, Some(old), "the copy on Valkey, before the mark");
    let stuck = jam(&fleet).await;
    there
        .invalidate_tag("all")
        .await
        .expect("invalidate the tag");
    until_async(
        "this process takes the marked copy for a miss",
        async || here.peek(&1).await.expect("peek").is_none(),
    )
    .await;
    fleet.gate.open();
    stuck.await.expect("the put's task").expect("put");
}
