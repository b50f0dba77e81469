//! Example binaries run as separate OS processes ("nodes") by the cross-process tests.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// The features this test binary was built with, for an example built to match it.
const FEATURES: &[(bool, &str)] = &[
    (cfg!(feature = "moka"), "moka"),
    (cfg!(feature = "metrics"), "metrics"),
    (cfg!(feature = "cluster"), "cluster"),
    (cfg!(feature = "tls"), "tls"),
    (cfg!(feature = "uuid"), "uuid"),
    (cfg!(feature = "fault-injection"), "fault-injection"),
];

/// The example `name` next to this test binary, built first (with this binary's features: a
/// node of a cluster test needs `cluster`) if this run did not build it.
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    let node = profile_dir.join("examples").join(name);
    if !node.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let features: Vec<&str> = FEATURES.iter().filter(|f| f.0).map(|f| f.1).collect();
        let status = Command::new(cargo)
            .args(["build", "-p", "echostore", "--example", name])
            .args(["--no-default-features", "--features", &features.join(",")])
            .status()
            .expect("cargo build --example");
        assert!(status.success(), "building example {name}");
    }
    node
}

/// Starts `node` with `args`, its output piped.
pub fn spawn_node(node: &PathBuf, args: &[&str]) -> Child {
    Command::new(node)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn node")
}

/// Waits for every node to exit successfully; each node's one JSON line, in order.
pub fn node_lines(children: Vec<Child>) -> Vec<serde_json::Value> {
    children
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().expect("node ran");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "node failed: {stderr}");
            serde_json::from_slice(&out.stdout).expect("one JSON line of stats")
        })
        .collect()
}
