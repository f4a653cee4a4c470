// One scenario of baiji's client tests (tests/java_go.rs) on the real, unmodified Apache
// rocketmq-client-go v2.1.2 (../shared/clients/go). The harness builds this file once and runs
//
//	go_client <scenario> -namesrv HOST:PORT -broker HOST:PORT -topic T -group G [-wait ms] [-linger ms]
//
// It prints one JSON object per line with a "kind", as tests/java_client/BaijiJavaClient.java
// does (same kinds, same fields): sent, received, checked, replied, reply, timeout, error, done.
// The program never decides pass or fail: it waits (at most -wait) for what it expects, lingers
// so that anything unexpected shows too, and reports; the harness judges.
//
// Features v2.1.2 does not have are not scenarios here: WithVIPChannel is stored but never read
// (internal/client.go brokerVIPChannel has no caller), and there is no message-query API (the
// harness finds Go's traces with the Java client's query).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

// queues of every topic a scenario creates (the harness assumes the same).
const queues = 4

type scenario struct {
	namesrv []string
	broker  string
	topic   string
	group   string
	wait    time.Duration
	linger  time.Duration

	mu      sync.Mutex
	seen    map[string]bool // "member/body"
	closers []func() error
}

var outMu sync.Mutex

func emit(e map[string]interface{}) {
	b, err := json.Marshal(e)
	if err != nil {
		b, _ = json.Marshal(map[string]interface{}{"kind": "error", "op": "encode", "error": err.Error()})
	}
	outMu.Lock()
	defer outMu.Unlock()
	os.Stdout.Write(append(b, '\n'))
}

func event(kind string) map[string]interface{} {
	return map[string]interface{}{"kind": kind}
}

func emitError(op string, err error) {
	e := event("error")
	e["op"] = op
	e["error"] = err.Error()
	emit(e)
}

func timeout(what string) {
	e := event("timeout")
	e["what"] = what
	emit(e)
}

func main() {
	status := 0
	defer func() {
		emit(event("done"))
		os.Exit(status)
	}()
	if len(os.Args) < 2 {
		emitError("usage", fmt.Errorf("usage: go_client <scenario> -namesrv ... -topic ... -group ..."))
		status = 2
		return
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ContinueOnError)
	namesrv := fs.String("namesrv", "", "name server host:port")
	broker := fs.String("broker", "", "broker host:port (topic creation)")
	topic := fs.String("topic", "", "topic")
	group := fs.String("group", "", "consumer group (producer groups derive from it)")
	wait := fs.Int("wait", 20000, "longest wait for what the scenario expects, ms")
	linger := fs.Int("linger", 1500, "listening time after what is expected arrived, ms")
	ready := fs.String("ready", "", "relay: the file that gets the message id once consumed")
	stop := fs.String("stop", "", "relay: the file whose existence ends the scenario")
	if err := fs.Parse(os.Args[2:]); err != nil {
		emitError("flags", err)
		status = 2
		return
	}
	rlog.SetLogLevel("warn")
	s := &scenario{
		namesrv: []string{*namesrv},
		broker:  *broker,
		topic:   *topic,
		group:   *group,
		wait:    time.Duration(*wait) * time.Millisecond,
		linger:  time.Duration(*linger) * time.Millisecond,
		seen:    map[string]bool{},
	}
	var err error
	switch os.Args[1] {
	case "produce":
		err = s.produce()
	case "tag":
		err = s.filtered(consumer.MessageSelector{Type: consumer.TAG, Expression: "TagA || TagB"})
	case "sql":
		err = s.filtered(consumer.MessageSelector{Type: consumer.SQL92, Expression: "a > 5 AND b = 'x'"})
	case "orderly":
		err = s.orderly()
	case "broadcast":
		err = s.broadcast()
	case "transaction":
		err = s.transaction()
	case "request":
		err = s.request()
	case "trace":
		err = s.trace()
	case "relay":
		err = s.relay(*ready, *stop)
	default:
		err = fmt.Errorf("unknown scenario %s", os.Args[1])
	}
	for i := len(s.closers) - 1; i >= 0; i-- {
		if cerr := s.closers[i](); cerr != nil {
			emitError("shutdown", cerr)
		}
	}
	if err != nil {
		emitError("scenario", err)
		status = 1
	}
}

