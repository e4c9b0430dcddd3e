//! The system tools a few test families need besides cargo (PostgreSQL's server binaries, SPIN,
//! Chromium with chromedriver, Python 3, Perl's DBD::SQLite), shared by those families' test
//! binaries (each includes this file with `#[path]`). `bash scripts/setup.sh` installs them,
//! and CI runs it first: with `CI` set a missing tool fails the test that needs it; without, the
//! test prints `skipped: TOOL not installed (bash scripts/setup.sh installs it)` on stderr and
//! returns without asserting anything.
#![allow(dead_code)] // Each test binary uses the part it needs.

use std::process::{Command, Stdio};

/// The line a test prints on stderr when `tool` is missing outside CI.
pub fn skipped(tool: &str) -> String {
    format!("skipped: {tool} not installed (bash scripts/setup.sh installs it)")
}

/// Whether a test that needs `tool` may run: `true` when `installed`. Otherwise, with `CI` set,
/// it fails (CI installs every tool, so a missing one is a broken set-up, not a skip); without,
/// it prints [`skipped`] on stderr and returns `false`, and the test returns.
pub fn require(tool: &str, installed: bool) -> bool {
    if !installed {
        if std::env::var_os("CI").is_some() {
            panic!(
                "{tool} not installed, and CI must not skip the tests that need it (bash scripts/setup.sh installs it)"
            );
        }
        eprintln!("{}", skipped(tool));
    }
    installed
}

/// Whether `program ARGS` starts and exits 0 (its output discarded).
pub fn runs(program: &str, args: &[&str]) -> bool {
    let mut command = Command::new(program);
    command.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    command.status().is_ok_and(|status| status.success())
}

/// The real path of Python 3 (`sys.executable`: a version manager's `python3` may be a shell
/// script that runs a dozen processes before Python, which every process of a replay would pay
/// for), or `None` after [`require`] (a skip, or a failure under CI).
pub fn python3() -> Option<String> {
    interpreter("python3", "python3", &["-c", "import sys; print(sys.executable)"])
}

/// The real path of Perl with the modules the example of `examples/perl/` loads (DBI,
/// DBD::SQLite and JSON::PP: Debian's libdbd-sqlite3-perl and its dependencies), or `None`
/// after [`require`].
pub fn perl() -> Option<String> {
    interpreter("Perl's DBD::SQLite", "perl", &["-MDBI", "-MDBD::SQLite", "-MJSON::PP", "-e", "print $^X"])
}

/// What `program ARGS` prints (trimmed) when it exits 0; `None` after [`require`] for `tool`
/// when it cannot start or fails.
fn interpreter(tool: &str, program: &str, print_path: &[&str]) -> Option<String> {
    let output = Command::new(program).args(print_path).stdin(Stdio::null()).output();
    let path = output.ok().filter(|output| output.status.success()).map(|output| output.stdout);
    let path = path.map(|path| String::from_utf8(path).expect("a UTF-8 path").trim().to_string());
    require(tool, path.as_ref().is_some_and(|path| !path.is_empty())).then(|| path.expect("checked"))
}
