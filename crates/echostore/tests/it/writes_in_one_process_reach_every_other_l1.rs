//! Coherence across OS processes: three `coherence_node` processes hold one id in L1 with a
//! minute's ttl; a `put` in one of them, an `invalidate` in another, and a foreign `SET` and `DEL`
//! from a plain client each reach every node's L1 — each node answers the new value, long before
//! its copy would have expired. Source reads are counted by the source itself, in Valkey. Once
//! with each tracking mode: by prefix (broadcast), and by key (Valkey pushes only the keys each
//! node's tracking connection read, so a node whose entry was never read there would hear of
//! nothing and keep its old copy until it expired).

use crate::common;

use std::io::{BufRead, BufReader, Lines, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use common::valkey;
use serde_json::Value;

/// The `coherence_node` example next to this test binary, built first if this run did not.
fn coherence_node() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    let node = profile_dir.join("examples").join("coherence_node");
    if !node.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-p", "echostore", "--example", "coherence_node"])
            .status()
            .expect("cargo build --example coherence_node");
        assert!(status.success());
    }
    node
}

/// One node process, driven a command line at a time; killed if the test ends early.
struct Node {
    name: usize,
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Node {
    fn start(name: usize, url: &str, run: &str, tracking: &str) -> Node {
        let mut child = Command::new(coherence_node())
            .args([url, run, tracking])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn coherence_node");
        let stdin = child.stdin.take().expect("stdin");
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Node {
            name,
            child,
            stdin,
            lines,
        }
    }

    fn line(&mut self) -> String {
        match self.lines.next() {
            Some(Ok(line)) => line,
            other => panic!("node {} said nothing more: {other:?}", self.name),
        }
    }

    /// Waits for the node's `ready` (its table is tracked).
    fn ready(&mut self) {
        assert_eq!(self.line(), "ready", "node {}", self.name);
    }

    /// Sends one command and returns its one-line JSON answer, which must not be an error.
    fn call(&mut self, command: &str) -> Value {
        writeln!(self.stdin, "{command}").expect("write a command");
        let line = self.line();
        let answer: Value = serde_json::from_str(&line).expect("a JSON answer");
        assert!(
            answer.get("error").is_none(),
            "node {}: {command}: {answer}",
            self.name
        );
        answer
    }

    /// The pushes that reached the node's table since it was ready.
    fn invalidations(&mut self) -> u64 {
        self.call("stats")["invalidations"]
            .as_u64()
            .expect("invalidations")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every node (but `except`) fetches `id` until it returns `want`; each answers it, and each
/// counted one more push than before.
fn all_reach(nodes: &mut [Node], except: Option<usize>, id: &str, want: &str, before: &[u64]) {
    for node in nodes.iter_mut().filter(|n| Some(n.name) != except) {
        let seen = node.call(&format!("wait-for {id} {want}"));
        assert_eq!(seen["value"], want, "node {}", node.name);
        let pushes = seen["invalidations"].as_u64().expect("invalidations");
        assert!(
            pushes > before[node.name],
            "node {} saw {want} without a push ({pushes} pushes, {} before)",
            node.name,
            before[node.name]
        );
    }
}

/// Every node holds `want` for `id` in its L1 (it fetches until a fetch is an L1 hit: its first
/// fetch after a change may be answered by a flight whose own write's push then dropped the copy);
/// returns each node's push count then. From here on a node can see another value only through
/// a push: its copy has a minute left.
fn all_hold(nodes: &mut [Node], id: &str, want: &str) -> Vec<u64> {
    for node in nodes.iter_mut() {
        let settled = node.call(&format!("settle {id}"));
        assert_eq!(settled["value"], want, "node {}", node.name);
        assert_eq!(settled["origin"], "L1", "node {}", node.name);
    }
    nodes.iter_mut().map(Node::invalidations).collect()
}

/// A put, an invalidate, a foreign SET and a foreign DEL each reach the L1 of every process,
/// whose copy had a minute left; the source is read once per change that needs a reload.
#[test]
fn writes_in_one_process_reach_every_other_l1() {
    writes_reach_every_l1("broadcast");
}

/// The same under key tracking: every process hears of each change of the id it holds.
#[test]
fn writes_reach_every_other_l1_under_key_tracking() {
    writes_reach_every_l1("keys");
}

fn writes_reach_every_l1(tracking: &str) {
    let valkey = valkey();
    let url = valkey.url();
    let run = std::process::id().to_string();
    let mut raw = redis::Client::open(url.as_str())
        .expect("url")
        .get_connection()
        .expect("a plain connection");
    let reads = format!("src:{run}:reads");
    let source = |id: &str| format!("src:{run}:{id}");
    let source_reads = |raw: &mut redis::Connection| -> u64 {
        redis::cmd("GET").arg(&reads).query(raw).expect("GET reads")
    };
    let set = |raw: &mut redis::Connection, key: &str, value: &[u8]| {
        let () = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .query(raw)
            .expect("SET");
    };
    set(&mut raw, &source("item"), b"v0");

    let mut nodes: Vec<Node> = (0..3)
        .map(|i| Node::start(i, &url, &run, tracking))
        .collect();
    for node in &mut nodes {
        node.ready();
    }
    for node in &mut nodes {
        assert_eq!(node.call("get item")["value"], "v0");
    }
    let before = all_hold(&mut nodes, "item", "v0");
    assert_eq!(source_reads(&mut raw), 1, "v0 read from the source once");

    // A put in node 0 reaches nodes 1 and 2 (no source read: the value is on Valkey).
    set(&mut raw, &source("item"), b"v1");
    nodes[0].call("put item v1");
    all_reach(&mut nodes, Some(0), "item", "v1", &before);
    assert_eq!(source_reads(&mut raw), 1, "a put needs no source read");

    // An invalidate in node 1 reaches nodes 0 and 2, which reload v2 from the source: once.
    let before = all_hold(&mut nodes, "item", "v1");
    set(&mut raw, &source("item"), b"v2");
    nodes[1].call("invalidate item");
    all_reach(&mut nodes, Some(1), "item", "v2", &before);
    assert_eq!(source_reads(&mut raw), 2, "one reload for three processes");

    // A foreign SET of the value key (an envelope of v3, copied from another id a node put)
    // reaches all three nodes, which read it from Valkey.
    nodes[2].call("put other v3");
    let envelope: Vec<u8> = redis::cmd("GET")
        .arg("coh:{other}")
        .query(&mut raw)
        .expect("GET the envelope");
    let before = all_hold(&mut nodes, "item", "v2");
    set(&mut raw, &source("item"), b"v3");
    set(&mut raw, "coh:{item}", &envelope);
    all_reach(&mut nodes, None, "item", "v3", &before);
    assert_eq!(
        source_reads(&mut raw),
        2,
        "the foreign value needed no source read"
    );

    // A foreign DEL reaches all three nodes, which reload v4 from the source: once.
    let before = all_hold(&mut nodes, "item", "v3");
    set(&mut raw, &source("item"), b"v4");
    let _: i64 = redis::cmd("DEL")
        .arg("coh:{item}")
        .query(&mut raw)
        .expect("DEL");
    all_reach(&mut nodes, None, "item", "v4", &before);
    assert_eq!(source_reads(&mut raw), 3, "one reload for three processes");

    for node in &mut nodes {
        let stats = node.call("stats");
        assert_eq!(stats["in_flight"], 0, "node {} settled: {stats}", node.name);
        assert!(
            stats["invalidations"].as_u64().unwrap_or(0) >= 4,
            "node {} got a push for each of the four changes: {stats}",
            node.name
        );
    }
}
