//! EchoStore's spans through `tracing-opentelemetry`, exported in-process: the recipe of
//! `docs/guide.md` ("Traces") run against a real Valkey, asserting the spans of one cold miss.

use crate::common;

use std::collections::HashMap;

use common::{Source, in_a_process_of_its_own, store_on, table_on, valkey};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing_subscriber::prelude::*;

/// A span's attributes as strings.
fn attributes(span: &SpanData) -> HashMap<String, String> {
    span.attributes
        .iter()
        .map(|kv| (kv.key.to_string(), kv.value.to_string()))
        .collect()
}

/// One cold miss on a table with Valkey: an `echostore.fill` span (table, id hash, lock won,
/// origin loaded, load time) and, inside it, an `echostore.load` span; a second read, an L1 hit,
/// opens no span.
// The subscriber is the process's global default (every thread's, as in a service): so the test
// runs in a process of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_miss_exports_a_fill_and_a_load_span() {
    if !in_a_process_of_its_own("a_cold_miss_is_traced::a_cold_miss_exports_a_fill_and_a_load_span")
    {
        return;
    }
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("echostore-test"));
    tracing_subscriber::registry().with(layer).init();

    let valkey = valkey();
    let source = Source::open();
    let table = table_on(&store_on(&valkey.url()).await, "traced", &source, |t| t).await;
    table.get(&7).await.expect("cold miss");
    table.get(&7).await.expect("L1 hit");
    // The fill's task ends (and its span closes) just after it answered: wait for both spans.
    common::until_async("the fill and load spans closed", async || {
        provider.force_flush().expect("flush");
        tokio::task::yield_now().await;
        exporter.get_finished_spans().expect("spans").len() >= 2
    })
    .await;

    let spans = exporter.get_finished_spans().expect("spans");
    let named =
        |name: &str| -> Vec<&SpanData> { spans.iter().filter(|s| s.name == name).collect() };
    let (fills, loads) = (named("echostore.fill"), named("echostore.load"));
    assert_eq!(
        (fills.len(), loads.len()),
        (1, 1),
        "one miss: {:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let fill = attributes(fills[0]);
    assert_eq!(fill["echostore.table"], "traced");
    assert_eq!(fill["echostore.lock"], "won");
    assert_eq!(fill["echostore.origin"], "loaded");
    assert_eq!(fill["echostore.id_hash"].len(), 16);
    assert!(fill.contains_key("echostore.load_ms"), "{fill:?}");
    assert_eq!(
        loads[0].parent_span_id,
        fills[0].span_context.span_id(),
        "the source read is a child of its fill"
    );
    assert_eq!(source.calls(), 1);
}
