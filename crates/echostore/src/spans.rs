//! The tracing spans EchoStore opens, with stable names and attributes, so that a
//! `tracing-opentelemetry` layer exports them as OpenTelemetry spans (the recipe is in
//! `docs/guide.md`, "Traces"). Spans are opened at `INFO` on misses only: an L1 hit opens none.
//!
//! | span | attributes |
//! |---|---|
//! | `echostore.fill` — one flight of one id | `echostore.table`, `echostore.id_hash`, `echostore.lock` (`won`, `lost`, `none` without Valkey, `unreachable`), `echostore.origin` (`loaded`, `l2`, `stale`, `default`, `skipped`, `error`), `echostore.load_ms` |
//! | `echostore.batch_fill` — the flights a batch read started | `echostore.table`, `echostore.ids` |
//! | `echostore.load` — one source read (loader, batch loader or reloader), a child of the fill | `echostore.table` |
//!
//! The id itself is never an attribute (it may be personal data): `echostore.id_hash` is a hash of
//! it, the same in every process of one build, enough to follow one id across services.

use std::hash::{DefaultHasher, Hash, Hasher};

/// `echostore.id_hash`: the id's hash as 16 hex digits.
pub(crate) fn id_hash<K: Hash + ?Sized>(id: &K) -> String {
    let mut hasher = DefaultHasher::new();
    id.hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// Records `value` as the current fill span's `field` (a no-op outside one).
pub(crate) fn record(field: &'static str, value: &str) {
    tracing::Span::current().record(field, value);
}
