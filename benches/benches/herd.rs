//! What a herd costs: N concurrent misses on one key (10 000, or 1 000 under `CI`) whose source
//! takes 5 ms, timed from the first spawn until every caller has the value.
//!
//! Four ways, each iteration on a fresh key: one store without Valkey (the owner's flights alone),
//! beside a bare tokio single-flight baseline with the same task spawning (what the owner must
//! not cost much more than); one store with Valkey (the fill adds `GET`, `SET NX PX`, the fenced
//! write and the release); four stores on one Valkey with the herd dealt round-robin across them
//! (three lose the lock and poll, every 10 ms by default, until the winner's value is on Valkey).
//! After every herd, outside the timing, the bench asserts the source was read exactly once, so
//! a build that broke single-flight cannot produce a pretty number.
#![allow(missing_docs)] // criterion_group! generates an undocumented function

use std::sync::atomic::AtomicU64;

use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use echostore::Store;
use echostore_testkit::Source;
use echostore_testkit::herd::{Herd, SOURCE_LATENCY, herd_table};
use echostore_testkit::{
    Samples, measurement_time, print_ratio, print_summary, runtime, size, warm_up_time,
};
use embedded_valkey::EmbeddedValkey;

/// Criterion's minimum; each sample holds many herds.
const SAMPLE_SIZE: usize = 10;

fn herd(c: &mut Criterion) {
    let rt = runtime();
    let callers = size(10_000, 1_000);
    let valkey = EmbeddedValkey::start().expect("an embedded valkey-server");
    let url = valkey.url();
    let with_valkey = || async {
        Store::builder()
            .valkey(url.as_str())
            .require_valkey(true)
            .build()
            .await
            .expect("store with valkey")
    };

    let answerers: Vec<(&str, Herd)> = rt.block_on(async {
        let table = |store: Store, name: &'static str, source: Source| async move {
            herd_table(&store, name, &source).await.expect("herd table")
        };
        let (local, one, four) = (
            Source::taking(SOURCE_LATENCY),
            Source::taking(SOURCE_LATENCY),
            Source::taking(SOURCE_LATENCY),
        );
        let mut four_tables = Vec::new();
        for _ in 0..4 {
            four_tables.push(table(with_valkey().await, "herd-four", four.clone()).await);
        }
        let local_store = Store::builder().build().await.expect("store");
        vec![
            (
                "one store without Valkey: the owner's flights",
                Herd::tables(
                    vec![table(local_store, "herd-local", local.clone()).await],
                    local,
                ),
            ),
            (
                "a bare oneshot single-flight: the baseline",
                Herd::baseline(Source::taking(SOURCE_LATENCY)),
            ),
            (
                "one store with Valkey",
                Herd::tables(
                    vec![table(with_valkey().await, "herd-one", one.clone()).await],
                    one,
                ),
            ),
            (
                "four stores on one Valkey, the herd dealt round-robin",
                Herd::tables(four_tables, four),
            ),
        ]
    });

    let ids = AtomicU64::new(0);
    let samples: Vec<Samples> = answerers.iter().map(|_| Samples::default()).collect();
    let mut group = c.benchmark_group(format!(
        "a herd of {callers} misses on one key, 5 ms source"
    ));
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(SAMPLE_SIZE);
    group.warm_up_time(warm_up_time());
    group.measurement_time(measurement_time() * 2);
    for ((name, answerer), recorded) in answerers.iter().zip(&samples) {
        group.bench_function(*name, |b| {
            b.iter_custom(|iters| {
                recorded.record(answerer.rounds(&rt, &ids, callers, iters), iters)
            })
        });
    }
    group.finish();

    println!("\nthe herd, this run ({callers} callers, one source read per herd checked):");
    let summaries: Vec<_> = samples.iter().map(|s| s.summary(SAMPLE_SIZE)).collect();
    for ((name, _), summary) in answerers.iter().zip(&summaries) {
        print_summary(name, *summary);
    }
    print_ratio(
        "through the owner against the bare baseline",
        ("one store without Valkey", summaries[0]),
        ("bare oneshot", summaries[1]),
    );
    print_ratio(
        "with Valkey against the bare baseline",
        ("one store with Valkey", summaries[2]),
        ("bare oneshot", summaries[1]),
    );
    print_ratio(
        "four stores against the bare baseline",
        ("four stores on one Valkey", summaries[3]),
        ("bare oneshot", summaries[1]),
    );
    drop(answerers);
    drop(valkey);
}

criterion_group!(benches, herd);
criterion_main!(benches);
