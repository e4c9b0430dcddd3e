//! What people look at (`view.rs`, `svg.rs`): every trace of the corpus judged along its own
//! path, the reasons in words, the compact state, and the timeline's colours.

use model::check::{replay, Verdict};
use model::trace::Trace;
use model::view::{compact, judge_path, PathOutcome};
use model::{Action, ConsumerModel, State};
use std::path::Path;

fn corpus() -> Vec<(String, Trace)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/traces");
    let mut files: Vec<_> =
        std::fs::read_dir(&dir).expect("tests/traces exists").map(|e| e.expect("an entry").path()).collect();
    files.sort();
    let traces = files.iter().filter(|f| model::trace::is_trace_file(f));
    traces
        .map(|f| (f.display().to_string(), Trace::from_slice(&std::fs::read(f).expect("readable")).expect("a trace")))
        .collect()
}

/// The path of a trace: its states with the action taken from each.
fn path_of(model: &ConsumerModel, actions: &[Action]) -> Vec<(State, Option<Action>)> {
    let states = replay(model, actions).expect("a corpus trace replays");
    let taken = actions.iter().map(|&a| Some(a)).chain([None]);
    states.into_iter().zip(taken).collect()
}

/// Every counterexample and example of the corpus, judged on its own path, shows its property
/// violated (or reached) exactly at its last step: its file says it is a shortest path there,
/// so the property held until then. And the reason of a violation is never empty.
#[test]
fn every_corpus_trace_is_judged_on_its_path_where_its_file_says() {
    let mut judged = 0;
    for (file, trace) in corpus() {
        let (Some(property), Some(verdict)) = (&trace.property, &trace.verdict) else { continue };
        let model = ConsumerModel::new(trace.config.clone());
        let verdicts = judge_path(&model, &path_of(&model, &trace.actions));
        let on_path = verdicts.iter().find(|v| v.name == property).unwrap_or_else(|| panic!("{file}: no {property}"));
        let last = trace.actions.len();
        match (verdict, &on_path.outcome) {
            (Verdict::Violated, PathOutcome::Violated { step, reason }) => {
                assert!(*step <= last && !reason.is_empty(), "{file}: step {step} of {last}, reason '{reason}'");
            }
            (Verdict::Reached, PathOutcome::Reached { step, .. }) => assert!(*step <= last, "{file}: step {step}"),
            (Verdict::Holds, PathOutcome::HoldsSoFar) => {}
            (expected, outcome) => panic!("{file}: the file says {expected:?}, the path shows {outcome:?}"),
        }
        judged += 1;
    }
    assert!(judged > 300, "only {judged} traces judged");
}

/// The reasons a person reads, for the three examples and the other safety
/// properties with a dedicated explanation: (trace file, property, words the reason contains).
const REASONS: [(&str, &str, &str); 6] = [
    ("effect-first--no-duplicate.json", "no-duplicate", "g0 p0 offset 0 applied twice: total 5 -> 10"),
    ("effect-first--monotonic-checkpoint.json", "monotonic-checkpoint", "g0 checkpoint of p0 moved back 2 -> 1"),
    ("effect-first--fenced-writes.json", "fenced-writes", "zombie write landed: g0/o0 wrote with epoch 1 < 2"),
    ("commit-first--contiguous-prefix.json", "contiguous-prefix", "was never applied: skipped"),
    ("effect-first--no-silent-skip.json", "no-silent-skip", "not accounted for"),
    ("dual-write--stores-agree.json", "stores-agree", "is at rest but its index holds"),
];

#[test]
fn violations_are_explained_in_words() {
    let corpus = corpus();
    for (name, property, words) in REASONS {
        let (_, trace) = corpus
            .iter()
            .find(|(file, _)| Path::new(file).file_name() == Some(name.as_ref()))
            .unwrap_or_else(|| panic!("no {name}"));
        let model = ConsumerModel::new(trace.config.clone());
        let verdicts = judge_path(&model, &path_of(&model, &trace.actions));
        let outcome = &verdicts.iter().find(|v| v.name == property).expect("the trace's property").outcome;
        let PathOutcome::Violated { reason, .. } = outcome else { panic!("{name}: {outcome:?}") };
        assert!(reason.contains(words), "{name}: '{reason}' lacks '{words}'");
    }
}

