'use strict';
// RocketMQ 5 Node.js SDK (rocketmq-client-nodejs 1.0.8) producers against baiji's gRPC face.
// Spawned by tests/grpc_clients/producer.rs: `node grpc_producer.js MODE ENDPOINT TOPIC [ARGS]`.
// Prints one JSON object per line on stdout (what was sent, what came back); the Rust test
// asserts on them and on what a remoting consumer reads. Exits non-zero on any failure.

const { Producer } = require('rocketmq-client-nodejs');
const { TransactionResolution } = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');

function emit(fields) {
  process.stdout.write(JSON.stringify(fields) + '\n');
}

const quiet = { info() {}, warn() {}, debug() {}, error(...a) { process.stderr.write(a.join(' ') + '\n'); } };

// Commits what the broker asks about, and remembers that it was asked.
function checker() {
  const c = { checked: [], waiters: [] };
  c.check = async view => {
    c.checked.push(view.messageId);
    for (const w of c.waiters.splice(0)) w();
    return TransactionResolution.COMMIT;
  };
  c.asked = ms => new Promise(resolve => {
    if (c.checked.length) return resolve(true);
    const t = setTimeout(() => resolve(false), ms);
    c.waiters.push(() => { clearTimeout(t); resolve(true); });
  });
  return c;
}

async function producer(endpoint, topic, check) {
  const p = new Producer({ endpoints: endpoint, namespace: '', topic, checker: check, logger: quiet });
  await p.startup();
  return p;
}

const modes = {
  async normal(endpoint, topic, count) {
    const p = await producer(endpoint, topic);
    for (let i = 0; i < Number(count); i++) {
      const keys = [ `key-${i}`, `other-${i}` ];
      const props = { color: `blue-${i}`, size: String(i) };
      const body = `node-normal-${i}`;
      const r = await p.send({ topic, body: Buffer.from(body), tag: 'TagN', keys, properties: new Map(Object.entries(props)) });
      emit({ kind: 'sent', message_id: r.messageId, body, tag: 'TagN', keys, props });
    }
    await p.shutdown();
  },
  async fifo(endpoint, topic, groups, count) {
    const p = await producer(endpoint, topic);
    for (let i = 0; i < Number(count); i++) {
      for (let g = 0; g < Number(groups); g++) {
        const body = `node-fifo-${g}-${i}`;
        const r = await p.send({ topic, body: Buffer.from(body), messageGroup: `group-${g}` });
        emit({ kind: 'sent', message_id: r.messageId, body, group: `group-${g}`, seq: i });
      }
    }
    await p.shutdown();
  },
  async delay(endpoint, topic, secs) {
    const p = await producer(endpoint, topic);
    const due = new Date(Date.now() + Number(secs) * 1000);
    const r = await p.send({ topic, body: Buffer.from('node-delay'), deliveryTimestamp: due });
    emit({ kind: 'sent', message_id: r.messageId, body: 'node-delay', due_ms: due.getTime() });
    await p.shutdown();
  },
  // Two delay messages due in `secs` s, the first recalled with its receipt's handle; then a
  // recall with a malformed handle, which the SDK rejects with the broker's status.
  async recall(endpoint, topic, secs) {
    const p = await producer(endpoint, topic);
    const due = Date.now() + Number(secs) * 1000;
    for (const [ body, at ] of [[ 'node-recalled', due ], [ 'node-kept', due + 1000 ]]) {
      const r = await p.send({ topic, body: Buffer.from(body), deliveryTimestamp: new Date(at) });
      emit({ kind: 'sent', message_id: r.messageId, body, recall_handle: r.recallHandle });
      if (body === 'node-recalled') {
        const receipt = await p.recallMessage(topic, r.recallHandle);
        emit({ kind: 'recalled', message_id: receipt.messageId });
      }
    }
    try {
      await p.recallMessage(topic, 'not-a-handle');
      emit({ kind: 'refused', error: null });
    } catch (err) {
      emit({ kind: 'refused', error: String(err && err.message || err) });
    }
    await p.shutdown();
  },
  async tx(endpoint, topic) {
    const p = await producer(endpoint, topic, checker());
    for (const [ body, decide ] of [[ 'node-tx-commit', 'commit' ], [ 'node-tx-rollback', 'rollback' ]]) {
      const t = p.beginTransaction();
      const r = await p.send({ topic, body: Buffer.from(body) }, t);
      emit({ kind: 'half', message_id: r.messageId, transaction_id: r.transactionId, body });
      if (decide === 'commit') await t.commit(); else await t.rollback();
      emit({ kind: decide, message_id: r.messageId });
    }
    await p.shutdown();
  },
  async orphan(endpoint, topic, waitSecs) {
    const c = checker();
    const p = await producer(endpoint, topic, c);
    const t = p.beginTransaction();
    const r = await p.send({ topic, body: Buffer.from('node-tx-orphan') }, t);
    emit({ kind: 'half', message_id: r.messageId, transaction_id: r.transactionId, body: 'node-tx-orphan' });
    // Left undecided: the broker's checker must ask this producer over Telemetry.
    if (!await c.asked(Number(waitSecs) * 1000)) {
      emit({ kind: 'error', error: 'the broker never asked about the orphaned transaction' });
      await p.shutdown();
      process.exit(1);
    }
    emit({ kind: 'checked', message_id: c.checked[0] });
    await new Promise(r => setTimeout(r, 2000)); // the checker's EndTransaction goes out first
    await p.shutdown();
  },
};

const [ mode, ...args ] = process.argv.slice(2);
modes[mode](...args).then(() => process.exit(0), err => {
  emit({ kind: 'error', error: String(err && err.stack || err) });
  process.exit(1);
});
