//! One node of a rolling deploy: two of these, whose cached types differ, read and write one table
//! side by side, as an old and a new version of a service do while pods are replaced.
//!
//! ```text
//! schema_node <valkey-url> <run-id> <schema> <shape> <seconds> <keys>
//! ```
//!
//! `<shape>` 1 caches `RowV1 { version, email }`, 2 caches `RowV2 { version, emails, verified }`
//! (the same row, its type changed); `<schema>` is the table's `.schema(n)`. The source is a
//! version per id on Valkey (`{schema-<run>}:row:<id>`); a write raises it and puts the new row.
//! Once both nodes have checked in, each reads random ids from 8 tasks (a read a millisecond
//! each) and writes one at a time
//! for `<seconds>`, counting a read `went_back` when it answers an older version than one this
//! node's own write had returned before the read began. Once both have stopped writing, it reads
//! every id until it answers the source's version (`converged`, at most 30 s each), and prints its
//! table's counters with `puts`, `went_back`, `converged` and `errors` as one JSON line.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use echostore::Table;
use redis::AsyncCommands;
use serde::{Deserialize, Serialize, de::DeserializeOwned};

#[path = "support/mod.rs"]
mod support;

/// The row as the old version of the service caches it.
#[derive(Serialize, Deserialize)]
struct RowV1 {
    version: u64,
    email: String,
}

/// The row as the new version caches it: `email` became a list, and a flag came.
#[derive(Serialize, Deserialize)]
struct RowV2 {
    version: u64,
    emails: Vec<String>,
    verified: bool,
}

/// A cached row of either shape.
trait Row: Serialize + DeserializeOwned + Send + Sync + 'static {
    fn of(version: u64) -> Self;
    fn version(&self) -> u64;
}

impl Row for RowV1 {
    fn of(version: u64) -> Self {
        RowV1 {
            version,
            email: format!("v{version}@example.com"),
        }
    }
    fn version(&self) -> u64 {
        self.version
    }
}

impl Row for RowV2 {
    fn of(version: u64) -> Self {
        RowV2 {
            version,
            emails: vec![format!("v{version}@example.com")],
            verified: version.is_multiple_of(2),
        }
    }
    fn version(&self) -> u64 {
        self.version
    }
}

/// What a node was told.
struct Args {
    url: String,
    run: String,
    schema: u32,
    seconds: u64,
    keys: u64,
}

/// Concurrent readers in one node.
const READERS: usize = 8;
/// How long the final read of one id may take to see the source's version.
const CONVERGE_WITHIN: Duration = Duration::from_secs(30);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let argv: Vec<String> = std::env::args().collect();
    let [_, url, run, schema, shape, seconds, keys] = &argv[..] else {
        return Err(
            "usage: schema_node <valkey-url> <run-id> <schema> <shape> <seconds> <keys>".into(),
        );
    };
    let args = Args {
        url: url.clone(),
        run: run.clone(),
        schema: schema.parse()?,
        seconds: seconds.parse()?,
        keys: keys.parse()?,
    };
    match shape.as_str() {
        "1" => node::<RowV1>(&args).await,
        "2" => node::<RowV2>(&args).await,
        _ => Err("shape is 1 or 2".into()),
    }
}

async fn node<R: Row>(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let row_key = |id: u64| format!("{{schema-{}}}:row:{id}", args.run);
    let source = support::connect(&args.url).await?;
    let store = support::store_builder(&args.url)
        .require_valkey(true)
        .build()
        .await?;
    let run = args.run.clone();
    let table = store
        .table::<u64, R>(&format!("schema-{}", args.run))
        .schema(args.schema)
        .ttl(Duration::from_secs(600))
        .early_refresh(0.0)
        .version_by(|row: &R| row.version())
        .loader(move |id: u64| {
            let (mut source, key) = (source.clone(), format!("{{schema-{run}}}:row:{id}"));
            async move {
                let version: Option<u64> = source.get(&key).await?;
                Ok::<_, redis::RedisError>(R::of(version.unwrap_or(0)))
            }
        })
        .build()
        .await?;

    let mut conn = support::connect(&args.url).await?;
    let barrier = |what: &str| format!("{{schema-{}}}:{what}", args.run);
    support::check_in(&mut conn, &barrier("ready"), 2).await?;
    let figures = Arc::new(Figures::default());
    let written: Arc<Vec<AtomicU64>> =
        Arc::new((0..args.keys).map(|_| AtomicU64::new(0)).collect());
    let until = Instant::now() + Duration::from_secs(args.seconds);
    let readers: Vec<_> = (0..READERS)
        .map(|_| {
            tokio::spawn(read(
                table.clone(),
                Arc::clone(&written),
                Arc::clone(&figures),
                until,
            ))
        })
        .collect();
    write(&table, &mut conn, &row_key, &written, &figures, until).await?;
    for reader in readers {
        reader.await?;
    }
    support::check_in(&mut conn, &barrier("stopped"), 2).await?;
    for id in 0..args.keys {
        let want: u64 = conn.get::<_, Option<u64>>(row_key(id)).await?.unwrap_or(0);
        converge(&table, id, want, &figures).await;
    }
    let mut line = serde_json::to_value(table.stats())?;
    for (field, value) in figures.fields() {
        line[field] = serde_json::json!(value);
    }
    // The first failed call, so that a test that finds `errors` above 0 says which.
    line["first_error"] = serde_json::json!(figures.first_error.lock().unwrap().clone());
    println!("{line}");
    Ok(())
}

