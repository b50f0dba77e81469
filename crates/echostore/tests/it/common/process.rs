//! A test that changes something process-wide (the wall-clock offset of `check`'s `skew` fault)
//! runs in a process of its own: this test binary run again, filtered to that one test. And the
//! heavy tests take turns ([`heavy`]).

use std::process::Command;

/// Set in the child that runs the test alone.
const ALONE_ENV: &str = "ECHOSTORE_TEST_ALONE";

/// `true` in the child process that runs the test `path` (`module::test`) alone, which then runs
/// the test's body; elsewhere, runs that child, asserts that the test passed there, and returns
/// `false`.
pub fn in_a_process_of_its_own(path: &str) -> bool {
    if std::env::var_os(ALONE_ENV).is_some() {
        return true;
    }
    let out = Command::new(std::env::current_exe().expect("this test binary"))
        .env(ALONE_ENV, "1")
        .args(["--exact", path, "--test-threads=1"])
        .output()
        .expect("the test binary runs again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{path}, alone:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("1 passed"),
        "{path} did not run alone:\n{stdout}"
    );
    false
}

/// Held by the tests that load the machine for seconds (a cluster under a service's load, a batch
/// of 20,000 ids, six stores racing): one at a time, so that their load does not turn the other
/// tests' deadlines (a 30 ms lock's lease, say) into races on a two-core machine.
static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Waits for the machine to be free of the other heavy tests; hold the guard for the test's length.
pub async fn heavy() -> tokio::sync::MutexGuard<'static, ()> {
    HEAVY.lock().await
}
