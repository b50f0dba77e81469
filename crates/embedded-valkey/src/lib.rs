//! Embedded Valkey (in progress).
