#!/usr/bin/env python3
"""atomic-fenced, broken on purpose: its restart position comes from a file of its own beside
the database (`position`), written just before each apply's commit. Every copy a kill leaves
shows the database's rows right, and an observation spec reads only those; a restart from a
kill between the file's rename and the commit resumes past a record its database never
applied (a skip). conformance catches it by restarting an owner on each kill point's copy.
With `--outside DIR` the file is kept in DIR instead, written under a temporary name and
renamed there: conformance refuses the step that renames it outside the store directory.
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "python"))

from atomic_fenced import AtomicFenced  # noqa: E402
from onceproof_consumer import serve  # noqa: E402


class SideFile(AtomicFenced):
    def __init__(self, init):
        if "--outside" in sys.argv:
            directory = sys.argv[sys.argv.index("--outside") + 1]
            self.side = os.path.join(directory, "position-" + init["store"].replace("/", "_"))
        else:
            self.side = os.path.join(init["store"], "position")
        super().__init__(init)

    def saved(self):
        try:
            with open(self.side) as file:
                return json.load(file)
        except FileNotFoundError:
            return {}

    def take_partitions(self, start):
        super().take_partitions(start)
        saved = self.saved()
        for partition, lease in self.leases.items():
            key = f"{self.group}/{partition}"
            if key in saved:
                lease.position = lease.checkpoint = saved[key]

    def step_apply_atomic(self, partition, offset, lease):
        saved = self.saved()
        saved[f"{self.group}/{partition}"] = offset + 1
        with open(self.side + ".new", "w") as file:
            json.dump(saved, file)
        os.rename(self.side + ".new", self.side)
        return super().step_apply_atomic(partition, offset, lease)


if __name__ == "__main__":
    sys.exit(serve(SideFile))
