//! The fleet model: a deterministic discrete-event simulation of 10 to 1,000 nodes over a
//! sharded Valkey (`fleet`), its per-operation costs fitted to the bench's measurements
//! (`calibrate`, from `docs/scale/measured.csv`), checked against the small fleets the bench ran
//! (the cells with 2, 4 and 8 connections or processes, left out of the fit), and drawn (`plot`).
//!
//! ```text
//! cargo run --release -p echostore-benches --bin scale_model -- [--nodes 10,30,100,300,1000]
//!     [--writes 1000,10000] [--keys 1000000] [--shards 6] [--measured docs/scale/measured.csv]
//! ```
//!
//! Writes `docs/scale/model.csv`, `docs/scale/validation.csv` and the SVG plots of docs/scale.md
//! into `--out-dir`, and the tables to stdout.

mod calibrate;
mod fleet;
mod plot;

use std::fmt::Write as _;

use clap::Parser;

use calibrate::Measured;
use fleet::{Costs, Fleet, Mode, Outcome};
use plot::{Chart, Series};

/// Predicts a fleet's Valkey load per tracking mode, calibrated with the bench's figures.
#[derive(Debug, Parser)]
#[command(name = "scale_model")]
struct Args {
    /// Fleet sizes (nodes), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "10,30,100,300,1000")]
    nodes: Vec<usize>,

    /// Fleet-wide write rates (writes per second), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    writes: Vec<f64>,

    /// Keys in the table.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u32,

    /// Zipf exponent of the reads and the writes.
    #[arg(long, default_value_t = 0.99)]
    zipf: f64,

    /// Reads per node per second.
    #[arg(long, default_value_t = 500.0)]
    reads_per_node: f64,

    /// A value's ttl in Valkey, seconds.
    #[arg(long, default_value_t = 5.0)]
    ttl: f64,

    /// A source read's duration, milliseconds.
    #[arg(long, default_value_t = 20.0)]
    load_ms: f64,

    /// Primaries of the cluster.
    #[arg(long, default_value_t = 6)]
    shards: usize,

    /// Simulated seconds per fleet.
    #[arg(long, default_value_t = 8.0)]
    seconds: f64,

    /// Connection counts of the bench kept out of the fit and predicted instead.
    #[arg(long, value_delimiter = ',', default_value = "2,4,8")]
    validate: Vec<usize>,

    /// The bench's CSV.
    #[arg(long, default_value = "docs/scale/measured.csv")]
    measured: String,

    /// Where the CSVs and plots go.
    #[arg(long, default_value = "docs/scale")]
    out_dir: String,

    /// Seeds every simulation.
    #[arg(long, default_value_t = 22)]
    seed: u64,
}

/// The share of one core a shard may spend on pushes before the rule of thumb says to act.
const PUSH_BUDGET: f64 = 0.5;

