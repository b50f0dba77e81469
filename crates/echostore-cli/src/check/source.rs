//! The source of truth `echostore check` reads through: one small file per id in the run's
//! directory, holding the id's current version, shared by every worker process. A write moves
//! the version on under an exclusive file lock (the row lock of a real database); a load reads
//! it under a shared one. It lives outside Valkey so that a Valkey restart, which empties the
//! cache, leaves the truth where it was.
//!
//! The file locks block, so every call runs on tokio's blocking pool, as a database driver's
//! I/O never holds a runtime thread: a row lock held by a process the scheduler set aside must
//! stall the caller's read, not the worker's runtime, whose pushes and other reads go on.
//!
//! The `slow-source` fault slows every read of it, in every worker, while a flag file lies in
//! the run's directory: a database under load, whose queries outlast the regeneration lock. The
//! `failing-source` fault fails every read the same way: a database that refuses queries (and the
//! loaders panic on one id in two: a loader's own bug, `tables::Loading`).
//!
//! It is not `echostore_testkit::Source`: that one counts and gates reads inside one process
//! (its counts and gate are in memory), while this one is the truth several OS processes share
//! and move on, with a version per id that the model judges every read against. The two share no
//! mechanism.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::rows;
use super::tables::LOCK_TTL;

/// How much longer a source read takes while the source is slow: past the tables' `lock_ttl`,
/// so that a load holds its lock only by its lease.
pub(crate) const SLOW_READ: Duration = LOCK_TTL.saturating_add(Duration::from_secs(1));

/// What a fault can do to the source's reads (never to its writes: a write that fails is the
/// workload's own error, not the cache's). Each is a flag file in the run's directory.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Trouble {
    /// Every read answers [`SLOW_READ`] late.
    Slow,
    /// Every read fails.
    Failing,
}

/// The kind of error every read answers while the source fails.
const FAILING: io::ErrorKind = io::ErrorKind::ConnectionRefused;

/// Whether `e` is a read's error while the source fails (the `failing-source` fault).
pub(crate) fn is_failing(e: &io::Error) -> bool {
    e.kind() == FAILING
}

/// Told, for each row a write moves, the row's id and next version under the row's lock before
/// the row moves: the write's record that it began, which a worker killed after the move (and
/// before its call's end) leaves on record (`history::BEGUN`).
pub(crate) type Begun = std::sync::Arc<dyn Fn(u32, u64) + Send + Sync>;

/// The versioned rows of one run.
#[derive(Debug, Clone)]
pub(crate) struct Source {
    dir: PathBuf,
}

impl Source {
    /// Lays down `tables × keys` rows at version 0 in `dir` (the controller, before any worker).
    pub(crate) fn create(dir: &Path, tables: u8, keys: u32) -> io::Result<Source> {
        let source = Source {
            dir: dir.to_owned(),
        };
        for table in 0..tables {
            for id in 0..keys {
                std::fs::write(source.row(table, id), 0u64.to_le_bytes())?;
            }
        }
        Ok(source)
    }

    /// The rows the controller laid down in `dir` (a worker).
    pub(crate) fn open(dir: &Path) -> Source {
        Source {
            dir: dir.to_owned(),
        }
    }

    /// The id's current version.
    pub(crate) async fn read(&self, table: u8, id: u32) -> io::Result<u64> {
        let mut versions = self.read_many(table, vec![id]).await?;
        versions
            .pop()
            .ok_or_else(|| io::Error::other("no row read"))
    }

    /// The current versions of `ids`, in their order, read one row at a time (as one query).
    /// While the source is slow, the answer comes [`SLOW_READ`] after the rows were read; while
    /// it fails, every read fails.
    pub(crate) async fn read_many(&self, table: u8, ids: Vec<u32>) -> io::Result<Vec<u64>> {
        let rows: Vec<PathBuf> = ids.iter().map(|&id| self.row(table, id)).collect();
        let (slow, failing) = (self.flag(Trouble::Slow), self.flag(Trouble::Failing));
        let read = blocking(move || {
            if failing.exists() {
                return Err(io::Error::new(
                    FAILING,
                    "the source is failing (the failing-source fault)",
                ));
            }
            let versions = rows.iter().map(|row| read_row(row)).collect();
            Ok((versions, slow.exists()))
        });
        let (versions, slow) = read.await?;
        if slow {
            tokio::time::sleep(SLOW_READ).await;
        }
        versions
    }

    /// Puts the source in `trouble`, in every worker (`true`), or out of it.
    pub(crate) fn set(&self, trouble: Trouble, on: bool) -> io::Result<()> {
        let flag = self.flag(trouble);
        if on {
            std::fs::write(flag, b"")
        } else {
            std::fs::remove_file(flag)
        }
    }

    fn flag(&self, trouble: Trouble) -> PathBuf {
        self.dir.join(match trouble {
            Trouble::Slow => "slow-source",
            Trouble::Failing => "failing-source",
        })
    }