/// The compact state of the walk (effect-first: append, fetch, apply, crash, restart,
/// fetch, apply): a short block with the log, the totals, the rows, each owner's lease with its
/// in-flight records, the ghost in one line per group; no Rust field names.
#[test]
fn the_state_reads_as_a_short_block() {
    let model = ConsumerModel::new(model::Config::new(model::Strategy::EffectFirst));
    let walk = [
        Action::Append { partition: 0, delta: 5 },
        Action::Fetch { group: 0, owner: 0, partition: 0, offset: 0 },
        Action::ApplyEffect { group: 0, owner: 0, partition: 0, offset: 0 },
        Action::Crash { group: 0, owner: 0 },
        Action::Restart { group: 0, owner: 0 },
        Action::Fetch { group: 0, owner: 0, partition: 0, offset: 0 },
        Action::ApplyEffect { group: 0, owner: 0, partition: 0, offset: 0 },
    ];
    let path = path_of(&model, &walk);
    let text = compact(&path.last().expect("a state").0);
    let expected = "\
log p0: [0:+5]
g0: total 10 | p0 next 0 epoch 2 owner o0
  o0: p0 epoch 2 position 1 checkpoint 0, in flight {0 effect applied}
  o1: alive, owns nothing
  ghost: applied p0 [2, 0, 0]
g1: total 0 | p0 next 0 epoch 1 owner o0
  o0: p0 epoch 1 position 0 checkpoint 0, in flight {}
  o1: alive, owns nothing
  ghost: applied p0 [0, 0, 0]
faults spent: crashes 1
this step reached: nothing";
    assert_eq!(text, expected);
    // The witness bits are the step's own: the fetch before showed the replay, the crash
    // before it a crash between two writes.
    let reached = |index: usize| compact(&path[index].0).lines().last().expect("a line").to_string();
    assert_eq!(reached(path.len() - 2), "this step reached: replay");
    assert_eq!(reached(path.len() - 4), "this step reached: crash-mid-record");
    assert_eq!(format!("{:#?}", path[0].0).lines().count(), 11, "{{:#?}} is the compact form");
    assert!(format!("{:#?}", path[0].0.full()).contains("witnessed: 0"), "the full form keeps every field");
    let verdicts = judge_path(&model, &path);
    let duplicate = verdicts.iter().find(|v| v.name == "no-duplicate").expect("no-duplicate is checked");
    assert_eq!(duplicate.outcome.step(), Some(7), "{:?}", duplicate.outcome);
}

/// An earlier incarnation has one spelling, spec.md §2.2's `gG/oO'`, in every text the model
/// writes with the state at hand: the step descriptions (the pause's and the incarnation's
/// own), `view::action_text` (the conformance harness's step headers) and the compact state
/// (its side-by-side tables). `Action`'s `Display`, which has no state, names the paused slot.
#[test]
fn an_earlier_incarnation_is_spelled_with_a_prime() {
    let model = ConsumerModel::new(model::Config::new(model::Strategy::AtomicFenced));
    let walk = [
        Action::Append { partition: 0, delta: 5 },
        Action::Fetch { group: 0, owner: 0, partition: 0, offset: 0 },
        Action::Pause { group: 0, owner: 0 },
        Action::ApplyAtomic { group: 0, owner: 2, partition: 0, offset: 0 },
    ];
    let path = path_of(&model, &walk);
    let (paused, fenced) = (&path[2], &path[3]);
    let apply = walk[3];
    let table: [(&str, String, &str); 5] = [
        ("the pause's description", model.describe_step(&paused.0, &walk[2]), "runs on as g0/o0' "),
        ("the incarnation's step", model.describe_step(&fenced.0, &apply), "g0/o0' is fenced writing p0 offset 0"),
        (
            "action_text",
            model::view::action_text(&fenced.0, &apply),
            "g0/o0' applies p0 offset 0 and its next offset in one transaction",
        ),
        (
            "the compact state",
            compact(&fenced.0),
            "\n  g0/o0' (earlier incarnation): p0 epoch 1 position 1 checkpoint 0, in flight {0 fetched}\n",
        ),
        ("Display, without a state", apply.to_string(), "g0/o2 applies p0 offset 0"),
    ];
    for (what, text, expected) in &table {
        assert!(text.contains(expected), "{what}: '{text}' lacks '{expected}'");
    }
    for (what, text, _) in &table[..4] {
        assert!(!text.contains("o2"), "{what} names the paused slot: '{text}'");
    }
}

