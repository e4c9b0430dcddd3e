//! Generates one named test per trace file of `tests/traces/` (`trace_NAME`) and of
//! `tests/traces/kept/` (`kept_NAME`), so that each file passes or fails on its own in
//! `cargo test`.

use std::fmt::Write;
use std::path::Path;

fn main() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/traces");
    let kept = corpus.join("kept");
    let mut code = String::new();
    // The generated corpus, then the traces users keep (`conformance keep`): `kept_NAME`.
    for (dir, prefix) in [(&corpus, "trace"), (&kept, "kept")] {
        println!("cargo:rerun-if-changed={}", dir.display());
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|entries| {
                entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect()
            })
            .unwrap_or_default();
        names.retain(|name| name.ends_with(".json") && !name.ends_with(".itf.json"));
        names.sort();
        let mut idents = std::collections::BTreeSet::new();
        for name in &names {
            let stem = name.trim_end_matches(".json").replace("--", "-");
            let ident: String =
                stem.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).collect();
            assert!(idents.insert(ident.clone()), "two trace files map to the test name {prefix}_{ident}: rename one");
            let path = dir.join(name);
            let _ = writeln!(
                code,
                "#[test]\nfn {prefix}_{ident}() {{\n    replay_corpus_file({:?});\n}}\n",
                path.display().to_string()
            );
        }
    }
    let out = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("corpus_tests.rs");
    std::fs::write(out, code).expect("OUT_DIR is writable");
}
