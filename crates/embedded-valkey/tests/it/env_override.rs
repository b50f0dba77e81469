//! `$ECHOSTORE_VALKEY_SERVER` naming something unusable is a clear error, and
//! so is `$ECHOSTORE_VALKEY_TLS_SERVER` naming a binary without TLS.
//!
//! Environment variables are process-wide and setting one is `unsafe` in
//! edition 2024, so this file never sets any in its own process: the test
//! re-runs its own binary as a child process with the variable set.

use std::path::{Path, PathBuf};
use std::process::Command;

use embedded_valkey::{
    EmbeddedValkey, Error, SERVER_ENV, TLS_SERVER_ENV, find_binary, find_tls_binary,
};

/// Set only on the child process, which then performs the checks.
const CHILD_MARKER: &str = "EMBEDDED_VALKEY_ENV_TEST_CHILD";
const TEST_NAME: &str = "env_override::env_var_pointing_nowhere_is_a_clear_error";

/// A variable naming a missing file, a non-executable file or a directory fails with an error naming the variable.
#[test]
fn env_var_pointing_nowhere_is_a_clear_error() {
    if std::env::var_os(CHILD_MARKER).is_some() {
        check_unusable_env_binary_is_reported();
        return;
    }

    let scratch =
        std::env::temp_dir().join(format!("embedded-valkey-env-test-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let not_executable = scratch.join("not-executable");
    std::fs::write(&not_executable, "#!/bin/sh\n").unwrap();
    let candidates: [PathBuf; 3] = [
        scratch.join("missing/valkey-server"),
        not_executable,
        scratch.clone(),
    ];

    for path in &candidates {
        run_child(TEST_NAME, SERVER_ENV, path, "1");
    }
    std::fs::remove_dir_all(&scratch).unwrap();
}

/// Runs the test `test` of this binary again in a child process with `env` set to `path` and
/// the child marker to `marker`; it must pass.
fn run_child(test: &str, env: &str, path: &Path, marker: &str) {
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(env, path)
        .env(CHILD_MARKER, marker)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "child run with {env}={} failed:\n{stdout}\n{stderr}",
        path.display()
    );
}

fn check_unusable_env_binary_is_reported() {
    let value = std::env::var(SERVER_ENV).unwrap();

    let err = find_binary().expect_err("an unusable binary must not be accepted");
    assert!(matches!(err, Error::BadEnvBinary { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(SERVER_ENV), "{message}");
    assert!(message.contains(&value), "{message}");

    let err = EmbeddedValkey::start().expect_err("start uses the same discovery");
    assert!(err.to_string().contains(SERVER_ENV), "{err}");
}

const TLS_TEST_NAME: &str =
    "env_override::tls_env_var_naming_a_binary_without_tls_is_a_clear_error";

/// `$ECHOSTORE_VALKEY_TLS_SERVER` naming a server without TLS is refused with
/// an error naming the variable; naming one with TLS makes it the choice.
#[test]
fn tls_env_var_naming_a_binary_without_tls_is_a_clear_error() {
    if let Some(expect) = std::env::var_os(CHILD_MARKER) {
        let value = PathBuf::from(std::env::var_os(TLS_SERVER_ENV).unwrap());
        if expect == "accepted" {
            assert_eq!(find_tls_binary().unwrap(), value);
        } else {
            let err = find_tls_binary().expect_err("a binary without TLS is refused");
            assert!(matches!(err, Error::BadEnvBinary { .. }), "{err:?}");
            let message = err.to_string();
            assert!(message.contains(TLS_SERVER_ENV), "{message}");
            assert!(message.contains("not built with TLS"), "{message}");
            let err = EmbeddedValkey::start_tls().expect_err("start_tls uses the same discovery");
            assert!(err.to_string().contains(TLS_SERVER_ENV), "{err}");
        }
        return;
    }

    let tls = find_tls_binary().unwrap_or_else(|err| panic!("a TLS binary: {err}"));
    let plain = find_binary().expect("a plain binary");
    if plain != tls {
        run_child(TLS_TEST_NAME, TLS_SERVER_ENV, &plain, "refused");
    }
    run_child(TLS_TEST_NAME, TLS_SERVER_ENV, &tls, "accepted");
}
