//! Callers on tasks of their own: one, or a herd released together.

use std::sync::Arc;

use echostore::{Fetched, Result, Table, Value};
use tokio::sync::Barrier;
use tokio::task::JoinHandle;

/// A caller's task: its `fetch` answer.
pub type Caller<V> = JoinHandle<Result<Fetched<V>>>;

/// `table.fetch(&id)` on a task of its own.
pub fn spawn_fetch<V: Value>(table: &Table<u64, V>, id: u64) -> Caller<V> {
    let table = table.clone();
    tokio::spawn(async move { table.fetch(&id).await })
}

/// `n` fetches of `id` on `table`, each on a task of its own, let go together by a barrier.
pub fn herd<V: Value>(table: &Table<u64, V>, n: usize, id: u64) -> Vec<Caller<V>> {
    herd_across(std::slice::from_ref(table), n, id)
}

/// `per_table` fetches of `id` on each of `tables`, let go together by one barrier.
pub fn herd_across<V: Value>(
    tables: &[Table<u64, V>],
    per_table: usize,
    id: u64,
) -> Vec<Caller<V>> {
    let barrier = Arc::new(Barrier::new(tables.len() * per_table));
    tables
        .iter()
        .flat_map(|t| (0..per_table).map(move |_| t.clone()))
        .map(|table| {
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                table.fetch(&id).await
            })
        })
        .collect()
}

/// Every caller's answer, in the callers' order (a caller's task must not have failed).
pub async fn answers<V: Value>(callers: Vec<Caller<V>>) -> Vec<Result<Fetched<V>>> {
    let mut answers = Vec::with_capacity(callers.len());
    for caller in callers {
        answers.push(caller.await.expect("caller task"));
    }
    answers
}
