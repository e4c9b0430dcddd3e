#!/usr/bin/env python3
"""atomic-fenced, broken on purpose: its start reads its partitions' rows in one transaction and
claims them in a second, writing back the epoch plus one and the next offset it read. Every
kill point leaves the store from before or after the start, and a start stepped between two
other steps never has another owner's write between its read and its write. conformance
catches it by racing: the start held between its two transactions while an earlier
incarnation, still current, applies a record; released, the start writes the old next offset
back, and the record would be applied again.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "python"))

from atomic_fenced import AtomicFenced  # noqa: E402
from onceproof_consumer import Lease, not_supported, serve  # noqa: E402


class ClaimApart(AtomicFenced):
    def take_partitions(self, start):
        if start not in ("claim", "stored"):
            raise not_supported(f"start '{start}'")
        with self.store.transaction():
            rows = {p: self.store.row(self.group, p) for p in range(self.partitions)}
        # The bug: the claim trusts the rows read in the transaction before.
        with self.store.transaction() as db:
            for partition, (next_offset, epoch, owner) in rows.items():
                if owner != self.name:
                    continue
                if start == "claim":
                    epoch += 1
                    db.execute(
                        "UPDATE progress SET epoch = ?, next_offset = ? WHERE grp = ? AND part = ?",
                        (epoch, next_offset, self.group, partition),
                    )
                self.leases[partition] = Lease(epoch, next_offset)


if __name__ == "__main__":
    sys.exit(serve(ClaimApart))
