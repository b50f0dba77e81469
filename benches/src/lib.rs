//! Shared helpers for the EchoStore benches (in progress).
