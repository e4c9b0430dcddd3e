#!/usr/bin/env bash
# Installs, where missing, every system package and client the tests need besides cargo:
# PostgreSQL's server binaries, SPIN with gcc and GNU time, Chromium with chromedriver, Python 3
# with the confluent-kafka client, Node.js with the JavaScript example's kafkajs and pg, and
# Perl with DBI and DBD::SQLite. README's test command (`bash scripts/test.sh`) and CI (.ci/run)
# run it first.
#
# Idempotent: when everything is there it only checks (well under a second) and prints one line.
# As root it installs what is missing from Debian's packages (apt-get), confluent-kafka from
# PyPI (pip) and the JavaScript example's packages from npm (npm ci), then checks again. As
# another user it installs nothing: it names what is missing and how to install it, and exits 1. Without the set-up `cargo test` still runs: a test family
# whose tool is missing prints `skipped: TOOL not installed (bash scripts/setup.sh installs it)`
# (and fails instead when CI is set).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
cd "$(dirname "$0")/.."

# The Python client's pinned version (PyPI).
CONFLUENT_KAFKA=2.16.2

# The JavaScript examples' packages (kafkajs, pg), pinned in examples/kafka/js/package-lock.json.
JS_EXAMPLES=examples/kafka/js

packages=() # the Debian packages to install, in order
missing=()  # one line per missing tool: what, for which tests, how to install it
pip=''      # set when confluent-kafka must be installed with pip
npm=''      # set when the JavaScript examples' packages must be installed with npm ci

# need PACKAGE WHAT TESTS: Debian's PACKAGE provides WHAT, which TESTS need.
need() {
    packages+=("$1")
    missing+=("$2 (for $3); to install it: sudo apt-get install -y $1")
}

found() { command -v "$1" >/dev/null 2>&1; }

# initdb in a /usr/lib/postgresql/*/bin (Debian's place, off PATH) or on PATH.
postgres_found() {
    local initdb
    for initdb in /usr/lib/postgresql/*/bin/initdb; do
        [ -x "$initdb" ] && return 0
    done
    found initdb
}

check() {
    packages=()
    missing=()
    pip=''
    npm=''

    # PostgreSQL's server binaries (initdb, pg_ctl: /usr/lib/postgresql/*/bin or PATH), Debian's
    # postgresql package: impl/tests/postgres.rs and the other PostgreSQL tests (impl/tests,
    # conformance/tests/postgres.rs and mutations.rs) start (and stop) their own private
    # cluster; nothing listens on the network.
    postgres_found || need postgresql "PostgreSQL's server binaries" "impl/tests/postgres.rs and the other PostgreSQL tests"

    # SPIN, the C compiler its verifier needs (gcc, also the `cc` cargo links with) and GNU
    # time (pan's peak memory): model/tests/vs_spin.rs runs `model bench --vs-spin` on a tiny
    # configuration, and fails instead of skipping when CI is set.
    found spin || need spin "SPIN" "model/tests/vs_spin.rs"
    found gcc || need gcc "gcc" "model/tests/vs_spin.rs, and cargo's linker"
    [ -x /usr/bin/time ] || need time "/usr/bin/time" "model/tests/vs_spin.rs"

    # Chromium and chromedriver (/usr/bin/chromium, /usr/bin/chromedriver): model/tests/browser.rs
    # drives `model explore` in a headless Chromium, and fails instead of skipping when CI is set.
    found chromium || need chromium "Chromium" "model/tests/browser.rs"
    found chromedriver || need chromium-driver "chromedriver" "model/tests/browser.rs"

    # Python 3: conformance/tests/protocol.rs, budgets.rs, observe.rs, incarnations.rs and docs.rs
    # replay the corpus, walks and documented commands against the example consumers of
    # examples/python/ (its standard library only) over the open protocol (PROTOCOL.md).
    found python3 || need python3 "Python 3" "conformance/tests/protocol.rs and the other example tests"

    # Python's confluent-kafka client, pinned (PyPI; pip itself from Debian's python3-pip when
    # missing): the Kafka example consumer of examples/kafka/ talks to the broker through it.
    if ! python3 -c 'import confluent_kafka' >/dev/null 2>&1; then
        pip=1
        if ! python3 -m pip --version >/dev/null 2>&1; then
            need python3-pip "pip" "installing confluent-kafka"
        fi
        missing+=("Python's confluent-kafka $CONFLUENT_KAFKA (for the Kafka example of examples/kafka/); to install it: python3 -m pip install confluent-kafka==$CONFLUENT_KAFKA (with --break-system-packages where pip refuses an externally managed environment)")
    fi

    # Node.js with npm, and the JavaScript example's kafkajs and pg (npm ci from its lock file
    # into examples/kafka/js/node_modules): conformance/tests/kafka_app.rs runs it on PostgreSQL.
    found node || need nodejs "Node.js" "conformance/tests/kafka_app.rs"
    found npm || need npm "npm" "installing the JavaScript example's kafkajs and pg"
    if ! node -e "require('./$JS_EXAMPLES/node_modules/kafkajs'); require('./$JS_EXAMPLES/node_modules/pg')" >/dev/null 2>&1; then
        npm=1
        missing+=("the JavaScript example's kafkajs and pg (for conformance/tests/kafka_app.rs); to install them: (cd $JS_EXAMPLES && npm ci)")
    fi

    # Perl 5 with DBI and DBD::SQLite (Debian's libdbd-sqlite3-perl, which pulls in perl and with
    # it JSON::PP): conformance/tests/protocol.rs, budgets.rs and observe.rs replay the corpus and
    # walks against the dedup-atomic example consumer of examples/perl/, whose store is a SQLite file.
    if ! perl -MDBI -MDBD::SQLite -MJSON::PP -e 1 >/dev/null 2>&1; then
        need libdbd-sqlite3-perl "Perl's DBI and DBD::SQLite" "conformance/tests/protocol.rs, budgets.rs and observe.rs"
    fi
}

