// One scenario of baiji's client tests (tests/java_go.rs) on the real, unmodified Apache RocketMQ
// 4.9.7 Java remoting client (../shared/clients/java). The harness compiles this file once,
// starts a broker, and runs
//
//     java BaijiJavaClient <scenario> namesrv=HOST:PORT topic=T group=G [key=value ...]
//
// Every fact the harness asserts on is printed to stdout as one JSON object per line (fastjson,
// the client's own JSON library), with a "kind":
//   sent      a message the client was told was accepted (mode, id = UNIQ_KEY, queue, offset)
//   received  a message a consumer's listener was given (member, id, queue, offset, tags, body)
//   checked   a transaction check-back the listener answered (body, answer)
//   reply     what DefaultMQProducer.request() returned (body, correlation id)
//   trace     the trace records the trace query path found for one message id (types)
//   (relay: the consumer's client id and a message id go to the file `ready` names instead)
//   timeout   a wait that ended before what it waited for happened (what)
//   error     an exception a client call threw (op, error, the cause chain, top frames)
//   done      the scenario finished (always the last line)
// The program never decides pass or fail: it waits (at most `wait` ms) for what it expects,
// lingers `linger` ms so that anything unexpected shows too, and reports; the harness judges.

import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.trace.TraceBean;
import org.apache.rocketmq.client.trace.TraceContext;
import org.apache.rocketmq.client.trace.TraceDataEncoder;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;
import org.apache.rocketmq.common.topic.TopicValidator;

public final class BaijiJavaClient {
    /** Queues of every topic a scenario creates (the harness assumes the same). */
    static final int QUEUES = 4;

    final Map<String, String> opts;
    final String namesrv;
    final String topic;
    final String group;
    /** Longest wait for what a scenario expects, ms. */
    final long waitMs;
    /** How long a scenario keeps listening once what it expects arrived, ms. */
    final long lingerMs;
    /** What the listeners saw: "member/body". */
    final Set<String> seen = ConcurrentHashMap.newKeySet();
    final List<AutoCloseable> toClose = new ArrayList<>();

    BaijiJavaClient(Map<String, String> opts) {
        this.opts = opts;
        this.namesrv = require(opts, "namesrv");
        this.topic = opts.getOrDefault("topic", "");
        this.group = opts.getOrDefault("group", "");
        this.waitMs = Long.parseLong(opts.getOrDefault("wait", "20000"));
        this.lingerMs = Long.parseLong(opts.getOrDefault("linger", "1500"));
    }

    public static void main(String[] args) {
        int status = 0;
        try {
            if (args.length < 1) {
                throw new IllegalArgumentException("usage: BaijiJavaClient <scenario> key=value...");
            }
            Map<String, String> opts = new HashMap<>();
            for (String a : Arrays.copyOfRange(args, 1, args.length)) {
                int eq = a.indexOf('=');
                if (eq < 0) {
                    throw new IllegalArgumentException("not key=value: " + a);
                }
                opts.put(a.substring(0, eq), a.substring(eq + 1));
            }
            BaijiJavaClient c = new BaijiJavaClient(opts);
            try {
                c.run(args[0]);
            } finally {
                c.closeAll();
            }
        } catch (Throwable t) {
            error("scenario", t);
            status = 1;
        }
        emit(event("done"));
        System.out.flush();
        // The client's threads (timers, netty) are not all daemons: leave at once.
        System.exit(status);
    }

    void run(String scenario) throws Exception {
        switch (scenario) {
            case "produce":
                produce(false);
                break;
            case "vip":
                produce(true);
                break;
            case "tag":
                filtered(MessageSelector.byTag("TagA || TagB"));
                break;
            case "sql":
                filtered(MessageSelector.bySql("a > 5 AND b = 'x'"));
                break;
            case "orderly":
                orderly();
                break;
            case "broadcast":
                broadcast();
                break;
            case "late_broadcast":
                lateBroadcast();
                break;
            case "transaction":
                transaction();
                break;
            case "request":
                request();
                break;
            case "trace":
                trace();
                break;
            case "trace-query":
                traceQuery();
                break;
            case "relay":
                relay();
                break;
            default:
                throw new IllegalArgumentException("unknown scenario " + scenario);
        }
    }

