//! `consumer --help` and `consumer SUB --help` of every subcommand against the snapshots in
//! `tests/help/consumer/`, each with one example (`tests/support/help_snapshots.rs`). After a
//! deliberate change of a help text: `HELP_SNAPSHOTS=overwrite cargo test -p consumer --test help`.

#[path = "../../tests/support/help_snapshots.rs"]
mod help_snapshots;

#[test]
fn every_help_matches_its_snapshot_and_has_one_example() {
    help_snapshots::check_help_snapshots("consumer", "consumer", env!("CARGO_BIN_EXE_consumer"), &[], &[]);
}

/// The man pages in `docs/man/` are what `consumer man` writes, and `consumer completions SHELL`
/// names every command (`tests/support/help_snapshots.rs`).
#[test]
fn the_man_pages_and_completions_cover_every_command() {
    help_snapshots::check_man_pages_and_completions("consumer", "consumer", env!("CARGO_BIN_EXE_consumer"), &[]);
}
