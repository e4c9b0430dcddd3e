#!/usr/bin/env python3
"""atomic-fenced, broken on purpose: it remembers what it applied in a file of its own beside
the database (`done`), written just before each apply's commit, and skips the effect of a
record the file says is done while still committing its next offset. Its leases come from the
database and are right after any kill; a restart from a kill between the file's write and the
commit takes the right position, fetches the record again and then skips its effect (a lost
record). conformance catches it by asking the owner restarted on each kill point's copy for
its next steps and reading the store they leave.
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "python"))

from atomic_fenced import AtomicFenced  # noqa: E402
from onceproof_consumer import serve  # noqa: E402


class SideSkip(AtomicFenced):
    def __init__(self, init):
        self.side = os.path.join(init["store"], "done")
        super().__init__(init)

    def done(self):
        try:
            with open(self.side) as file:
                return json.load(file)
        except FileNotFoundError:
            return {}

    def step_apply_atomic(self, partition, offset, lease):
        done = self.done()
        key = f"{self.group}/{partition}"
        if offset < done.get(key, 0):
            # "Already applied": commit the offset only.
            self.record("apply-atomic", offset, lease, "fetched")
            with self.store.transaction() as db:
                db.execute(
                    "UPDATE progress SET next_offset = ? WHERE grp = ? AND part = ?",
                    (offset + 1, self.group, partition),
                )
            del lease.records[offset]
            lease.checkpoint = offset + 1
            return {"outcome": "applied", "applied": 1, "skipped": 0}
        done[key] = offset + 1
        with open(self.side + ".new", "w") as file:
            json.dump(done, file)
        os.rename(self.side + ".new", self.side)
        return super().step_apply_atomic(partition, offset, lease)


if __name__ == "__main__":
    sys.exit(serve(SideSkip))
