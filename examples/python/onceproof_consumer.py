"""A consumer of onceproof's open owner protocol (PROTOCOL.md, version 1), standard library only.

This module holds what every example consumer shares: the newline-delimited JSON loop, the
store (one SQLite file in the directory `init` names), the store role (`setup`, `claim`,
`observe`) and an owner's leases (`fetch`, `assign`, `leases`, `arm`, and the two steps that
stop working on a partition without writing: `refuse-ahead` when the log lost records the
group consumed, `fail-out-of-range` when retention removed the next record). A strategy is a
subclass that implements its write steps: see atomic_fenced.py and effect_first.py.

The store, per group:
    totals(grp PRIMARY KEY, total)                  the effect: total += delta
    progress(grp, part, next_offset, epoch, owner)  the group's progress and fencing token
"""

import json
import os
import signal
import sqlite3
import sys


class StepError(Exception):
    """A request this consumer answers with an `error` reply (PROTOCOL.md, "Errors")."""

    def __init__(self, code, text, definite=True):
        super().__init__(text)
        self.code = code
        self.text = text
        self.definite = definite


def not_enabled(text):
    return StepError("not-enabled", text)


def not_supported(text):
    return StepError("not-supported", text)


SCHEMA = """
CREATE TABLE IF NOT EXISTS totals (grp TEXT PRIMARY KEY, total INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS progress (
    grp TEXT NOT NULL, part INTEGER NOT NULL, next_offset INTEGER NOT NULL,
    epoch INTEGER NOT NULL, owner TEXT NOT NULL, PRIMARY KEY (grp, part));
"""


class Store:
    """The consumer's store: one SQLite file, explicit transactions (autocommit otherwise)."""

    def __init__(self, directory, create):
        path = os.path.join(directory, "store.db")
        if not create and not os.path.exists(path):
            raise StepError("refused", f"no store at {path}: the store role's setup creates it")
        self.db = sqlite3.connect(path, isolation_level=None, timeout=10)
        self.db.execute("PRAGMA synchronous = EXTRA")
        if create:
            self.db.executescript(SCHEMA)

    def transaction(self):
        """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on an exception (`with store.transaction():`)."""
        return _Transaction(self.db)

    def row(self, group, partition):
        row = self.db.execute(
            "SELECT next_offset, epoch, owner FROM progress WHERE grp = ? AND part = ?", (group, partition)
        ).fetchone()
        if row is None:
            raise StepError("storage", f"no progress row for {group}/{partition}", definite=True)
        return row

    def total(self, group):
        row = self.db.execute("SELECT total FROM totals WHERE grp = ?", (group,)).fetchone()
        return 0 if row is None else row[0]


class _Transaction:
    def __init__(self, db):
        self.db = db

    def __enter__(self):
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, kind, value, traceback):
        self.db.execute("ROLLBACK" if kind else "COMMIT")
        return False


class StoreRole:
    """The harness's window on the durable state: setup, claim (a rebalance), observe."""

    def __init__(self, init):
        self.directory = init["store"]
        self.partitions = init["partitions"]
        self.store = None

    def opened(self, create=False):
        if self.store is None:
            self.store = Store(self.directory, create)
        return self.store

    def handle(self, kind, request):
        if kind == "setup":
            store = self.opened(create=True)
            with store.transaction() as db:
                db.execute("INSERT OR IGNORE INTO totals VALUES (?, 0)", (request["group"],))
                for partition in range(self.partitions):
                    db.execute(
                        "INSERT OR IGNORE INTO progress VALUES (?, ?, 0, 1, ?)",
                        (request["group"], partition, request["owner"]),
                    )
            return {}
        if kind == "claim":
            group, partition, owner = request["group"], request["partition"], request["owner"]
            with self.opened().transaction() as db:
                db.execute(
                    "UPDATE progress SET epoch = epoch + 1, owner = ? WHERE grp = ? AND part = ?",
                    (owner, group, partition),
                )
                (epoch,) = db.execute(
                    "SELECT epoch FROM progress WHERE grp = ? AND part = ?", (group, partition)
                ).fetchone()
            return {"epoch": epoch}
        if kind == "observe":
            store, group = self.opened(), request["group"]
            rows = []
            for partition in range(self.partitions):
                next_offset, epoch, owner = store.row(group, partition)
                rows.append({"next_offset": next_offset, "epoch": epoch, "owner": owner, "stamp": None})
            return {"total": store.total(group), "partitions": rows}
        raise StepError("malformed", f"'{kind}' is no request of the store role")