/// What a node counts beside its table's counters.
#[derive(Default)]
struct Figures {
    puts: AtomicU64,
    went_back: AtomicU64,
    converged: AtomicU64,
    errors: AtomicU64,
    first_error: std::sync::Mutex<Option<String>>,
}

impl Figures {
    /// A call failed with `what`: counted, logged, and kept if it is the first.
    fn failed(&self, what: String) {
        eprintln!("{what}");
        self.errors.fetch_add(1, Relaxed);
        self.first_error.lock().unwrap().get_or_insert(what);
    }

    fn fields(&self) -> [(&'static str, u64); 4] {
        [
            ("puts", self.puts.load(Relaxed)),
            ("went_back", self.went_back.load(Relaxed)),
            ("converged", self.converged.load(Relaxed)),
            ("errors", self.errors.load(Relaxed)),
        ]
    }
}

/// Reads random ids until `until`; a read older than this node's own returned write went back.
async fn read<R: Row>(
    table: Table<u64, R>,
    written: Arc<Vec<AtomicU64>>,
    figures: Arc<Figures>,
    until: Instant,
) {
    while Instant::now() < until {
        let id = rand::random_range(0..written.len() as u64);
        let floor = written[id as usize].load(Relaxed);
        match table.get(&id).await {
            Ok(row) if row.version() < floor => {
                eprintln!(
                    "id {id}: read v{} after this node wrote v{floor}",
                    row.version()
                );
                figures.went_back.fetch_add(1, Relaxed);
            }
            Ok(_) => {}
            Err(e) => figures.failed(format!("read {id}: {e}")),
        }
        // An L1 hit never waits: paced, the readers leave the writer and the owners their turn.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Writes random ids one at a time until `until`: the source's version raised, then the row put.
async fn write<R: Row>(
    table: &Table<u64, R>,
    conn: &mut support::Conn,
    row_key: &impl Fn(u64) -> String,
    written: &[AtomicU64],
    figures: &Figures,
    until: Instant,
) -> Result<(), Box<dyn std::error::Error>> {
    while Instant::now() < until {
        let id = rand::random_range(0..written.len() as u64);
        let version: u64 = conn.incr(row_key(id), 1).await?;
        match table.put(&id, R::of(version)).await {
            Ok(_) => {
                written[id as usize].fetch_max(version, Relaxed);
                figures.puts.fetch_add(1, Relaxed);
            }
            // A newer row of the id, put by the other node, is already stored: nothing to do.
            Err(echostore::Error::Superseded) => {}
            Err(e) => figures.failed(format!("put {id}: {e}")),
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

/// Reads `id` until it answers version `want` (the other node's writes reach this one's L1 by a
/// push); counted in `converged` when it did within [`CONVERGE_WITHIN`].
async fn converge<R: Row>(table: &Table<u64, R>, id: u64, want: u64, figures: &Figures) {
    let deadline = Instant::now() + CONVERGE_WITHIN;
    while Instant::now() < deadline {
        match table.get(&id).await {
            Ok(row) if row.version() == want => {
                figures.converged.fetch_add(1, Relaxed);
                return;
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(1)).await,
            Err(e) => {
                figures.failed(format!("converging {id}: {e}"));
                return;
            }
        }
    }
    eprintln!("id {id}: never read v{want}");
}
