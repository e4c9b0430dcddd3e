//! Generates one named test per trace file of `tests/traces/`, so that each file passes or
//! fails on its own in `cargo test`.

use std::fmt::Write;
use std::path::Path;

fn main() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/traces");
    println!("cargo:rerun-if-changed={}", corpus.display());
    let mut names: Vec<String> = std::fs::read_dir(&corpus)
        .map(|entries| entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.retain(|name| name.ends_with(".json"));
    names.sort();
    let mut code = String::new();
    let mut idents = std::collections::BTreeSet::new();
    for name in &names {
        let stem = name.trim_end_matches(".json").replace("--", "-");
        let ident: String =
            stem.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).collect();
        assert!(idents.insert(ident.clone()), "two trace files map to the test name trace_{ident}: rename one");
        let path = corpus.join(name);
        let _ = writeln!(
            code,
            "#[test]\nfn trace_{ident}() {{\n    replay_corpus_file({:?});\n}}\n",
            path.display().to_string()
        );
    }
    let out = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("corpus_tests.rs");
    std::fs::write(out, code).expect("OUT_DIR is writable");
}