    // ---- scenarios ----------------------------------------------------------------------------

    /**
     * Sync, async, one-way and batch sends (4 messages each), all read by one push consumer.
     * With `vip` the producer and the consumer have `vipChannelEnabled=true`: every broker call
     * that `MixAll.brokerVIPChannel` routes goes to `listenPort - 2`.
     */
    void produce(boolean vip) throws Exception {
        DefaultMQProducer p = producer(new DefaultMQProducer(group + "_p"));
        p.setVipChannelEnabled(vip);
        start(p);
        if (vip) {
            // Topic creation is set-up here, not under test: made without the VIP channel.
            DefaultMQProducer admin = producer(new DefaultMQProducer(group + "_admin"));
            admin.setInstanceName("admin");
            start(admin);
            createTopic(admin);
        } else {
            createTopic(p);
        }
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setVipChannelEnabled(vip);
        concurrently(c, "c1", "*");
        start(c);

        List<String> bodies = new ArrayList<>();
        for (int i = 0; i < 4; i++) {
            String body = "sync-" + i;
            bodies.add(body);
            try {
                sent("sync", p.send(message(body, null, null)), body, 0);
            } catch (Exception e) {
                error("send sync " + body, e);
            }
        }
        CountDownLatch acks = new CountDownLatch(4);
        for (int i = 0; i < 4; i++) {
            final String body = "async-" + i;
            bodies.add(body);
            try {
                p.send(message(body, null, null), new SendCallback() {
                    @Override
                    public void onSuccess(SendResult r) {
                        sent("async", r, body, 0);
                        acks.countDown();
                    }

                    @Override
                    public void onException(Throwable e) {
                        error("send async " + body, e);
                        acks.countDown();
                    }
                });
            } catch (Exception e) {
                error("send async " + body, e);
                acks.countDown();
            }
        }
        if (!acks.await(waitMs, TimeUnit.MILLISECONDS)) {
            timeout("async send callbacks");
        }
        for (int i = 0; i < 4; i++) {
            String body = "oneway-" + i;
            bodies.add(body);
            Message m = message(body, null, null);
            try {
                p.sendOneway(m);
                // sendKernelImpl gave the message its UNIQ_KEY before writing it.
                JSONObject e = event("sent");
                e.put("mode", "oneway");
                e.put("id", MessageClientIDSetter.getUniqID(m));
                e.put("body", body);
                emit(e);
            } catch (Exception e) {
                error("send oneway " + body, e);
            }
        }
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < 4; i++) {
            String body = "batch-" + i;
            bodies.add(body);
            batch.add(message(body, null, null));
        }
        try {
            SendResult r = p.send(batch);
            // A batch's msgId lists each entry's UNIQ_KEY, comma-separated, in order; its queue
            // offset is the first entry's.
            String[] ids = r.getMsgId().split(",");
            String[] offsetIds = String.valueOf(r.getOffsetMsgId()).split(",");
            for (int i = 0; i < batch.size(); i++) {
                JSONObject e = sentEvent("batch", r, "batch-" + i, i);
                e.put("id", i < ids.length ? ids[i] : null);
                e.put("offsetMsgId", i < offsetIds.length ? offsetIds[i] : null);
                emit(e);
            }
        } catch (Exception e) {
            error("send batch", e);
        }
        awaitSeen("c1", bodies);
    }

    /**
     * One message sent and consumed by push consumer c1, which then stays up until the file
     * `stop` names exists (at most `wait` ms), so that the harness can ask the broker about it
     * meanwhile: GET_CONSUMER_RUNNING_INFO and CONSUME_MESSAGE_DIRECTLY, which the broker relays
     * to this client's ClientRemotingProcessor. The file `ready` names gets the consumer's client
     * id and the message's offsetMsgId (`{"clientId":..,"msgId":..}`) once it was consumed.
     */
    void relay() throws Exception {
        DefaultMQProducer p = producer(new DefaultMQProducer(group + "_p"));
        start(p);
        createTopic(p);
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        concurrently(c, "c1", "*");
        start(c);
        String body = "relay-0";
        SendResult r = p.send(message(body, null, null));
        sent("sync", r, body, 0);
        awaitSeen("c1", java.util.Collections.singletonList(body));
        JSONObject ready = new JSONObject(true);
        ready.put("clientId", c.buildMQClientId());
        ready.put("msgId", r.getOffsetMsgId());
        java.nio.file.Path tmp = java.nio.file.Paths.get(require(opts, "ready") + ".tmp");
        java.nio.file.Files.write(tmp, ready.toJSONString().getBytes(StandardCharsets.UTF_8));
        java.nio.file.Files.move(tmp, java.nio.file.Paths.get(require(opts, "ready")));
        java.io.File stop = new java.io.File(require(opts, "stop"));
        if (!waitFor(stop::exists, waitMs)) {
            timeout("the stop file " + stop);
        }
    }

    /** A push consumer with `selector`; messages with every combination of tag and properties. */
    void filtered(MessageSelector selector) throws Exception {
        DefaultMQProducer p = producer(new DefaultMQProducer(group + "_p"));
        start(p);
        createTopic(p);
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        concurrently(c, "c1", selector);
        start(c);

        String[] tags = {"TagA", "TagB", "TagC", null};
        String[][] props = {{"3", "x"}, {"7", "x"}, {"9", "y"}, {"10", "x"}, {"6", "x"}, null};
        List<String> expected = new ArrayList<>();
        int n = 0;
        for (String tag : tags) {
            for (String[] ab : props) {
                String body = "filter-" + n++;
                Message m = message(body, tag, null);
                if (ab != null) {
                    m.putUserProperty("a", ab[0]);
                    m.putUserProperty("b", ab[1]);
                }
                boolean match = selector.getExpressionType().equals("TAG")
                    ? "TagA".equals(tag) || "TagB".equals(tag)
                    : ab != null && Integer.parseInt(ab[0]) > 5 && ab[1].equals("x");
                if (match) {
                    expected.add(body);
                }
                try {
                    JSONObject e = sentEvent("sync", p.send(m), body, 0);
                    e.put("tag", tag);
                    e.put("a", ab == null ? null : ab[0]);
                    e.put("b", ab == null ? null : ab[1]);
                    emit(e);
                } catch (Exception ex) {
                    error("send " + body, ex);
                }
            }
        }
        awaitSeen("c1", expected);
    }

    /**
     * Keys k0..k5, six messages each, sent through a MessageQueueSelector by key (k4 and k5 share
     * queues with k0 and k1), read by an orderly push consumer.
     */
    void orderly() throws Exception {
        DefaultMQProducer p = producer(new DefaultMQProducer(group + "_p"));
        start(p);
        createTopic(p);
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        subscribe(c, "c1", "*");
        c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                received("c1", m);
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        start(c);

        List<String> bodies = new ArrayList<>();
        for (int seq = 0; seq < 6; seq++) {
            for (int k = 0; k < 6; k++) {
                String body = "k" + k + "-" + seq;
                bodies.add(body);
                try {
                    SendResult r = p.send(message(body, null, "k" + k),
                        (mqs, msg, arg) -> mqs.get((Integer) arg % mqs.size()), k);
                    JSONObject e = sentEvent("sync", r, body, 0);
                    e.put("key", "k" + k);
                    emit(e);
                } catch (Exception e) {
                    error("send " + body, e);
                }
            }
        }
        awaitSeen("c1", bodies);
    }

    /** Two broadcasting members of one group; each must get every message. */
    void broadcast() throws Exception {
        DefaultMQProducer p = producer(new DefaultMQProducer(group + "_p"));
        start(p);
        createTopic(p);
        List<DefaultMQPushConsumer> members = new ArrayList<>();
        for (String member : new String[] {"c1", "c2"}) {
            DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
            c.setMessageModel(MessageModel.BROADCASTING);
            concurrently(c, member, "*");
            start(c);
            members.add(c);
        }
        // Send only once both members pull every queue (each joined the group first).
        boolean ready = waitFor(() -> members.stream().allMatch(c -> c.getDefaultMQPushConsumerImpl()
            .getRebalanceImpl().getProcessQueueTable().keySet().stream()
            .filter(mq -> mq.getTopic().equals(topic)).count() == QUEUES), waitMs);
        if (!ready) {
            timeout("both broadcasting members pull all " + QUEUES + " queues");
        }
        List<String> bodies = new ArrayList<>();
        for (int i = 0; i < 8; i++) {
            String body = "broadcast-" + i;
            bodies.add(body);
            try {
                sent("sync", p.send(message(body, null, null)), body, 0);
            } catch (Exception e) {
                error("send " + body, e);
            }
        }
        awaitSeen("c1", bodies);
        awaitSeen("c2", bodies);
    }

    /**
     * A broadcasting member that starts only after the first one has read (and so acknowledged)
     * every message: from the first offset, it must still get them all, as on a persistent
     * broker (baiji with keep-acknowledged-secs).
     */
    void lateBroadcast() throws Exception {
        DefaultMQProducer p = producer(new DefaultMQProducer(group + "_p"));
        start(p);
        createTopic(p);
        DefaultMQPushConsumer first = new DefaultMQPushConsumer(group);
        first.setMessageModel(MessageModel.BROADCASTING);
        concurrently(first, "c1", "*");
        start(first);
        boolean ready = waitFor(() -> first.getDefaultMQPushConsumerImpl().getRebalanceImpl()
            .getProcessQueueTable().keySet().stream()
            .filter(mq -> mq.getTopic().equals(topic)).count() == QUEUES, waitMs);
        if (!ready) {
            timeout("the first broadcasting member pulls all " + QUEUES + " queues");
        }
        List<String> bodies = new ArrayList<>();
        for (int i = 0; i < 8; i++) {
            String body = "late-" + i;
            bodies.add(body);
            try {
                sent("sync", p.send(message(body, null, null)), body, 0);
            } catch (Exception e) {
                error("send " + body, e);
            }
        }
        awaitSeen("c1", bodies);
        DefaultMQPushConsumer late = new DefaultMQPushConsumer(group);
        late.setMessageModel(MessageModel.BROADCASTING);
        concurrently(late, "c2", "*");
        start(late);
        awaitSeen("c2", bodies);
    }

    /**
     * A transactional producer whose local transaction commits or rolls back at once
     * ("now-commit", "now-rollback") or answers UNKNOW, and whose check-back listener then
     * commits ("check-commit") or rolls back ("check-rollback").
     */
    void transaction() throws Exception {
        Set<String> checked = ConcurrentHashMap.newKeySet();
        TransactionMQProducer p = new TransactionMQProducer(group + "_p");
        p.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message m, Object arg) {
                String body = text(m.getBody());
                if (body.startsWith("now-commit")) {
                    return LocalTransactionState.COMMIT_MESSAGE;
                }
                if (body.startsWith("now-rollback")) {
                    return LocalTransactionState.ROLLBACK_MESSAGE;
                }
                return LocalTransactionState.UNKNOW;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt m) {
                String body = text(m.getBody());
                LocalTransactionState answer = body.startsWith("check-rollback")
                    ? LocalTransactionState.ROLLBACK_MESSAGE
                    : body.startsWith("check-commit") ? LocalTransactionState.COMMIT_MESSAGE
                    : LocalTransactionState.UNKNOW;
                JSONObject e = event("checked");
                e.put("body", body);
                e.put("id", m.getMsgId());
                e.put("transactionId", m.getTransactionId());
                e.put("answer", answer.name());
                emit(e);
                checked.add(body);
                return answer;
            }
        });
        producer(p);
        start(p);
        createTopic(p);
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        concurrently(c, "c1", "*");
        start(c);

        String[] bodies = {"now-commit-0", "now-rollback-0", "check-commit-0", "check-commit-1",
            "check-rollback-0"};
        for (String body : bodies) {
            try {
                SendResult r = p.sendMessageInTransaction(message(body, null, null), null);
                JSONObject e = sentEvent("transaction", r, body, 0);
                e.put("transactionId", r.getTransactionId());
                emit(e);
            } catch (Exception e) {
                error("send " + body, e);
            }
        }
        List<String> committed = Arrays.asList("now-commit-0", "check-commit-0", "check-commit-1");
        List<String> toCheck = Arrays.asList("check-commit-0", "check-commit-1", "check-rollback-0");
        if (!waitFor(() -> checked.containsAll(toCheck), waitMs)) {
            timeout("check-backs of " + toCheck);
        }
        awaitSeen("c1", committed);
    }

    /** `DefaultMQProducer.request()` answered by a consumer through `MessageUtil.createReplyMessage`. */
    void request() throws Exception {
        DefaultMQProducer replier = producer(new DefaultMQProducer(group + "_r"));
        start(replier);
        createTopic(replier);
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        subscribe(c, "c1", "*");
        // Counts the replier's sends that got their answer: the broker answers a reply once the
        // requester took it, so request() can return before the replier's send() does.
        CountDownLatch replied = new CountDownLatch(2);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                received("c1", m);
                String body = text(m.getBody());
                try {
                    Message reply = MessageUtil.createReplyMessage(m, ("reply-" + body).getBytes(StandardCharsets.UTF_8));
                    SendResult r = replier.send(reply);
                    JSONObject e = event("replied");
                    e.put("body", body);
                    e.put("status", r.getSendStatus().name());
                    e.put("replyTopic", reply.getTopic());
                    emit(e);
                } catch (Exception e) {
                    error("reply to " + body, e);
                }
                replied.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        start(c);

        DefaultMQProducer requester = producer(new DefaultMQProducer(group + "_q"));
        start(requester);
        for (int i = 0; i < 2; i++) {
            String body = "request-" + i;
            try {
                Message m = message(body, null, null);
                Message reply = requester.request(m, 6_000);
                JSONObject e = event("reply");
                e.put("request", body);
                e.put("body", reply == null ? null : text(reply.getBody()));
                e.put("correlationId", reply == null ? null : reply.getProperty("CORRELATION_ID"));
                e.put("requestCorrelationId", m.getProperty("CORRELATION_ID"));
                emit(e);
            } catch (Exception e) {
                error("request " + body, e);
            }
        }
        // Shutting down interrupts the consumer's threads: first let the replier's sends end.
        if (!replied.await(10, TimeUnit.SECONDS)) {
            timeout("the replier's answers");
        }
    }

    /**
     * A traced producer and a traced push consumer (`enableMsgTrace = true`, the default trace
     * topic `RMQ_SYS_TRACE_TOPIC`); then the trace records of every message, looked up as the
     * dashboard looks them up: QUERY_MESSAGE by key (the message id) on the trace topic.
     */
    void trace() throws Exception {
        DefaultMQProducer p = producer(new DefaultMQProducer(group + "_p", true));
        start(p);
        createTopic(p);
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group, true);
        concurrently(c, "c1", "*");
        start(c);
        List<String> bodies = new ArrayList<>();
        List<String> ids = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            String body = "trace-" + i;
            bodies.add(body);
            try {
                SendResult r = p.send(message(body, "TagT", "trace-key-" + i));
                ids.add(r.getMsgId());
                sent("sync", r, body, 0);
            } catch (Exception e) {
                error("send " + body, e);
            }
        }
        awaitSeen("c1", bodies);
        queryTraces(p, ids, Arrays.asList("Pub", "SubBefore", "SubAfter"));
    }

    /** The trace records of `ids` (comma-separated), each until it shows every type in `types`. */
    void traceQuery() throws Exception {
        DefaultMQProducer p = producer(new DefaultMQProducer(group + "_q"));
        start(p);
        List<String> ids = Arrays.asList(require(opts, "ids").split(","));
        queryTraces(p, ids, Arrays.asList(require(opts, "types").split(",")));
    }

    // ---- pieces -------------------------------------------------------------------------------

    /** Queries the trace records of every id until each shows every type, all within `wait`. */
    void queryTraces(DefaultMQProducer p, List<String> ids, List<String> types) {
        Map<String, Set<String>> found = new HashMap<>();
        Map<String, JSONArray> records = new HashMap<>();
        Map<String, Exception> last = new HashMap<>();
        for (String id : ids) {
            found.put(id, new LinkedHashSet<>());
            records.put(id, new JSONArray());
        }
        waitFor(() -> {
            boolean all = true;
            for (String id : ids) {
                if (found.get(id).containsAll(types)) {
                    continue;
                }
                all = false;
                try {
                    // The dashboard's MessageTraceServiceImpl: queryMessage(traceTopic, msgId, ...).
                    QueryResult q = p.queryMessage(TopicValidator.RMQ_SYS_TRACE_TOPIC, id, 64, 0, Long.MAX_VALUE);
                    last.remove(id);
                    for (MessageExt m : q.getMessageList()) {
                        for (TraceContext ctx : TraceDataEncoder.decoderFromTraceDataString(text(m.getBody()))) {
                            for (TraceBean b : ctx.getTraceBeans()) {
                                if (id.equals(b.getMsgId()) && found.get(id).add(ctx.getTraceType().name())) {
                                    JSONObject r = new JSONObject(true);
                                    r.put("type", ctx.getTraceType().name());
                                    r.put("group", ctx.getGroupName());
                                    r.put("topic", b.getTopic());
                                    r.put("success", ctx.isSuccess());
                                    records.get(id).add(r);
                                }
                            }
                        }
                    }
                } catch (Exception e) {
                    last.put(id, e);
                }
            }
            return all;
        }, waitMs);
        for (String id : ids) {
            JSONObject e = event("trace");
            e.put("id", id);
            e.put("types", new ArrayList<>(found.get(id)));
            e.put("records", records.get(id));
            emit(e);
            if (!found.get(id).containsAll(types)) {
                if (last.containsKey(id)) {
                    error("query traces of " + id, last.get(id));
                }
                timeout("trace records " + types + " of " + id);
            }
        }
    }

    <P extends DefaultMQProducer> P producer(P p) {
        p.setNamesrvAddr(namesrv);
        p.setSendMsgTimeout(10_000);
        return p;
    }

    void start(DefaultMQProducer p) throws Exception {
        p.start();
        toClose.add(p::shutdown);
    }

    void start(DefaultMQPushConsumer c) throws Exception {
        c.start();
        toClose.add(0, c::shutdown);
    }

    void closeAll() {
        for (AutoCloseable c : toClose) {
            try {
                c.close();
            } catch (Exception e) {
                error("shutdown", e);
            }
        }
    }

    /**
     * Creates the scenario's topic with {@link #QUEUES} queues (MQAdmin.createTopic through the
     * brokers serving TBW102) and waits until the name server routes it, so that consumers find
     * it at start rather than at their next 30 s route poll.
     */
    void createTopic(DefaultMQProducer p) throws Exception {
        p.createTopic(TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC, topic, QUEUES);
        Exception[] last = {null};
        boolean routed = waitFor(() -> {
            try {
                return p.fetchPublishMessageQueues(topic).size() == QUEUES;
            } catch (Exception e) {
                last[0] = e;
                return false;
            }
        }, waitMs);
        if (!routed) {
            if (last[0] != null) {
                error("route of " + topic, last[0]);
            }
            timeout("route of " + topic);
        }
    }

    /**
     * Sets push consumer `member` up (clustering unless set before): its instance name, the name
     * server, the first offset for a new group, the subscription (a tag expression or a
     * MessageSelector). The caller registers the listener.
     */
    void subscribe(DefaultMQPushConsumer c, String member, Object subscription) throws Exception {
        c.setInstanceName(member);
        c.setNamesrvAddr(namesrv);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        if (subscription instanceof MessageSelector) {
            c.subscribe(topic, (MessageSelector) subscription);
        } else {
            c.subscribe(topic, (String) subscription);
        }
    }

    /** {@link #subscribe} with a concurrent listener that only records what it receives. */
    void concurrently(DefaultMQPushConsumer c, String member, Object subscription) throws Exception {
        subscribe(c, member, subscription);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                received(member, m);
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
    }

    Message message(String body, String tag, String key) {
        Message m = new Message(topic, body.getBytes(StandardCharsets.UTF_8));
        if (tag != null) {
            m.setTags(tag);
        }
        if (key != null) {
            m.setKeys(key);
        }
        return m;
    }

    void received(String member, MessageExt m) {
        String body = text(m.getBody());
        JSONObject e = event("received");
        e.put("member", member);
        e.put("id", m.getMsgId());
        e.put("topic", m.getTopic());
        e.put("queue", m.getQueueId());
        e.put("offset", m.getQueueOffset());
        e.put("tags", m.getTags());
        e.put("keys", m.getKeys());
        e.put("body", body);
        e.put("reconsumeTimes", m.getReconsumeTimes());
        e.put("properties", new JSONObject(new HashMap<>(m.getProperties())));
        emit(e);
        seen.add(member + "/" + body);
    }

    void sent(String mode, SendResult r, String body, int index) {
        emit(sentEvent(mode, r, body, index));
    }

    /** A `sent` event for entry `index` of what `r` answers (0 unless a batch). */
    static JSONObject sentEvent(String mode, SendResult r, String body, int index) {
        JSONObject e = event("sent");
        e.put("mode", mode);
        e.put("id", r.getMsgId());
        e.put("offsetMsgId", r.getOffsetMsgId());
        e.put("status", r.getSendStatus().name());
        MessageQueue q = r.getMessageQueue();
        e.put("queue", q == null ? null : q.getQueueId());
        e.put("offset", r.getQueueOffset() + index);
        e.put("body", body);
        return e;
    }

    /** Waits until `member` saw every body of `bodies`, then lingers. */
    void awaitSeen(String member, Collection<String> bodies) throws InterruptedException {
        List<String> keys = new ArrayList<>();
        for (String b : bodies) {
            keys.add(member + "/" + b);
        }
        if (!waitFor(() -> seen.containsAll(keys), waitMs)) {
            List<String> missing = new ArrayList<>(keys);
            missing.removeAll(seen);
            timeout(member + " receives " + missing);
        }
        Thread.sleep(lingerMs);
    }

    static boolean waitFor(BooleanSupplier cond, long ms) {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms);
        while (true) {
            if (cond.getAsBoolean()) {
                return true;
            }
            if (System.nanoTime() > deadline) {
                return false;
            }
            try {
                Thread.sleep(20);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            }
        }
    }

    static String require(Map<String, String> opts, String key) {
        String v = opts.get(key);
        if (v == null) {
            throw new IllegalArgumentException("missing " + key + "=...");
        }
        return v;
    }

    static String text(byte[] b) {
        return b == null ? null : new String(b, StandardCharsets.UTF_8);
    }

    static JSONObject event(String kind) {
        JSONObject e = new JSONObject(true);
        e.put("kind", kind);
        return e;
    }

    static void timeout(String what) {
        JSONObject e = event("timeout");
        e.put("what", what);
        emit(e);
    }

    static void error(String op, Throwable t) {
        JSONObject e = event("error");
        e.put("op", op);
        e.put("error", t.toString());
        JSONArray causes = new JSONArray();
        for (Throwable c = t.getCause(); c != null && causes.size() < 5; c = c.getCause()) {
            causes.add(c.toString());
        }
        e.put("causes", causes);
        JSONArray frames = new JSONArray();
        for (StackTraceElement f : t.getStackTrace()) {
            if (frames.size() == 8) {
                break;
            }
            frames.add(f.toString());
        }
        e.put("at", frames);
        emit(e);
    }

    static synchronized void emit(JSONObject e) {
        System.out.println(e.toJSONString());
    }
}
