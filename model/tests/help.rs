//! `model --help` and `model SUB --help` of every subcommand against the snapshots in
//! `tests/help/model/`, each with one example (`tests/support/help_snapshots.rs`). After a
//! deliberate change of a help text: `HELP_SNAPSHOTS=overwrite cargo test -p model --test help`.

#[path = "../../tests/support/help_snapshots.rs"]
mod help_snapshots;

#[test]
fn every_help_matches_its_snapshot_and_has_one_example() {
    help_snapshots::check_help_snapshots("model", "model", env!("CARGO_BIN_EXE_model"), &[], &[]);
}

/// The man pages in `docs/man/` are what `model man` writes, and `model completions SHELL`
/// names every command (`tests/support/help_snapshots.rs`).
#[test]
fn the_man_pages_and_completions_cover_every_command() {
    help_snapshots::check_man_pages_and_completions("model", "model", env!("CARGO_BIN_EXE_model"), &[]);
}
