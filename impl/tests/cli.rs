//! Bad input to the `consumer` command line: every rejection exits 2 with an `error:` line,
//! prints nothing on stdout and leaves the data directory byte for byte as it was. A damaged
//! log is not bad input but a refusal to protect data (exit 4): `loss.rs`.

mod common;

use common::readme_bad_input::readme_bad_input_rows;
use common::{describe, run_bad_input_row, snapshot, stderr, stdout, DataDir, FAILED};
use std::path::Path;
use std::process::Command;

/// The data directory a bad-input case runs against.
#[derive(Clone, Copy, Debug)]
enum Setup {
    /// Initialised, with five records of +5 in partition 0.
    FiveRecords,
    /// A path nobody ran `init` on.
    Uninitialised,
    /// Five records, and the test holds `BEGIN IMMEDIATE` on the store for the whole run.
    Locked,
    /// Initialised, then its log directory removed: a store without its log.
    StoreWithoutLog,
    /// No log; `store.db` is someone else's SQLite database: one table, version 0.
    ForeignTable,
    /// No log; `store.db` is an SQLite database with no table and a schema version (7).
    ForeignVersion,
    /// No store; `log/partition-0.log` is a symbolic link to itself, which no one can stat
    /// (`ELOOP`): an I/O error that is not a missing file.
    LoopedPartitionFile,
}

struct BadInput {
    name: &'static str,
    setup: Setup,
    /// The subcommand and its arguments; `--dir` is added after the subcommand.
    args: &'static [&'static str],
    /// Texts the error line must contain; `{dir}` stands for the data directory.
    expected: &'static [&'static str],
    /// Clap's own rejections add a usage hint after the error line (the model's CLI tests
    /// allow the same); the consumer's own errors are exactly one line.
    from_clap: bool,
}

/// Builds the case's data directory.
fn prepare(case: &str, setup: Setup) -> DataDir {
    match setup {
        Setup::Uninitialised => DataDir::uninitialised(case),
        Setup::FiveRecords | Setup::Locked => DataDir::with_records(case, 5, 5),
        Setup::StoreWithoutLog => {
            let dir = DataDir::with_records(case, 5, 5);
            std::fs::remove_dir_all(dir.log_dir()).unwrap_or_else(|e| panic!("case '{case}': remove the log: {e}"));
            dir
        }
        Setup::ForeignTable => foreign_database(case, |conn| conn.execute_batch("CREATE TABLE notes (body TEXT)")),
        Setup::ForeignVersion => foreign_database(case, |conn| conn.pragma_update(None, "user_version", 7)),
        Setup::LoopedPartitionFile => {
            let dir = DataDir::uninitialised(case);
            let file = dir.log_file(0);
            std::fs::create_dir_all(dir.log_dir()).unwrap_or_else(|e| panic!("case '{case}': create log/: {e}"));
            std::os::unix::fs::symlink(&file, &file).unwrap_or_else(|e| panic!("case '{case}': the link: {e}"));
            dir
        }
    }
}

/// An uninitialised directory whose `store.db` is an SQLite database `fill` made.
fn foreign_database(case: &str, fill: impl FnOnce(&rusqlite::Connection) -> rusqlite::Result<()>) -> DataDir {
    let dir = DataDir::uninitialised(case);
    std::fs::create_dir(&dir.path).unwrap_or_else(|e| panic!("case '{case}': create the directory: {e}"));
    let conn =
        rusqlite::Connection::open(dir.store_path()).unwrap_or_else(|e| panic!("case '{case}': create store.db: {e}"));
    fill(&conn).unwrap_or_else(|e| panic!("case '{case}': fill store.db: {e}"));
    dir
}

/// For `Setup::Locked`, a connection holding the store's write lock until it is dropped. It is
/// taken after the snapshot: closing any other descriptor of store.db in this process would
/// release SQLite's POSIX lock.
fn lock(case: &str, setup: Setup, dir: &DataDir) -> Option<rusqlite::Connection> {
    let Setup::Locked = setup else { return None };
    let conn =
        rusqlite::Connection::open(dir.store_path()).unwrap_or_else(|e| panic!("case '{case}': open the store: {e}"));
    conn.execute_batch("BEGIN IMMEDIATE").unwrap_or_else(|e| panic!("case '{case}': take the write lock: {e}"));
    Some(conn)
}

