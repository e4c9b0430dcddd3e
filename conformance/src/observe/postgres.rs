//! `kafka app --postgres`: the spec's queries on the run's PostgreSQL database, in a read-only
//! transaction, with the same checks as on SQLite (one `:group` parameter, the columns by
//! name, integers where integers are read, the row counts in bounds).

use super::{one_line, AppObserved, Kind, ObserveError, ObserveSpec, Query, Row, Values};
use postgres::types::Type;

/// How long a connection to the server may take.
const CONNECT_TIMEOUT_S: u64 = 10;

impl ObserveSpec {
    /// `kafka app`'s observation of a PostgreSQL store: `group`'s total and (where the spec
    /// reads them) the ids applied in order, from the database at `url`.
    pub fn observe_app_postgres(&self, url: &str, group: &str) -> Result<AppObserved, ObserveError> {
        let fail = |problem: String| self.error(None, None, problem);
        let mut config: postgres::Config =
            url.parse().map_err(|error: postgres::Error| fail(format!("the database URL: {error}")))?;
        config.connect_timeout(std::time::Duration::from_secs(CONNECT_TIMEOUT_S));
        let mut client = config
            .connect(postgres::NoTls)
            .map_err(|error| fail(format!("cannot connect to the run's database: {}", one_line(&error.to_string()))))?;
        let mut transaction = client
            .build_transaction()
            .read_only(true)
            .start()
            .map_err(|error| fail(format!("cannot begin a read-only transaction: {error}")))?;
        let total_sql = self.queries.get(&Query::Total).expect("require_app checked it");
        let rows = self.run_postgres(&mut transaction, Query::Total, total_sql, group)?;
        let read = Values { spec: self, query: Query::Total, group, partitions: 0 };
        let total = read.int(&rows[0], "total")?;
        let applied = match self.queries.get(&Query::Applied) {
            None => None,
            Some(sql) => {
                let rows = self.run_postgres(&mut transaction, Query::Applied, sql, group)?;
                let read = Values { spec: self, query: Query::Applied, group, partitions: 0 };
                Some(rows.iter().map(|row| read.int(row, "id")).collect::<Result<_, _>>()?)
            }
        };
        Ok(AppObserved { total, applied })
    }

    /// One query for `group`, `:group` bound as PostgreSQL's `$1`.
    fn run_postgres(
        &self,
        transaction: &mut postgres::Transaction<'_>,
        query: Query,
        sql: &str,
        group: &str,
    ) -> Result<Vec<Row>, ObserveError> {
        let fail = |column: Option<&'static str>, problem: String| self.error(Some(query), column, problem);
        let Some(bound) = bind_group(sql) else {
            let problem = format!("{sql}: must take exactly one parameter, :group (every query reads one group)");
            return Err(fail(None, problem));
        };
        let statement = transaction
            .prepare_typed(&bound, &[Type::TEXT])
            .map_err(|error| fail(None, format!("{sql}: {}", database_message(&error))))?;
        let names: Vec<String> = statement.columns().iter().map(|column| column.name().to_string()).collect();
        let columns = query.columns();
        for name in &names {
            if !columns.iter().any(|column| column.name == name) {
                let expected: Vec<&str> = columns.iter().map(|column| column.name).collect();
                let problem = format!("returns a column '{name}' (the columns are {})", expected.join(", "));
                return Err(fail(None, problem));
            }
        }
        for column in columns.iter().filter(|column| !column.optional) {
            if !names.iter().any(|name| name == column.name) {
                let problem = format!("not returned (the query returns {})", names.join(", "));
                return Err(fail(Some(column.name), problem));
            }
        }
        let (least, most) = query.rows(0);
        let found = transaction
            .query(&statement, &[&group])
            .map_err(|error| fail(None, format!("{sql}: {}", database_message(&error))))?;
        if found.len() > most {
            return Err(fail(None, format!("more than {most} rows for {group}")));
        }
        let mut rows = Vec::new();
        for result in &found {
            let mut row = Row::default();
            for (index, name) in names.iter().enumerate() {
                let column = columns.iter().find(|column| column.name == name).expect("checked above");
                let kind = result.columns()[index].type_().clone();
                match column.kind {
                    Kind::Integer | Kind::IntegerOrNull => {
                        let value = integer(result, index, &kind).map_err(|problem| {
                            fail(Some(column.name), format!("{problem} for {group}, where an integer is expected"))
                        })?;
                        if value.is_none() && column.kind == Kind::Integer {
                            return Err(fail(Some(column.name), format!("NULL for {group}")));
                        }
                        row.integers.insert(column.name, value);
                    }
                    Kind::Text => {
                        let text: Option<String> = result.try_get(index).map_err(|_| {
                            fail(Some(column.name), format!("{kind} for {group}, where text is expected"))
                        })?;
                        row.owner = text;
                    }
                }
            }
            rows.push(row);
        }
        if rows.len() < least {
            return Err(fail(None, format!("{} rows for {group}, where {least} are expected", rows.len())));
        }
        Ok(rows)
    }
}

