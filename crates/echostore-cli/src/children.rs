//! Processes of this same binary that a readout runs (the `coherence` readers, the `check`
//! workers), from the parent's side: started with their stdin and stdout piped, every stdout line
//! delivered on one channel with its child's index (a thread per child reads its pipe), told
//! things on stdin, and killed by their own handles if the readout stops early.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};

use tokio::sync::mpsc;

use crate::CliResult;

/// A command running this binary with `args`: the caller adds the rest (stderr, more args).
pub(crate) fn this_binary(args: &[&str]) -> CliResult<Command> {
    let exe = std::env::current_exe()
        .map_err(|e| format!("finding the echostore binary to run children: {e}"))?;
    let mut command = Command::new(exe);
    command.args(args);
    Ok(command)
}

/// What a child said: a line of its stdout, or `None` once its stdout closed (it exited).
pub(crate) type Said = (usize, Option<String>);

/// The running children.
pub(crate) struct Children {
    children: Vec<Child>,
    stdins: Vec<Option<ChildStdin>>,
    lines: mpsc::UnboundedReceiver<Said>,
    /// Where a child added later sends its lines.
    said: mpsc::UnboundedSender<Said>,
}

impl Children {
    /// Starts one child per command, named `what` in errors.
    pub(crate) fn spawn(what: &str, commands: Vec<Command>) -> CliResult<Children> {
        let (said, lines) = mpsc::unbounded_channel();
        let mut started = Children {
            children: Vec::with_capacity(commands.len()),
            stdins: Vec::with_capacity(commands.len()),
            lines,
            said,
        };
        for command in commands {
            started.add(what, command)?;
        }
        Ok(started)
    }

    /// Starts one more child, named `what` in errors; returns its index.
    pub(crate) fn add(&mut self, what: &str, mut command: Command) -> CliResult<usize> {
        let i = self.children.len();
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting {what} {i}: {e}"))?;
        self.stdins.push(child.stdin.take());
        let stdout = child.stdout.take();
        self.children.push(child);
        let tx = self.said.clone();
        std::thread::spawn(move || {
            if let Some(stdout) = stdout {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    let _ = tx.send((i, Some(line)));
                }
            }
            let _ = tx.send((i, None));
        });
        Ok(i)
    }

    /// The next thing a child said; `None` once every child's stdout has closed.
    pub(crate) async fn next(&mut self) -> Option<Said> {
        self.lines.recv().await
    }

    /// Writes `line` to child `i`'s stdin.
    pub(crate) fn say(&mut self, i: usize, line: &str) -> CliResult<()> {
        let stdin = self
            .stdins
            .get_mut(i)
            .and_then(Option::as_mut)
            .ok_or_else(|| format!("child {i} has no stdin"))?;
        writeln!(stdin, "{line}").map_err(|e| format!("telling child {i} `{line}`: {e}"))?;
        Ok(())
    }

    /// Closes every child's stdin.
    pub(crate) fn close_stdins(&mut self) {
        for stdin in &mut self.stdins {
            drop(stdin.take());
        }
    }

    /// Child `i`'s handle.
    pub(crate) fn child_mut(&mut self, i: usize) -> Option<&mut Child> {
        self.children.get_mut(i)
    }

    /// Waits for child `i` to exit: its status.
    pub(crate) fn wait(&mut self, i: usize) -> CliResult<ExitStatus> {
        let child = self
            .children
            .get_mut(i)
            .ok_or_else(|| format!("no child {i}"))?;
        Ok(child.wait()?)
    }

    /// Waits for every child to exit; the first that failed, by index, with its status.
    pub(crate) fn wait_all(&mut self) -> CliResult<Option<(usize, ExitStatus)>> {
        let mut failed = None;
        for (i, child) in self.children.iter_mut().enumerate() {
            let status = child.wait()?;
            if !status.success() && failed.is_none() {
                failed = Some((i, status));
            }
        }
        Ok(failed)
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        // A readout stopped early (an error, Ctrl-C) leaves no child behind.
        for child in &mut self.children {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}
