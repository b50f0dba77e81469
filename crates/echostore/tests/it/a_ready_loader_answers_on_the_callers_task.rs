//! A miss whose loader answers at once lands on the caller's own task, with no task hand-off (as
//! moka's `get_with` does); a loader that waits on anything runs on a task of its own from its
//! first wait on, so no other caller ever depends on the first one polling its read.

use std::future::Future;
use std::sync::{Arc, Mutex};

use echostore::{Fetched, Origin, Store, Table};
use tokio::task::Id;

/// The task each of the loader's steps ran on, in order.
type Steps = Arc<Mutex<Vec<Option<Id>>>>;

fn step(steps: &Steps) {
    steps.lock().expect("steps").push(tokio::task::try_id());
}

/// A table without Valkey whose loader is `load(steps, id)`, and the steps it records.
async fn table<F, Fut>(load: F) -> (Table<u64, u64>, Steps)
where
    F: Fn(&Steps, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<u64, std::io::Error>> + Send + 'static,
{
    let store = Store::builder().build().await.expect("a store");
    let steps = Steps::default();
    let seen = Arc::clone(&steps);
    let table = store
        .table::<u64, u64>("loads")
        .loader(move |id: u64| load(&seen, id))
        .build()
        .await
        .expect("a table");
    (table, steps)
}

/// Fetches `id` on a task of its own: that task's id, and the answer.
async fn fetch_on_a_task(table: &Table<u64, u64>, id: u64) -> (Id, Fetched<u64>) {
    let table = table.clone();
    tokio::spawn(async move {
        let fetched = table.fetch(&id).await.expect("a value");
        (tokio::task::id(), fetched)
    })
    .await
    .expect("the caller's task")
}

#[tokio::test(flavor = "current_thread")]
async fn a_loader_that_answers_at_once_runs_on_the_callers_task() {
    let (table, steps) = table(|seen, id| {
        step(seen);
        let seen = Arc::clone(seen);
        async move {
            step(&seen);
            Ok(id * 2)
        }
    })
    .await;

    let (caller, first) = fetch_on_a_task(&table, 21).await;

    assert_eq!((*first.value, first.origin), (42, Origin::Loaded));
    // One load, both of its steps on the caller's task.
    assert_eq!(*steps.lock().expect("steps"), [Some(caller), Some(caller)]);
    assert_eq!(table.fetch(&21).await.expect("a value").origin, Origin::L1);
}

#[tokio::test(flavor = "current_thread")]
async fn a_loader_that_waits_goes_on_on_a_task_of_its_own() {
    let (table, steps) = table(|seen, id| {
        let seen = Arc::clone(seen);
        async move {
            step(&seen);
            tokio::task::yield_now().await;
            step(&seen);
            Ok(id * 2)
        }
    })
    .await;

    let (caller, first) = fetch_on_a_task(&table, 21).await;

    assert_eq!((*first.value, first.origin), (42, Origin::Loaded));
    let steps = steps.lock().expect("steps").clone();
    assert_eq!(steps.len(), 2, "one load: {steps:?}");
    assert_eq!(
        steps[0],
        Some(caller),
        "its first step runs on the caller's task"
    );
    assert!(
        steps[1].is_some_and(|after| after != caller),
        "after its first wait it runs on a task of its own: {steps:?}"
    );
}
