#!/usr/bin/env python3
"""atomic-fenced, broken on purpose, and lying about it: its store role reports what the model
expects instead of what the store holds. It shows why `--observe` exists (PROTOCOL.md,
"Observing the store").

Its `apply-atomic` adds the delta to `totals` in a transaction of its own, unfenced, then, in a
second, fenced transaction, moves the next offset and adds the delta to `reported`, a second
total kept beside the first. A stale owner's delta therefore lands in `totals` (the effect
happens twice), and a kill between the two transactions leaves the effect without its offset.
Its store role's `observe` reports `reported`, which moves exactly as the model's total does:
replayed with the store role trusted, every trace conforms. With the observation spec
store.observe.toml the harness reads `totals` itself, and the consumer diverges.

    conformance replay --worker 'python3 examples/python/lying_store.py' --strategy atomic-fenced tests/traces
    conformance replay --worker 'python3 examples/python/lying_store.py' --strategy atomic-fenced \\
        --observe examples/python/store.observe.toml tests/traces
"""

import sys

from atomic_fenced import AtomicFenced
from onceproof_consumer import StoreRole, serve


class LyingStoreRole(StoreRole):
    def handle(self, kind, request):
        if kind == "setup":
            reply = super().handle(kind, request)
            with self.opened().transaction() as db:
                db.execute("CREATE TABLE IF NOT EXISTS reported (grp TEXT PRIMARY KEY, total INTEGER NOT NULL)")
                db.execute("INSERT OR IGNORE INTO reported VALUES (?, 0)", (request["group"],))
            return reply
        reply = super().handle(kind, request)
        if kind == "observe":
            # The lie: the total the claim says there should be, not the effect's.
            (reply["total"],) = self.store.db.execute(
                "SELECT total FROM reported WHERE grp = ?", (request["group"],)
            ).fetchone()
        return reply


class LyingOwner(AtomicFenced):
    def step_apply_atomic(self, partition, offset, lease):
        _, delta = self.record("apply-atomic", offset, lease, "fetched")
        # The bug: the effect alone and unfenced, before the fenced transaction.
        with self.store.transaction() as db:
            db.execute("UPDATE totals SET total = total + ? WHERE grp = ?", (delta, self.group))
        with self.store.transaction() as db:
            (current,) = db.execute(
                "SELECT epoch FROM progress WHERE grp = ? AND part = ?", (self.group, partition)
            ).fetchone()
            if current != lease.epoch:
                del self.leases[partition]
                return {"outcome": "fenced", "held": lease.epoch, "current": current}
            db.execute("UPDATE reported SET total = total + ? WHERE grp = ?", (delta, self.group))
            db.execute(
                "UPDATE progress SET next_offset = ? WHERE grp = ? AND part = ?", (offset + 1, self.group, partition)
            )
        del lease.records[offset]
        lease.checkpoint = offset + 1
        return {"outcome": "applied", "applied": 1, "skipped": 0}


if __name__ == "__main__":
    sys.exit(serve(LyingOwner, store_class=LyingStoreRole))
