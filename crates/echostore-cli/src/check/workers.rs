//! The worker processes of `echostore check`, from the controller's side: this same binary with
//! the hidden `check-worker` subcommand ([`Children`]), waited on for `ready`, told `crash`,
//! `skew`, `write` (before a kill) and `stop` (one alone, to replace it with a newcomer), frozen
//! or killed by signal, and
//! asked why when one goes away (the end of its stderr, in the run's directory).

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;

use super::worker::WorkerArgs;
use crate::CliResult;
use crate::children::{self, Children};
use echostore_testkit::duration::render;

/// How long a worker may take to start, crash an owner, or finish.
const WITHIN: Duration = Duration::from_secs(60);

/// How long a worker told to write only writes before it is killed.
const WRITES_UNDER_WAY: Duration = Duration::from_millis(20);

/// The running workers, and those a `replace` retired.
pub(crate) struct Workers {
    children: Children,
    /// Each child's flags, by index: a replacement is a child of its own, at the end.
    args: Vec<WorkerArgs>,
    /// Each child's Valkey URL.
    urls: Vec<String>,
    /// The children a `replace` stopped or a `kill-worker` killed: told nothing more, waited on
    /// no more.
    retired: Vec<bool>,
    /// The children a `kill-worker` killed: their exit is no failure.
    killed: Vec<usize>,
    /// Lines a wait for another worker's line read past, kept for their own wait.
    early: Vec<(usize, String)>,
    /// The run's directory, where each worker's stderr is.
    dir: PathBuf,
}

impl Workers {
    /// Starts one worker per entry of `args`, worker `i` on `urls[i]`; each has its stderr in
    /// the run's directory.
    pub(crate) fn spawn(urls: &[String], args: &[WorkerArgs], dir: &Path) -> CliResult<Workers> {
        let mut workers = Workers {
            children: Children::spawn("worker", Vec::new())?,
            args: Vec::new(),
            urls: Vec::new(),
            retired: Vec::new(),
            killed: Vec::new(),
            early: Vec::new(),
            dir: dir.to_owned(),
        };
        for (url, a) in urls.iter().zip(args) {
            workers.start(url, a.clone())?;
        }
        Ok(workers)
    }

    /// Starts one more worker with `args` on `url`: its index.
    fn start(&mut self, url: &str, a: WorkerArgs) -> CliResult<usize> {
        let i = self.args.len();
        let stderr = std::fs::File::create(self.dir.join(format!("worker-{i}.stderr")))?;
        let mut command = children::this_binary(&["--valkey", url, "check-worker"])?;
        command
            .args(["--process", &a.process.to_string()])
            .arg("--dir")
            .arg(&a.dir)
            .args(["--namespace", &a.namespace])
            .args(["--keys", &a.keys.to_string()])
            .args(["--schema", &a.schema.to_string()])
            .args(["--tasks", &a.tasks.to_string()])
            .args(["--reads", &a.reads.to_string()])
            .args(["--ttl", &render(a.ttl)])
            .args(["--source-latency", &render(a.source_latency)])
            .args(["--unconfirmed-l1-life", &render(a.unconfirmed_l1_life)])
            .args(["--coherence", a.coherence.name()])
            .args(["--tracking", a.tracking.name()])
            .args(["--seed", &a.seed.to_string()])
            .stderr(stderr);
        self.children.add("worker", command)?;
        self.args.push(a);
        self.urls.push(url.to_owned());
        self.retired.push(false);
        Ok(i)
    }

    /// The index of the `n`-th running worker (counted round, so any `n` picks one).
    pub(crate) fn pick(&self, n: usize) -> usize {
        let live: Vec<usize> = (0..self.retired.len())
            .filter(|&i| !self.retired[i])
            .collect();
        live[n % live.len().max(1)]
    }

    /// Worker `i`'s process number.
    pub(crate) fn process_of(&self, i: usize) -> u32 {
        self.args[i].process
    }

