//! The reader processes of `echostore coherence`, from the parent's side: spawned as this same
//! binary with the hidden `coherence-reader` subcommand, their stdout lines turned into [`Event`]s
//! on one channel (a thread per reader reads its pipe), their stdin closed to end the run, and
//! every one still running killed (by its own handle) if the readout stops early.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::Switch;
use super::reader::ReaderStats;
use crate::CliResult;

/// What a reader said.
#[derive(Debug)]
pub(crate) enum Event {
    /// Its table is tracked and the id is in its L1.
    Ready,
    /// It first saw write `seq` at `at_ns` (Unix time, ns).
    Seen { seq: u64, at_ns: u64 },
    /// Its closing counters.
    Stats(ReaderStats),
    /// Its stdout closed (it exited).
    Gone,
}

/// The running readers.
pub(crate) struct Readers {
    children: Vec<Child>,
    stdins: Vec<Option<ChildStdin>>,
    events: mpsc::UnboundedReceiver<(usize, Event)>,
}

impl Readers {
    /// Starts `n` readers of the run `run` against the Valkey at `url`.
    pub(crate) fn spawn(
        n: usize,
        url: &str,
        run: &str,
        ttl: Duration,
        coherence: Switch,
        read_every: Duration,
    ) -> CliResult<Readers> {
        let exe = std::env::current_exe()
            .map_err(|e| format!("finding the echostore binary to run readers: {e}"))?;
        let (tx, events) = mpsc::unbounded_channel();
        let mut readers = Readers {
            children: Vec::with_capacity(n),
            stdins: Vec::with_capacity(n),
            events,
        };
        for reader in 0..n {
            let mut child = Command::new(&exe)
                .arg("--valkey")
                .arg(url)
                .arg("coherence-reader")
                .arg("--run")
                .arg(run)
                .arg("--ttl")
                .arg(echostore_benches::duration::render(ttl))
                .arg("--coherence")
                .arg(coherence.name())
                .arg("--read-every")
                .arg(echostore_benches::duration::render(read_every))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("starting reader {reader}: {e}"))?;
            readers.stdins.push(child.stdin.take());
            let stdout = child.stdout.take();
            readers.children.push(child);
            let tx = tx.clone();
            std::thread::spawn(move || {
                if let Some(stdout) = stdout {
                    for line in BufReader::new(stdout).lines() {
                        let Ok(line) = line else { break };
                        if let Some(event) = parse(&line) {
                            let _ = tx.send((reader, event));
                        }
                    }
                }
                let _ = tx.send((reader, Event::Gone));
            });
        }
        Ok(readers)
    }

    /// The next event, or an error once `deadline` passes.
    pub(crate) async fn next(
        &mut self,
        deadline: Instant,
        waiting_for: &str,
    ) -> CliResult<(usize, Event)> {
        match tokio::time::timeout_at(deadline, self.events.recv()).await {
            Ok(Some(event)) => Ok(event),
            Ok(None) => Err("every reader's output closed".into()),
            Err(_) => Err(format!("timed out waiting for {waiting_for}").into()),
        }
    }

    /// Why reader `i` went away: its exit status and the end of its stderr.
    pub(crate) fn why_gone(&mut self, i: usize) -> String {
        let Some(child) = self.children.get_mut(i) else {
            return "no such reader".to_owned();
        };
        let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            let _ = pipe.read_to_string(&mut stderr);
        }
        let tail: String = stderr.lines().rev().take(5).collect::<Vec<_>>().join(" / ");
        format!("reader {i} exited ({status}): {tail}")
    }

    /// Closes every reader's stdin: each prints its counters and exits.
    pub(crate) fn stop(&mut self) {
        for stdin in &mut self.stdins {
            drop(stdin.take());
        }
    }

    /// Waits for every reader to exit; an error names the first that failed.
    pub(crate) fn wait(&mut self) -> CliResult<()> {
        for i in 0..self.children.len() {
            let status = self.children[i].wait()?;
            if !status.success() {
                return Err(self.why_gone(i).into());
            }
        }
        Ok(())
    }
}

impl Drop for Readers {
    fn drop(&mut self) {
        // A readout stopped early (an error, Ctrl-C) leaves no reader behind.
        for child in &mut self.children {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// One line of a reader's stdout.
fn parse(line: &str) -> Option<Event> {
    let mut words = line.splitn(3, ' ');
    match words.next()? {
        "ready" => Some(Event::Ready),
        "seen" => {
            let seq = words.next()?.parse().ok()?;
            let at_ns = words.next()?.parse().ok()?;
            Some(Event::Seen { seq, at_ns })
        }
        "stats" => serde_json::from_str(line.strip_prefix("stats ")?)
            .ok()
            .map(Event::Stats),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reader's three kinds of line parse; anything else is ignored.
    #[test]
    fn parses_reader_lines() {
        assert!(matches!(parse("ready"), Some(Event::Ready)));
        assert!(matches!(
            parse("seen 7 1700000000000000000"),
            Some(Event::Seen {
                seq: 7,
                at_ns: 1_700_000_000_000_000_000
            })
        ));
        let stats = serde_json::to_string(&ReaderStats::default()).expect("json");
        assert!(matches!(
            parse(&format!("stats {stats}")),
            Some(Event::Stats(_))
        ));
        assert!(parse("seen x").is_none());
        assert!(parse("hello").is_none());
    }
}
