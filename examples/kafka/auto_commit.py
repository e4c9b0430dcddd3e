#!/usr/bin/env python3
"""auto-commit: Kafka's default. Once a second librdkafka commits, in the background, the
offsets of the records poll() has returned, applied or not.

Killed after applying records but before the next auto-commit, the instance that reads the
partition next (itself restarted, or another) starts at the older committed offset and applies
them again: duplicates. Killed after an auto-commit that covered a record polled but not yet
applied, that record is never applied: a skip.

    conformance kafka app --observe examples/kafka/app.observe.toml -- python3 examples/kafka/auto_commit.py
"""

import json
import os
import signal
import sqlite3
import sys

from confluent_kafka import Consumer

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
        # The default, spelled out: commit what poll() has returned, once a second.
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 1000,
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
    consumer.close()  # commits the last offsets poll() returned, leaves the group
    db.close()


if __name__ == "__main__":
    main()
