//! docs/errors.md's "Bad input and the one line it gets" as test data, shared by the CLI tests of the
//! three binaries (each includes this file with `#[path]`): the table is the tests' table.

use std::path::Path;

/// A row of the table: the command, its exit code and the exact line it prints on stderr.
pub struct BadInputRow {
    pub command: Vec<String>,
    pub exit: i32,
    pub line: String,
}

/// The text of a Markdown code span: without its backtick run, and without the one space each
/// side that a span starting or ending with a backtick needs.
fn code_span(cell: &str) -> &str {
    let ticks = cell.chars().take_while(|&c| c == '`').count();
    let inner = &cell[ticks..cell.len() - ticks];
    match (inner.strip_prefix(' '), inner.ends_with(' ')) {
        (Some(rest), true) => &rest[..rest.len() - 1],
        _ => inner,
    }
}

/// The rows of docs/errors.md whose command starts with `tool`. `\n` in a command stands for a
/// newline inside that argument (as that page says above the table).
pub fn readme_bad_input_rows(tool: &str) -> Vec<BadInputRow> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/errors.md");
    let readme = std::fs::read_to_string(&path).expect("docs/errors.md is readable");
    let section = readme
        .split("\n## ")
        .find(|section| section.starts_with("Bad input and the one line it gets"))
        .expect("docs/errors.md has the section 'Bad input and the one line it gets'");
    let mut rows = Vec::new();
    for line in section.lines().filter(|line| line.starts_with("| ")) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        let [_, command, exit, printed] = cells[..] else { continue };
        let command = code_span(command);
        if !command.starts_with(&format!("{tool} ")) && command != tool {
            continue;
        }
        rows.push(BadInputRow {
            command: command.split_whitespace().map(|arg| arg.replace("\\n", "\n")).collect(),
            exit: exit.parse().unwrap_or_else(|_| panic!("docs/errors.md row '{line}': exit '{exit}' is not a number")),
            line: code_span(printed).to_string(),
        });
    }
    rows
}