// ---- scenarios --------------------------------------------------------------------------------

// produce: sync, async, one-way and batch sends (4 messages each), all read by one push consumer.
func (s *scenario) produce() error {
	p, err := s.started(nil, everything)
	if err != nil {
		return err
	}
	ctx := context.Background()
	var bodies []string
	for i := 0; i < 4; i++ {
		body := fmt.Sprintf("sync-%d", i)
		bodies = append(bodies, body)
		r, err := p.SendSync(ctx, s.message(body, "", ""))
		if err != nil {
			emitError("send sync "+body, err)
			continue
		}
		s.sent("sync", r, body, 0)
	}
	var acks sync.WaitGroup
	for i := 0; i < 4; i++ {
		body := fmt.Sprintf("async-%d", i)
		bodies = append(bodies, body)
		acks.Add(1)
		err := p.SendAsync(ctx, func(_ context.Context, r *primitive.SendResult, err error) {
			defer acks.Done()
			if err != nil {
				emitError("send async "+body, err)
				return
			}
			s.sent("async", r, body, 0)
		}, s.message(body, "", ""))
		if err != nil {
			emitError("send async "+body, err)
			acks.Done()
		}
	}
	if !waitGroup(&acks, s.wait) {
		timeout("async send callbacks")
	}
	for i := 0; i < 4; i++ {
		body := fmt.Sprintf("oneway-%d", i)
		bodies = append(bodies, body)
		m := s.message(body, "", "")
		if err := p.SendOneWay(ctx, m); err != nil {
			emitError("send oneway "+body, err)
			continue
		}
		// buildSendRequest gave the message its UNIQ_KEY before writing it.
		e := event("sent")
		e["mode"] = "oneway"
		e["id"] = m.GetProperty(primitive.PropertyUniqueClientMessageIdKeyIndex)
		e["body"] = body
		emit(e)
	}
	var batch []*primitive.Message
	for i := 0; i < 4; i++ {
		body := fmt.Sprintf("batch-%d", i)
		bodies = append(bodies, body)
		batch = append(batch, s.message(body, "", ""))
	}
	if r, err := p.SendSync(ctx, batch...); err != nil {
		emitError("send batch", err)
	} else {
		// Go gives batch entries no UNIQ_KEY (producer.go encodeBatch): no per-entry id.
		for i := range batch {
			e := sentEvent("batch", r, fmt.Sprintf("batch-%d", i), i)
			e["id"] = nil
			emit(e)
		}
	}
	s.awaitSeen("c1", bodies)
	return nil
}

// filtered: a push consumer with selector; messages with every combination of tag and properties.
func (s *scenario) filtered(selector consumer.MessageSelector) error {
	p, err := s.started(nil, selector)
	if err != nil {
		return err
	}
	tags := []string{"TagA", "TagB", "TagC", ""}
	props := [][]string{{"3", "x"}, {"7", "x"}, {"9", "y"}, {"10", "x"}, {"6", "x"}, nil}
	var expected []string
	n := 0
	for _, tag := range tags {
		for _, ab := range props {
			body := fmt.Sprintf("filter-%d", n)
			n++
			m := s.message(body, tag, "")
			if ab != nil {
				m.WithProperty("a", ab[0])
				m.WithProperty("b", ab[1])
			}
			var match bool
			if selector.Type == consumer.TAG {
				match = tag == "TagA" || tag == "TagB"
			} else {
				a, _ := strconv.Atoi(firstOr(ab, 0))
				match = ab != nil && a > 5 && ab[1] == "x"
			}
			if match {
				expected = append(expected, body)
			}
			r, err := p.SendSync(context.Background(), m)
			if err != nil {
				emitError("send "+body, err)
				continue
			}
			e := sentEvent("sync", r, body, 0)
			e["tag"] = nilIfEmpty(tag)
			e["a"] = nilIfEmpty(firstOr(ab, 0))
			e["b"] = nilIfEmpty(firstOr(ab, 1))
			emit(e)
		}
	}
	s.awaitSeen("c1", expected)
	return nil
}

