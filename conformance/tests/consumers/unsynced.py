#!/usr/bin/env python3
"""atomic-fenced, broken on purpose in how its commits are made durable: its store runs with
`PRAGMA synchronous = LEVEL` (`--synchronous`, default OFF: it never syncs) and
`PRAGMA journal_mode = MODE` (`--journal`, default DELETE). A SIGKILL keeps the page cache, so
every kill point reads right; a power cut right after a step's reply loses the step. With FULL
in DELETE mode only the commit itself, the journal's unlink, is not made durable (its directory
is not synced): a cut brings the journal back, hot, and the reader rolls the commit back.
conformance catches each by the power cut right after the step. With `--journal WAL
--synchronous FULL` every commit is synced, and it conforms.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "python"))

import onceproof_consumer  # noqa: E402
from atomic_fenced import AtomicFenced  # noqa: E402


def flag(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


SYNCHRONOUS = flag("--synchronous", "OFF")
JOURNAL = flag("--journal", "DELETE")
original = onceproof_consumer.Store.__init__


def unsynced(self, directory, create):
    original(self, directory, create)
    self.db.execute(f"PRAGMA journal_mode = {JOURNAL}")
    self.db.execute(f"PRAGMA synchronous = {SYNCHRONOUS}")


onceproof_consumer.Store.__init__ = unsynced

if __name__ == "__main__":
    sys.exit(onceproof_consumer.serve(AtomicFenced))
