//! The stand-in email provider (`external.db`): the model's inbox, outside the store. Every
//! request is recorded durably (one `synchronous=EXTRA` transaction per batch of requests)
//! before `send` returns; a request carrying an idempotency key the provider received before
//! is recorded as a duplicate and not delivered again. A real provider must do the same for
//! a key: remember it durably, for at least as long as a consumer may retry, before it answers.

use super::{create_file, fail, open_file, write, ExternalError};
use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The provider file's version (`PRAGMA user_version`).
const VERSION: i64 = 1;

const SCHEMA: &str = "
    CREATE TABLE requests (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,       -- arrival order
        idem_key TEXT,                               -- the idempotency key, or NULL
        grp TEXT NOT NULL, part INTEGER NOT NULL, log_offset INTEGER NOT NULL,
        payload TEXT NOT NULL,
        delivered INTEGER NOT NULL);                 -- 1 delivered, 0 dropped: a repeated key
    CREATE INDEX requests_by_key ON requests (idem_key);
    CREATE INDEX requests_by_record ON requests (grp, part, log_offset);
";

const KEY_SEEN_SQL: &str = "SELECT 1 FROM requests WHERE idem_key = ?1 AND delivered = 1 LIMIT 1";
const INSERT_SQL: &str = "INSERT INTO requests (idem_key, grp, part, log_offset, payload, delivered) \
                          VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
const DELIVERIES_SQL: &str =
    "SELECT count(*) FROM requests WHERE grp = ?1 AND part = ?2 AND log_offset = ?3 AND delivered = 1";

/// One email to send: the record it is about, its body, and its idempotency key if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmailRequest {
    pub key: Option<String>,
    pub group: String,
    pub partition: u32,
    pub offset: u64,
    pub payload: String,
}

impl EmailRequest {
    /// The email of record `offset` of `partition` consumed by `group`, with the record's
    /// identity as its idempotency key when `keyed`.
    pub fn for_record(group: &str, partition: u32, offset: u64, delta: i64, keyed: bool) -> EmailRequest {
        EmailRequest {
            key: keyed.then(|| format!("{group}/{partition}/{offset}")),
            group: group.to_string(),
            partition,
            offset,
            payload: format!("record {offset} of partition {partition} (delta {delta}) consumed by group {group}"),
        }
    }
}

/// One request the provider received, in arrival order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Received {
    pub seq: u64,
    pub key: Option<String>,
    pub group: String,
    pub partition: u32,
    pub offset: u64,
    pub payload: String,
    /// False: a repeat of a key already received, recorded and dropped.
    pub delivered: bool,
}

pub struct EmailProvider {
    conn: Connection,
    path: PathBuf,
}

impl EmailProvider {
    /// Creates the provider's file (`consumer init`); one that exists is kept.
    pub fn create(path: &Path) -> Result<(), ExternalError> {
        create_file(path, SCHEMA, VERSION)
    }

    /// Opens the provider's file, which must exist.
    pub fn open(path: &Path) -> Result<EmailProvider, ExternalError> {
        Ok(EmailProvider { conn: open_file(path, VERSION)?, path: path.to_path_buf() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Receives `requests` in one durable transaction (a crash before it returns loses none of
    /// them or all) and returns, per request, how many times its record's email has been
    /// delivered now. A request whose key was delivered before is recorded, not delivered.
    pub fn send(&mut self, requests: &[EmailRequest]) -> Result<Vec<u64>, ExternalError> {
        let path = self.path.clone();
        write(&mut self.conn, &path, &mut || {}, |tx| {
            let mut delivered = Vec::with_capacity(requests.len());
            for request in requests {
                let repeat = match &request.key {
                    Some(key) => tx
                        .query_row(KEY_SEEN_SQL, params![key], |_| Ok(()))
                        .optional()
                        .map_err(fail(&path, KEY_SEEN_SQL))?
                        .is_some(),
                    None => false,
                };
                let EmailRequest { key, group, partition, offset, payload } = request;
                tx.execute(INSERT_SQL, params![key, group, partition, offset, payload, !repeat])
                    .map_err(fail(&path, INSERT_SQL))?;
                let count: u64 = tx
                    .query_row(DELIVERIES_SQL, params![group, partition, offset], |row| row.get(0))
                    .map_err(fail(&path, DELIVERIES_SQL))?;
                delivered.push(count);
            }
            Ok(delivered)
        })
    }

    /// How many times the email of record (`group`, `partition`, `offset`) was delivered.
    pub fn deliveries(&self, group: &str, partition: u32, offset: u64) -> Result<u64, ExternalError> {
        self.conn
            .query_row(DELIVERIES_SQL, params![group, partition, offset], |row| row.get(0))
            .map_err(fail(&self.path, DELIVERIES_SQL))
    }

    /// Every request received, in arrival order; only `group`'s if given.
    pub fn received(&self, group: Option<&str>) -> Result<Vec<Received>, ExternalError> {
        let sql = "SELECT seq, idem_key, grp, part, log_offset, payload, delivered FROM requests \
                   WHERE ?1 IS NULL OR grp = ?1 ORDER BY seq";
        let mut statement = self.conn.prepare(sql).map_err(fail(&self.path, sql))?;
        let rows = statement
            .query_map(params![group], |row| {
                Ok(Received {
                    seq: row.get(0)?,
                    key: row.get(1)?,
                    group: row.get(2)?,
                    partition: row.get(3)?,
                    offset: row.get(4)?,
                    payload: row.get(5)?,
                    delivered: row.get(6)?,
                })
            })
            .map_err(fail(&self.path, sql))?;
        rows.collect::<Result<_, _>>().map_err(fail(&self.path, sql))
    }
}