fn run_bad_input(case: &BadInput) {
    let name = case.name;
    let dir = prepare(name, case.setup);
    let before = snapshot(&dir.path);
    let held = lock(name, case.setup, &dir);
    let (subcommand, args) = case.args.split_first().expect("a case names a subcommand");
    let output = dir.run(subcommand, args);
    drop(held);

    let errors = stderr(&output);
    assert_eq!(output.status.code(), Some(FAILED), "case '{name}'\n{}", describe(&output));
    assert_eq!(stdout(&output), "", "case '{name}': a rejected command prints nothing on stdout");
    let first = errors.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("error: "),
        "case '{name}': the first stderr line is not an error\n{}",
        describe(&output)
    );
    for expected in case.expected {
        let expected = expected.replace("{dir}", &dir.path.display().to_string());
        assert!(first.contains(&expected), "case '{name}': '{first}' lacks '{expected}'");
    }
    if !case.from_clap {
        assert_eq!(errors.lines().count(), 1, "case '{name}': the error must be one line\n{}", describe(&output));
        // The library's errors include their cause's message and return the cause from
        // `source()` too: the line shows each cause once.
        let parts: Vec<&str> = first.split(": ").collect();
        assert!(!parts.windows(2).any(|pair| pair[0] == pair[1]), "case '{name}': a cause repeated in '{first}'");
    }
    assert!(
        snapshot(&dir.path) == before,
        "case '{name}': the rejected command changed files under {}",
        dir.path.display()
    );
}

#[test]
fn bad_input_exits_2_with_one_error_line_and_changes_nothing() {
    let consume: &[&str] = &["consume", "--group", "g", "--strategy", "atomic"];
    let cases = [
        BadInput {
            name: "unknown strategy",
            setup: Setup::FiveRecords,
            args: &["consume", "--group", "g", "--strategy", "exactly-once"],
            expected: &["unknown strategy 'exactly-once'"],
            from_clap: true,
        },
        BadInput {
            name: "a crash point that is not STEP:WHEN",
            setup: Setup::FiveRecords,
            args: &["consume", "--group", "g", "--strategy", "atomic", "--crash-at", "nonsense"],
            expected: &["crash point 'nonsense' is not STEP:WHEN[@OFFSET]"],
            from_clap: true,
        },
        BadInput {
            name: "a crash inside fetch, which has no transaction",
            setup: Setup::FiveRecords,
            args: &["consume", "--group", "g", "--strategy", "atomic", "--crash-at", "fetch:inside"],
            expected: &["fetch writes nothing, so it has no inside"],
            from_clap: true,
        },
        BadInput {
            name: "a batch of zero records",
            setup: Setup::FiveRecords,
            args: &["consume", "--group", "g", "--strategy", "atomic", "--batch", "0"],
            expected: &["invalid value '0' for '--batch <BATCH>': 0 is not in 1..=10000"],
            from_clap: true,
        },
        BadInput {
            name: "consuming a directory never initialised",
            setup: Setup::Uninitialised,
            args: consume,
            expected: &["{dir}/store.db", "is not initialised"],
            from_clap: false,
        },
        BadInput {
            name: "init twice on the same directory",
            setup: Setup::FiveRecords,
            args: &["init"],
            expected: &["{dir}/store.db", "exists already"],
            from_clap: false,
        },
        // `init` checks for a store before it creates anything: a log made first and then
        // refused at the store would be half an `init` (the snapshot's check catches it).
        BadInput {
            name: "init on a store whose log was removed",
            setup: Setup::StoreWithoutLog,
            args: &["init"],
            expected: &["{dir}/store.db", "exists already"],
            from_clap: false,
        },
        // Any table or any schema version makes a database taken (not only this schema's).
        BadInput {
            name: "init on another program's SQLite database",
            setup: Setup::ForeignTable,
            args: &["init"],
            expected: &["{dir}/store.db", "exists already"],
            from_clap: false,
        },
        BadInput {
            name: "init on an SQLite database with a schema version but no table",
            setup: Setup::ForeignVersion,
            args: &["init"],
            expected: &["{dir}/store.db", "exists already"],
            from_clap: false,
        },
        BadInput {
            name: "init on a log whose partition file cannot be reached",
            setup: Setup::LoopedPartitionFile,
            args: &["init"],
            expected: &["log I/O error on {dir}/log/partition-0.log: Too many levels of symbolic links"],
            from_clap: false,
        },
        BadInput {
            name: "a store locked by another writer past the busy timeout",
            setup: Setup::Locked,
            args: &["claim", "--group", "g", "--partition", "0", "--owner", "o1", "--busy-timeout", "0.3"],
            expected: &["{dir}/store.db", "is locked by another process"],
            from_clap: false,
        },
    ];
    for case in &cases {
        run_bad_input(case);
    }
}

#[test]
fn version_prints_the_package_version_and_exits_0() {
    let output = std::process::Command::new(common::BIN).arg("--version").output().expect("the consumer binary starts");
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(stdout(&output), format!("consumer {}\n", env!("CARGO_PKG_VERSION")));
}

