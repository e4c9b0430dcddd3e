//! Totals never overflow: `--delta` is bounded so that no reachable total leaves `i64`
//! (spec.md §4), the largest deltas change no verdict, and past the bound the model stops
//! with an assertion naming the overflow instead of wrapping.

mod common;

use common::small_config;
use model::check::{self, CheckOptions, Verdict};
use model::config::DELTA_MAX;
use model::{Action, Config, ConsumerModel, Strategy};
use stateright::Model;

#[test]
fn the_delta_is_bounded_so_that_no_total_overflows() {
    let refused = "is out of range: accepted values are -1000000000000..=1000000000000 except 0";
    // (delta, accepted)
    let cases = [
        (1, true),
        (-1, true),
        (DELTA_MAX, true),
        (-DELTA_MAX, true),
        (0, false),
        (DELTA_MAX + 1, false),
        (-DELTA_MAX - 1, false),
        (i64::MAX, false),
        (i64::MIN, false),
    ];
    for (delta, accepted) in cases {
        let config = Config { delta, ..small_config(Strategy::Atomic) };
        for result in [config.validate(), config.validate_for_replay()] {
            match result {
                Ok(()) => assert!(accepted, "--delta {delta} was accepted"),
                Err(why) if delta == 0 => assert!(why.starts_with("--delta 0 would make"), "{why}"),
                Err(why) => assert!(
                    !accepted && why == format!("--delta {delta} {refused} (a larger delta could overflow a total)"),
                    "{why}"
                ),
            }
        }
    }
}

/// The rows whose totals grow most: duplicates (atomic, effect-first), appends repeated by a
/// producer (producer-new-sequence), and applications of records a log lost moved to
/// `lost_sum` (log-loss-unchecked). At the largest deltas, either sign, every verdict is the
/// one of `--delta 5`, and (in a debug build, where arithmetic is checked) nothing overflowed.
#[test]
fn the_largest_deltas_keep_every_verdict() {
    let strategies =
        [Strategy::Atomic, Strategy::EffectFirst, Strategy::ProducerNewSequence, Strategy::LogLossUnchecked];
    for strategy in strategies {
        let verdicts = |delta: i64| -> Vec<(String, Verdict)> {
            let config = Config { delta, ..small_config(strategy) };
            config.validate().unwrap_or_else(|why| panic!("{strategy}: {why}"));
            let report = check::run(&ConsumerModel::new(config), &CheckOptions::default(), &mut |_| {});
            report.properties.into_iter().map(|p| (p.name, p.verdict)).collect()
        };
        let expected = verdicts(5);
        assert!(expected.iter().any(|(_, verdict)| *verdict == Verdict::Violated), "{strategy} violates something");
        for delta in [DELTA_MAX, -DELTA_MAX] {
            assert_eq!(verdicts(delta), expected, "{strategy} with --delta {delta}");
        }
    }
}

/// Past the bound (a total made to sit at `i64::MAX`), an application stops the model with an
/// assertion that names the overflow: a wrapped total would be a silent lie.
#[test]
#[should_panic(expected = "a total overflowed i64")]
fn an_overflowing_total_is_an_assertion_not_a_wrap() {
    let model = ConsumerModel::new(small_config(Strategy::Atomic));
    let append = Action::Append { partition: 0, delta: 5 };
    let fetch = Action::Fetch { group: 0, owner: 0, partition: 0, offset: 0 };
    let mut state = check::replay(&model, &[append, fetch]).expect("an append and a fetch").pop().expect("a state");
    state.groups[0].store.total = i64::MAX;
    let _ = model.next_state(&state, Action::ApplyAtomic { group: 0, owner: 0, partition: 0, offset: 0 });
}

#[test]
#[should_panic(expected = "the sum of lost applications overflowed i64")]
fn an_overflowing_lost_sum_is_an_assertion_not_a_wrap() {
    let _ = model::step::lost_sum(i64::MAX, 1, 1);
}

/// `group-isolation` on a configuration `Config::validate` refuses (so never checked): its sum
/// overflows, and says so.
#[test]
#[should_panic(expected = "group-isolation's sum overflowed i64")]
fn an_overflowing_group_isolation_sum_is_an_assertion_not_a_wrap() {
    let config = Config { delta: i64::MAX, ..small_config(Strategy::Atomic) };
    let mut state = model::State::initial(&config);
    state.groups[0].ghost.applied[0][0] = 2;
    let _ = model::properties::group_isolation(&ConsumerModel::new(config), &state);
}

/// A record's application count is 8-bit; the replay limits keep it at most 255
/// (`APPLICATIONS_MAX`), and one more is an assertion, not a wrap to 0.
#[test]
#[should_panic(expected = "a record was applied more than 255 times")]
fn an_overflowing_application_count_is_an_assertion_not_a_wrap() {
    assert_eq!(model::config::APPLICATIONS_MAX, u8::MAX);
    let model = ConsumerModel::new(small_config(Strategy::Atomic));
    let append = Action::Append { partition: 0, delta: 5 };
    let fetch = Action::Fetch { group: 0, owner: 0, partition: 0, offset: 0 };
    let mut state = check::replay(&model, &[append, fetch]).expect("an append and a fetch").pop().expect("a state");
    state.groups[0].ghost.applied[0][0] = u8::MAX;
    let _ = model.next_state(&state, Action::ApplyAtomic { group: 0, owner: 0, partition: 0, offset: 0 });
}