# One line naming what is there (the fast path's only output).
summary() {
    echo "scripts/setup.sh: the tests' tools are installed (PostgreSQL, SPIN, gcc, time, Chromium, chromedriver, Python 3, confluent-kafka, Node.js with kafkajs and pg, Perl's DBI and DBD::SQLite)"
}

report() {
    local line
    for line in "${missing[@]}"; do
        echo "scripts/setup.sh: missing $line" >&2
    done
}

check
if [ ${#missing[@]} -eq 0 ]; then
    summary
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    report
    echo "scripts/setup.sh: not root, so nothing was installed: run sudo bash scripts/setup.sh, or the commands above" >&2
    exit 1
fi
if [ ${#packages[@]} -gt 0 ] && ! found apt-get; then
    report
    echo "scripts/setup.sh: no apt-get (not Debian?): install the Debian packages above with this system's package manager" >&2
    exit 1
fi

if [ ${#packages[@]} -gt 0 ]; then
    echo "installing Debian's ${packages[*]}"
    apt-get update -qq
    apt-get install -y -qq "${packages[@]}" >/dev/null
fi
if [ -n "$pip" ]; then
    echo "installing confluent-kafka $CONFLUENT_KAFKA from PyPI"
    # Debian's Python is an externally managed environment (PEP 668), where pip refuses to
    # install unless told to; a pyenv or virtual environment's Python ignores the setting.
    PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 \
        python3 -m pip install -q "confluent-kafka==$CONFLUENT_KAFKA"
fi
if [ -n "$npm" ]; then
    echo "installing the JavaScript example's kafkajs and pg (npm ci in $JS_EXAMPLES)"
    (cd "$JS_EXAMPLES" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi

check
if [ ${#missing[@]} -gt 0 ]; then
    report
    echo "scripts/setup.sh: still missing after the installation above" >&2
    exit 1
fi
summary