/// The query with its one `:group` made `$1`; `None` when it has none, or another
/// `:name` parameter (a `::type` cast is not one).
fn bind_group(sql: &str) -> Option<String> {
    let bytes = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let (mut index, mut groups) = (0, 0);
    while index < bytes.len() {
        let byte = bytes[index];
        let cast = byte == b':' && (bytes.get(index + 1) == Some(&b':') || index > 0 && bytes[index - 1] == b':');
        if byte == b':' && !cast {
            let name_end = (index + 1..bytes.len())
                .find(|&at| !(bytes[at].is_ascii_alphanumeric() || bytes[at] == b'_'))
                .unwrap_or(bytes.len());
            if &sql[index + 1..name_end] != "group" {
                return None;
            }
            out.push_str("$1");
            groups += 1;
            index = name_end;
            continue;
        }
        out.push(char::from(byte));
        index += 1;
        if !byte.is_ascii() {
            // Copy the rest of a multi-byte character as it is.
            let start = index - 1;
            let end = (index..=bytes.len()).find(|&at| sql.is_char_boundary(at)).unwrap_or(bytes.len());
            out.pop();
            out.push_str(&sql[start..end]);
            index = end;
        }
    }
    (groups >= 1).then_some(out)
}

/// An integer column's value, of any of PostgreSQL's integer types; the type's name otherwise.
fn integer(row: &postgres::Row, index: usize, kind: &Type) -> Result<Option<i64>, String> {
    let read = |error: postgres::Error| error.to_string();
    match *kind {
        Type::INT2 => row.try_get::<_, Option<i16>>(index).map(|v| v.map(i64::from)).map_err(read),
        Type::INT4 => row.try_get::<_, Option<i32>>(index).map(|v| v.map(i64::from)).map_err(read),
        Type::INT8 => row.try_get::<_, Option<i64>>(index).map_err(read),
        _ => Err(format!("a value of type {kind}")),
    }
}

/// The server's own message for a database error (its SQLSTATE's words), else the client's.
fn database_message(error: &postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => db.message().to_string(),
        None => one_line(&error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::bind_group;
    use crate::observe::{ObserveSpec, Store};

    /// The store a spec names, or the one line refusing it: a table of (the spec's head, the
    /// store or the words of the refusal).
    #[test]
    fn a_spec_names_its_store_and_a_file_only_for_sqlite() {
        let queries = "[queries]\ntotal = \"SELECT total FROM t WHERE g = :group\"\n";
        let table: [(&str, Result<Store, &str>); 5] = [
            ("version = 1\ndatabase = \"app.db\"\n", Ok(Store::Sqlite)),
            ("version = 1\nstore = \"postgres\"\n", Ok(Store::Postgres)),
            ("version = 1\n", Err("no database: a SQLite store names its file")),
            (
                "version = 1\nstore = \"postgres\"\ndatabase = \"app.db\"\n",
                Err("the run creates the database, give no file"),
            ),
            ("version = 1\nstore = \"mysql\"\n", Err("store 'mysql' (the stores are sqlite, postgres)")),
        ];
        let dir = tempfile::tempdir().expect("a temporary directory");
        for (head, expected) in table {
            let path = dir.path().join("spec.toml");
            std::fs::write(&path, format!("{head}{queries}")).expect("the spec written");
            match (ObserveSpec::load(&path), expected) {
                (Ok(spec), Ok(store)) => assert_eq!(spec.store, store, "{head}"),
                (Err(error), Err(words)) => assert!(error.to_string().contains(words), "{head}: {error}"),
                (outcome, expected) => panic!("{head}: {:?}, expected {expected:?}", outcome.map(|spec| spec.store)),
            }
        }
    }

    /// `:group` becomes `$1` wherever it is; a cast is left alone; another parameter, or
    /// none, is refused.
    #[test]
    fn the_group_parameter_is_bound_as_postgres_numbers_it() {
        let table = [
            ("SELECT total FROM totals WHERE grp = :group", Some("SELECT total FROM totals WHERE grp = $1")),
            (
                "SELECT id::bigint FROM a WHERE g = :group ORDER BY seq",
                Some("SELECT id::bigint FROM a WHERE g = $1 ORDER BY seq"),
            ),
            (
                "SELECT 'é' AS x, total FROM t WHERE g = :group OR h = :group",
                Some("SELECT 'é' AS x, total FROM t WHERE g = $1 OR h = $1"),
            ),
            ("SELECT total FROM totals", None),
            ("SELECT total FROM totals WHERE grp = :grp", None),
            ("SELECT total FROM totals WHERE grp = :group AND x = :other", None),
        ];
        for (sql, expected) in table {
            assert_eq!(bind_group(sql).as_deref(), expected, "{sql}");
        }
    }
}
