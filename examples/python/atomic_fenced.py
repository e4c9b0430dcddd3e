#!/usr/bin/env python3
"""atomic-fenced: the effect and the next offset in one transaction that first checks the
owner's epoch against the stored one (the fencing token). A stale owner (a zombie after a
rebalance, or an earlier incarnation of a restarted owner) writes nothing and drops the
partition. Each record's effect lands exactly once, whatever crashes, rebalances and
competing owners do.

    conformance replay --worker 'python3 examples/python/atomic_fenced.py' --strategy atomic-fenced tests/traces

`--no-fence` drops the epoch check: the deliberately broken variant, which conformance must
catch (a zombie's write lands).
"""

import sys

from onceproof_consumer import Owner, serve


class AtomicFenced(Owner):
    strategy = "atomic-fenced"
    fence = True

    def step_apply_atomic(self, partition, offset, lease):
        _, delta = self.record("apply-atomic", offset, lease, "fetched")
        self.crash_point("apply-atomic", offset, "before")
        with self.store.transaction() as db:
            (current,) = db.execute(
                "SELECT epoch FROM progress WHERE grp = ? AND part = ?", (self.group, partition)
            ).fetchone()
            if self.fence and current != lease.epoch:
                # Fenced: nothing written; another owner holds the partition now.
                del self.leases[partition]
                return {"outcome": "fenced", "held": lease.epoch, "current": current}
            db.execute("UPDATE totals SET total = total + ? WHERE grp = ?", (delta, self.group))
            db.execute(
                "UPDATE progress SET next_offset = ? WHERE grp = ? AND part = ?", (offset + 1, self.group, partition)
            )
            self.crash_point("apply-atomic", offset, "inside")
        self.crash_point("apply-atomic", offset, "after")
        del lease.records[offset]
        lease.checkpoint = offset + 1
        return {"outcome": "applied", "applied": 1, "skipped": 0}


class Unfenced(AtomicFenced):
    fence = False


if __name__ == "__main__":
    sys.exit(serve(Unfenced if "--no-fence" in sys.argv[1:] else AtomicFenced))
