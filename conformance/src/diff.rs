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
    use super::lines;

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