// orderly: keys k0..k5, six messages each, sent through the hash-by-sharding-key queue selector,
// read by an orderly push consumer.
func (s *scenario) orderly() error {
	p, err := s.started([]producer.Option{producer.WithQueueSelector(producer.NewHashQueueSelector())},
		everything, consumer.WithConsumerOrder(true))
	if err != nil {
		return err
	}
	var bodies []string
	for seq := 0; seq < 6; seq++ {
		for k := 0; k < 6; k++ {
			key := fmt.Sprintf("k%d", k)
			body := fmt.Sprintf("%s-%d", key, seq)
			bodies = append(bodies, body)
			m := s.message(body, "", key)
			m.WithShardingKey(key)
			r, err := p.SendSync(context.Background(), m)
			if err != nil {
				emitError("send "+body, err)
				continue
			}
			e := sentEvent("sync", r, body, 0)
			e["key"] = key
			emit(e)
		}
	}
	s.awaitSeen("c1", bodies)
	return nil
}

// broadcast: two broadcasting members of one group; each must get every message.
func (s *scenario) broadcast() error {
	p, err := s.producer("p", nil)
	if err != nil {
		return err
	}
	if err := s.createTopic(); err != nil {
		return err
	}
	for _, member := range []string{"c1", "c2"} {
		if err := s.pushConsumer(member, everything,
			consumer.WithConsumerModel(consumer.BroadCasting)); err != nil {
			return err
		}
	}
	// Start returns after each member's heartbeat (push_consumer.go Start:
	// SendHeartbeatToAllBrokerWithLock): both belong to the group before the first send.
	var bodies []string
	for i := 0; i < 8; i++ {
		body := fmt.Sprintf("broadcast-%d", i)
		bodies = append(bodies, body)
		r, err := p.SendSync(context.Background(), s.message(body, "", ""))
		if err != nil {
			emitError("send "+body, err)
			continue
		}
		s.sent("sync", r, body, 0)
	}
	s.awaitSeen("c1", bodies)
	s.awaitSeen("c2", bodies)
	return nil
}

type txListener struct {
	mu      sync.Mutex
	checked map[string]bool
}

func (l *txListener) ExecuteLocalTransaction(m *primitive.Message) primitive.LocalTransactionState {
	body := string(m.Body)
	switch {
	case strings.HasPrefix(body, "now-commit"):
		return primitive.CommitMessageState
	case strings.HasPrefix(body, "now-rollback"):
		return primitive.RollbackMessageState
	default:
		return primitive.UnknowState
	}
}

func (l *txListener) CheckLocalTransaction(m *primitive.MessageExt) primitive.LocalTransactionState {
	body := string(m.Body)
	answer, name := primitive.UnknowState, "UNKNOW"
	switch {
	case strings.HasPrefix(body, "check-rollback"):
		answer, name = primitive.RollbackMessageState, "ROLLBACK_MESSAGE"
	case strings.HasPrefix(body, "check-commit"):
		answer, name = primitive.CommitMessageState, "COMMIT_MESSAGE"
	}
	e := event("checked")
	e["body"] = body
	e["id"] = m.MsgId
	e["transactionId"] = m.TransactionId
	e["answer"] = name
	emit(e)
	l.mu.Lock()
	l.checked[body] = true
	l.mu.Unlock()
	return answer
}