class Lease:
    """An owner's view of a partition it believes it owns (the model's lease)."""

    def __init__(self, epoch, next_offset):
        self.epoch = epoch
        self.position = next_offset  # the next offset to fetch
        self.checkpoint = next_offset  # the next offset of the last checkpoint written or taken
        self.records = {}  # offset -> [stage, delta]: fetched and not finished

    def wire(self, partition):
        records = [{"offset": o, "stage": r[0]} for o, r in sorted(self.records.items())]
        return {"partition": partition, "epoch": self.epoch, "position": self.position,
                "checkpoint": self.checkpoint, "records": records, "done": []}


class Owner:
    """One owner of one group. Subclasses name their strategy and implement its write steps
    as methods `step_<name>(partition, offset, lease)` (dashes as underscores)."""

    strategy = None

    def __init__(self, init):
        if init["strategy"] != self.strategy:
            raise not_supported(f"strategy '{init['strategy']}' (this consumer is {self.strategy})")
        settings = init["settings"]
        if settings["on_out_of_range"] != "fail" or settings["log_check"] != "refuse-ahead":
            raise not_supported(f"settings {settings} (this consumer runs the defaults only)")
        self.group, self.name = init["group"], init["owner"]
        self.store = Store(init["store"], create=False)
        self.partitions = init["partitions"]
        self.armed = []
        self.leases = {}
        self.take_partitions(init.get("start", "claim"))

    def take_partitions(self, start):
        """The coordinator hands a starting owner every partition the store names it owner
        of; it resumes each from the committed next offset, at a new epoch it claims (so an
        earlier incarnation still running is fenced) or, `stored`, at the stored one."""
        if start not in ("claim", "stored"):
            raise not_supported(f"start '{start}'")
        with self.store.transaction() as db:
            for partition in range(self.partitions):
                next_offset, epoch, owner = self.store.row(self.group, partition)
                if owner != self.name:
                    continue
                if start == "claim":
                    epoch += 1
                    db.execute(
                        "UPDATE progress SET epoch = ? WHERE grp = ? AND part = ?", (epoch, self.group, partition)
                    )
                self.leases[partition] = Lease(epoch, next_offset)

    def handle(self, kind, request):
        if kind == "step":
            return self.step(request)
        if kind == "assign":
            partition = request["partition"]
            next_offset, epoch, owner = self.store.row(self.group, partition)
            if owner != self.name:
                return {"epoch": None}
            self.leases[partition] = Lease(epoch, next_offset)
            return {"epoch": epoch}
        if kind == "leases":
            return {"leases": [lease.wire(p) for p, lease in sorted(self.leases.items())]}
        if kind == "arm":
            self.armed.append(parse_point(request["point"]))
            return {}
        raise StepError("malformed", f"'{kind}' is no request of the owner role")

    def step(self, request):
        name, partition, offset = request["step"], request["partition"], request["offset"]
        lease = self.leases.get(partition)
        if lease is None:
            raise not_enabled(f"{name} {partition} {offset}: no lease on partition {partition}")
        if name == "fetch":
            return self.fetch(request, lease)
        if name in ("refuse-ahead", "fail-out-of-range"):
            return self.stop(name, request, lease)
        method = getattr(self, "step_" + name.replace("-", "_"), None)
        if method is None:
            raise not_supported(f"step '{name}' (this consumer is {self.strategy})")
        return method(partition, offset, lease)

    def fetch(self, request, lease):
        partition, offset, log = request["partition"], request["offset"], request.get("log")
        records = [r for r in request.get("records", []) if r["offset"] == offset]
        if offset != lease.position or not records:
            raise not_enabled(f"fetch {partition} {offset}: the position is {lease.position}")
        if log is not None and not log["start"] <= offset < log["end"]:
            raise not_enabled(f"fetch {partition} {offset}: the log holds {log['start']}..{log['end']}")
        must = self.must_stop(partition, lease, log)
        if must is not None:
            raise not_enabled(f"fetch {partition} {offset}: the lease must {must[0]} first")
        if records[0].get("poison"):
            # The model meets poison records in the poison rows only (`--poison` is refused
            # for the others), and this consumer implements none of them.
            raise not_supported("a poison record (this consumer has no poison policy)")
        lease.records[offset] = ["fetched", records[0]["delta"]]
        lease.position = offset + 1
        return {"outcome": "fetched", "count": 1}

    def must_stop(self, partition, lease, log):
        """Whether a lease must stop working on its partition before anything else, and why
        (spec.md §3, the model's `lease_actions`), as `(step, stored next offset)`, or None.
        Only a lease with nothing in flight stops (records fetched before a retention or a
        loss are still completed). It `refuse-ahead`s (`--log-check refuse-ahead`) when its
        group's stored next offset or its own position is past the log's end: the log lost
        records the group consumed. Else it `fail-out-of-range`s (`--on-out-of-range fail`)
        when retention removed the record at its position. `log` is the request's (the
        partition's log as the harness sees it before the step)."""
        if lease.records or log is None:
            return None
        stored, _, _ = self.store.row(self.group, partition)
        if stored > log["end"] or lease.position > log["end"]:
            return ("refuse-ahead", stored)
        if lease.position < log["start"]:
            return ("fail-out-of-range", stored)
        return None

    def stop(self, name, request, lease):
        """`refuse-ahead` or `fail-out-of-range`: nothing is written; the owner drops the lease
        (the real consumer exits with code 4, or with `OffsetOutOfRange`)."""
        partition, offset, log = request["partition"], request["offset"], request.get("log")
        must = self.must_stop(partition, lease, log)
        if offset != lease.position or must is None or must[0] != name:
            raise not_enabled(f"{name} {partition} {offset}: the lease is at {lease.position}, the log {log}")
        del self.leases[partition]
        if name == "refuse-ahead":
            return {"outcome": "refused", "stored": must[1], "position": lease.position, "end": log["end"]}
        return {"outcome": "out-of-range", "position": lease.position, "start": log["start"]}

    def record(self, name, offset, lease, stage):
        """The record in flight at `offset`, which must be at `stage`."""
        record = lease.records.get(offset)
        if record is None or record[0] != stage:
            raise not_enabled(f"{name} {offset}: no record at {offset} in stage {stage}")
        return record

    def crash_point(self, name, offset, when):
        """Dies here, by SIGKILL, if a crash point armed for this step and moment says so."""
        for point in self.armed:
            if point == (name, when, None) or point == (name, when, offset):
                sys.stdout.flush()
                os.kill(os.getpid(), signal.SIGKILL)


