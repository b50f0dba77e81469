//! `echostore purge <table> <id>`: invalidate one id from outside the application.
//!
//! It sends what the library's `Table::invalidate` sends to Valkey, `DEL <value> <lock>` in one
//! command, with the value and lock of the id in every other live schema of the table
//! (`.schema(n)`, as its live schemas on Valkey list them), and an `EXISTS` of schema 0's two keys
//! before it, in one `MULTI`, to say what was there:
//!
//! - the value is gone, so the next read of the id anywhere misses and reads the source once;
//! - the lock is gone, so a fill in flight anywhere finds its token missing at its fenced write
//!   and stores nothing (`fenced_write_skipped`): it cannot write back what it read before;
//! - with coherence on (the default), Valkey pushes an invalidation of the value key to every
//!   store, and each drops the id from its L1 within milliseconds.
//!
//! Purging an id that has nothing on Valkey is not an error: it says so and exits 0.

use serde::Serialize;

use crate::keyspace::{self, KeyArgs};
use crate::{CliResult, Outcome, output};

/// Flags of `echostore purge`.
pub(crate) type PurgeArgs = KeyArgs;

/// What `purge` prints with `--json`.
#[derive(Debug, Serialize)]
struct PurgeReport {
    /// `"purge"`.
    command: &'static str,
    valkey: String,
    namespace: Option<String>,
    table: String,
    id: String,
    value_key: String,
    lock_key: String,
    /// The value key existed and was deleted.
    value_deleted: bool,
    /// The lock key existed (a fill was rebuilding) and was deleted.
    lock_deleted: bool,
    /// The value and lock keys of the id in every other live schema of the table
    /// (`.schema(n)`), deleted in the same `DEL`.
    schema_keys: Vec<String>,
    /// What `DEL` returned: keys deleted.
    deleted: u64,
}

/// Deletes the id's value and lock and says which were there.
pub(crate) async fn run(url: Option<&str>, args: &PurgeArgs) -> CliResult<Outcome> {
    let names = args.names()?;
    let target = keyspace::open(url).await?;
    let mut conn = target.connect().await?;
    let schema_keys: Vec<String> = args
        .schema_names(&mut conn)
        .await?
        .into_iter()
        .flat_map(|other| [other.value, other.lock])
        .collect();
    let (value_there, lock_there, deleted): (bool, bool, u64) = redis::pipe()
        .atomic()
        .cmd("EXISTS")
        .arg(&names.value)
        .cmd("EXISTS")
        .arg(&names.lock)
        .cmd("DEL")
        .arg(&names.value)
        .arg(&names.lock)
        .arg(&schema_keys)
        .query_async(&mut conn)
        .await
        .map_err(|e| format!("deleting {} and {}: {e}", names.value, names.lock))?;
    let report = PurgeReport {
        command: "purge",
        valkey: target.shown_url(),
        namespace: args.namespace.clone(),
        table: args.table.clone(),
        id: args.id.clone(),
        value_key: names.value,
        lock_key: names.lock,
        value_deleted: value_there,
        lock_deleted: lock_there,
        schema_keys,
        deleted,
    };
    if args.json {
        output::print_json(&report)?;
    } else {
        print_human(&report);
    }
    Ok(Outcome::Held)
}

fn print_human(r: &PurgeReport) {
    let what = |there: bool| if there { "deleted" } else { "was not there" };
    println!(
        "purge {} {} · Valkey at {}  (DEL {} {} → {})",
        r.table, r.id, r.valkey, r.value_key, r.lock_key, r.deleted
    );
    println!("  value  {}  {}", r.value_key, what(r.value_deleted));
    println!("  lock   {}  {}", r.lock_key, what(r.lock_deleted));
    for key in &r.schema_keys {
        println!("  other schema  {key}  deleted if there");
    }
    if r.value_deleted {
        println!(
            "the next read of this id misses and reads the source once; with coherence on, every \
             store drops it from its L1 as Valkey's push arrives (within milliseconds)."
        );
    }
    if r.lock_deleted {
        println!("a fill in flight for it will find its lock gone and store nothing.");
    }
    if r.deleted == 0 {
        println!(
            "nothing was on Valkey for this id: no key changed, so no store was told anything."
        );
    }
}
