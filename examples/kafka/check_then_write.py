#!/usr/bin/env python3
"""check-then-write: process-then-commit with a dedup check, but the check is a read of its
own and the write another transaction. Kills do not break it: an instance that applies a
record again after a kill finds its id already applied and leaves it.

Two instances can still both pass the check before either writes: one paused between its
check and its write (a zombie: a long GC pause, a slow call) while its partition moved, or
two owners overlapping in a rebalance. Each then writes the record: a duplicate. The check
belongs in the writing transaction (BEGIN IMMEDIATE, then check, then write).

    conformance kafka app --observe examples/kafka/app.observe.toml -- python3 examples/kafka/check_then_write.py
"""

import json
import os
import signal
import sqlite3
import sys

from confluent_kafka import Consumer, KafkaException

INSTANCE, GROUP = os.environ["ONCEPROOF_INSTANCE"], os.environ["ONCEPROOF_GROUP"]
SCHEMA = """
PRAGMA journal_mode = WAL;
PRAGMA synchronous = FULL;
CREATE TABLE IF NOT EXISTS totals (grp TEXT PRIMARY KEY, total INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS applied (seq INTEGER PRIMARY KEY AUTOINCREMENT, grp TEXT NOT NULL, id INTEGER NOT NULL);
"""
stopping = False


def on_sigterm(signum, frame):
    global stopping
    stopping = True  # finish the record in hand, then leave the group (consumer.close())


def apply(db, msg):
    # The effect, in one transaction: the total moves and the id is logged, or neither.
    record = json.loads(msg.value())
    # The dedup check, in a read of its own (autocommit): the write below is another
    # transaction, so what the check saw may have changed by the time it writes.
    if db.execute("SELECT 1 FROM applied WHERE grp = ? AND id = ?", (GROUP, record["id"])).fetchone():
        return
    db.execute("BEGIN IMMEDIATE")
    db.execute("UPDATE totals SET total = total + ? WHERE grp = ?", (record["delta"], GROUP))
    db.execute("INSERT INTO applied (grp, id) VALUES (?, ?)", (GROUP, record["id"]))
    db.execute("COMMIT")


def main():
    signal.signal(signal.SIGTERM, on_sigterm)
    # One file shared by all the group's instances: WAL, and a 30 s busy timeout so that a
    # writer waits for another instance's transaction instead of failing.
    db = sqlite3.connect(os.path.join(os.environ["ONCEPROOF_STORE"], "app.db"), timeout=30, isolation_level=None)
    db.executescript(SCHEMA)
    db.execute("INSERT OR IGNORE INTO totals VALUES (?, 0)", (GROUP,))
    consumer = Consumer({
        "bootstrap.servers": os.environ["ONCEPROOF_BOOTSTRAP"],
        "group.id": GROUP,
        "client.id": INSTANCE,
        "session.timeout.ms": int(os.environ["ONCEPROOF_SESSION_TIMEOUT_MS"]),
        "heartbeat.interval.ms": int(os.environ["ONCEPROOF_HEARTBEAT_INTERVAL_MS"]),
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,  # committed below, each offset after its record's effect
        "error_cb": lambda error: print(f"{INSTANCE} error: {error}", file=sys.stderr, flush=True),
    })

    def on_assign(consumer, partitions):
        print(f"{INSTANCE} assigned {[tp.partition for tp in partitions]}", flush=True)

    def on_revoke(consumer, partitions):  # also on_lost: the partitions are not ours any more
        print(f"{INSTANCE} revoked {[tp.partition for tp in partitions]}", flush=True)

    consumer.subscribe([os.environ["ONCEPROOF_TOPIC"]], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    while not stopping:
        msg = consumer.poll(0.5)  # also runs the rebalance callbacks; idle: None, poll again
        if msg is None:
            continue
        if msg.error():
            print(f"{INSTANCE} error: {msg.error()}", file=sys.stderr, flush=True)
            continue
        apply(db, msg)
        # <- killed here, the record is applied but not committed: it will be applied again.
        try:
            consumer.commit(message=msg, asynchronous=False)  # commits msg.offset() + 1
        except KafkaException as error:
            # Typically a rebalance took the partition: its next owner applies the record again.
            print(f"{INSTANCE} error: commit of offset {msg.offset()}: {error}", file=sys.stderr, flush=True)
    consumer.close()  # leaves the group
    db.close()


if __name__ == "__main__":
    main()
