#!/usr/bin/env bash
# Tallies the committed shard results (mutants/GROUP/KofN/*.txt) per file, as MUTANTS.md's
# table: `scripts/mutants-tally.sh [GROUP]`. Score = caught / (caught + missed + timeout);
# unviable mutants (they do not build) are not counted. Reads only; prints Markdown.
#
# Then, for one GROUP with mutants/GROUP/verdicts.tsv, the score with the survivors' verdicts:
# a survivor `killed` (by the test the row names, re-run by scripts/mutants-verify.sh) counts
# as caught, an `equivalent` one leaves the count, an `explained` one (a behaviour the tests
# do not pin, such as how often a file is read) stays a survivor, and every survivor without a
# verdict is listed.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
group=${1:-*}
shopt -s nullglob
lists=(mutants/$group/*of*/)
if [[ ${#lists[@]} -eq 0 ]]; then
    echo "no shard results under mutants/$group/" >&2
    exit 2
fi
for dir in "${lists[@]}"; do
    # A shard still running (or interrupted) has no summary yet: it is not a result.
    [[ -f $dir/summary.txt ]] || continue
    for outcome in caught missed timeout unviable; do
        # A mutant's name starts with its file: impl/src/owner.rs:183:84: replace ...
        sed -n "s|^\([^:]*\):.*|\1 $outcome|p" "$dir/$outcome.txt"
    done
done | sort | uniq -c | awk '
    # Input: "COUNT FILE OUTCOME", sorted by file.
    function row(f) {
        c = count["caught"] + 0; m = count["missed"] + 0; t = count["timeout"] + 0; u = count["unviable"] + 0
        v = c + m + t
        printf "| `%s` | %d | %d | %d | %d | %s |\n", f, c, m, t, u, v ? sprintf("%.1f %%", 100 * c / v) : "-"
        C += c; M += m; T += t; U += u
        split("", count)
    }
    BEGIN {
        print "| file | caught | missed | timeout | unviable | score |"
        print "|---|---|---|---|---|---|"
    }
    $2 != file && file != "" { row(file) }
    { file = $2; count[$3] = $1 }
    END {
        row(file)
        V = C + M + T
        printf "| all | %d | %d | %d | %d | %s |\n", C, M, T, U, V ? sprintf("%.1f %%", 100 * C / V) : "-"
    }'

[[ $group != "*" && -f mutants/$group/verdicts.tsv ]] || exit 0
verdicts=mutants/$group/verdicts.tsv
survivors=$(for dir in "${lists[@]}"; do
    if [[ -f $dir/summary.txt ]]; then cat "$dir/missed.txt" "$dir/timeout.txt"; fi
done | sort)
caught=$(for dir in "${lists[@]}"; do if [[ -f $dir/summary.txt ]]; then cat "$dir/caught.txt"; fi; done | wc -l)
total=$(printf '%s\n' "$survivors" | grep -c . || true)
verdict_of() { awk -F'\t' -v m="$1" '$1 == m { print $2; exit }' "$verdicts"; }
killed=0
equivalent=0
explained=0
open=()
while IFS= read -r mutant; do
    [[ -n $mutant ]] || continue
    case $(verdict_of "$mutant") in
    killed) killed=$((killed + 1)) ;;
    equivalent) equivalent=$((equivalent + 1)) ;;
    explained) explained=$((explained + 1)) ;;
    *) open+=("$mutant") ;;
    esac
done <<<"$survivors"
viable=$((caught + total - equivalent))
echo
echo "With the verdicts of \`$verdicts\`: of $total survivors, $killed killed by a named test, $equivalent equivalent, $explained explained (still survivors), ${#open[@]} without a verdict."
awk -v c=$((caught + killed)) -v v=$viable 'BEGIN { printf "Score counting the kills, equivalent mutants left out: %d/%d = %.1f %%\n", c, v, v ? 100 * c / v : 0 }'
for mutant in "${open[@]}"; do
    echo "- no verdict: $mutant"
done
