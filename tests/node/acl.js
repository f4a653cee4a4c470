'use strict';
// node acl.js --namesrv H:P --topic T --denied-topic D --group G --access-key AK
//             --secret-key SK [--max-ms N]
// ali-ons with its ACL options (accessKey / secretKey: every request carries AccessKey,
// OnsChannel and Signature, lib/channel.js). Prints, one JSON line each:
//   {"sent":...}          a send to T (permitted);
//   {"deniedSend":...}    what producer.send(D) threw (ali-ons retries NO_PERMISSION, then
//                         throws its own "Send [n] times, still failed" error);
//   {"deniedAnswer":...}  the broker's answer to one send to D, taken below the retry loop
//                         (sendKernelImpl), so its code and remark show;
//   {"consumed":...}      the message a consumer with the same credentials received from T.
const { Producer, Consumer, Message } = require('ali-ons');
const { parseArgs, baseOptions, emit } = require('./common');

(async () => {
  const args = parseArgs(process.argv);
  const producer = new Producer(Object.assign(baseOptions(args), {
    producerGroup: args.group + '_producer',
    sendMsgTimeout: 5000,
  }));
  await producer.ready();
  const r = await producer.send(new Message(args.topic, 'TagA', 'signed by ali-ons'));
  emit({ sent: { sendStatus: r.sendStatus, topic: r.messageQueue.topic, msgId: r.msgId } });

  try {
    await producer.send(new Message(args.deniedTopic, 'TagA', 'must be refused'));
    emit({ deniedSend: { error: null } });
  } catch (err) {
    emit({ deniedSend: { error: err.message, name: err.name } });
  }
  const info = await producer.tryToFindTopicPublishInfo(args.deniedTopic);
  const mq = info.messageQueueList[0];
  try {
    await producer.sendKernelImpl(new Message(args.deniedTopic, 'TagA', 'must be refused'), mq);
    emit({ deniedAnswer: { code: 0 } });
  } catch (err) {
    emit({ deniedAnswer: { code: err.code, remark: err.message, name: err.name } });
  }
  await producer.close();

  const consumer = new Consumer(Object.assign(baseOptions(args), {
    consumerGroup: args.group,
    consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET',
    rebalanceInterval: 1000,
    persistConsumerOffsetInterval: 1000,
  }));
  consumer.on('error', e => console.error('[consumer error]', e.message));
  let done = false;
  const stop = async code => {
    if (done) return;
    done = true;
    try { await consumer.close(); } catch (e) { console.error('[consumer close]', e.message); }
    process.exit(code);
  };
  consumer.subscribe(args.topic, '*', async msg => {
    emit({ consumed: { topic: msg.topic, body: msg.body.toString(), msgId: msg.msgId } });
    setTimeout(() => stop(0), 200);
  });
  await consumer.ready();
  if (args.maxMs) setTimeout(() => stop(2), args.maxMs);
})().catch(err => { console.error('[acl.js]', err); process.exit(1); });
