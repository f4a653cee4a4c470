'use strict';
// node producer.js --namesrv H:P --topic T [--queues N] [--count N] [--tag T] [--key K]...
//                  [--prop k=v]... [--body B] [--group G]
// With --queues, first creates the topic the way ali-ons can: UPDATE_AND_CREATE_TOPIC to the
// master of every broker serving TBW102 (ali-ons throws on a topic without a route, so a
// topic must exist before it sends). Prints {"created":...} and then one SendResult per message.
const { Producer, Message } = require('ali-ons');
const { parseArgs, baseOptions, emit } = require('./common');

(async () => {
  const args = parseArgs(process.argv);
  const producer = new Producer(Object.assign(baseOptions(args), {
    producerGroup: args.group || 'baiji_ons_producer',
    sendMsgTimeout: 5000,
  }));
  await producer.ready();
  if (args.queues) {
    const client = producer._mqClient;
    const route = await client.getTopicRouteInfoFromNameServer('TBW102', 3000);
    const addrs = route.brokerDatas.map(b => b.brokerAddrs['0'] || b.brokerAddrs[0]).filter(Boolean);
    if (!addrs.length) throw new Error('no broker serves TBW102');
    for (const addr of addrs) {
      await client.createTopic(addr, 'TBW102', {
        topicName: args.topic, readQueueNums: args.queues, writeQueueNums: args.queues,
        perm: 6, topicFilterType: 'SINGLE_TAG', topicSysFlag: 0, order: false,
      }, 3000);
    }
    emit({ created: args.topic, brokers: addrs });
  }
  const count = args.count === undefined ? 1 : args.count;
  for (let i = 0; i < count; i++) {
    const msg = new Message(args.topic, args.tag || 'TagA', `${args.body || 'from ali-ons'} #${i}`);
    if (args.keys.length) msg.keys = args.keys;
    for (const [k, v] of Object.entries(args.props)) msg.properties[k] = v;
    const r = await producer.send(msg);
    emit({
      sendStatus: r.sendStatus, msgId: r.msgId, queueOffset: Number(r.queueOffset),
      topic: r.messageQueue.topic, queueId: Number(r.messageQueue.queueId), body: msg.body.toString(),
    });
  }
  await producer.close();
  process.exit(0);
})().catch(err => { console.error('[producer.js]', err); process.exit(1); });
