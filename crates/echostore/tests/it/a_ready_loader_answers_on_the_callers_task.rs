//! A miss whose loader answers at once lands on the caller's own task, with no task hand-off (as
//! moka's `get_with` does); a loader that waits on anything runs on a task of its own from its
//! first wait on, so no other caller ever depends on the first one polling its read.

use std::sync::{Arc, Mutex};

use echostore::{Origin, Store};
use tokio::task::Id;

/// The task each of the loader's steps ran on, in order.
type Steps = Arc<Mutex<Vec<Option<Id>>>>;

fn step(steps: &Steps) {
    steps.lock().expect("steps").push(tokio::task::try_id());
}

#[tokio::test(flavor = "current_thread")]
async fn a_loader_that_answers_at_once_runs_on_the_callers_task() {
    let store = Store::builder().build().await.expect("a store");
    let steps = Steps::default();
    let seen = Arc::clone(&steps);
    let table = store
        .table::<u64, u64>("ready")
        .loader(move |id: u64| {
            step(&seen);
            let seen = Arc::clone(&seen);
            async move {
                step(&seen);
                Ok::<_, std::io::Error>(id * 2)
            }
        })
        .build()
        .await
        .expect("a table");

    let reader = table.clone();
    let (caller, first) = tokio::spawn(async move {
        let first = reader.fetch(&21).await.expect("a value");
        (tokio::task::id(), first)
    })
    .await
    .expect("the caller's task");

    assert_eq!((*first.value, first.origin), (42, Origin::Loaded));
    assert_eq!(*steps.lock().expect("steps"), [Some(caller), Some(caller)]);
    assert_eq!(table.fetch(&21).await.expect("a value").origin, Origin::L1);
}

#[tokio::test(flavor = "current_thread")]
async fn a_loader_that_waits_goes_on_on_a_task_of_its_own() {
    let store = Store::builder().build().await.expect("a store");
    let steps = Steps::default();
    let seen = Arc::clone(&steps);
    let table = store
        .table::<u64, u64>("waits")
        .loader(move |id: u64| {
            let seen = Arc::clone(&seen);
            async move {
                step(&seen);
                tokio::task::yield_now().await;
                step(&seen);
                Ok::<_, std::io::Error>(id * 2)
            }
        })
        .build()
        .await
        .expect("a table");

    let reader = table.clone();
    let (caller, value) = tokio::spawn(async move {
        let value = reader.get(&21).await.expect("a value");
        (tokio::task::id(), value)
    })
    .await
    .expect("the caller's task");

    assert_eq!(*value, 42);
    let steps = steps.lock().expect("steps").clone();
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
