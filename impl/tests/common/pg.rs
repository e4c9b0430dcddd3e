//! A throwaway PostgreSQL server for the tests: one private cluster per test binary, started on
//! first use and stopped when the test binary exits, and one fresh database per test.
//!
//! The cluster lives in a temporary directory and listens only on a Unix socket in that
//! directory (`listen_addresses = ''`), with `trust` authentication for the `postgres` role.
//! `initdb` refuses to run as root, so as root the directory is handed to the `postgres` OS
//! user and `initdb` and `pg_ctl` run through `runuser -u postgres --`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

#[path = "../../../tests/support/tools.rs"]
pub mod tools;

/// One running cluster.
pub struct Server {
    /// The directory of the cluster's data, log and socket.
    root: PathBuf,
    /// The directory holding `initdb` and `pg_ctl`.
    bin: PathBuf,
    /// Whether the tools run as the `postgres` OS user (the tests run as root).
    as_postgres: bool,
}

static SERVER: OnceLock<Server> = OnceLock::new();
static NEXT_DATABASE: AtomicU32 = AtomicU32::new(0);

/// The directory of `initdb` and `pg_ctl`: the newest `/usr/lib/postgresql/*/bin`, or else the
/// one of `initdb` on `PATH`.
fn find_binaries() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("pg_ctl").is_file()).then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
}

fn is_root() -> bool {
    // The tests have no libc binding; `id -u` says who they run as.
    Command::new("id").arg("-u").output().map(|output| output.stdout.starts_with(b"0\n")).unwrap_or(false)
}

impl Server {
    /// A command running one of the server's tools, as the `postgres` OS user when needed.
    fn tool(&self, name: &str) -> Command {
        let program = self.bin.join(name);
        if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        }
    }

    fn run(&self, what: &str, command: &mut Command) {
        let output = command.output().unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
        assert!(
            output.status.success(),
            "{what} failed ({:?}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn data(&self) -> PathBuf {
        self.root.join("data")
    }

    /// The socket directory, which is also the `host` of a connection URL.
    fn socket(&self) -> &Path {
        &self.root
    }

    fn start(bin: PathBuf) -> Server {
        // Kept past the TempDir's life: `stop_at_exit` removes it after stopping the server.
        let root = tempfile::Builder::new().prefix("pg").tempdir().expect("a temp dir for the cluster").keep();
        let as_postgres = is_root();
        let server = Server { root, bin, as_postgres };
        if as_postgres {
            server.run("chown", Command::new("chown").arg("postgres:").arg(&server.root));
        }
        let data = server.data();
        server.run(
            "initdb",
            server
                .tool("initdb")
                .args(["-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C", "-D"])
                .arg(&data),
        );
        // No TCP at all, the socket in the private directory, and no fsync: a crash the tests
        // make is a client's, never the server's, so durability across power loss is not
        // what they check.
        let settings = format!(
            "\nlisten_addresses = ''\nunix_socket_directories = '{}'\nfsync = off\n",
            server.socket().display()
        );
        let config = data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&config).unwrap_or_else(|e| panic!("read {}: {e}", config.display()));
        text.push_str(&settings);
        std::fs::write(&config, text).unwrap_or_else(|e| panic!("write {}: {e}", config.display()));
        let log = server.root.join("server.log");
        server
            .run("pg_ctl start", server.tool("pg_ctl").args(["-w", "-D"]).arg(&data).arg("-l").arg(&log).arg("start"));
        stop_at_exit();
        server
    }

    /// Stops the cluster at once (the tests' data is disposable) and removes its directory.
    fn stop(&self) {
        let _ = self.tool("pg_ctl").args(["-D"]).arg(self.data()).args(["-m", "immediate", "stop"]).output();
        let _ = std::fs::remove_dir_all(&self.root);
    }

    /// A URL for `database` on this cluster, through its socket.
    pub fn url(&self, database: &str) -> String {
        format!("postgres:///{database}?host={}&user=postgres", self.socket().display())
    }

    /// The process id of the cluster's postmaster (the first line of `postmaster.pid`), which a
    /// test stops (SIGSTOP) to play a server that accepts connections and never answers.
    pub fn postmaster_pid(&self) -> u32 {
        let path = self.data().join("postmaster.pid");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let first = text.lines().next().unwrap_or("");
        first.trim().parse().unwrap_or_else(|_| panic!("{}: '{first}' is not a process id", path.display()))
    }

    /// Creates a fresh, empty database and returns its URL.
    pub fn database(&self) -> String {
        let name = format!("t_{}_{}", std::process::id(), NEXT_DATABASE.fetch_add(1, Ordering::Relaxed));
        let mut admin = postgres::Client::connect(&self.url("postgres"), postgres::NoTls)
            .unwrap_or_else(|e| panic!("connect to the test cluster: {e}"));
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
        self.url(&name)
    }
}

extern "C" {
    fn atexit(callback: extern "C" fn()) -> i32;
}

extern "C" fn stop_server() {
    if let Some(server) = SERVER.get() {
        server.stop();
    }
}

/// Registers the cluster's stop with the C runtime: the test harness ends through `exit`,
/// which runs it whether the tests passed or failed (statics are never dropped).
fn stop_at_exit() {
    // SAFETY: `atexit` only records the function pointer; `stop_server` touches nothing that
    // `exit` has torn down (the static and the standard library's process spawning).
    let registered = unsafe { atexit(stop_server) };
    assert_eq!(registered, 0, "atexit could not register the cluster's stop");
}

/// The cluster of this test binary, started on first use; `None` when no server binary exists,
/// after printing `skipped: PostgreSQL not installed (bash scripts/setup.sh installs it)`. With
/// `CI` set a missing server is a failure, not a skip.
pub fn server() -> Option<&'static Server> {
    if let Some(server) = SERVER.get() {
        return Some(server);
    }
    let bin = find_binaries();
    if !tools::require("PostgreSQL", bin.is_some()) {
        return None;
    }
    Some(SERVER.get_or_init(|| Server::start(bin.expect("checked"))))
}

/// A fresh database's URL, or `None` (after printing why) when the tests cannot run here.
pub fn database() -> Option<String> {
    server().map(Server::database)
}
