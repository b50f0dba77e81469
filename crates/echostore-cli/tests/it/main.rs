//! The `echostore` binary's integration tests, one test binary: each module runs the built
//! `echostore` against real Valkey servers, as a user would.

mod common;

mod early_refresh_readout;
mod inspect_and_purge;
mod race_serves_prometheus_metrics;
mod readouts;
mod the_documented_acl_is_enough;
mod the_valkey_command;
