//! `--postgres`: the run's own database on the user's PostgreSQL server, made fresh for each
//! run (a shrink's candidates each get theirs) and kept after it, named in the report.

use std::sync::atomic::{AtomicU32, Ordering};

/// How long a connection to the server may take.
const CONNECT_TIMEOUT_S: u64 = 10;

/// The most names tried when earlier ones exist (a process id reused, a database kept).
const NAMES_MAX: u32 = 100;

/// The runs of this process so far, which number their databases.
static RUNS: AtomicU32 = AtomicU32::new(0);

/// The database made for one run: its name and the URL the instances get.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Database {
    pub name: String,
    pub url: String,
}

/// Makes a new database on the server `admin_url` names; its URL is `admin_url` with the
/// database part replaced. Errors are one line naming the URL's problem or the server's.
pub fn create(admin_url: &str) -> Result<Database, String> {
    // Checked first, so that a URL the instances could not be given is refused at once.
    with_database(admin_url, "x").ok_or_else(|| {
        format!("--postgres {admin_url}: not a postgres:// or postgresql:// URL (the instances get it with the database changed)")
    })?;
    let mut config: postgres::Config =
        admin_url.parse().map_err(|error: postgres::Error| format!("--postgres {admin_url}: {error}"))?;
    config.connect_timeout(std::time::Duration::from_secs(CONNECT_TIMEOUT_S));
    let mut client = config
        .connect(postgres::NoTls)
        .map_err(|error| format!("--postgres {admin_url}: cannot connect: {}", message(&error)))?;
    for _ in 0..NAMES_MAX {
        let name = format!("onceproof_app_{}_{}", std::process::id(), RUNS.fetch_add(1, Ordering::Relaxed) + 1);
        match client.batch_execute(&format!("CREATE DATABASE {name}")) {
            Ok(()) => {
                let url = with_database(admin_url, &name).expect("checked above");
                return Ok(Database { name, url });
            }
            Err(error) if error.code() == Some(&postgres::error::SqlState::DUPLICATE_DATABASE) => continue,
            Err(error) => return Err(format!("--postgres {admin_url}: CREATE DATABASE {name}: {}", message(&error))),
        }
    }
    Err(format!("--postgres {admin_url}: {NAMES_MAX} databases onceproof_app_{}_N exist already", std::process::id()))
}

/// `url` with its database (the path) made `database`, its parameters kept; `None` when it is
/// not a postgres:// or postgresql:// URL.
pub fn with_database(url: &str, database: &str) -> Option<String> {
    let scheme = ["postgres://", "postgresql://"].into_iter().find(|scheme| url.starts_with(scheme))?;
    let rest = &url[scheme.len()..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let query = tail.find('?').map_or("", |at| &tail[at..]);
    Some(format!("{scheme}{authority}/{database}{query}"))
}

fn message(error: &postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => db.message().to_string(),
        None => error.to_string().lines().map(str::trim).collect::<Vec<_>>().join(" "),
    }
}

#[cfg(test)]
mod tests {
    use super::with_database;

    /// The database part is replaced, the authority and the parameters kept; other URLs refused.
    #[test]
    fn a_url_gets_the_runs_database_with_everything_else_kept() {
        let table = [
            ("postgres:///postgres?host=/tmp/pg&user=postgres", Some("postgres:///run1?host=/tmp/pg&user=postgres")),
            ("postgresql://u:p@127.0.0.1:5432/db", Some("postgresql://u:p@127.0.0.1:5432/run1")),
            ("postgres://localhost", Some("postgres://localhost/run1")),
            ("postgres://localhost?sslmode=disable", Some("postgres://localhost/run1?sslmode=disable")),
            ("host=/tmp dbname=x", None),
            ("mysql://localhost/db", None),
        ];
        for (url, expected) in table {
            assert_eq!(with_database(url, "run1").as_deref(), expected, "{url}");
        }
    }
}
