#!/usr/bin/env python3
"""commit-then-process: commit each record's offset to Kafka synchronously, then apply it. The
database and Kafka are two systems: two steps, and a kill can fall between them.

Killed after a record's commit but before its transaction has committed, the instance that
reads the partition next starts after the record: it is never applied, a skip. It never
applies one twice (at most once).

    conformance kafka app --observe examples/kafka/app.observe.toml -- python3 examples/kafka/commit_then_process.py
"""

import json
import os
import signal
import sqlite3
import sys

from confluent_kafka import Consumer, KafkaException, TopicPartition

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
        "enable.auto.commit": False,  # committed below, each offset before its record's effect
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
        try:
            consumer.commit(message=msg, asynchronous=False)  # commits msg.offset() + 1
        except KafkaException as error:
            # Not committed, so not applied: read the record again if the partition is still
            # ours (if a rebalance took it, its next owner reads it from the committed offset).
            print(f"{INSTANCE} error: commit of offset {msg.offset()}: {error}", file=sys.stderr, flush=True)
            try:
                consumer.seek(TopicPartition(msg.topic(), msg.partition(), msg.offset()))
            except KafkaException:
                pass
            continue
        # <- killed here, the record is committed but not applied: it will never be applied.
        apply(db, msg)
    consumer.close()  # leaves the group
    db.close()


if __name__ == "__main__":
    main()