/// Runs `consumer ARGS...` in `cwd` and asserts it succeeds.
fn run_in(cwd: &Path, args: &[&str]) {
    let mut command = Command::new(common::BIN);
    command.args(args).current_dir(cwd);
    let output = common::output_within(command, common::RUN_TIMEOUT);
    assert_eq!(output.status.code(), Some(0), "consumer {}\n{}", args.join(" "), describe(&output));
}

/// Rewrites byte 7 of `path` (the version digit of an 8-byte format header).
/// Rewrites the identity file at `path` as format version 2 writes it: `ONCELID1`, the same
/// id and partition count, and their crc32c (a flipped digit alone is damage, not a version).
fn write_version_2_identity(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    bytes[7] = b'1';
    let crc = crc32c::crc32c(&bytes[..20]);
    bytes[20..24].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// The data directories the consumer rows of docs/errors.md name (SQLite), made in `root` as that page
/// says; returns their names.
fn prepare_readme_dirs(root: &Path) -> Vec<&'static str> {
    let dirs = ["data", "overflow", "killed-init", "locked-log", "old-schema", "old-log", "old-partition"];
    for dir in dirs {
        run_in(root, &["init", "--dir", dir]);
    }
    run_in(root, &["append", "--dir", "data", "--delta", "5"]);
    run_in(root, &["append", "--dir", "overflow", "--delta", "9223372036854775807", "--count", "2"]);
    // What a kill inside `init` before the store's COMMIT leaves: the file, nothing committed.
    std::fs::write(root.join("killed-init/store.db"), b"").expect("empty killed-init/store.db");
    let old = rusqlite::Connection::open(root.join("old-schema/store.db")).expect("open old-schema/store.db");
    old.pragma_update(None, "user_version", 4).expect("set user_version 4");
    write_version_2_identity(&root.join("old-log/log/identity"));
    // An empty partition file of format version 2: its 8-byte header alone.
    let old_partition = root.join("old-partition/log/partition-0.log");
    std::fs::write(&old_partition, b"ONCELOG2").expect("write old-partition's partition file");
    // A store file that is not SQLite, too short for SQLite's header (SQLite took it for an
    // empty database, and `init` overwrote it), and a regular file named as --dir.
    std::fs::create_dir(root.join("not-sqlite")).expect("create not-sqlite/");
    std::fs::write(root.join("not-sqlite/store.db"), b"x").expect("write not-sqlite/store.db");
    std::fs::write(root.join("a-file"), b"not a directory").expect("write a-file");
    // One byte short of SQLite's header, beginning as it does.
    let mut short = b"SQLite format 3\0".to_vec();
    short.resize(99, 0);
    std::fs::create_dir(root.join("short-sqlite")).expect("create short-sqlite/");
    std::fs::write(root.join("short-sqlite/store.db"), &short).expect("write short-sqlite/store.db");
    dirs.to_vec()
}

/// Every `consumer` row of the bad-input table of docs/errors.md but the PostgreSQL ones (`$PG`: in
/// `hardening_pg.rs`), as a child process in a directory holding the data directories it
/// names: the row's exit code, the row's line and nothing else on stderr, nothing on stdout.
#[test]
fn every_bad_input_row_of_the_readme_gets_its_one_line() {
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let root = scratch.path();
    let dirs = prepare_readme_dirs(root);
    let rows: Vec<_> = readme_bad_input_rows("consumer").into_iter().filter(|row| !row.is_postgres()).collect();
    assert!(rows.len() >= 30, "the bad-input table of docs/errors.md has {} consumer rows", rows.len());
    for dir in dirs {
        assert!(rows.iter().any(|row| row.dir() == Some(dir)), "no row of docs/errors.md runs on {dir}");
    }
    // The log's writer lock, held by another "writer" while the rows run.
    let lock = std::fs::File::create(root.join("locked-log/log/writer.lock")).expect("open the writer lock");
    lock.lock().expect("take the writer lock");
    for row in &rows {
        run_bad_input_row(row, root, &[]);
    }
    drop(lock);
    assert!(!root.join("fresh").exists(), "a refused command created fresh/");
    // The refused `init`s left what they found as it was.
    assert_eq!(std::fs::read(root.join("not-sqlite/store.db")).expect("read not-sqlite/store.db"), b"x");
    assert!(!root.join("not-sqlite/log").exists(), "a refused init created not-sqlite/log");
    assert_eq!(std::fs::read(root.join("short-sqlite/store.db")).expect("read short-sqlite/store.db").len(), 99);
}
