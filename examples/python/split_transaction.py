#!/usr/bin/env python3
"""atomic-fenced, broken on purpose: the fenced effect and the next offset are committed in two
transactions. Every reply is the one the real atomic-fenced consumer gives, and a crash between
two steps can never tell them apart; only a kill between the two commits shows it (the effect
is durable, the offset is not: after the restart the record is applied again). conformance
catches it with its default kill points inside steps, and passes it with `--inside-step off`.

    conformance replay --worker 'python3 examples/python/split_transaction.py' --strategy atomic-fenced tests/traces
"""

import sys

from atomic_fenced import AtomicFenced
from onceproof_consumer import serve


class SplitTransaction(AtomicFenced):
    def step_apply_atomic(self, partition, offset, lease):
        _, delta = self.record("apply-atomic", offset, lease, "fetched")
        with self.store.transaction() as db:
            (current,) = db.execute(
                "SELECT epoch FROM progress WHERE grp = ? AND part = ?", (self.group, partition)
            ).fetchone()
            if current != lease.epoch:
                del self.leases[partition]
                return {"outcome": "fenced", "held": lease.epoch, "current": current}
            db.execute("UPDATE totals SET total = total + ? WHERE grp = ?", (delta, self.group))
        # The bug: the offset in a transaction of its own, after the effect's COMMIT.
        with self.store.transaction() as db:
            db.execute(
                "UPDATE progress SET next_offset = ? WHERE grp = ? AND part = ?", (offset + 1, self.group, partition)
            )
        del lease.records[offset]
        lease.checkpoint = offset + 1
        return {"outcome": "applied", "applied": 1, "skipped": 0}


if __name__ == "__main__":
    sys.exit(serve(SplitTransaction))