// transaction: a transactional producer whose local transaction commits or rolls back at once
// ("now-commit", "now-rollback") or answers UNKNOW, and whose check-back listener then commits
// ("check-commit") or rolls back ("check-rollback").
func (s *scenario) transaction() error {
	l := &txListener{checked: map[string]bool{}}
	p, err := producer.NewTransactionProducer(l,
		producer.WithNsResolver(primitive.NewPassthroughResolver(s.namesrv)),
		producer.WithGroupName(s.group+"_p"),
		producer.WithInstanceName("p"),
		producer.WithSendMsgTimeout(10*time.Second))
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return err
	}
	s.closers = append(s.closers, p.Shutdown)
	if err := s.createTopic(); err != nil {
		return err
	}
	if err := s.pushConsumer("c1", everything); err != nil {
		return err
	}
	for _, body := range []string{"now-commit-0", "now-rollback-0", "check-commit-0", "check-commit-1", "check-rollback-0"} {
		r, err := p.SendMessageInTransaction(context.Background(), s.message(body, "", ""))
		if err != nil {
			emitError("send "+body, err)
			continue
		}
		e := sentEvent("transaction", r.SendResult, body, 0)
		e["transactionId"] = r.TransactionID
		emit(e)
	}
	toCheck := []string{"check-commit-0", "check-commit-1", "check-rollback-0"}
	if !waitFor(s.wait, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, b := range toCheck {
			if !l.checked[b] {
				return false
			}
		}
		return true
	}) {
		timeout(fmt.Sprintf("check-backs of %v", toCheck))
	}
	s.awaitSeen("c1", []string{"now-commit-0", "check-commit-0", "check-commit-1"})
	return nil
}

// request: Producer.Request answered by a consumer through consumer.CreateReplyMessage.
func (s *scenario) request() error {
	replier, err := s.producer("r", nil)
	if err != nil {
		return err
	}
	if err := s.createTopic(); err != nil {
		return err
	}
	c, err := consumer.NewPushConsumer(s.consumerOptions("c1")...)
	if err != nil {
		return err
	}
	// One signal per reply the replier's send got an answer for (or failed): the broker answers
	// a reply once the requester took it, so Request can return before SendSync does.
	replied := make(chan struct{}, 16)
	done := func() {
		select {
		case replied <- struct{}{}:
		default:
		}
	}
	err = c.Subscribe(s.topic, everything,
		func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			for _, m := range msgs {
				s.received("c1", m)
				body := string(m.Body)
				reply, err := consumer.CreateReplyMessage(m, nil)
				if err != nil {
					emitError("reply to "+body, err)
					continue
				}
				// v2.1.2's CreateReplyMessage parses the body it is given as properties instead
				// of setting it (consumer/message_util.go): set the body here.
				reply.Body = []byte("reply-" + body)
				r, err := replier.SendSync(context.Background(), reply)
				done()
				if err != nil {
					emitError("reply to "+body, err)
					continue
				}
				e := event("replied")
				e["body"] = body
				e["status"] = r.Status
				e["replyTopic"] = reply.Topic
				emit(e)
			}
			return consumer.ConsumeSuccess, nil
		})
	if err != nil {
		return err
	}
	if err := c.Start(); err != nil {
		return err
	}
	s.closers = append(s.closers, c.Shutdown)
	requester, err := s.producer("q", nil)
	if err != nil {
		return err
	}
	for i := 0; i < 2; i++ {
		body := fmt.Sprintf("request-%d", i)
		m := s.message(body, "", "")
		reply, err := requester.Request(context.Background(), 6*time.Second, m)
		if err != nil {
			emitError("request "+body, err)
			continue
		}
		e := event("reply")
		e["request"] = body
		e["body"] = string(reply.Body)
		e["correlationId"] = reply.GetProperty(primitive.PropertyCorrelationID)
		e["requestCorrelationId"] = m.GetProperty(primitive.PropertyCorrelationID)
		emit(e)
	}
	// Shutting down stops the consumer: first let the replier's sends end.
	wait := time.After(10 * time.Second)
	for n := 0; n < 2; n++ {
		select {
		case <-replied:
		case <-wait:
			timeout("the replier's answers")
			return nil
		}
	}
	return nil
}

// trace: a traced producer and a traced push consumer (WithTrace, the default trace topic
// RMQ_SYS_TRACE_TOPIC); the harness then looks the records up with the Java client's query.
func (s *scenario) trace() error {
	cfg := &primitive.TraceConfig{Access: primitive.Local, NamesrvAddrs: s.namesrv, GroupName: s.group + "_trace"}
	p, err := s.started([]producer.Option{producer.WithTrace(cfg)}, everything, consumer.WithTrace(cfg))
	if err != nil {
		return err
	}
	var bodies []string
	for i := 0; i < 3; i++ {
		body := fmt.Sprintf("trace-%d", i)
		bodies = append(bodies, body)
		r, err := p.SendSync(context.Background(), s.message(body, "TagT", fmt.Sprintf("trace-key-%d", i)))
		if err != nil {
			emitError("send "+body, err)
			continue
		}
		s.sent("sync", r, body, 0)
	}
	s.awaitSeen("c1", bodies)
	// The trace dispatcher sends in the background (5 ms batches): give it time before the
	// producer and consumer shut it down.
	time.Sleep(time.Second)
	return nil
}

