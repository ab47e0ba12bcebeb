// kafkajs_failover.js BOOTSTRAP TOPIC TAG COUNT: produces COUNT keyed records
// ("TAG-key-<i mod 40>" -> "TAG-value-<i>") with acks=-1 and the idempotent
// producer, one send at a time, retrying through a leader change, and prints
// one JSON line {"ok": true, "delivered": [[partition, offset], ...]} in send
// order. Any error exits non-zero with an ERROR line.
"use strict";
const { Kafka, logLevel } = require("kafkajs");

async function main() {
  const [bootstrap, topic, tag, countArg] = process.argv.slice(2);
  const retry = { retries: 40, initialRetryTime: 200, maxRetryTime: 2000 };
  const kafka = new Kafka({
    clientId: "tarn-kafkajs-failover",
    brokers: bootstrap.split(","),
    logLevel: logLevel.NOTHING,
    retry,
  });
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, retry });
  await producer.connect();
  const delivered = [];
  try {
    for (let i = 0; i < Number(countArg); i++) {
      const [meta] = await producer.send({
        topic,
        acks: -1,
        timeout: 30000,
        messages: [{ key: `${tag}-key-${i % 40}`, value: `${tag}-value-${i}` }],
      });
      delivered.push([meta.partition, Number(meta.baseOffset)]);
    }
  } finally {
    await producer.disconnect();
  }
  console.log(JSON.stringify({ ok: true, delivered }));
}

main().catch((e) => {
  console.error(`ERROR ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
