#!/usr/bin/env python3
"""atomic, unfenced: each record's effect and its partition's next offset in ONE SQLite
transaction, so a kill leaves both or neither, and on assignment the instance seeks to the
stored offset: the pattern Kafka's documentation suggests for storing offsets outside Kafka.
But nothing fences an earlier owner: no epoch is claimed, and the transaction writes the
offset it has without looking at the stored one. An instance paused while its partitions
moved (a zombie) wakes with records it fetched before, and applies them again after the new
owner did. atomic_fenced.py is the same program with the fence.

    conformance kafka app --observe examples/kafka/app.observe.toml -- python3 examples/kafka/atomic_unfenced.py
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
CREATE TABLE IF NOT EXISTS offsets (grp TEXT NOT NULL, part INTEGER NOT NULL,
    next_offset INTEGER NOT NULL, epoch INTEGER NOT NULL, PRIMARY KEY (grp, part));
"""
stopping = False


def on_sigterm(signum, frame):
    global stopping
    stopping = True  # finish the record in hand, then leave the group (consumer.close())


def resume_at(db, part):
    # Where applying resumes: the stored next offset (no epoch claimed: nothing fences).
    db.execute("INSERT OR IGNORE INTO offsets VALUES (?, ?, 0, 0)", (GROUP, part))
    return db.execute("SELECT next_offset FROM offsets WHERE grp = ? AND part = ?", (GROUP, part)).fetchone()[0]


def apply(db, msg):
    part = msg.partition()
    db.execute("BEGIN IMMEDIATE")
    record = json.loads(msg.value())
    db.execute("UPDATE totals SET total = total + ? WHERE grp = ?", (record["delta"], GROUP))
    db.execute("INSERT INTO applied (grp, id) VALUES (?, ?)", (GROUP, record["id"]))
    db.execute("UPDATE offsets SET next_offset = ? WHERE grp = ? AND part = ?", (msg.offset() + 1, GROUP, part))
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
        "enable.auto.commit": False,  # the position lives in the database
        "error_cb": lambda error: print(f"{INSTANCE} error: {error}", file=sys.stderr, flush=True),
    })

    def on_assign(consumer, partitions):
        for tp in partitions:
            tp.offset = resume_at(db, tp.partition)
        consumer.assign(partitions)  # each partition starts at its stored next offset
        print(f"{INSTANCE} assigned {[tp.partition for tp in partitions]}", flush=True)

    def on_revoke(consumer, partitions):  # also on_lost
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
    consumer.close()  # leaves the group; nothing to commit
    db.close()


if __name__ == "__main__":
    main()