// ---- pieces -----------------------------------------------------------------------------------

// sender is what the scenarios use of a started default producer.
type sender interface {
	SendSync(context.Context, ...*primitive.Message) (*primitive.SendResult, error)
	SendAsync(context.Context, func(context.Context, *primitive.SendResult, error), ...*primitive.Message) error
	SendOneWay(context.Context, ...*primitive.Message) error
	Request(context.Context, time.Duration, *primitive.Message) (*primitive.Message, error)
}

// everything subscribes to every tag.
var everything = consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}

// started is the set-up most scenarios share: producer "p" (with popts) started, the topic
// created, push consumer "c1" (selector, copts) started.
// relay: one message sent and consumed by push consumer c1, which then stays up until the file
// `stop` exists (at most `wait`), so that the harness can ask the broker about it meanwhile
// (GET_CONSUMER_RUNNING_INFO, CONSUME_MESSAGE_DIRECTLY, relayed to this client). The file
// `ready` gets the message's offsetMsgId (`{"msgId":..}`) once it was consumed.
func (s *scenario) relay(ready, stop string) error {
	p, err := s.started(nil, everything)
	if err != nil {
		return err
	}
	body := "relay-0"
	r, err := p.SendSync(context.Background(), s.message(body, "", ""))
	if err != nil {
		return err
	}
	s.sent("sync", r, body, 0)
	s.awaitSeen("c1", []string{body})
	data, err := json.Marshal(map[string]string{"msgId": r.OffsetMsgID})
	if err != nil {
		return err
	}
	if err := os.WriteFile(ready+".tmp", data, 0o644); err != nil {
		return err
	}
	if err := os.Rename(ready+".tmp", ready); err != nil {
		return err
	}
	if !waitFor(s.wait, func() bool { _, err := os.Stat(stop); return err == nil }) {
		timeout("the stop file " + stop)
	}
	return nil
}

func (s *scenario) started(popts []producer.Option, selector consumer.MessageSelector, copts ...consumer.Option) (sender, error) {
	p, err := s.producer("p", popts)
	if err != nil {
		return nil, err
	}
	if err := s.createTopic(); err != nil {
		return nil, err
	}
	if err := s.pushConsumer("c1", selector, copts...); err != nil {
		return nil, err
	}
	return p, nil
}

// producer starts a producer of group <group>_<name>, instance <name> (each client its own
// instance: a shared one would keep the first creator's callback channel, which carries the
// transaction check-backs).
func (s *scenario) producer(name string, extra []producer.Option) (sender, error) {
	opts := append([]producer.Option{
		producer.WithNsResolver(primitive.NewPassthroughResolver(s.namesrv)),
		producer.WithGroupName(s.group + "_" + name),
		producer.WithInstanceName(name),
		producer.WithSendMsgTimeout(10 * time.Second),
		producer.WithRetry(2),
	}, extra...)
	p, err := producer.NewDefaultProducer(opts...)
	if err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, p.Shutdown)
	return p, nil
}

func (s *scenario) consumerOptions(member string, extra ...consumer.Option) []consumer.Option {
	return append([]consumer.Option{
		consumer.WithNsResolver(primitive.NewPassthroughResolver(s.namesrv)),
		consumer.WithGroupName(s.group),
		consumer.WithInstance(member),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	}, extra...)
}

