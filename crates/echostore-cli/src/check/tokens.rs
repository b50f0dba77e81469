//! The session tokens the check carries from the process that wrote to the processes that read,
//! as a service carries one in a cookie or a header: a put on a table ordered by Valkey's clock
//! (no `.version_by`) returns a *written* version (`w…`, `Table::put_versioned`), and a read in
//! any process made `at_least` that token must see the put or something newer.
//!
//! One file per id in the run's directory holds the source version and the token of a recent
//! put of it, replaced whole (written beside, then renamed over), so a reader finds one put's
//! pair or the one before it, never half of one. A put landing out of order leaves an older
//! pair: a read then asks for less, never for a version no write made.

use std::path::{Path, PathBuf};

use echostore::Version;

use super::source::blocking;

/// The tokens of one run.
#[derive(Debug, Clone)]
pub(crate) struct Tokens {
    dir: PathBuf,
}

impl Tokens {
    /// The tokens kept in `dir`, the run's directory.
    pub(crate) fn in_dir(dir: &Path) -> Tokens {
        Tokens {
            dir: dir.to_owned(),
        }
    }

    /// Keeps `written`, the token of a put of `version` of `id`, for the readers.
    pub(crate) async fn keep(&self, table: u8, id: u32, version: u64, written: Version) {
        let (file, beside) = (self.file(table, id), self.beside(table, id));
        let pair = format!("{version} {written}");
        // A token that could not be kept is one fewer read made `at_least`: nothing to record.
        let _ = blocking(move || {
            std::fs::write(&beside, pair)?;
            std::fs::rename(&beside, &file)
        })
        .await;
    }

    /// The source version and token of a recent put of `id`, if any was kept.
    pub(crate) async fn recent(&self, table: u8, id: u32) -> Option<(u64, Version)> {
        let file = self.file(table, id);
        let pair = blocking(move || std::fs::read_to_string(file)).await.ok()?;
        let (version, token) = pair.split_once(' ')?;
        Some((version.parse().ok()?, token.parse().ok()?))
    }

    fn file(&self, table: u8, id: u32) -> PathBuf {
        self.dir.join(format!("token-{table}-{id}"))
    }

    /// Where a new pair is written before it is renamed over [`Self::file`]: one per process,
    /// so two processes' puts of one id never write the same file.
    fn beside(&self, table: u8, id: u32) -> PathBuf {
        let process = std::process::id();
        self.dir.join(format!(".token-{table}-{id}-{process}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kept token is read back with its version, by any handle on the directory; the last
    /// kept wins; an id never put has none.
    #[tokio::test]
    async fn a_kept_token_is_read_back_by_every_handle() {
        let dir = tempfile::tempdir().expect("a directory");
        let (writer, reader) = (Tokens::in_dir(dir.path()), Tokens::in_dir(dir.path()));
        assert_eq!(reader.recent(2, 7).await, None);
        let first: Version = "w18c3b2a1f00".parse().expect("a token");
        let second: Version = "w18c3b2a1f07".parse().expect("a token");
        writer.keep(2, 7, 4, first).await;
        assert_eq!(reader.recent(2, 7).await, Some((4, first)));
        writer.keep(2, 7, 9, second).await;
        assert_eq!(reader.recent(2, 7).await, Some((9, second)));
        assert_eq!(reader.recent(2, 8).await, None);
    }
}
