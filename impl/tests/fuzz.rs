//! Fuzzing of the parsers that face input, with proptest inside `cargo test`
//! (seeded, no persistence, a few seconds each in a debug build): the worker protocol's line
//! parser and the crash-point parser (`--crash-at`, the worker's `arm`). Whatever the input,
//! neither panics; an error is one line (every control character escaped, so a newline in the
//! input cannot split it); and what parses prints back as the same value. The log frame
//! decoder's fuzz is a unit test beside it (`src/log/frame.rs`), where its functions live.

use consumer::crash::CrashPoint;
use consumer::strategy::{Step, StepKind};
use consumer::worker::{parse_command, Command};
use proptest::prelude::*;
use proptest::test_runner::{RngAlgorithm, RngSeed};

fn deterministic(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        rng_algorithm: RngAlgorithm::ChaCha,
        rng_seed: RngSeed::Fixed(12),
        ..ProptestConfig::default()
    }
}

/// The words and separators of the grammars, and numbers at the edges of their types: random
/// strings alone almost never reach past the first check of a parser.
fn token() -> impl Strategy<Value = String> {
    let mut words: Vec<String> = StepKind::ALL.iter().map(|kind| kind.name().to_string()).collect();
    words.extend(
        [
            "assign",
            "arm",
            "quit",
            "state",
            "before",
            "inside",
            "after",
            " ",
            "  ",
            ":",
            "@",
            "\t",
            "\n",
            "\r",
            "\u{0}",
            "\u{7f}",
            "\u{2028}",
            "é",
            "0",
            "1",
            "-1",
            "+1",
            "4294967295",
            "4294967296",
            "18446744073709551615",
            "18446744073709551616",
            "1e3",
            "0x10",
        ]
        .map(str::to_string),
    );
    prop_oneof![4 => prop::sample::select(words), 1 => any::<String>()]
}

/// A number as the grammars see one: an edge of `u32` or `u64` (or past it), or any `u64`.
fn number() -> impl Strategy<Value = String> {
    let edges = ["0", "1", "4294967295", "4294967296", "18446744073709551615", "18446744073709551616", "-1"];
    prop_oneof![prop::sample::select(edges.to_vec()).prop_map(str::to_string), any::<u64>().prop_map(|n| n.to_string())]
}

/// A line of the protocol's shape: an `assign`, an `arm` or a step, its parts drawn from the
/// grammar and the number edges.
fn shaped() -> impl Strategy<Value = String> {
    let kind = prop::sample::select(StepKind::ALL.to_vec()).prop_map(StepKind::name);
    let when = prop::sample::select(vec!["before", "inside", "after", "during", ""]);
    prop_oneof![
        number().prop_map(|n| format!("assign {n}")),
        (kind.clone(), when, prop::option::of(number()))
            .prop_map(|(kind, when, at)| format!("arm {kind}:{when}{}", at.map_or(String::new(), |n| format!("@{n}")))),
        (kind, number(), number()).prop_map(|(kind, partition, offset)| format!("{kind} {partition} {offset}")),
    ]
}

/// `line` with `token` inserted at the character boundary `at` selects.
fn insert(line: String, at: prop::sample::Index, token: String) -> String {
    let boundaries: Vec<usize> = line.char_indices().map(|(i, _)| i).chain([line.len()]).collect();
    let at = boundaries[at.index(boundaries.len())];
    format!("{}{token}{}", &line[..at], &line[at..])
}

/// A line: of the protocol's shape, perhaps with a token inserted; built of tokens; or any
/// string at all.
fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => (shaped(), prop::option::of((any::<prop::sample::Index>(), token())))
            .prop_map(|(line, edit)| match edit {
                Some((at, token)) => insert(line, at, token),
                None => line,
            }),
        2 => prop::collection::vec(token(), 0..8).prop_map(|tokens| tokens.concat()),
        1 => any::<String>(),
    ]
}

/// An error message is one line: no line break, whatever the input held.
fn assert_one_line(input: &str, error: &str) {
    assert!(!error.contains(['\n', '\r']), "input {input:?}: the error {error:?} is not one line");
    assert!(!error.is_empty(), "input {input:?}: an empty error");
}

proptest! {
    #![proptest_config(deterministic(4000))]

    /// `parse_command` of any line: a command, or one line saying why not; a parsed step or
    /// crash point prints back as itself.
    #[test]
    fn the_worker_protocol_parser_never_panics_and_errs_in_one_line(input in line()) {
        match parse_command(&input) {
            Ok(Command::Quit) => prop_assert_eq!(input.trim(), "quit"),
            Ok(Command::State) => prop_assert_eq!(input.trim(), "state"),
            Ok(Command::Assign { partition }) => {
                let text = input.trim().strip_prefix("assign ").expect("an assign line");
                prop_assert_eq!(text.trim().parse::<u32>(), Ok(partition));
            }
            Ok(Command::Arm(point)) => prop_assert_eq!(point.to_string().parse::<CrashPoint>(), Ok(point)),
            Ok(Command::Step(step)) => prop_assert_eq!(step.to_string().parse::<Step>(), Ok(step)),
            Err(error) => assert_one_line(&input, &error),
        }
    }

    /// `CrashPoint::from_str` of any text (as `--crash-at` and `arm` take it).
    #[test]
    fn the_crash_point_parser_never_panics_and_errs_in_one_line(line in line()) {
        // The `arm` lines without their command word: the crash point as `--crash-at` takes it.
        let input = line.strip_prefix("arm ").unwrap_or(&line);
        match input.parse::<CrashPoint>() {
            Ok(point) => {
                prop_assert_eq!(point.to_string().parse::<CrashPoint>(), Ok(point));
                prop_assert!(input.contains(':'), "{:?} parsed without its STEP:WHEN colon", input);
            }
            Err(error) => assert_one_line(input, &error),
        }
    }
}

/// The fuzz's inputs reach past the first check: of the lines the seeded generator makes, some
/// parse as each kind of command (properties over errors alone would test little).
#[test]
fn the_generated_lines_reach_every_kind_of_command() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::new(deterministic(1));
    let mut kinds = [0usize; 5];
    for _ in 0..4_000 {
        let input = line().new_tree(&mut runner).expect("a line").current();
        let kind = match parse_command(&input) {
            Ok(Command::Quit) => 0,
            Ok(Command::State) => 1,
            Ok(Command::Assign { .. }) => 2,
            Ok(Command::Arm(_)) => 3,
            Ok(Command::Step(_)) => 4,
            Err(_) => continue,
        };
        kinds[kind] += 1;
    }
    assert!(kinds.iter().all(|&count| count > 0), "commands parsed (quit, state, assign, arm, step): {kinds:?}");
}

/// Known lines: accepted, or refused with their one line.
#[test]
fn known_lines_parse_or_are_refused_in_one_line() {
    let accepted = ["quit", " state ", "assign 3", "arm apply-effect:after@49", "fetch 0 7"];
    for input in accepted {
        assert!(parse_command(input).is_ok(), "{input:?} is a command");
    }
    for (input, says) in [
        ("assign 4294967296", "partition '4294967296' is not a number"),
        ("arm fetch:inside", "fetch writes nothing, so it has no inside"),
        ("fetch 0 7 8", "expected 'STEP PARTITION OFFSET', got 'fetch 0 7 8'"),
        ("bell\u{7} 0 0", "unknown step 'bell\\u{7}'"),
        ("no-such-step 0 0", "unknown step 'no-such-step'"),
    ] {
        let error = parse_command(input).expect_err(input);
        assert!(error.contains(says), "{input:?}: {error}");
        assert_one_line(input, &error);
    }
}