    /// The process numbers of the running workers that reach Valkey at `url`.
    pub(crate) fn processes_on(&self, url: &str) -> Vec<u32> {
        (0..self.args.len())
            .filter(|&i| !self.retired[i] && self.urls[i] == url)
            .map(|i| self.args[i].process)
            .collect()
    }

    /// Every process number a worker of the run has had (its history's name).
    pub(crate) fn processes(&self) -> Vec<u32> {
        self.args.iter().map(|a| a.process).collect()
    }

    /// Waits until every worker has said `ready`.
    pub(crate) async fn ready(&mut self) -> CliResult<()> {
        for i in 0..self.args.len() {
            self.line_from(i, "ready").await?;
        }
        Ok(())
    }

    /// Stops worker `i` as a deploy stops a process (its history flushed, its tables dropped),
    /// then starts a new one in its place as process `process` of schema `schema`: a rolling
    /// restart, whose newcomer joins a fleet that never stopped. Its span's start and end.
    pub(crate) async fn replace(
        &mut self,
        i: usize,
        (process, schema): (u32, u32),
    ) -> CliResult<(u64, u64)> {
        let start = super::history::now_ns();
        self.children.say(i, "stop")?;
        self.line_from(i, "done").await?;
        let status = tokio::task::block_in_place(|| self.children.wait(i))?;
        if !status.success() {
            return Err(format!("worker {i} exited ({status}) when replaced").into());
        }
        self.retired[i] = true;
        self.newcomer(i, (process, schema)).await?;
        Ok((start, super::history::now_ns()))
    }

    /// Kills worker `i` (`SIGKILL`: an OOM kill, a lost node) in the middle of its writes, then
    /// starts a new one in its place as [`Workers::replace`] does. Its span's start and end.
    pub(crate) async fn kill(
        &mut self,
        i: usize,
        (process, schema): (u32, u32),
    ) -> CliResult<(u64, u64)> {
        let start = super::history::now_ns();
        // Its tasks all writing first, so that the kill cuts writes off on their way (a write
        // is a few ms; a kill between calls would cut nothing).
        self.children.say(i, "write")?;
        self.line_from(i, "writing").await?;
        tokio::time::sleep(WRITES_UNDER_WAY).await;
        rustix::process::kill_process(self.pid(i)?, rustix::process::Signal::KILL)?;
        tokio::task::block_in_place(|| self.children.wait(i))?;
        self.retired[i] = true;
        self.killed.push(i);
        self.newcomer(i, (process, schema)).await?;
        Ok((start, super::history::now_ns()))
    }

    /// Starts process `process` of schema `schema` in retired worker `i`'s place (its flags, its
    /// Valkey), and waits until it serves.
    async fn newcomer(&mut self, i: usize, (process, schema): (u32, u32)) -> CliResult<()> {
        let args = WorkerArgs {
            process,
            schema,
            ..self.args[i].clone()
        };
        let url = self.urls[i].clone();
        let new = self.start(&url, args)?;
        self.line_from(new, "ready").await.map(drop)
    }

    /// Worker `i`'s OS process.
    fn pid(&mut self, i: usize) -> CliResult<rustix::process::Pid> {
        let pid = (self.children.child_mut(i))
            .and_then(|child| rustix::process::Pid::from_raw(child.id() as i32));
        Ok(pid.ok_or_else(|| format!("worker {i} has no process"))?)
    }

    /// Has worker `i` crash its struct table's owner: the crash's start and end, and whether the
    /// owner restarted (it ends when the held writes do if not).
    pub(crate) async fn crash(&mut self, i: usize) -> CliResult<(u64, u64, bool)> {
        self.children.say(i, "crash")?;
        let line = self.line_from(i, "crashed").await?;
        parse_crashed(&line)
            .ok_or_else(|| format!("worker {i} answered the crash with `{line}`").into())
    }

    /// Has worker `i`'s wall clock, as EchoStore reads it, run `by_ms` ahead (negative: behind).
    pub(crate) async fn skew(&mut self, i: usize, by_ms: i64) -> CliResult<()> {
        self.children.say(i, &format!("skew {by_ms}"))?;
        self.line_from(i, "skewed").await.map(drop)
    }