fn contrast(a: &str, b: &str) -> f64 {
    let luminance = |hex: &str| {
        let channel = |i: usize| {
            let c = f64::from(u8::from_str_radix(&hex[1 + 2 * i..3 + 2 * i], 16).expect("a hex colour")) / 255.0;
            if c <= 0.03928 {
                c / 12.92
            } else {
                ((c + 0.055) / 1.055).powf(2.4)
            }
        };
        0.2126 * channel(0) + 0.7152 * channel(1) + 0.0722 * channel(2)
    };
    let (la, lb) = (luminance(a), luminance(b));
    (la.max(lb) + 0.05) / (la.min(lb) + 0.05)
}

/// Every colour a timeline draws text or a mark with (`fill`, `stroke`) stands at 4.5:1 or
/// more against its own background (the first `rect`), except the hollow dots' inside, which
/// is the background; a violation is marked with its reason; the strategy is named; the width
/// fits a 1280 px screen. Traces with a crash, a zombie write and violations.
#[test]
fn the_timeline_is_readable_and_marks_the_violation() {
    let corpus = corpus();
    for name in ["effect-first--monotonic-checkpoint.json", "effect-first--crash-mid-record.json"] {
        let (_, trace) = corpus
            .iter()
            .find(|(file, _)| Path::new(file).file_name() == Some(name.as_ref()))
            .unwrap_or_else(|| panic!("no {name}"));
        let model = ConsumerModel::new(trace.config.clone());
        let svg = model::svg::timeline(&model, &path_of(&model, &trace.actions));
        let background = attribute_values(&svg, "fill='").next().expect("the background rect comes first");
        let mut colours =
            attribute_values(&svg, "fill='").chain(attribute_values(&svg, "stroke='")).collect::<Vec<_>>();
        colours.retain(|c| c.starts_with('#') && *c != background);
        assert!(colours.len() > 10, "{name}: {colours:?}");
        for colour in colours {
            assert!(
                contrast(colour, background) >= 4.5,
                "{name}: {colour} on {background}: {:.2}",
                contrast(colour, background)
            );
        }
        assert!(svg.contains("data-strategy='effect-first'") && svg.contains("effect-first — "), "{name}");
        let width: usize = svg
            .split("max-width:")
            .nth(1)
            .and_then(|w| w.split("px").next())
            .and_then(|w| w.parse().ok())
            .expect("a width");
        assert!(width <= 1240, "{name}: {width} px");
        if name.contains("monotonic") {
            assert!(svg.contains("class='violation' data-property='monotonic-checkpoint' data-step='12'"), "{svg}");
            assert!(svg.contains(">✗ monotonic-checkpoint violated: g0 checkpoint of p0 moved back</text><text class='reason' x='508' y='647' fill='#ff6b6b' font-weight='bold'>2 -&gt; 1<"), "{svg}");
        }
    }
}

fn attribute_values<'a>(svg: &'a str, prefix: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    svg.split(prefix).skip(1).filter_map(|rest| rest.split('\'').next())
}
