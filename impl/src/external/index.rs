//! The index (`index.db`): the second store of the dual-write rows, which must hold the same
//! facts as the store (one per applied record). Writes are idempotent (a set), so a fact
//! written twice is held once: the relay may copy an outbox row again after a crash.

use super::{create_file, fail, open_file, write, ExternalError};
use crate::store::{Fact, InsideHook};
use rusqlite::{params, Connection};
use std::path::{Path, PathBuf};

/// The index file's version (`PRAGMA user_version`).
const VERSION: i64 = 1;

const SCHEMA: &str = "
    CREATE TABLE facts (
        grp TEXT NOT NULL, part INTEGER NOT NULL, log_offset INTEGER NOT NULL,
        PRIMARY KEY (grp, part, log_offset));
";

const INSERT_SQL: &str = "INSERT OR IGNORE INTO facts (grp, part, log_offset) VALUES (?1, ?2, ?3)";

pub struct Index {
    conn: Connection,
    path: PathBuf,
}

impl Index {
    /// Creates the index's file (`consumer init`); one that exists is kept.
    pub fn create(path: &Path) -> Result<(), ExternalError> {
        create_file(path, SCHEMA, VERSION)
    }

    /// Opens the index's file, which must exist.
    pub fn open(path: &Path) -> Result<Index, ExternalError> {
        Ok(Index { conn: open_file(path, VERSION)?, path: path.to_path_buf() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `facts` in one transaction (`synchronous=EXTRA`): the `inside` hook runs before its
    /// COMMIT (a crash there writes nothing). Returns how many facts were new.
    pub fn write(&mut self, facts: &[Fact], inside: InsideHook<'_>) -> Result<u64, ExternalError> {
        let path = self.path.clone();
        write(&mut self.conn, &path, inside, |tx| {
            let mut new = 0;
            for Fact { group, partition, offset } in facts {
                new +=
                    tx.execute(INSERT_SQL, params![group, partition, offset]).map_err(fail(&path, INSERT_SQL))? as u64;
            }
            Ok(new)
        })
    }

    /// The facts, sorted by group, partition and offset; only `group`'s if given.
    pub fn facts(&self, group: Option<&str>) -> Result<Vec<Fact>, ExternalError> {
        let sql = "SELECT grp, part, log_offset FROM facts WHERE ?1 IS NULL OR grp = ?1 ORDER BY grp, part, log_offset";
        let mut statement = self.conn.prepare(sql).map_err(fail(&self.path, sql))?;
        let rows = statement
            .query_map(params![group], |row| {
                Ok(Fact { group: row.get(0)?, partition: row.get(1)?, offset: row.get(2)? })
            })
            .map_err(fail(&self.path, sql))?;
        rows.collect::<Result<_, _>>().map_err(fail(&self.path, sql))
    }
}