fn main() -> std::process::ExitCode {
    match run(Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("scale_model: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), String> {
    let measured = calibrate::read(&args.measured)?;
    let (held_out, fit_set): (Vec<Measured>, Vec<Measured>) = measured
        .iter()
        .cloned()
        .partition(|r| args.validate.contains(&r.conns));
    let costs = calibrate::fit(&fit_set)?;
    println!(
        "costs fitted to {} cells, those of up to {} connections (µs of server CPU):",
        fit_set
            .iter()
            .filter(|r| r.conns <= calibrate::FIT_CONNS)
            .count(),
        calibrate::FIT_CONNS
    );
    println!(
        "  write {:.2}, idle {:.0} per s, bcast {:.3} per message + {:.3} per key, default {:.3} per push, read {:.2}; {:.1} B per pushed key + 25 per message",
        costs.write_us,
        costs.idle_us_per_s,
        costs.message_us,
        costs.push_us[0],
        costs.push_us[1],
        costs.read_us,
        costs.key_bytes
    );
    println!(
        "  lag p99: bcast {:.0} µs + {:.2} µs per recipient, default {:.0} µs + {:.2} µs per recipient",
        costs.lag0_us[0],
        costs.lag_per_recipient_us[0],
        costs.lag0_us[1],
        costs.lag_per_recipient_us[1]
    );
    std::fs::create_dir_all(&args.out_dir).map_err(|e| format!("{}: {e}", args.out_dir))?;
    let path = |name: &str| format!("{}/{name}", args.out_dir);

    validate(&held_out, &costs, &args, &path("validation.csv"))?;
    let fleets = sweep(&costs, &args, &path("model.csv"))?;
    rule_of_thumb(&costs, &args);
    draw_measured(&measured, &path)?;
    draw_model(&fleets, &args, &costs, &path)?;
    println!(
        "\nwritten: {}/{{validation,model}}.csv and the SVG plots",
        args.out_dir
    );
    Ok(())
}

/// The bench's held-out cells, simulated as the bench ran them, beside what it measured.
fn validate(rows: &[Measured], costs: &Costs, args: &Args, out: &str) -> Result<(), String> {
    let mut csv = String::from(
        "mode,conns,procs,rate,keys,measured_cpu_us_per_write,model_cpu_us_per_write,measured_push_bytes_per_write,model_push_bytes_per_write,measured_lag_p99_us,model_lag_p99_us\n",
    );
    println!("\nmodel vs measured, the cells left out of the fit (error = model / measured − 1):");
    println!(
        "{:<8} {:>5} {:>5} {:>7} | {:>8} {:>8} {:>6} | {:>8} {:>8} {:>6} | {:>8} {:>8} {:>6}",
        "mode",
        "conns",
        "rate",
        "keys",
        "cpu µs/w",
        "model",
        "err",
        "push B/w",
        "model",
        "err",
        "lag p99",
        "model",
        "err"
    );
    // Per kind of fleet: connections of one process, or processes of their own.
    let mut errs: [[Vec<f64>; 3]; 2] = Default::default();
    for r in rows {
        let kind = usize::from(r.procs > 1);
        let fleet = Fleet {
            mode: r.mode,
            nodes: r.conns,
            keys: r.keys,
            zipf: 0.0,
            reads_per_node: 0.0,
            writes_per_s: r.achieved_rate,
            ttl_s: f64::INFINITY,
            load_s: 0.0,
            shards: 1,
            seconds: r.seconds,
            held: r.held,
            tick_ns: 1_000_000,
            seed: args.seed,
        };
        let o = fleet::run(&fleet, costs);
        let cpu = o.busy_us() / o.app_writes.max(1) as f64;
        let bytes = o.push_bytes(costs) / o.app_writes.max(1) as f64;
        let err = |model: f64, measured: f64| model / measured - 1.0;
        let (ec, eb, el) = (
            err(cpu, r.cpu_per_write()),
            err(bytes, r.push_bytes_per_write()),
            err(o.lag_p99_us, r.lag_p99_us),
        );
        errs[kind][0].push(ec.abs());
        errs[kind][1].push(eb.abs());
        if r.kept_rate() {
            errs[kind][2].push(el.abs());
        }
        let conns = if r.procs > 1 {
            format!("{}p", r.procs)
        } else {
            r.conns.to_string()
        };
        println!(
            "{:<8} {:>5} {:>5} {:>7} | {:>8.2} {:>8.2} {:>+5.0}% | {:>8.1} {:>8.1} {:>+5.0}% | {:>6}µs {:>6.0}µs {:>+5.0}%",
            r.mode.name(),
            conns,
            r.rate,
            r.keys,
            r.cpu_per_write(),
            cpu,
            ec * 100.0,
            r.push_bytes_per_write(),
            bytes,
            eb * 100.0,
            r.lag_p99_us,
            o.lag_p99_us,
            el * 100.0
        );
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{:.3},{:.3},{:.2},{:.2},{},{:.0}",
            r.mode.name(),
            r.conns,
            r.procs,
            r.rate,
            r.keys,
            r.cpu_per_write(),
            cpu,
            r.push_bytes_per_write(),
            bytes,
            r.lag_p99_us,
            o.lag_p99_us
        );
    }
    let worst = |e: &[f64]| e.iter().copied().fold(0.0, f64::max) * 100.0;
    let mean = |e: &[f64]| e.iter().sum::<f64>() / e.len().max(1) as f64 * 100.0;
    for (kind, e) in ["connections of one process", "separate processes"]
        .iter()
        .zip(&errs)
        .filter(|(_, e)| !e[0].is_empty())
    {
        println!(
            "|error|, {kind}: cpu mean {:.0}% worst {:.0}%; push bytes mean {:.0}% worst {:.0}%; lag p99 mean {:.0}% worst {:.0}%",
            mean(&e[0]),
            worst(&e[0]),
            mean(&e[1]),
            worst(&e[1]),
            mean(&e[2]),
            worst(&e[2])
        );
    }
    std::fs::write(out, csv).map_err(|e| format!("{out}: {e}"))
}

/// One simulated fleet and its prediction.
struct Predicted {
    mode: Mode,
    nodes: usize,
    writes: f64,
    out: Outcome,
}

/// The fleets of the sweep, each mode.
fn sweep(costs: &Costs, args: &Args, out: &str) -> Result<Vec<Predicted>, String> {
    let mut csv = String::from(
        "mode,nodes,writes_per_s,reads_per_s,l1_hit_ratio,source_reads_per_s,max_source_reads_per_expiry,ops_per_s_per_shard,pushes_per_s_per_shard,push_bytes_per_s_per_shard,busiest_shard_cpu,lag_p50_us,lag_p99_us,tracked_keys\n",
    );
    println!(
        "\nfleet predictions: {} keys, Zipf {}, {} reads/s per node, ttl {} s, {} shards:",
        args.keys, args.zipf, args.reads_per_node, args.ttl, args.shards
    );
    println!(
        "{:<8} {:>5} {:>6} | {:>6} {:>9} {:>7} | {:>10} {:>11} {:>10} {:>8} | {:>9} {:>10}",
        "mode",
        "nodes",
        "writes",
        "L1 hit",
        "source/s",
        "per exp",
        "ops/s/shd",
        "pushes/s/shd",
        "MB/s/shd",
        "max cpu",
        "lag p99",
        "tracked"
    );
    let mut all = Vec::new();
    for &writes in &args.writes {
        for mode in Mode::ALL {
            for &nodes in &args.nodes {
                let fleet = Fleet {
                    mode,
                    nodes,
                    keys: args.keys,
                    zipf: args.zipf,
                    reads_per_node: args.reads_per_node,
                    writes_per_s: writes,
                    ttl_s: args.ttl,
                    load_s: args.load_ms / 1e3,
                    shards: args.shards,
                    seconds: args.seconds,
                    held: 0,
                    tick_ns: 0,
                    seed: args.seed,
                };
                let o = fleet::run(&fleet, costs);
                let per_shard_s = (args.shards as f64) * args.seconds;
                let ops = o.ops_per_shard.iter().sum::<u64>() as f64 / per_shard_s;
                let pushes = o.pushes() as f64 / per_shard_s;
                let bytes = o.push_bytes(costs) / per_shard_s;
                let lag = if o.max_utilisation() < 1.0 {
                    format!("{:.0}µs", o.lag_p99_us)
                } else {
                    "saturated".to_owned()
                };
                println!(
                    "{:<8} {:>5} {:>6} | {:>5.1}% {:>9.0} {:>7} | {:>10.0} {:>11.0} {:>10.2} {:>7.0}% | {:>9} {:>10}",
                    mode.name(),
                    nodes,
                    writes,
                    100.0 * o.l1_hits as f64 / o.reads.max(1) as f64,
                    o.source_reads as f64 / args.seconds,
                    o.max_reads_per_expiry,
                    ops,
                    pushes,
                    bytes / 1e6,
                    100.0 * o.max_utilisation(),
                    lag,
                    o.tracked_keys
                );
                let _ = writeln!(
                    csv,
                    "{},{},{},{:.0},{:.4},{:.1},{},{:.0},{:.0},{:.0},{:.4},{:.0},{:.0},{}",
                    mode.name(),
                    nodes,
                    writes,
                    o.reads as f64 / args.seconds,
                    o.l1_hits as f64 / o.reads.max(1) as f64,
                    o.source_reads as f64 / args.seconds,
                    o.max_reads_per_expiry,
                    ops,
                    pushes,
                    bytes,
                    o.max_utilisation(),
                    o.lag_p50_us,
                    o.lag_p99_us,
                    o.tracked_keys
                );
                all.push(Predicted {
                    mode,
                    nodes,
                    writes,
                    out: o,
                });
            }
        }
    }
    std::fs::write(out, csv).map_err(|e| format!("{out}: {e}"))?;
    Ok(all)
}

/// The operator's rule, from the fitted costs: BCAST's push work per shard is writes × nodes ×
/// the cost of a push message / shards (each write its own event-loop turn, as on a shard with
/// room to spare); and what an outage costs the source per `unconfirmed_l1_life`.
fn rule_of_thumb(costs: &Costs, args: &Args) {
    let budget = PUSH_BUDGET * 1e6 / (costs.message_us + costs.push_us[0]);
    println!(
        "\nrule of thumb: BCAST keeps a shard's push work under {:.0}% of a core while (writes/s + fills/s) × nodes ≤ {:.2}M × shards",
        PUSH_BUDGET * 100.0,
        budget / 1e6
    );
    for &writes in &args.writes {
        let nodes: Vec<String> = [1usize, 3, 6, 12]
            .iter()
            .map(|&s| format!("{s} shard(s): {:.0} nodes", budget * s as f64 / writes))
            .collect();
        println!("  at {writes} writes/s: {}", nodes.join(", "));
    }
    println!(
        "source reads per second while Valkey is unreachable (every node reads each id it is asked for once per unconfirmed_l1_life):"
    );
    let zipf = zipf_probabilities(args.keys, args.zipf);
    print!("  {:>6}", "nodes");
    let lives = [0.25, 1.0, 5.0, 30.0];
    for life in lives {
        print!(" {:>12}", format!("life {life} s"));
    }
    println!();
    for &nodes in &args.nodes {
        print!("  {nodes:>6}");
        for life in lives {
            let distinct = expected_distinct(&zipf, args.reads_per_node * life);
            print!(" {:>12.0}", nodes as f64 * distinct / life);
        }
        println!();
    }
}

fn zipf_probabilities(keys: u32, s: f64) -> Vec<f64> {
    let w: Vec<f64> = (1..=keys).map(|r| 1.0 / f64::from(r).powf(s)).collect();
    let sum: f64 = w.iter().sum();
    w.into_iter().map(|x| x / sum).collect()
}

/// Expected distinct keys among `draws` Zipf draws.
fn expected_distinct(p: &[f64], draws: f64) -> f64 {
    p.iter().map(|&p| 1.0 - (1.0 - p).powf(draws)).sum()
}

fn draw_measured(rows: &[Measured], path: &dyn Fn(&str) -> String) -> Result<(), String> {
    let mut groups: Vec<(Mode, f64, u32)> = rows.iter().map(|r| (r.mode, r.rate, r.keys)).collect();
    groups.sort_by(|a, b| (a.2, a.1 as u64, a.0.name()).cmp(&(b.2, b.1 as u64, b.0.name())));
    groups.dedup();
    let series = |value: &dyn Fn(&Measured) -> f64| -> Vec<Series> {
        groups
            .iter()
            .map(|&(mode, rate, keys)| Series {
                label: format!("{} {rate}/s {keys} keys", mode.name()),
                points: rows
                    .iter()
                    .filter(|r| r.mode == mode && r.rate == rate && r.keys == keys)
                    .filter(|r| r.procs <= 1)
                    .map(|r| (r.conns as f64, value(r)))
                    .collect(),
                predicted: false,
            })
            .collect()
    };
    plot::draw(
        &Chart {
            path: &path("measured_cpu.svg"),
            title: "Valkey CPU per write (measured)",
            x: "tracking connections",
            y: "server CPU µs per write",
        },
        &series(&Measured::cpu_per_write),
    )?;
    plot::draw(
        &Chart {
            path: &path("measured_push_bytes.svg"),
            title: "push bytes per write (measured)",
            x: "tracking connections",
            y: "bytes pushed per write",
        },
        &series(&|r: &Measured| r.push_bytes_per_write().max(0.1)),
    )?;
    plot::draw(
        &Chart {
            path: &path("measured_lag.svg"),
            title: "coherence lag p99, write reply → push (measured)",
            x: "tracking connections",
            y: "lag p99 µs",
        },
        &series(&|r: &Measured| r.lag_p99_us),
    )?;
    Ok(())
}

fn draw_model(
    fleets: &[Predicted],
    args: &Args,
    costs: &Costs,
    path: &dyn Fn(&str) -> String,
) -> Result<(), String> {
    let series = |value: &dyn Fn(&Predicted) -> f64| -> Vec<Series> {
        let mut out = Vec::new();
        for &writes in &args.writes {
            for mode in Mode::ALL {
                out.push(Series {
                    label: format!("{} {writes}/s", mode.name()),
                    points: fleets
                        .iter()
                        .filter(|p| p.mode == mode && p.writes == writes)
                        .map(|p| (p.nodes as f64, value(p)))
                        .collect(),
                    predicted: true,
                });
            }
        }
        out
    };
    let per_shard_s = args.shards as f64 * args.seconds;
    plot::draw(
        &Chart {
            path: &path("model_shard_cpu.svg"),
            title: "busiest shard's CPU, share of a core (model, 6 shards, 1M keys)",
            x: "nodes",
            y: "CPU share",
        },
        &series(&|p: &Predicted| p.out.max_utilisation().max(1e-4)),
    )?;
    plot::draw(
        &Chart {
            path: &path("model_push_bytes.svg"),
            title: "push bytes per second per shard (model)",
            x: "nodes",
            y: "bytes/s per shard",
        },
        &series(&|p: &Predicted| (p.out.push_bytes(costs) / per_shard_s).max(1.0)),
    )?;
    Ok(())
}
