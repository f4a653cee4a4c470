'use strict';
// node consumer.js --namesrv H:P --topic T --group G [--sub 'TagA || TagB'] [--from-first]
//                  [--retry-first] [--count N] [--max-ms N]
// Prints {"ready":true} once started, then one JSON line per delivery. With --retry-first a
// message's first delivery answers ACTION_RETRY (CONSUMER_SEND_MSG_BACK, delay level 0). Exits
// after --count distinct messages were consumed successfully, or after --max-ms.
const { Consumer } = require('ali-ons');
const { parseArgs, baseOptions, emit } = require('./common');

(async () => {
  const args = parseArgs(process.argv);
  const consumer = new Consumer(Object.assign(baseOptions(args), {
    consumerGroup: args.group || 'baiji_ons_consumer',
    consumeFromWhere: args.fromFirst ? 'CONSUME_FROM_FIRST_OFFSET' : 'CONSUME_FROM_LAST_OFFSET',
    rebalanceInterval: 1000,
    persistConsumerOffsetInterval: 1000,
  }));
  consumer.on('error', err => console.error('[consumer error]', err.message));
  const done = new Set();
  let closing = false;
  const stop = async code => {
    if (closing) return;
    closing = true;
    try { await consumer.close(); } catch (e) { console.error('[consumer close]', e.message); }
    process.exit(code);
  };
  consumer.subscribe(args.topic, args.sub || '*', async msg => {
    const retry = !!args.retryFirst && msg.reconsumeTimes === 0;
    emit({
      topic: msg.topic, tags: msg.tags || null, keys: msg.keys || null, props: msg.properties,
      body: msg.body ? msg.body.toString() : null, msgId: msg.msgId, queueId: msg.queueId,
      queueOffset: Number(msg.queueOffset), reconsumeTimes: msg.reconsumeTimes, retry,
    });
    if (retry) return Consumer.ACTION_RETRY;
    done.add(msg.properties.UNIQ_KEY || msg.msgId);
    if (args.count && done.size >= args.count) setTimeout(() => stop(0), 200);
  });
  await consumer.ready();
  emit({ ready: true });
  process.on('SIGTERM', () => stop(0));
  if (args.maxMs) setTimeout(() => stop(2), args.maxMs);
})().catch(err => { console.error('[consumer.js]', err); process.exit(1); });
