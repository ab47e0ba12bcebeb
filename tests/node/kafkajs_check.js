// kafkajs against a running Tarn broker: admin (createTopics,
// fetchTopicMetadata, fetchTopicOffsets, fetchOffsets, deleteTopics),
// producers with every codec kafkajs has without a plugin (none, gzip; one
// of them idempotent), and a consumer group that reads back exactly what was
// produced (keys, values, headers, order per partition), commits, and a
// second member of the same group that resumes from the committed offsets.
//
// Usage: node kafkajs_check.js HOST:PORT
// Prints one JSON summary line on success and exits 0; any mismatch or error
// is printed to stderr and exits 1. Run by tests/python/test_kafkajs.py.
'use strict';

const { Kafka, CompressionTypes, logLevel } = require('kafkajs');

const PARTITIONS = 3;
const RECORDS_PER_CODEC = 150;
const RESUME_RECORDS = 30;
const WAIT_MS = 60000;
const CODECS = [
  { name: 'none', type: CompressionTypes.None, idempotent: true },
  { name: 'gzip', type: CompressionTypes.GZIP, idempotent: false },
];

class Mismatch extends Error {}

function check(condition, message) {
  if (!condition) throw new Mismatch(message);
}

// Record `seq` of a run: keys cycle through 7 values (one in 11 is null),
// values carry some binary bytes (one in 13 is a tombstone), and headers
// vary (an `id` header naming the record, plus none, two distinct, or a
// repeated key).
function makeRecord(tag, seq) {
  const key = seq % 11 === 0 ? null : Buffer.from(`${tag}-key-${seq % 7}`);
  const value = seq % 13 === 0 ? null
    : Buffer.concat([Buffer.from(`${tag}-value-${seq}|`), Buffer.from([0, 255, seq % 256])]);
  const headers = { id: Buffer.from(`${tag}:${seq}`) };
  if (seq % 3 === 1) {
    headers.h1 = Buffer.from(`${tag}-${seq}`);
    headers.bin = Buffer.from([0, 1, 254, 255]);
  } else if (seq % 3 === 2) {
    headers.dup = [Buffer.from('a'), Buffer.from('b')];
  }
  return { tag, seq, key, value, headers };
}

function sameBytes(a, b) {
  if (a === null || b === null) return a === b;
  return Buffer.compare(a, b) === 0;
}

function headersEqual(got, want) {
  const gotKeys = Object.keys(got).sort();
  const wantKeys = Object.keys(want).sort();
  if (JSON.stringify(gotKeys) !== JSON.stringify(wantKeys)) return false;
  return wantKeys.every((k) => {
    const g = [].concat(got[k]);
    const w = [].concat(want[k]);
    return g.length === w.length && g.every((v, i) => sameBytes(v, w[i]));
  });
}

function describe(rec) {
  return `${rec.tag}#${rec.seq}`;
}

