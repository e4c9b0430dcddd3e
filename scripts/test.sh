#!/usr/bin/env bash
# README's test command: installs what the tests need where it is missing (scripts/setup.sh:
# system packages and the Python client; instant when everything is there), then runs every
# test of the workspace. Arguments go to cargo test, e.g. `bash scripts/test.sh -- --nocapture`.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! bash scripts/setup.sh; then
    echo "scripts/test.sh: the set-up is incomplete (above), so no test ran; without it," \
        "cargo test --workspace --locked --all-targets runs the tests, a family whose tool is missing" \
        "printing 'skipped: TOOL not installed'" >&2
    exit 1
fi
exec cargo test --workspace --locked --all-targets "$@"