def parse_point(text):
    """`STEP:WHEN[@OFFSET]`, WHEN one of before, inside, after."""
    point, _, offset = text.partition("@")
    name, _, when = point.partition(":")
    if when not in ("before", "inside", "after") or (offset and not offset.isdigit()):
        raise StepError("malformed", f"crash point '{text}' is not STEP:WHEN[@OFFSET]")
    return (name, when, int(offset) if offset else None)


def serve(owner_class, stdin=sys.stdin, stdout=sys.stdout, store_class=None):
    """Serves requests until `quit` or the end of input. Every reply is flushed before the next
    request is read: the harness may SIGKILL this process between any two. `store_class` is the
    store role (default `StoreRole`)."""
    store_class = store_class or StoreRole
    served = None
    for line in stdin:
        request_id, reply = None, None
        try:
            request = json.loads(line)
            request_id = request.get("id")
            kind = request["type"]
            if served is None:
                if kind != "init":
                    raise StepError("malformed", f"'{kind}' before init")
                if request["protocol"] != 1:
                    raise not_supported(f"protocol version {request['protocol']}")
                served = store_class(request) if request["role"] == "store" else owner_class(request)
                reply = {"type": "init_ok", "protocol": 1}
            elif kind == "quit":
                write(stdout, request_id, {"type": "quit_ok"})
                return 0
            else:
                reply = {"type": kind + "_ok", **served.handle(kind, request)}
        except StepError as error:
            reply = {"type": "error", "code": error.code, "definite": error.definite, "text": error.text}
            if served is None and request_id is not None:
                write(stdout, request_id, reply)
                return 2
        except (ValueError, KeyError, TypeError) as error:
            reply = {"type": "error", "code": "malformed", "definite": True, "text": f"{type(error).__name__}: {error}"}
        except sqlite3.Error as error:
            reply = {"type": "error", "code": "storage", "definite": False, "text": str(error)}
        write(stdout, request_id, reply)
    return 0


def write(stdout, request_id, reply):
    message = {"in_reply_to": request_id, **reply} if request_id is not None else reply
    stdout.write(json.dumps(message) + "\n")
    stdout.flush()
