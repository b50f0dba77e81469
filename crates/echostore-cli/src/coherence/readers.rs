//! The reader processes of `echostore coherence`, from the parent's side: this same binary with
//! the hidden `coherence-reader` subcommand ([`Children`]), their stdout lines turned into
//! [`Event`]s, and their stdin closed to end the run.

use std::io::Read;
use std::process::Stdio;
use std::time::Duration;

use tokio::time::Instant;

use super::reader::ReaderStats;
use super::{Mode, Switch};
use crate::CliResult;
use crate::children::{self, Children};

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
    children: Children,
}

impl Readers {
    /// Starts `n` readers of the run `run` against the Valkey at `url`.
    pub(crate) fn spawn(
        n: usize,
        url: &str,
        run: &str,
        ttl: Duration,
        (coherence, tracking): (Switch, Mode),
        read_every: Duration,
    ) -> CliResult<Readers> {
        let mut commands = Vec::with_capacity(n);
        for _ in 0..n {
            let mut command = children::this_binary(&["--valkey", url, "coherence-reader"])?;
            command
                .args(["--run", run])
                .args(["--ttl", &echostore_testkit::duration::render(ttl)])
                .args(["--coherence", coherence.name()])
                .args(["--tracking", tracking.name()])
                .args([
                    "--read-every",
                    &echostore_testkit::duration::render(read_every),
                ])
                .stderr(Stdio::piped());
            commands.push(command);
        }
        Ok(Readers {
            children: Children::spawn("reader", commands)?,
        })
    }

    /// The next event, or an error once `deadline` passes.
    pub(crate) async fn next(
        &mut self,
        deadline: Instant,
        waiting_for: &str,
    ) -> CliResult<(usize, Event)> {
        loop {
            match tokio::time::timeout_at(deadline, self.children.next()).await {
                Ok(Some((i, Some(line)))) => {
                    if let Some(event) = parse(&line) {
                        return Ok((i, event));
                    }
                }
                Ok(Some((i, None))) => return Ok((i, Event::Gone)),
                Ok(None) => return Err("every reader's output closed".into()),
                Err(_) => return Err(format!("timed out waiting for {waiting_for}").into()),
            }
        }
    }

    /// Why reader `i` went away: its exit status and the end of its stderr.
    pub(crate) fn why_gone(&mut self, i: usize) -> String {
        let Some(child) = self.children.child_mut(i) else {
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
        self.children.close_stdins();
    }

    /// Waits for every reader to exit; an error names the first that failed.
    pub(crate) fn wait(&mut self) -> CliResult<()> {
        match self.children.wait_all()? {
            Some((i, _)) => Err(self.why_gone(i).into()),
            None => Ok(()),
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
