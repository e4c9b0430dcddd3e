//! Files of another log or partition, and damaged headers, through the real `consumer` binary:
//! every per-partition file names its log and partition (`src/log/header.rs`), so a file
//! swapped in from another partition or copied in from another log is refused by `repair`,
//! `consume` and `status` alike, in one line naming the file (exit 4), never applied. A damaged
//! header is refused too; `repair` makes a damaged one good where that loses nothing. A log of
//! format version 2 is refused with the upgrade's hint (exit 2). One helper, one table.

mod common;

use common::{describe, expect_code, stderr, stdout, DataDir};
use consumer::log::{write_v2_log_for_tests, Log, LogIdentity, Storage, V2Batch, V2Partition};
use consumer::txn::OutputLog;
use std::fs;
use std::path::Path;

const CONSUME: &[&str] = &["consume", "--group", "g", "--strategy", "atomic-fenced"];
const STATUS: &[&str] = &["status"];
const REPAIR: &[&str] = &["repair"];
/// Partition 0 holds 3 records of 1, partition 1 holds 2 of 10.
const TOTAL: i64 = 3 + 20;

/// What a case does to data directory `a` (`b` is another log, filled the same way).
type Mutation = fn(&Path, &Path);

/// One command and what it must do: exit status and a phrase of its one-line output.
struct Expect {
    command: &'static [&'static str],
    code: i32,
    says: &'static str,
}

const fn expect(command: &'static [&'static str], code: i32, says: &'static str) -> Expect {
    Expect { command, code, says }
}

struct Case {
    name: &'static str,
    mutate: Mutation,
    /// Run in order, on the same directory.
    expect: &'static [Expect],
}

fn swap(log: &Path, kinds: &[&str]) {
    for kind in kinds {
        let (zero, one) = (log.join(format!("partition-0.{kind}")), log.join(format!("partition-1.{kind}")));
        let aside = log.join("aside");
        fs::rename(&zero, &aside).expect("rename");
        fs::rename(&one, &zero).expect("rename");
        fs::rename(&aside, &one).expect("rename");
    }
}

fn copy_in(from: &Path, to: &Path, kinds: &[&str]) {
    for kind in kinds {
        let name = format!("partition-0.{kind}");
        fs::copy(from.join(&name), to.join(&name)).expect("copy");
    }
}

/// Flips one byte of the log id in the header of `partition-0.{kind}` (for the
/// acknowledgement record: in both slots, whose own checksums each catch it).
fn flip(log: &Path, kind: &str) {
    let path = log.join(format!("partition-0.{kind}"));
    let mut bytes = fs::read(&path).expect("read");
    let positions: &[usize] = if kind == "ack" { &[10, 4096 + 10] } else { &[10] };
    positions.iter().for_each(|&at| bytes[at] ^= 0x40);
    fs::write(&path, bytes).expect("write");
}

/// The log (and output log) of `a` replaced by the same logs of format version 2.
fn version_2(a: &Path, _: &Path) {
    let identity = Log::read_identity(a).expect("identity").expect("initialised");
    let plain = |payloads: Vec<i64>| V2Batch {
        producer: None,
        payloads: payloads.into_iter().map(consumer::log::encode_delta).collect(),
    };
    let partitions = vec![
        V2Partition { batches: vec![plain(vec![1]), plain(vec![1, 1])], start: 0, unacknowledged: vec![7; 5] },
        V2Partition { batches: vec![plain(vec![10, 10])], start: 0, unacknowledged: Vec::new() },
    ];
    write_v2_log_for_tests(&Storage::Real, a, identity, &partitions).expect("v2 log");
    let output = OutputLog::at(&Storage::Real, a, identity);
    let empty = V2Partition { batches: Vec::new(), start: 0, unacknowledged: Vec::new() };
    write_v2_log_for_tests(&Storage::Real, output.dir(), output.identity(), &[empty.clone(), empty])
        .expect("v2 output");
}

const FOREIGN_EVERYWHERE: &[Expect] =
    &[expect(REPAIR, 4, "belongs to log"), expect(CONSUME, 4, "belongs to log"), expect(STATUS, 4, "belongs to log")];

