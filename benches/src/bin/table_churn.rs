//! Starting and dropping tables, round after round, against a real Valkey: each round starts
//! `--tables` tables of one store (each registers its prefixes on the store's tracking
//! connection) and drops them. A dropped table's prefixes are removed, so every round should take
//! about as long as the first; prefixes left behind made each round slower than the last, since
//! Valkey checks every new `CLIENT TRACKING … PREFIX` against all the others.
//!
//! ```text
//! cargo run --release -p echostore-benches --bin table_churn -- [--rounds 5] [--tables 1000]
//! ```

use std::time::{Duration, Instant};

use clap::Parser;
use echostore::Store;
use echostore_testkit::info;
use embedded_valkey::EmbeddedValkey;

/// Start and drop tables, round after round; prints each round's time and Valkey's prefix count.
#[derive(Debug, Parser)]
#[command(name = "table_churn")]
struct Args {
    /// Rounds of starting and dropping.
    #[arg(long, default_value_t = 5)]
    rounds: u32,

    /// Tables started (then dropped) per round.
    #[arg(long, default_value_t = 1000)]
    tables: u32,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let valkey = EmbeddedValkey::start()?;
    let store = Store::builder()
        .valkey(valkey.url())
        .require_valkey(true)
        .build()
        .await?;
    let client = redis::Client::open(valkey.url())?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let mut first: Option<Duration> = None;
    println!("round  tables  time      vs first  prefixes tracked after");
    for round in 0..args.rounds {
        let began = Instant::now();
        let mut tables = Vec::with_capacity(args.tables as usize);
        for n in 0..args.tables {
            let table = store
                .table::<u64, u64>(&format!("churn-{round}-{n}"))
                .loader(|id: u64| async move { Ok::<_, std::io::Error>(id) })
                .start()
                .await?;
            tables.push(table);
        }
        drop(tables);
        let took = began.elapsed();
        let first = *first.get_or_insert(took);
        let info = info::read(&mut conn, "stats").await?;
        let prefixes = info::field(&info, "tracking_total_prefixes")
            .unwrap_or("?")
            .to_owned();
        println!(
            "{round:>5}  {:>6}  {:>7.2} s  {:>7.2}×  {prefixes}",
            args.tables,
            took.as_secs_f64(),
            took.as_secs_f64() / first.as_secs_f64()
        );
    }
    Ok(())
}
