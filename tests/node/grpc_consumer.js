'use strict';
// SimpleConsumer and PushConsumer scenarios of rocketmq-client-nodejs 1.0.8 against a baiji
// broker's gRPC port, run by tests/grpc_clients/consumer.rs. Prints one JSON object per line on
// stdout; diagnostics go to stderr.
//
//   --mode receive        receive --count messages (invisible --invisible ms), ack each, then
//                         keep receiving for --linger s and print anything more
//   --mode change         receive one (invisible 30 s), change its invisible duration to
//                         --invisible ms, ack with the old handle (prints the error code),
//                         receive it again once visible, ack it
//   --mode bad-invisible  receive with --invisible ms: prints the error code
//   --mode push           a PushConsumer whose listener fails the first --fail deliveries of
//                         each message (-1: all) and always a message whose body is --poison;
//                         ends --linger s after --expect successes, or after --seconds

const { SimpleConsumer, PushConsumer, ConsumeResult, FilterExpression } = require('rocketmq-client-nodejs');

function args(argv) {
  const out = { mode: 'receive', count: 1, invisible: 30000, fail: 0, expect: 0, seconds: 45, linger: 0, tag: '*' };
  for (let i = 2; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, '');
    const v = argv[i + 1];
    out[k] = ['count', 'invisible', 'fail', 'expect', 'seconds', 'linger'].includes(k) ? Number(v) : v;
  }
  if (!out.endpoint || !out.topic || !out.group) throw new Error('--endpoint, --topic and --group are required');
  return out;
}

function emit(o) { process.stdout.write(JSON.stringify(o) + '\n'); }

const quiet = {
  info() {}, debug() {}, close() {},
  warn(...a) { console.error('[warn]', ...a); },
  error(...a) { console.error('[error]', ...a); },
};

function describe(m) {
  return {
    kind: 'message',
    id: m.messageId,
    topic: m.topic,
    body: m.body.toString('utf8'),
    tag: m.tag === undefined ? null : m.tag,
    keys: [...(m.keys || [])].sort(),
    properties: Object.fromEntries(m.properties || new Map()),
    attempt: m.deliveryAttempt,
    group: m.messageGroup === undefined ? null : m.messageGroup,
    handle: m.receiptHandle,
  };
}

async function simple(a) {
  const consumer = new SimpleConsumer({
    endpoints: a.endpoint, namespace: '', consumerGroup: a.group, logger: quiet,
    requestTimeout: 5000, awaitDuration: 5000,
    subscriptions: new Map([[a.topic, a.tag]]),
  });
  await consumer.startup();
  const deadline = Date.now() + 45000;
  try {
    if (a.mode === 'receive') {
      let got = 0;
      while (got < a.count && Date.now() < deadline) {
        for (const m of await consumer.receive(32, a.invisible)) {
          emit(describe(m));
          await consumer.ack(m);
          got++;
        }
      }
      let extra = 0;
      const until = Date.now() + a.linger * 1000;
      while (Date.now() < until) {
        for (const m of await consumer.receive(32, a.invisible)) {
          emit(describe(m));
          await consumer.ack(m);
          extra++;
        }
      }
      emit({ kind: 'done', received: got, extra });
    } else if (a.mode === 'change') {
      let first;
      while (!first && Date.now() < deadline) [first] = await consumer.receive(1, 30000);
      if (!first) return emit({ kind: 'error', error: 'nothing received' });
      emit(describe(first));
      const old = first.receiptHandle;
      await consumer.changeInvisibleDuration(first, a.invisible);
      const changedAt = Date.now();
      emit({ kind: 'changed', new_handle: first.receiptHandle, differs: first.receiptHandle !== old });
      first.receiptHandle = old;
      try {
        await consumer.ack(first);
        emit({ kind: 'old_ack', code: null });
      } catch (e) {
        emit({ kind: 'old_ack', code: e.code === undefined ? null : e.code, error: String(e.message) });
      }
      let again;
      while (!again && Date.now() < deadline) [again] = await consumer.receive(1, 30000);
      if (!again) return emit({ kind: 'error', error: 'not redelivered' });
      emit(describe(again));
      emit({ kind: 'redelivered', after_s: (Date.now() - changedAt) / 1000 });
      await consumer.ack(again);
      emit({ kind: 'done', acked: true });
    } else if (a.mode === 'bad-invisible') {
      try {
        await consumer.receive(1, a.invisible);
        emit({ kind: 'done', code: null });
      } catch (e) {
        emit({ kind: 'done', code: e.code === undefined ? null : e.code, error: String(e.message) });
      }
    } else {
      throw new Error('unknown mode ' + a.mode);
    }
  } finally {
    await consumer.shutdown();
  }
}

async function push(a) {
  const seen = new Map();
  const ok = new Set();
  let finish;
  const finished = new Promise(resolve => { finish = resolve; });
  const consumer = new PushConsumer({
    endpoints: a.endpoint, namespace: '', consumerGroup: a.group, logger: quiet, requestTimeout: 5000,
    subscriptions: new Map([[a.topic, FilterExpression.SUB_ALL]]),
    messageListener: {
      async consume(m) {
        const n = (seen.get(m.messageId) || 0) + 1;
        seen.set(m.messageId, n);
        const body = m.body.toString('utf8');
        const failing = a.fail < 0 || n <= a.fail || (a.poison !== undefined && body === a.poison);
        emit({
          kind: 'consume', id: m.messageId, body,
          tag: m.tag === undefined ? null : m.tag,
          group: m.messageGroup === undefined ? null : m.messageGroup,
          attempt: m.deliveryAttempt, call: n, result: failing ? 'failure' : 'success',
        });
        if (failing) return ConsumeResult.FAILURE;
        ok.add(m.messageId);
        if (a.expect && ok.size >= a.expect) setTimeout(finish, a.linger * 1000);
        return ConsumeResult.SUCCESS;
      },
    },
  });
  await consumer.startup();
  emit({ kind: 'started', clientId: consumer.clientId });
  await Promise.race([finished, new Promise(resolve => setTimeout(resolve, a.seconds * 1000))]);
  await consumer.shutdown();
  emit({ kind: 'done', succeeded: ok.size });
}

const a = args(process.argv);
(a.mode === 'push' ? push(a) : simple(a)).then(
  () => process.exit(0),
  e => {
    console.error('grpc_consumer.js failed:', e);
    emit({ kind: 'error', error: String(e && e.message) });
    process.exit(1);
  },
);
