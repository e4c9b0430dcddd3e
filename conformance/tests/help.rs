//! `conformance --help` and `conformance SUB --help` of every subcommand against the snapshots in
//! `tests/help/conformance/`, each with one example, and of the subcommands of `kafka` when built
//! with its feature (`tests/support/help_snapshots.rs`). After a
//! deliberate change of a help text: `HELP_SNAPSHOTS=overwrite cargo test -p conformance --test help`.

#[path = "../../tests/support/help_snapshots.rs"]
mod help_snapshots;

/// Subcommands the `kafka` feature adds: their snapshots and pages are checked by a build with
/// it (CI's) and kept by one without (README's).
const OPTIONAL: &[&str] = &["kafka"];

#[test]
fn every_help_matches_its_snapshot_and_has_one_example() {
    help_snapshots::check_help_snapshots(
        "conformance",
        "conformance",
        env!("CARGO_BIN_EXE_conformance"),
        &["worker", "serve", "cross-check"],
        OPTIONAL,
    );
}

/// The man pages in `docs/man/` are what `conformance man` writes, and `conformance completions SHELL`
/// names every command (`tests/support/help_snapshots.rs`).
#[test]
fn the_man_pages_and_completions_cover_every_command() {
    help_snapshots::check_man_pages_and_completions(
        "conformance",
        "conformance",
        env!("CARGO_BIN_EXE_conformance"),
        OPTIONAL,
    );
}