    /// Stops worker `i`'s process (`SIGSTOP`) for `how_long`, then lets it go on (`SIGCONT`).
    pub(crate) async fn freeze(&mut self, i: usize, how_long: Duration) -> CliResult<()> {
        let pid = self.pid(i)?;
        rustix::process::kill_process(pid, rustix::process::Signal::STOP)?;
        tokio::time::sleep(how_long).await;
        rustix::process::kill_process(pid, rustix::process::Signal::CONT)?;
        Ok(())
    }

    /// Tells every worker to stop, and waits until each has flushed its history and exited.
    pub(crate) async fn stop(&mut self) -> CliResult<()> {
        let running: Vec<usize> = (0..self.retired.len())
            .filter(|&i| !self.retired[i])
            .collect();
        for &i in &running {
            self.children.say(i, "stop")?;
        }
        for &i in &running {
            self.line_from(i, "done").await?;
        }
        for i in (0..self.args.len()).filter(|i| !self.killed.contains(i)) {
            let status = tokio::task::block_in_place(|| self.children.wait(i))?;
            if !status.success() {
                return Err(format!("worker {i} exited ({status})").into());
            }
        }
        Ok(())
    }

    /// The next line of worker `i` that starts with `word`; its other lines are dropped, and
    /// other workers' lines kept for their own waits.
    async fn line_from(&mut self, i: usize, word: &str) -> CliResult<String> {
        if let Some(at) = self
            .early
            .iter()
            .position(|(w, l)| *w == i && l.starts_with(word))
        {
            return Ok(self.early.remove(at).1);
        }
        let deadline = Instant::now() + WITHIN;
        loop {
            match tokio::time::timeout_at(deadline, self.children.next()).await {
                Ok(Some((w, Some(line)))) if w == i && line.starts_with(word) => return Ok(line),
                Ok(Some((w, None))) if w == i => return Err(why_gone(i, &self.dir).into()),
                Ok(Some((w, Some(line)))) if w != i => self.early.push((w, line)),
                Ok(Some(_)) => {}
                Ok(None) => return Err("every worker's output closed".into()),
                Err(_) => return Err(format!("worker {i} never said `{word}`").into()),
            }
        }
    }
}

/// The end of worker `i`'s stderr: why it went away.
fn why_gone(i: usize, dir: &Path) -> String {
    let stderr =
        std::fs::read_to_string(dir.join(format!("worker-{i}.stderr"))).unwrap_or_default();
    let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
    format!("worker {i} exited: {}", tail.join(" / "))
}

/// A worker's answer to `crash`: `crashed <start> <end>` (the owner restarted) or `crashed none
/// <start> <end>` (it did not; the span is the held writes'), as the crash's start, end, and
/// whether the owner restarted.
fn parse_crashed(line: &str) -> Option<(u64, u64, bool)> {
    let words: Vec<&str> = line.split(' ').collect();
    let (restarted, start, end) = match words.as_slice() {
        ["crashed", "none", start, end] => (false, start, end),
        ["crashed", start, end] => (true, start, end),
        _ => return None,
    };
    Some((start.parse().ok()?, end.parse().ok()?, restarted))
}

#[cfg(test)]
mod tests {
    use super::parse_crashed;

    /// Both answers a worker gives, and nothing else, are a crash's span.
    #[test]
    fn a_crash_answer_is_its_span_and_whether_the_owner_restarted() {
        assert_eq!(parse_crashed("crashed 10 25"), Some((10, 25, true)));
        assert_eq!(parse_crashed("crashed none 10 25"), Some((10, 25, false)));
        for bad in [
            "crashed",
            "crashed 10",
            "crashed none 10",
            "crashed x 25",
            "crashed 1 2 3",
        ] {
            assert_eq!(parse_crashed(bad), None, "{bad}");
        }
    }
}
