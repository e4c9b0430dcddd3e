#!/usr/bin/env python3
"""atomic-fenced with a counter of applied records in a file of its store directory, written
through a shared memory map (`mmap`): stores to that memory change the file with no system
call, so a kill between two of them is never a kill point the tracer could stop at.
conformance refuses to certify it, naming the mapped file.
"""

import mmap
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "python"))

from atomic_fenced import AtomicFenced  # noqa: E402
from onceproof_consumer import serve  # noqa: E402


class Mapped(AtomicFenced):
    def __init__(self, init):
        super().__init__(init)
        path = os.path.join(init["store"], "counter")
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        os.ftruncate(descriptor, 8)
        self.counter = mmap.mmap(descriptor, 8, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        os.close(descriptor)

    def step_apply_atomic(self, partition, offset, lease):
        reply = super().step_apply_atomic(partition, offset, lease)
        (count,) = struct.unpack("<q", self.counter[:8])
        self.counter[:8] = struct.pack("<q", count + 1)
        return reply


if __name__ == "__main__":
    sys.exit(serve(Mapped))
