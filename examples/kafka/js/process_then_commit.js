#!/usr/bin/env node
// process-then-commit in JavaScript: kafkajs for Kafka, node-postgres for a PostgreSQL store.
// Each record is applied in one transaction (the total moves and its id is logged), then its
// offset is committed to Kafka. The database and Kafka are two systems: a kill between the
// transaction's COMMIT and the offset commit makes the partition's next owner apply the
// record again, a duplicate. It never skips one (at least once).
//
//     (cd examples/kafka/js && npm ci)
//     conformance kafka app --postgres URL --observe examples/kafka/js/app.observe.toml -- node examples/kafka/js/process_then_commit.js

'use strict';

const { Kafka, logLevel } = require('kafkajs');
const { Client } = require('pg');

const env = process.env;
const INSTANCE = env.ONCEPROOF_INSTANCE;
const GROUP = env.ONCEPROOF_GROUP;

// Every instance runs this at its start: the advisory lock keeps two instances from creating
// the tables at once (PostgreSQL's CREATE TABLE IF NOT EXISTS can fail when raced).
const SCHEMA = `
  SELECT pg_advisory_lock(7001);
  CREATE TABLE IF NOT EXISTS totals (grp TEXT PRIMARY KEY, total BIGINT NOT NULL);
  CREATE TABLE IF NOT EXISTS applied (seq BIGSERIAL PRIMARY KEY, grp TEXT NOT NULL, id BIGINT NOT NULL);
  SELECT pg_advisory_unlock(7001);
`;

async function main() {
  const db = new Client({ connectionString: env.ONCEPROOF_DATABASE_URL });
  await db.connect();
  await db.query(SCHEMA);
  await db.query('INSERT INTO totals (grp, total) VALUES ($1, 0) ON CONFLICT (grp) DO NOTHING', [GROUP]);

  const kafka = new Kafka({
    clientId: INSTANCE,
    brokers: [env.ONCEPROOF_BOOTSTRAP],
    logLevel: logLevel.WARN,
  });
  const consumer = kafka.consumer({
    groupId: GROUP,
    sessionTimeout: Number(env.ONCEPROOF_SESSION_TIMEOUT_MS),
    heartbeatInterval: Number(env.ONCEPROOF_HEARTBEAT_INTERVAL_MS),
  });
  let stopping = false;
  process.on('SIGTERM', async () => {
    if (stopping) return;
    stopping = true;
    await consumer.disconnect(); // leaves the group
    await db.end();
    process.exit(0);
  });
  consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
    const mine = payload.memberAssignment[env.ONCEPROOF_TOPIC] || [];
    console.log(`${INSTANCE} assigned ${JSON.stringify(mine)}`);
  });

  await consumer.connect();
  await consumer.subscribe({ topic: env.ONCEPROOF_TOPIC, fromBeginning: true }); // earliest
  await consumer.run({
    autoCommit: false, // committed below, each offset after its record's effect
    eachMessage: async ({ topic, partition, message }) => {
      const record = JSON.parse(message.value.toString());
      // The effect, in one transaction: the total moves and the id is logged, or neither.
      await db.query('BEGIN');
      await db.query('UPDATE totals SET total = total + $1 WHERE grp = $2', [record.delta, GROUP]);
      await db.query('INSERT INTO applied (grp, id) VALUES ($1, $2)', [GROUP, record.id]);
      await db.query('COMMIT');
      // Then the offset: the next one to read. A kill between the COMMIT above and this
      // line is the duplicate.
      const next = (BigInt(message.offset) + 1n).toString();
      await consumer.commitOffsets([{ topic, partition, offset: next }]);
    },
  });
}

main().catch((error) => {
  console.error(`${INSTANCE} error: ${error.stack || error}`);
  process.exit(1);
});
