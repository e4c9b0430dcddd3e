//! A line diff (longest common subsequence) for showing where two state dumps differ.

/// Lines only in `expected` prefixed `-`, only in `actual` prefixed `+`, with up to two lines
/// of unchanged context around each change; elided runs are marked `...`.
pub fn lines(expected: &str, actual: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    // lcs[i][j]: length of the longest common subsequence of a[i..] and b[j..].
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let mut edits: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            edits.push((' ', a[i]));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            edits.push(('-', a[i]));
            i += 1;
        } else {
            edits.push(('+', b[j]));
            j += 1;
        }
    }
    render(&edits)
}

/// Two states' readable forms (`model::view::compact`, one line per log partition, group,
/// owner slot, ...) side by side: the model's on the left, the real system's on the right
/// where a line differs (marked `≠`), `(same)` where it does not.
pub fn side_by_side(model: &str, real: &str) -> String {
    let (left, right): (Vec<&str>, Vec<&str>) = (model.lines().collect(), real.lines().collect());
    let width = left.iter().map(|line| line.chars().count()).max().unwrap_or(0).max("model".len());
    let mut out = vec![format!("  {:width$} | consumer", "model")];
    for index in 0..left.len().max(right.len()) {
        let (a, b) = (left.get(index).copied().unwrap_or(""), right.get(index).copied().unwrap_or(""));
        out.push(match a == b {
            true => format!("  {a:width$} | (same)"),
            false => format!("≠ {a:width$} | {b}"),
        });
    }
    out.join("\n")
}

/// Three texts side by side, line by line (each column headed by its name): every line where
/// the three agree is `(same)`, the others are marked `≠`.
pub fn three_columns(a: (&str, &str), b: (&str, &str), c: (&str, &str)) -> String {
    let columns: Vec<Vec<&str>> = [a.1, b.1, c.1].iter().map(|text| text.lines().collect()).collect();
    let width = |index: usize, name: &str| {
        columns[index].iter().map(|line| line.chars().count()).max().unwrap_or(0).max(name.chars().count())
    };
    let (wa, wb) = (width(0, a.0), width(1, b.0));
    let mut out = vec![format!("  {:wa$} | {:wb$} | {}", a.0, b.0, c.0)];
    let rows = columns.iter().map(Vec::len).max().unwrap_or(0);
    for index in 0..rows {
        let cell = |column: usize| columns[column].get(index).copied().unwrap_or("");
        let (x, y, z) = (cell(0), cell(1), cell(2));
        out.push(match x == y && y == z {
            true => format!("  {x:wa$} | (same)"),
            false => format!("≠ {x:wa$} | {y:wb$} | {z}"),
        });
    }
    out.join("\n")
}

fn render(edits: &[(char, &str)]) -> String {
    const CONTEXT: usize = 2;
    let near_change = |index: usize| {
        let low = index.saturating_sub(CONTEXT);
        let high = (index + CONTEXT + 1).min(edits.len());
        edits[low..high].iter().any(|(kind, _)| *kind != ' ')
    };
    let mut out = Vec::new();
    let mut elided = false;
    for (index, (kind, line)) in edits.iter().enumerate() {
        if near_change(index) {
            out.push(format!("{kind} {line}"));
            elided = false;
        } else if !elided {
            out.push("  ...".to_string());
            elided = true;
        }
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::{lines, side_by_side};

    #[test]
    fn side_by_side_marks_the_lines_that_differ() {
        let table = [
            ("a\nb", "a\nb", "  model | consumer\n  a     | (same)\n  b     | (same)"),
            ("a\nlong", "a\nx", "  model | consumer\n  a     | (same)\n≠ long  | x"),
            ("a", "a\nextra", "  model | consumer\n  a     | (same)\n≠       | extra"),
        ];
        for (model, real, expected) in table {
            assert_eq!(side_by_side(model, real), expected, "side by side of {model:?} and {real:?}");
        }
    }

    #[test]
    fn shows_changed_lines_with_context() {
        let table = [
            ("a\nb\nc", "a\nb\nc", "  ..."),
            ("a\nb\nc", "a\nx\nc", "  a\n- b\n+ x\n  c"),
            ("1\n2\n3\n4\n5\n6\n7", "1\n2\n3\n4\n5\n6\n8", "  ...\n  5\n  6\n- 7\n+ 8"),
        ];
        for (expected, actual, diff) in table {
            assert_eq!(lines(expected, actual), diff, "diff of {expected:?} and {actual:?}");
        }
    }
}
