#!/usr/bin/env python3
"""atomic-fenced, broken on purpose: where retention removed the record at its position it
resets its group's next offset to the log's start and goes on, where the row says to fail
(`on_out_of_range: fail`): the records retention removed are skipped without a word. The
atomic-fenced corpus has no retention; a claim of atomic-fenced also replays reset-fail's
out-of-range trace, which catches it.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "python"))

from atomic_fenced import AtomicFenced  # noqa: E402
from onceproof_consumer import serve  # noqa: E402


class ResetToStart(AtomicFenced):
    def stop(self, name, request, lease):
        reply = super().stop(name, request, lease)
        if name == "fail-out-of-range":
            partition, start = request["partition"], request["log"]["start"]
            with self.store.transaction() as db:
                db.execute(
                    "UPDATE progress SET next_offset = ? WHERE grp = ? AND part = ?", (start, self.group, partition)
                )
        return reply


if __name__ == "__main__":
    sys.exit(serve(ResetToStart))
