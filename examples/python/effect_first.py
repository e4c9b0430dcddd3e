#!/usr/bin/env python3
"""effect-first: apply the effect, then commit the next offset, in two transactions (the
seed's consumer). A crash between them replays the record after the restart, and a zombie's
write lands (no fence): duplicates, which conformance shows the model predicts, step by step.

    conformance replay --worker 'python3 examples/python/effect_first.py' --strategy effect-first tests/traces
"""

import sys

from onceproof_consumer import Owner, serve


class EffectFirst(Owner):
    strategy = "effect-first"

    def step_apply_effect(self, partition, offset, lease):
        record = self.record("apply-effect", offset, lease, "fetched")
        self.crash_point("apply-effect", offset, "before")
        with self.store.transaction() as db:
            db.execute("UPDATE totals SET total = total + ? WHERE grp = ?", (record[1], self.group))
            self.crash_point("apply-effect", offset, "inside")
        self.crash_point("apply-effect", offset, "after")
        record[0] = "effect-applied"
        return {"outcome": "applied", "applied": 1, "skipped": 0}

    def step_commit_offset(self, partition, next_offset, lease):
        self.record("commit-offset", next_offset - 1, lease, "effect-applied")
        self.crash_point("commit-offset", next_offset, "before")
        with self.store.transaction() as db:
            db.execute(
                "UPDATE progress SET next_offset = ? WHERE grp = ? AND part = ?", (next_offset, self.group, partition)
            )
            self.crash_point("commit-offset", next_offset, "inside")
        self.crash_point("commit-offset", next_offset, "after")
        del lease.records[next_offset - 1]
        lease.checkpoint = next_offset
        lease.position = max(lease.position, next_offset)
        return {"outcome": "committed"}


if __name__ == "__main__":
    sys.exit(serve(EffectFirst))