const CASES: &[Case] = &[
    Case { name: "partition 0's and 1's data and ack files swapped", mutate: |a, _| swap(a, &["log", "ack"]), expect: FOREIGN_EVERYWHERE },
    Case { name: "another log's data and ack files copied in", mutate: |a, b| copy_in(b, a, &["log", "ack"]), expect: FOREIGN_EVERYWHERE },
    Case {
        name: "start files swapped",
        mutate: |a, _| swap(a, &["start"]),
        expect: &[
            expect(REPAIR, 4, "partition-0.start belongs to log"),
            expect(CONSUME, 4, "partition-0.start belongs to log"),
            expect(STATUS, 4, "partition-0.start belongs to log"),
        ],
    },
    Case {
        name: "another log's ack file only",
        mutate: |a, b| copy_in(b, a, &["ack"]),
        expect: &[
            expect(REPAIR, 4, "partition-0.ack belongs to log"),
            expect(CONSUME, 4, "partition-0.ack belongs to log"),
            expect(STATUS, 4, "partition-0.ack belongs to log"),
        ],
    },
    Case {
        name: "another log's data file only",
        mutate: |a, b| copy_in(b, a, &["log"]),
        expect: &[
            expect(REPAIR, 4, "partition-0.log belongs to log"),
            expect(CONSUME, 4, "partition-0.log belongs to log"),
            expect(STATUS, 4, "partition-0.log belongs to log"),
        ],
    },
    Case {
        name: "a flipped byte in the data file's header",
        mutate: |a, _| flip(a, "log"),
        expect: &[
            expect(CONSUME, 4, "partition-0.log: its header is damaged"),
            expect(STATUS, 4, "partition-0.log: its header is damaged"),
            expect(REPAIR, 0, "had a damaged header (the header's checksum does not match it), but its frames"),
            expect(CONSUME, 0, ""),
        ],
    },
    Case {
        name: "a flipped byte in the data file's header, and acknowledged bytes lost",
        mutate: |a, _| {
            flip(a, "log");
            let path = a.join("partition-0.log");
            let len = fs::metadata(&path).expect("metadata").len();
            fs::OpenOptions::new().write(true).open(&path).expect("open").set_len(len - 1).expect("cut");
        },
        expect: &[
            expect(REPAIR, 4, "partition-0.log: its header is damaged"),
            expect(CONSUME, 4, "partition-0.log: its header is damaged"),
        ],
    },
    Case {
        name: "a flipped byte in the ack file's slots",
        mutate: |a, _| flip(a, "ack"),
        expect: &[
            expect(CONSUME, 4, "partition-0.ack is corrupt"),
            expect(STATUS, 4, "partition-0.ack is corrupt"),
            expect(REPAIR, 0, "rebuilt"),
            expect(CONSUME, 0, ""),
        ],
    },
    Case {
        name: "a flipped byte in the start file's header",
        mutate: |a, _| flip(a, "start"),
        expect: &[
            expect(CONSUME, 4, "partition-0.start: its header is damaged"),
            expect(STATUS, 4, "partition-0.start: its header is damaged"),
            expect(REPAIR, 0, "made again at offset 0"),
            expect(CONSUME, 0, ""),
        ],
    },
    Case {
        name: "a log of format version 2",
        mutate: version_2,
        expect: &[
            expect(CONSUME, 2, "identity has format ONCELID1, the previous version: this build reads only ONCELID2; run `consumer repair --upgrade`"),
            expect(STATUS, 2, "run `consumer repair --upgrade`"),
            expect(REPAIR, 2, "run `consumer repair --upgrade`"),
            expect(&["repair", "--upgrade"], 0, "upgraded 2 log director(ies) to format version 3"),
            expect(CONSUME, 0, ""),
            expect(&["repair", "--upgrade"], 0, "nothing to upgrade"),
        ],
    },
];

/// Two logs filled the same way: partition 0 three records of 1, partition 1 two of 10.
fn filled(case: &str) -> DataDir {
    let dir = DataDir::new(case, 2);
    dir.append(case, 0, 1, 1);
    dir.append(case, 0, 1, 2);
    dir.append(case, 1, 10, 2);
    dir
}

fn run_case(case: &Case) {
    let (a, b) = (filled(case.name), filled(case.name));
    (case.mutate)(&a.log_dir(), &b.log_dir());
    for step in case.expect {
        let (subcommand, args) = step.command.split_first().expect("a subcommand");
        let output = a.run(subcommand, args);
        let what = step.command.join(" ");
        expect_code(case.name, &what, &output, step.code);
        let text = if step.code == 0 { stdout(&output) } else { stderr(&output) };
        assert!(
            text.contains(step.says),
            "case '{}': {what} should say {:?}\n{}",
            case.name,
            step.says,
            describe(&output)
        );
        if step.code != 0 {
            assert_eq!(
                text.trim_end().lines().count(),
                1,
                "case '{}': {what}: one line\n{}",
                case.name,
                describe(&output)
            );
        }
    }
    if case.expect.last().is_some_and(|step| step.code == 0) {
        let total = a.group(case.name, "g")["total"].as_i64().expect("a total");
        assert_eq!(total, TOTAL, "case '{}': every record applied exactly once", case.name);
    }
}

#[test]
fn foreign_files_and_damaged_headers_are_refused() {
    for case in CASES {
        run_case(case);
    }
}

/// The refusal names the file, what it names and what was expected, in one line.
#[test]
fn a_foreign_file_names_both_owners() {
    let (a, b) = (filled("names"), filled("names"));
    copy_in(&b.log_dir(), &a.log_dir(), &["log"]);
    let output = a.run("status", &[]);
    expect_code("names", "status", &output, 4);
    let found: LogIdentity = Log::read_identity(&b.log_dir()).expect("b").expect("b");
    let expected: LogIdentity = Log::read_identity(&a.log_dir()).expect("a").expect("a");
    let line = format!(
        "{} belongs to log {:016x} partition 0, not to this log {:016x} partition 0: refused",
        a.log_file(0).display(),
        found.id,
        expected.id
    );
    assert!(stderr(&output).contains(&line), "{line}\n{}", describe(&output));
}