    /// Moves each of `ids` to its next version; returns the ids that moved, with their versions.
    pub(crate) async fn bump_many(
        &self,
        table: u8,
        ids: Vec<u32>,
        begun: Begun,
    ) -> Vec<(u32, u64)> {
        let rows: Vec<(u32, PathBuf)> = ids.iter().map(|&id| (id, self.row(table, id))).collect();
        let bumped = blocking(move || {
            let moved = rows.iter().filter_map(|(id, row)| {
                let moved = bump_row(row, |v| v + 1, |v| begun(*id, v));
                moved.ok().map(|v| (*id, v))
            });
            Ok(moved.collect())
        });
        bumped.await.unwrap_or_default()
    }

    /// Moves the id to its next version and returns it.
    pub(crate) async fn bump(&self, table: u8, id: u32, begun: Begun) -> io::Result<u64> {
        let row = self.row(table, id);
        blocking(move || bump_row(&row, |v| v + 1, |v| begun(id, v))).await
    }

    /// Deletes the row: moves the id to its next version that is a row gone at the source
    /// ([`rows::next_gone`]), in one step, and returns it.
    pub(crate) async fn delete(&self, table: u8, id: u32, begun: Begun) -> io::Result<u64> {
        let row = self.row(table, id);
        blocking(move || bump_row(&row, rows::next_gone, |v| begun(id, v))).await
    }

    fn row(&self, table: u8, id: u32) -> PathBuf {
        self.dir.join(format!("row-{table}-{id}"))
    }
}

/// Runs `f` on the blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(io::Error::other(e)))
}

/// A row's version, under a shared lock.
fn read_row(row: &Path) -> io::Result<u64> {
    let mut file = File::open(row)?;
    file.lock_shared()?;
    let version = read_version(&mut file);
    file.unlock()?;
    version
}

/// Moves a row to its `next` version under an exclusive lock, and returns it; `begun` is told
/// the version before the row moves.
fn bump_row(row: &Path, next: fn(u64) -> u64, begun: impl FnOnce(u64)) -> io::Result<u64> {
    let mut file = OpenOptions::new().read(true).write(true).open(row)?;
    file.lock()?;
    let next = read_version(&mut file).and_then(|v| {
        let next = next(v);
        begun(next);
        file.seek(SeekFrom::Start(0))?;
        file.write_all(&next.to_le_bytes())?;
        Ok(next)
    });
    file.unlock()?;
    next
}

fn read_version(file: &mut File) -> io::Result<u64> {
    let mut bytes = [0u8; 8];
    file.read_exact(&mut bytes)?;
    Ok(u64::from_le_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write's start that nobody records.
    fn quiet() -> Begun {
        std::sync::Arc::new(|_, _| {})
    }

    /// Each row's next version is told before the row moves: a reader under the row's lock
    /// then still finds the old one.
    #[tokio::test]
    async fn a_bump_is_told_before_the_row_moves() {
        let dir = tempfile::tempdir().expect("tempdir");
        let source = Source::create(dir.path(), 1, 1).expect("create");
        let row = source.row(0, 0);
        let told = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = std::sync::Arc::clone(&told);
        let begun: Begun = std::sync::Arc::new(move |id, v| {
            // The row still holds the old version when the write's start is told.
            let mut file = File::open(&row).expect("the row");
            let before = read_version(&mut file).expect("a version");
            seen.lock().expect("told").push((id, v, before));
        });
        assert_eq!(source.bump(0, 0, begun).await.expect("bump"), 1);
        assert_eq!(*told.lock().expect("told"), [(0, 1, 0)]);
    }

    /// Rows start at 0, move on by one per bump, and two handles on one directory see one row.
    #[tokio::test]
    async fn bumps_are_seen_by_every_handle() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = Source::create(dir.path(), 2, 3).expect("create");
        let b = Source::open(dir.path());
        assert_eq!(a.read(1, 2).await.expect("read"), 0);
        assert_eq!(a.bump(1, 2, quiet()).await.expect("bump"), 1);
        assert_eq!(b.bump(1, 2, quiet()).await.expect("bump"), 2);
        assert_eq!(a.read(1, 2).await.expect("read"), 2);
        assert_eq!(
            b.read(0, 2).await.expect("read"),
            0,
            "rows are per table and id"
        );
        assert_eq!(
            b.bump_many(1, vec![0, 2], quiet()).await,
            vec![(0, 1), (2, 3)]
        );
        assert_eq!(
            a.read_many(1, vec![2, 0, 1]).await.expect("read"),
            vec![3, 1, 0]
        );
    }

    /// A failing source fails every worker's reads, and only its reads, until it is set right
    /// (the controller's flag, seen by another handle on the run's directory).
    #[tokio::test]
    async fn a_failing_source_fails_every_handles_reads_and_only_reads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let controller = Source::create(dir.path(), 1, 2).expect("create");
        let worker = Source::open(dir.path());
        controller.set(Trouble::Failing, true).expect("failing");
        assert!(worker.read(0, 1).await.is_err(), "reads fail");
        assert!(
            worker.read_many(0, vec![0, 1]).await.is_err(),
            "batch reads fail"
        );
        assert_eq!(
            worker.bump(0, 1, quiet()).await.expect("bump"),
            1,
            "writes do not"
        );
        controller.set(Trouble::Failing, false).expect("well again");
        assert_eq!(worker.read(0, 1).await.expect("read"), 1);
    }
}
