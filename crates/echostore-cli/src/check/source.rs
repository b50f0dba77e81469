//! The source of truth `echostore check` reads through: one small file per id in the run's
//! directory, holding the id's current version, shared by every worker process. A write moves
//! the version on under an exclusive file lock (the row lock of a real database); a load reads
//! it under a shared one. It lives outside Valkey so that a Valkey restart, which empties the
//! cache, leaves the truth where it was.
//!
//! It is not `echostore_testkit::Source`: that one counts and gates reads inside one process
//! (its counts and gate are in memory), while this one is the truth several OS processes share
//! and move on, with a version per id that the model judges every read against. The two share no
//! mechanism.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

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
    pub(crate) fn read(&self, table: u8, id: u32) -> io::Result<u64> {
        let mut file = File::open(self.row(table, id))?;
        file.lock_shared()?;
        let version = read_version(&mut file);
        file.unlock()?;
        version
    }

    /// Moves the id to its next version and returns it.
    pub(crate) fn bump(&self, table: u8, id: u32) -> io::Result<u64> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.row(table, id))?;
        file.lock()?;
        let next = read_version(&mut file).and_then(|v| {
            let next = v + 1;
            file.seek(SeekFrom::Start(0))?;
            file.write_all(&next.to_le_bytes())?;
            Ok(next)
        });
        file.unlock()?;
        next
    }

    fn row(&self, table: u8, id: u32) -> PathBuf {
        self.dir.join(format!("row-{table}-{id}"))
    }
}

fn read_version(file: &mut File) -> io::Result<u64> {
    let mut bytes = [0u8; 8];
    file.read_exact(&mut bytes)?;
    Ok(u64::from_le_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows start at 0, move on by one per bump, and two handles on one directory see one row.
    #[test]
    fn bumps_are_seen_by_every_handle() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = Source::create(dir.path(), 2, 3).expect("create");
        let b = Source::open(dir.path());
        assert_eq!(a.read(1, 2).expect("read"), 0);
        assert_eq!(a.bump(1, 2).expect("bump"), 1);
        assert_eq!(b.bump(1, 2).expect("bump"), 2);
        assert_eq!(a.read(1, 2).expect("read"), 2);
        assert_eq!(b.read(0, 2).expect("read"), 0, "rows are per table and id");
    }
}