// pushConsumer starts push consumer `member` of the scenario's group on its topic.
func (s *scenario) pushConsumer(member string, selector consumer.MessageSelector, extra ...consumer.Option) error {
	c, err := consumer.NewPushConsumer(s.consumerOptions(member, extra...)...)
	if err != nil {
		return err
	}
	err = c.Subscribe(s.topic, selector, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range msgs {
			s.received(member, m)
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		return err
	}
	if err := c.Start(); err != nil {
		return err
	}
	s.closers = append(s.closers, c.Shutdown)
	return nil
}

// createTopic creates the scenario's topic with `queues` queues on the broker (the admin API)
// and waits until the name server routes it: a push consumer refuses to start on a topic
// without a route.
func (s *scenario) createTopic() error {
	a, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(s.namesrv)))
	if err != nil {
		return err
	}
	defer a.Close()
	ctx := context.Background()
	err = a.CreateTopic(ctx, admin.WithTopicCreate(s.topic), admin.WithBrokerAddrCreate(s.broker),
		admin.WithReadQueueNums(queues), admin.WithWriteQueueNums(queues))
	if err != nil {
		return err
	}
	var last error
	if !waitFor(s.wait, func() bool {
		mqs, err := a.FetchPublishMessageQueues(ctx, s.topic)
		last = err
		return err == nil && len(mqs) == queues
	}) {
		if last != nil {
			emitError("route of "+s.topic, last)
		}
		timeout("route of " + s.topic)
	}
	return nil
}

func (s *scenario) message(body, tag, key string) *primitive.Message {
	m := primitive.NewMessage(s.topic, []byte(body))
	if tag != "" {
		m.WithTag(tag)
	}
	if key != "" {
		m.WithKeys([]string{key})
	}
	return m
}

func (s *scenario) received(member string, m *primitive.MessageExt) {
	body := string(m.Body)
	e := event("received")
	e["member"] = member
	e["id"] = m.MsgId
	e["topic"] = m.Topic
	if m.Queue != nil {
		e["queue"] = m.Queue.QueueId
	}
	e["offset"] = m.QueueOffset
	e["tags"] = nilIfEmpty(m.GetTags())
	e["keys"] = nilIfEmpty(m.GetKeys())
	e["body"] = body
	e["reconsumeTimes"] = m.ReconsumeTimes
	e["properties"] = m.GetProperties()
	emit(e)
	s.mu.Lock()
	s.seen[member+"/"+body] = true
	s.mu.Unlock()
}

func (s *scenario) sent(mode string, r *primitive.SendResult, body string, index int) {
	emit(sentEvent(mode, r, body, index))
}

// sentEvent is a `sent` event for entry `index` of what r answers (0 unless a batch).
func sentEvent(mode string, r *primitive.SendResult, body string, index int) map[string]interface{} {
	e := event("sent")
	e["mode"] = mode
	e["id"] = r.MsgID
	e["offsetMsgId"] = r.OffsetMsgID
	e["status"] = sendStatus(r.Status)
	if r.MessageQueue != nil {
		e["queue"] = r.MessageQueue.QueueId
	}
	e["offset"] = r.QueueOffset + int64(index)
	e["body"] = body
	return e
}

func sendStatus(s primitive.SendStatus) string {
	switch s {
	case primitive.SendOK:
		return "SEND_OK"
	case primitive.SendFlushDiskTimeout:
		return "FLUSH_DISK_TIMEOUT"
	case primitive.SendFlushSlaveTimeout:
		return "FLUSH_SLAVE_TIMEOUT"
	case primitive.SendSlaveNotAvailable:
		return "SLAVE_NOT_AVAILABLE"
	default:
		return fmt.Sprintf("UNKNOWN(%d)", s)
	}
}

// awaitSeen waits until member saw every body, then lingers.
func (s *scenario) awaitSeen(member string, bodies []string) {
	missing := func() []string {
		s.mu.Lock()
		defer s.mu.Unlock()
		var m []string
		for _, b := range bodies {
			if !s.seen[member+"/"+b] {
				m = append(m, b)
			}
		}
		return m
	}
	if !waitFor(s.wait, func() bool { return len(missing()) == 0 }) {
		timeout(fmt.Sprintf("%s receives %v", member, missing()))
	}
	time.Sleep(s.linger)
}

func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitGroup(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

func firstOr(xs []string, i int) string {
	if i < len(xs) {
		return xs[i]
	}
	return ""
}

func nilIfEmpty(s string) interface{} {
	if s == "" {
		return nil
	}
	return s
}
