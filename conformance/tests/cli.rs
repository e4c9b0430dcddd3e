//! The `conformance` command line: exit codes for conforming, divergent and unreadable input,
//! and generated tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn conformance(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_conformance")).args(args).output().expect("the conformance binary runs")
}

fn corpus(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/traces").join(name).display().to_string()
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

#[test]
fn replay_exit_codes() {
    let fenced = corpus("scenario--zombie-atomic-fenced.json");
    let dir = scratch("cli-replay");
    let wrong_version = dir.join("wrong-version.json");
    std::fs::write(&wrong_version, r#"{"format":"onceproof-trace","version":2}"#).expect("write");
    let not_json = dir.join("not-json.json");
    std::fs::write(&not_json, "{ nope").expect("write");
    let (wrong_version, not_json) = (wrong_version.display().to_string(), not_json.display().to_string());
    // (case, arguments, exit code, a line the output must contain)
    let table: [(&str, Vec<&str>, i32, &str); 5] = [
        ("conforms", vec!["replay", &fenced], 0, "1 passed, 0 failed"),
        (
            "diverges",
            vec!["replay", "--mutation", "no-fence", &fenced],
            1,
            "reproduce: cargo run -p conformance -- replay --mode process --mutation no-fence",
        ),
        ("wrong version", vec!["replay", &wrong_version], 2, "trace format version 2 is not supported"),
        ("not json", vec!["replay", &not_json], 2, "not a valid trace"),
        ("missing file", vec!["replay", "/no/such/trace.json"], 2, "no such file or directory"),
    ];
    for (case, args, code, needle) in table {
        let output = conformance(&args);
        let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert_eq!(output.status.code(), Some(code), "{case}: {text}");
        assert!(text.contains(needle), "{case}: expected '{needle}' in:\n{text}");
        if code == 2 {
            assert_eq!(String::from_utf8_lossy(&output.stderr).lines().count(), 1, "{case}: one error line:\n{text}");
        }
    }
}

#[test]
fn generated_walks_and_depths_conform() {
    let out = scratch("cli-generated");
    let out = out.display().to_string();
    for args in [
        vec![
            "test",
            "--strategy",
            "atomic-fenced",
            "--walks",
            "20",
            "--seed",
            "7",
            "--mode",
            "in-process",
            "--out",
            &out,
        ],
        vec![
            "test",
            "--strategy",
            "dedup-separate",
            "--groups",
            "1",
            "--depth",
            "4",
            "--mode",
            "process",
            "--out",
            &out,
        ],
    ] {
        let output = conformance(&args);
        let text = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(0), "{args:?}:\n{text}{}", String::from_utf8_lossy(&output.stderr));
        assert!(text.contains(" 0 failed"), "{args:?}:\n{text}");
    }
}

#[test]
fn version_names_the_package_version() {
    let output = conformance(&["--version"]);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), format!("conformance {}", env!("CARGO_PKG_VERSION")));
}