async function waitFor(what, predicate) {
  const deadline = Date.now() + WAIT_MS;
  while (!predicate()) {
    check(Date.now() < deadline, `timed out after ${WAIT_MS} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

async function produce(kafka, topic, tag, count, codec) {
  const producer = kafka.producer({ idempotent: codec.idempotent, maxInFlightRequests: codec.idempotent ? 1 : 5 });
  await producer.connect();
  const records = [];
  for (let seq = 0; seq < count; seq++) records.push(makeRecord(tag, seq));
  try {
    // Two sends so that a second batch lands behind the first per partition.
    const half = Math.floor(count / 2);
    for (const part of [records.slice(0, half), records.slice(half)]) {
      const acks = await producer.send({
        topic,
        acks: -1,
        compression: codec.type,
        messages: part.map((r) => ({ key: r.key, value: r.value, headers: r.headers })),
      });
      for (const ack of acks) check(ack.errorCode === 0, `produce ${tag}: error ${ack.errorCode} on partition ${ack.partition}`);
    }
  } finally {
    await producer.disconnect();
  }
  return records;
}

// Runs a member of `groupId` until it has `expected` records; returns them as
// { partition, offset, rec } in arrival order, then commits the next offsets
// and leaves the group.
async function consumeGroup(kafka, groupId, topic, expected) {
  const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 1000 });
  await consumer.connect();
  const got = [];
  const next = new Map();
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        got.push({ partition, offset: Number(message.offset), message });
        next.set(partition, Number(message.offset) + 1);
      },
    });
    await waitFor(`${expected} records in group ${groupId} (have ${got.length})`, () => got.length >= expected);
    // Give the fetcher a moment to deliver anything extra: it must not exist.
    await new Promise((resolve) => setTimeout(resolve, 1000));
    check(got.length === expected, `group ${groupId} read ${got.length} records, expected ${expected}`);
    await consumer.commitOffsets([...next].map(([partition, offset]) => ({ topic, partition, offset: String(offset) })));
  } finally {
    await consumer.disconnect();
  }
  return got;
}

// Every produced record arrives exactly once and unchanged; within a
// partition the offsets increase and the records keep the order in which
// one producer sent them; records with the same key share a partition.
function verify(produced, got) {
  const byId = new Map(produced.map((r) => [`${r.tag}|${r.seq}`, r]));
  const seen = new Set();
  const lastByPartition = new Map();
  const keyPartition = new Map();
  for (const { partition, offset, message } of got) {
    const idHeader = message.headers.id;
    const rec = Buffer.isBuffer(idHeader) ? byId.get(idHeader.toString().replace(':', '|')) : undefined;
    check(rec !== undefined, `p${partition}@${offset}: a record nobody produced (id header ${idHeader})`);
    const id = `${rec.tag}|${rec.seq}`;
    check(!seen.has(id), `p${partition}@${offset}: ${describe(rec)} delivered twice`);
    seen.add(id);
    check(sameBytes(message.key, rec.key), `p${partition}@${offset}: ${describe(rec)} key ${message.key} != ${rec.key}`);
    check(sameBytes(message.value, rec.value), `p${partition}@${offset}: ${describe(rec)} value differs`);
    check(headersEqual(message.headers, rec.headers), `p${partition}@${offset}: ${describe(rec)} headers differ: ${JSON.stringify(message.headers)}`);
    const orderKey = `${partition}|${rec.tag}`;
    const last = lastByPartition.get(orderKey) ?? -1;
    check(rec.seq > last, `p${partition}@${offset}: ${describe(rec)} after seq ${last}: out of order`);
    lastByPartition.set(orderKey, rec.seq);
    if (rec.key !== null) {
      const k = `${rec.tag}|${rec.key.toString()}`;
      const p = keyPartition.get(k) ?? partition;
      check(p === partition, `key ${k} in partitions ${p} and ${partition}`);
      keyPartition.set(k, partition);
    }
  }
  const missing = produced.filter((r) => !seen.has(`${r.tag}|${r.seq}`)).map(describe);
  check(missing.length === 0, `not delivered: ${missing.slice(0, 10).join(', ')}`);
  // Offsets per partition are strictly increasing in arrival order.
  const lastOffset = new Map();
  for (const { partition, offset } of got) {
    check(offset > (lastOffset.get(partition) ?? -1), `p${partition}: offset ${offset} not increasing`);
    lastOffset.set(partition, offset);
  }
}

async function main() {
  const bootstrap = process.argv[2];
  check(bootstrap, 'usage: node kafkajs_check.js HOST:PORT');
  const kafka = new Kafka({
    clientId: 'tarn-kafkajs-check',
    brokers: [bootstrap],
    logLevel: logLevel.WARN,
    retry: { retries: 3 },
  });
  const topic = 'kafkajs-check';
  const groupId = 'kafkajs-check-group';
  const admin = kafka.admin();
  await admin.connect();
  try {
    const created = await admin.createTopics({
      topics: [{ topic, numPartitions: PARTITIONS, replicationFactor: 1 }],
      waitForLeaders: true,
    });
    check(created === true, `createTopics returned ${created}`);
    const again = await admin.createTopics({ topics: [{ topic, numPartitions: PARTITIONS }] });
    check(again === false, 'createTopics of an existing topic did not report it as existing');
    const meta = await admin.fetchTopicMetadata({ topics: [topic] });
    check(meta.topics.length === 1 && meta.topics[0].name === topic, `metadata: ${JSON.stringify(meta)}`);
    const parts = meta.topics[0].partitions.map((p) => p.partitionId).sort();
    check(JSON.stringify(parts) === JSON.stringify([0, 1, 2]), `partitions ${parts}`);
    for (const p of meta.topics[0].partitions) {
      check(p.partitionErrorCode === 0 && p.leader >= 0, `partition ${p.partitionId}: ${JSON.stringify(p)}`);
    }
    check((await admin.listTopics()).includes(topic), 'listTopics does not list the new topic');

    const produced = [];
    for (const codec of CODECS) produced.push(...await produce(kafka, topic, codec.name, RECORDS_PER_CODEC, codec));
    const offsets = await admin.fetchTopicOffsets(topic);
    const total = offsets.reduce((sum, o) => sum + Number(o.high) - Number(o.low), 0);
    check(total === produced.length, `fetchTopicOffsets: ${total} records, produced ${produced.length}: ${JSON.stringify(offsets)}`);

    const first = await consumeGroup(kafka, groupId, topic, produced.length);
    verify(produced, first);
    const committed = await admin.fetchOffsets({ groupId, topics: [topic] });
    for (const o of offsets) {
      const c = committed[0].partitions.find((p) => p.partition === o.partition);
      check(c && c.offset === o.high, `partition ${o.partition}: committed ${c && c.offset}, end ${o.high}`);
    }

    // A second member of the same group starts from the committed offsets:
    // it sees only what was produced after the commit.
    const more = await produce(kafka, topic, 'resume', RESUME_RECORDS, CODECS[1]);
    const second = await consumeGroup(kafka, groupId, topic, more.length);
    verify(more, second);

    await admin.deleteTopics({ topics: [topic] });
    check(!(await admin.listTopics()).includes(topic), 'deleteTopics: topic still listed');
    console.log(JSON.stringify({
      ok: true,
      produced: produced.length,
      consumed_first: first.length,
      resumed: second.length,
      partitions_used: new Set(first.map((g) => g.partition)).size,
    }));
  } finally {
    await admin.disconnect();
  }
}

main().then(() => process.exit(0), (err) => {
  console.error(err instanceof Mismatch ? `MISMATCH: ${err.message}` : `ERROR: ${err.stack || err}`);
  process.exit(1);
});
