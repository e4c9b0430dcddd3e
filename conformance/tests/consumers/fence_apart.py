#!/usr/bin/env python3
"""atomic-fenced, broken on purpose: it checks its fence in one transaction and writes the effect
and the next offset together in a second. Effect and offset are atomic, so every kill point
leaves the store from before or after the step, and owners stepped one after the other never
put a claim between the check and the write: the fence looks right. conformance catches it by
racing: the owner held between its two transactions while a second incarnation claims and
applies the record, then released, applies it again.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "python"))

from atomic_fenced import AtomicFenced  # noqa: E402
from onceproof_consumer import serve  # noqa: E402


class FenceApart(AtomicFenced):
    def step_apply_atomic(self, partition, offset, lease):
        _, delta = self.record("apply-atomic", offset, lease, "fetched")
        with self.store.transaction() as db:
            (current,) = db.execute(
                "SELECT epoch FROM progress WHERE grp = ? AND part = ?", (self.group, partition)
            ).fetchone()
        if current != lease.epoch:
            del self.leases[partition]
            return {"outcome": "fenced", "held": lease.epoch, "current": current}
        # The bug: the write trusts the check of the transaction before.
        with self.store.transaction() as db:
            db.execute("UPDATE totals SET total = total + ? WHERE grp = ?", (delta, self.group))
            db.execute(
                "UPDATE progress SET next_offset = ? WHERE grp = ? AND part = ?", (offset + 1, self.group, partition)
            )
        del lease.records[offset]
        lease.checkpoint = offset + 1
        return {"outcome": "applied", "applied": 1, "skipped": 0}


if __name__ == "__main__":
    sys.exit(serve(FenceApart))
