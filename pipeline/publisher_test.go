package pipeline_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
	"github.com/conveyorq/conveyor/stream"
)

// TestPublisherPubSub holds the Publisher to Watermill's universal Pub/Sub suite, paired with
// package stream's Subscriber reading the queues' streams. Each constructor call makes a new
// consumer group (created from the first entry), so a new subscriber reads the whole stream,
// as in stream's own TestPubSub.
func TestPublisherPubSub(t *testing.T) {
	t.Parallel()
	prefix := redistest.UniqueName(t)
	features := tests.Features{
		ConsumerGroups: true,
		// At-least-once: the subscriber puts back what a closing subscription held, and it
		// may be read again.
		ExactlyOnceDelivery: false,
		// Not with the subscriber's Concurrency > 1: up to Concurrency messages are out at
		// once, each handed out by its own goroutine, and a nacked one comes back after
		// NackResendSleep behind later ones. The Publisher keeps order (one call's messages
		// become stream entries in their order, and calls are written in the order they are
		// made): TestPublisherPubSubInOrder runs the order tests with Concurrency 1.
		GuaranteedOrder:                     false,
		GuaranteedOrderWithSingleSubscriber: false,
		// Jobs stay in the stream until a worker finishes them, and nothing here does.
		Persistent:                       true,
		RequireSingleInstance:            false,
		NewSubscriberReceivesOldMessages: true,
		// The suite restarts the broker with an external command (TestReconnect); the
		// Publisher has no connection of its own to re-establish (go-redis does that).
		RestartServiceCommand: nil,
		// The message's context is used for the Redis call, not carried to the subscriber.
		ContextPreserved: false,
	}
	tests.TestPubSub(t, features,
		func(t *testing.T) (message.Publisher, message.Subscriber) {
			return newPublisherPubSub(t, prefix, watermill.NewShortUUID(), 0)
		},
		func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
			return newPublisherPubSub(t, prefix, group, 0)
		},
	)
}

// TestPublisherPubSubInOrder runs the suite's order tests with the subscriber's Concurrency 1,
// where one message is out at a time: what the Publisher wrote in order is read in order.
func TestPublisherPubSubInOrder(t *testing.T) {
	t.Parallel()
	prefix := redistest.UniqueName(t)
	features := tests.Features{
		ConsumerGroups:                      true,
		GuaranteedOrder:                     true,
		GuaranteedOrderWithSingleSubscriber: true,
		Persistent:                          true,
		NewSubscriberReceivesOldMessages:    true,
	}
	ctor := func(t *testing.T) (message.Publisher, message.Subscriber) {
		return newPublisherPubSub(t, prefix, watermill.NewShortUUID(), 1)
	}
	for name, test := range map[string]func(*testing.T, tests.TestContext, tests.PubSubConstructor){
		"TestPublishSubscribeInOrder": tests.TestPublishSubscribeInOrder,
		"TestNoAck":                   tests.TestNoAck,
		"TestResendOnError":           tests.TestResendOnError,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, tests.TestContext{TestID: tests.NewTestID(), Features: features}, ctor)
		})
	}
}

// queueSubscriber subscribes to a queue's stream when asked for the queue: the suite uses one
// topic name for both sides, and the Publisher's topic is a queue name.
type queueSubscriber struct {
	*stream.Subscriber
	prefix string
}

func (s queueSubscriber) Subscribe(ctx context.Context, queue string) (<-chan *message.Message, error) {
	return s.Subscriber.Subscribe(ctx, keys.New(s.prefix, queue).Stream())
}

// newPublisherPubSub returns a Publisher (the suite's messages carry no type: DefaultType) and
// a stream Subscriber in group on the queues' streams.
func newPublisherPubSub(t *testing.T, prefix, group string, concurrency int) (message.Publisher, message.Subscriber) {
	// The Publisher does not close its client's connection, so both sides may share it.
	rdb := redistest.Client(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: prefix})
	require.NoError(t, err)
	pub, err := pipeline.NewPublisher(client,
		pipeline.PublisherConfig{DefaultType: "suite"})
	require.NoError(t, err)
	sub, err := stream.NewSubscriber(stream.Config{
		Client:          rdb,
		Group:           group,
		Concurrency:     concurrency,
		BlockTime:       50 * time.Millisecond,
		NackResendSleep: 10 * time.Millisecond,
		// As in stream's TestPubSub: the suite waits at most 15s for a closed subscription's
		// messages to be cancelled, and closes up to 50 multiplied subscribers in turn.
		CloseTimeout: 50 * time.Millisecond,
		// Put back at once what a closing subscription held, so the next subscription of the
		// group reads it (TestSubscribeCtx re-subscribes the same consumer right away); a
		// worker does the same with its own release script.
		OnRelease: requeueEntries(rdb, group),
	})
	require.NoError(t, err)
	// Some suite tests never close what they construct.
	t.Cleanup(func() { _ = sub.Close() })
	return pub, queueSubscriber{Subscriber: sub, prefix: prefix}
}

// requeueEntriesScript copies entries to the end of the stream and acknowledges them.
// KEYS[1] stream; ARGV[1] group, ARGV[2..] ids.
var requeueEntriesScript = redis.NewScript(`
for i = 2, #ARGV do
  local e = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])
  if #e > 0 then redis.call('XADD', KEYS[1], '*', unpack(e[1][2])) end
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[i])
end
return #ARGV - 1
`)

func requeueEntries(rdb redis.UniversalClient, group string) func(ctx context.Context, stream string, ids []string) {
	return func(ctx context.Context, stream string, ids []string) {
		args := []any{group}
		for _, id := range ids {
			args = append(args, id)
		}
		_ = requeueEntriesScript.Run(ctx, rdb, []string{stream}, args...).Err()
	}
}

// newTestPublisher returns a Publisher over the bundle's client, closed when the test ends.
func newTestPublisher(t *testing.T, client *pipeline.Client, cfg pipeline.PublisherConfig) *pipeline.Publisher {
	t.Helper()
	pub, err := pipeline.NewPublisher(client, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	return pub
}

// A subscriber of the queue's stream receives the message as published: UUID, payload, and the
// metadata without the control keys.
func TestPublisherEntryCarriesMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := newTestPublisher(t, b.client, pipeline.PublisherConfig{})
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"order":42}`))
	msg.Metadata.Set("tenant", "acme")
	msg.Metadata.Set("trace", "abc")
	msg.Metadata.Set(pipeline.MetaKeyType, "ship")
	msg.Metadata.Set(pipeline.MetaKeyMaxRetries, "2")
	require.NoError(t, pub.Publish(b.queue, msg))

	sub, err := stream.NewSubscriber(stream.Config{Client: b.rdb, Group: "watermill-app", BlockTime: 50 * time.Millisecond})
	require.NoError(t, err)
	defer sub.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ch, err := sub.Subscribe(ctx, b.q.Stream())
	require.NoError(t, err)
	var got *message.Message
	select {
	case got = <-ch:
	case <-ctx.Done():
		t.Fatal("nothing received")
	}
	got.Ack()
	require.Equal(t, msg.UUID, got.UUID)
	require.Equal(t, string(msg.Payload), string(got.Payload))
	require.Empty(t, got.Metadata.Get(stream.PoisonKey))
	for k, v := range got.Metadata {
		if k == stream.EntryIDKey || k == stream.StreamKey {
			continue
		}
		require.Contains(t, []string{"tenant", "trace"}, k, "metadata %s=%s", k, v)
	}
	require.Equal(t, "acme", got.Metadata.Get("tenant"))
	require.Equal(t, "abc", got.Metadata.Get("trace"))

	j, err := b.client.Get(t.Context(), b.queue, msg.UUID)
	require.NoError(t, err)
	require.Equal(t, "ship", j.Type)
	require.Equal(t, 2, j.MaxRetries)
	require.Equal(t, map[string]string{"tenant": "acme", "trace": "abc"}, j.Metadata)
}

// A Watermill router handler whose output goes through the Publisher creates jobs that a
// Worker runs to completion.
func TestPublisherRouterHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := newTestPublisher(t, b.client, pipeline.PublisherConfig{})
	events := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	defer events.Close()

	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddHandler("orders-to-jobs", "orders", events, b.queue, pub, func(msg *message.Message) ([]*message.Message, error) {
		job := message.NewMessage("ship-"+msg.UUID, msg.Payload)
		job.Metadata.Set(pipeline.MetaKeyType, "ship")
		job.Metadata.Set(pipeline.MetaKeyMaxRetries, "1")
		job.Metadata.Set("order", msg.Metadata.Get("order"))
		return []*message.Message{job}, nil
	})
	done := make(chan error, 1)
	go func() { done <- router.Run(context.Background()) }()
	defer func() {
		require.NoError(t, router.Close())
		require.NoError(t, <-done)
	}()
	select {
	case <-router.Running():
	case err := <-done:
		t.Fatalf("router stopped: %v", err)
	}

	var mu sync.Mutex
	seen := map[string]map[string]string{} // job id -> metadata the handler saw
	b.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{
		"ship": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
			mu.Lock()
			seen[j.ID] = j.Metadata
			mu.Unlock()
			return append([]byte("shipped "), j.Payload...), nil
		},
	})

	var ids []string
	for i := range 5 {
		ev := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf("order %d", i)))
		ev.Metadata.Set("order", strconv.Itoa(i))
		require.NoError(t, events.Publish("orders", ev))
		ids = append(ids, "ship-"+ev.UUID)
	}
	for i, id := range ids {
		j := b.waitStatus(t, id, status.Completed)
		require.Equal(t, "ship", j.Type)
		require.Equal(t, 1, j.MaxRetries)
		require.Equal(t, fmt.Sprintf("shipped order %d", i), string(j.Result))
		mu.Lock()
		require.Equal(t, map[string]string{"order": strconv.Itoa(i)}, seen[id])
		mu.Unlock()
	}
}

// Watermill's Forwarder forwards enveloped messages from another Pub/Sub (here gochannel, as an
// outbox would be an SQL table) into the Publisher: they become jobs that a Worker runs.
func TestPublisherForwarder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := newTestPublisher(t, b.client, pipeline.PublisherConfig{DefaultType: "echo"})
	outbox := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	defer outbox.Close()

	fwd, err := forwarder.NewForwarder(outbox, pub, watermill.NopLogger{}, forwarder.Config{ForwarderTopic: "outbox"})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- fwd.Run(context.Background()) }()
	defer func() {
		require.NoError(t, fwd.Close())
		require.NoError(t, <-done)
	}()
	select {
	case <-fwd.Running():
	case err := <-done:
		t.Fatalf("forwarder stopped: %v", err)
	}

	b.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{"echo": echo})

	// The application publishes through the forwarder's publisher, naming the queue.
	app := forwarder.NewPublisher(outbox, forwarder.PublisherConfig{ForwarderTopic: "outbox"})
	var msgs []*message.Message
	for i := range 5 {
		m := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf("payload %d", i)))
		m.Metadata.Set("tenant", "acme")
		msgs = append(msgs, m)
	}
	msgs[4].Metadata.Set(pipeline.MetaKeyTimeout, "1m")
	require.NoError(t, app.Publish(b.queue, msgs...))

	for _, m := range msgs {
		j := b.waitStatus(t, m.UUID, status.Completed)
		require.Equal(t, "echo", j.Type)
		require.Equal(t, string(m.Payload), string(j.Result))
		require.Equal(t, map[string]string{"tenant": "acme"}, j.Metadata)
	}
	j, err := b.client.Get(t.Context(), b.queue, msgs[4].UUID)
	require.NoError(t, err)
	require.Equal(t, time.Minute, j.Timeout)
}

func newMessage(uuid, payload string, md map[string]string) *message.Message {
	m := message.NewMessage(uuid, []byte(payload))
	for k, v := range md {
		m.Metadata.Set(k, v)
	}
	return m
}

// Each control key sets its option, and is removed from the job's metadata.
func TestPublisherControlKeys(t *testing.T) {
	t.Parallel()
	type want struct {
		typ        string
		status     status.Status
		runAt      time.Duration // after the client's now, when scheduled
		maxRetries int
		timeout    time.Duration
		uniqueKey  string
		uniqueTTL  time.Duration // the key's TTL is at most this, and more than half of it
	}
	plain := want{typ: "default-type", status: status.Queued, maxRetries: pipeline.DefaultMaxRetries}
	with := func(f func(*want)) want { w := plain; f(&w); return w }
	cases := []struct {
		name string
		md   func(now time.Time) map[string]string
		want want
	}{
		{"DefaultType", func(time.Time) map[string]string { return nil }, plain},
		{"Type", func(time.Time) map[string]string { return map[string]string{"conveyor_type": "email:send"} },
			with(func(w *want) { w.typ = "email:send" })},
		{"Delay", func(time.Time) map[string]string { return map[string]string{"conveyor_delay": "1h30m"} },
			with(func(w *want) { w.status, w.runAt = status.Scheduled, 90*time.Minute })},
		{"DelayZero", func(time.Time) map[string]string { return map[string]string{"conveyor_delay": "0s"} }, plain},
		{"RunAtUnixMilli", func(now time.Time) map[string]string {
			return map[string]string{"conveyor_run_at": strconv.FormatInt(now.Add(2*time.Hour).UnixMilli(), 10)}
		}, with(func(w *want) { w.status, w.runAt = status.Scheduled, 2*time.Hour })},
		{"RunAtRFC3339", func(now time.Time) map[string]string {
			return map[string]string{"conveyor_run_at": now.Add(3 * time.Hour).In(time.FixedZone("X", 3600)).Format(time.RFC3339Nano)}
		}, with(func(w *want) { w.status, w.runAt = status.Scheduled, 3*time.Hour })},
		{"RunAtPast", func(now time.Time) map[string]string {
			return map[string]string{"conveyor_run_at": strconv.FormatInt(now.Add(-time.Hour).UnixMilli(), 10)}
		}, plain},
		{"MaxRetriesZero", func(time.Time) map[string]string { return map[string]string{"conveyor_max_retries": "0"} },
			with(func(w *want) { w.maxRetries = 0 })},
		{"MaxRetries", func(time.Time) map[string]string { return map[string]string{"conveyor_max_retries": "7"} },
			with(func(w *want) { w.maxRetries = 7 })},
		{"Timeout", func(time.Time) map[string]string { return map[string]string{"conveyor_timeout": "45s"} },
			with(func(w *want) { w.timeout = 45 * time.Second })},
		{"Unique", func(time.Time) map[string]string { return map[string]string{"conveyor_unique_key": "order-1"} },
			with(func(w *want) { w.uniqueKey, w.uniqueTTL = "order-1", pipeline.DefaultUniqueTTL })},
		{"UniqueTTL", func(time.Time) map[string]string {
			return map[string]string{"conveyor_unique_key": "order:1", "conveyor_unique_ttl": "10m"}
		}, with(func(w *want) { w.uniqueKey, w.uniqueTTL = "order:1", 10*time.Minute })},
		{"All", func(time.Time) map[string]string {
			return map[string]string{
				"conveyor_type": "report", "conveyor_delay": "5m", "conveyor_max_retries": "3",
				"conveyor_timeout": "2m", "conveyor_unique_key": "r", "conveyor_unique_ttl": "30m",
			}
		}, want{typ: "report", status: status.Scheduled, runAt: 5 * time.Minute, maxRetries: 3,
			timeout: 2 * time.Minute, uniqueKey: "r", uniqueTTL: 30 * time.Minute}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{fixedClock: true})
			pub := newTestPublisher(t, b.client, pipeline.PublisherConfig{DefaultType: "default-type"})
			md := tc.md(b.now)
			if md == nil {
				md = map[string]string{}
			}
			md["tenant"] = "acme" // plain metadata is kept
			msg := newMessage(watermill.NewUUID(), "payload", md)
			require.NoError(t, pub.Publish(b.queue, msg))

			j, err := b.client.Get(t.Context(), b.queue, msg.UUID)
			require.NoError(t, err)
			w := tc.want
			require.Equal(t, w.typ, j.Type)
			require.Equal(t, w.status, j.Status)
			require.Equal(t, "payload", string(j.Payload))
			require.Equal(t, map[string]string{"tenant": "acme"}, j.Metadata, "control keys are removed")
			require.True(t, j.RunAt.Equal(b.now.Add(w.runAt)), "run at %s, want now+%s", j.RunAt, w.runAt)
			require.Equal(t, w.maxRetries, j.MaxRetries)
			require.Equal(t, w.timeout, j.Timeout)

			ukey := b.q.Unique(w.uniqueKey)
			if w.uniqueKey == "" {
				require.NotContains(t, strings.Join(b.queueKeys(t), " "), ":unique:")
				return
			}
			holder, err := b.rdb.Get(t.Context(), ukey).Result()
			require.NoError(t, err)
			require.Equal(t, msg.UUID, holder)
			ttl, err := b.rdb.PTTL(t.Context(), ukey).Result()
			require.NoError(t, err)
			require.LessOrEqual(t, ttl, w.uniqueTTL)
			require.Greater(t, ttl, w.uniqueTTL/2)

			// Another message with the same unique key makes no job while the key is held.
			other := newMessage(watermill.NewUUID(), "other", map[string]string{"conveyor_unique_key": w.uniqueKey})
			require.NoError(t, pub.Publish(b.queue, other))
			_, err = b.client.Get(t.Context(), b.queue, other.UUID)
			require.ErrorIs(t, err, pipeline.ErrNotFound)
			require.EqualValues(t, 1, b.stats(t).Enqueued)
		})
	}
}

// Each invalid message refuses the whole call, names the message, and writes nothing.
func TestPublisherRefusesInvalidMessages(t *testing.T) {
	t.Parallel()
	const badUUID = "bad-message"
	md := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	cases := []struct {
		name        string
		uuid        string // defaults to badUUID
		payload     string
		md          map[string]string
		noDefault   bool // the publisher has no DefaultType
		maxPayload  int
		errIs       error // defaults to ErrInvalid
		errContains string
	}{
		{name: "NoType", noDefault: true, errContains: "no job type"},
		{name: "EmptyType", md: md("conveyor_type", ""), errContains: "empty job type"},
		{name: "TypeWithSpace", md: md("conveyor_type", "a b"), errContains: "space"},
		{name: "DelayNotDuration", md: md("conveyor_delay", "10"), errContains: "conveyor_delay"},
		{name: "DelayNegative", md: md("conveyor_delay", "-1s"), errContains: "negative"},
		{name: "DelayAndRunAt", md: md("conveyor_delay", "1s", "conveyor_run_at", "0"), errContains: "together"},
		{name: "RunAtWord", md: md("conveyor_run_at", "tomorrow"), errContains: "conveyor_run_at"},
		{name: "RunAtNegative", md: md("conveyor_run_at", "-5"), errContains: "conveyor_run_at"},
		{name: "RunAtOverflow", md: md("conveyor_run_at", "99999999999999999999"), errContains: "out of range"},
		{name: "RunAtAfterMax", md: md("conveyor_run_at", "253402300800000"), errContains: "after"},
		{name: "RunAtRFC3339NoZone", md: md("conveyor_run_at", "2030-01-02T15:04:05"), errContains: "RFC 3339"},
		{name: "MaxRetriesWord", md: md("conveyor_max_retries", "three"), errContains: "not an integer"},
		{name: "MaxRetriesNegative", md: md("conveyor_max_retries", "-1"), errContains: "outside"},
		{name: "MaxRetriesTooMany", md: md("conveyor_max_retries", "1001"), errContains: "outside"},
		{name: "TimeoutWord", md: md("conveyor_timeout", "soon"), errContains: "conveyor_timeout"},
		{name: "TimeoutNegative", md: md("conveyor_timeout", "-1m"), errContains: "negative"},
		{name: "UniqueKeyEmpty", md: md("conveyor_unique_key", ""), errContains: "conveyor_unique_key"},
		{name: "UniqueKeyTooLong", md: md("conveyor_unique_key", strings.Repeat("k", keys.MaxNameLen+1)), errContains: "conveyor_unique_key"},
		{name: "UniqueTTLZero", md: md("conveyor_unique_key", "k", "conveyor_unique_ttl", "0s"), errContains: "positive"},
		{name: "UniqueTTLWord", md: md("conveyor_unique_key", "k", "conveyor_unique_ttl", "long"), errContains: "conveyor_unique_ttl"},
		{name: "UniqueTTLWithoutKey", md: md("conveyor_unique_ttl", "1m"), errContains: "without"},
		{name: "UnknownControlKey", md: md("conveyor_retries", "3"), errContains: "unknown control key"},
		{name: "PriorityWord", md: md("conveyor_priority", "high"), errContains: "conveyor_priority"},
		{name: "PriorityZero", md: md("conveyor_priority", "0"), errContains: "conveyor_priority"},
		{name: "PriorityFive", md: md("conveyor_priority", "5"), errContains: "conveyor_priority"},
		{name: "GroupEmpty", md: md("conveyor_group", ""), errContains: "conveyor_group"},
		{name: "GroupWithSpace", md: md("conveyor_group", "a b"), errContains: "conveyor_group"},
		{name: "LimitKeyEmpty", md: md("conveyor_limit_key", ""), errContains: "conveyor_limit_key"},
		{name: "LimitKeyControl", md: md("conveyor_limit_key", "a\nb"), errContains: "conveyor_limit_key"},
		{name: "LimitKeyTooLong", md: md("conveyor_limit_key", strings.Repeat("k", keys.MaxNameLen+1)), errContains: "conveyor_limit_key"},
		{name: "RetentionWord", md: md("conveyor_retention", "forever"), errContains: "conveyor_retention"},
		{name: "RetentionNegative", md: md("conveyor_retention", "-1h"), errContains: "conveyor_retention"},
		{name: "DebounceKeyAlone", md: md("conveyor_debounce_key", "k"), errContains: "conveyor_debounce_quiet"},
		{name: "DebounceNoMaxWait", md: md("conveyor_debounce_key", "k", "conveyor_debounce_quiet", "1s"), errContains: "conveyor_debounce_max_wait"},
		{name: "DebounceTimesAlone", md: md("conveyor_debounce_quiet", "1s", "conveyor_debounce_max_wait", "1m"), errContains: "need conveyor_debounce_key"},
		{name: "DebounceKeyEmpty", md: md("conveyor_debounce_key", "", "conveyor_debounce_quiet", "1s", "conveyor_debounce_max_wait", "1m"), errContains: "conveyor_debounce_key"},
		{name: "DebounceQuietZero", md: md("conveyor_debounce_key", "k", "conveyor_debounce_quiet", "0s", "conveyor_debounce_max_wait", "1m"), errContains: "conveyor_debounce_quiet"},
		{name: "DebounceQuietWord", md: md("conveyor_debounce_key", "k", "conveyor_debounce_quiet", "soon", "conveyor_debounce_max_wait", "1m"), errContains: "conveyor_debounce_quiet"},
		{name: "DebounceMaxWaitBelowQuiet", md: md("conveyor_debounce_key", "k", "conveyor_debounce_quiet", "1m", "conveyor_debounce_max_wait", "1s"), errContains: "conveyor_debounce_max_wait"},
		{name: "DebounceMaxWaitTooLong", md: md("conveyor_debounce_key", "k", "conveyor_debounce_quiet", "1s", "conveyor_debounce_max_wait", "9000h"), errContains: "conveyor_debounce_max_wait"},
		{name: "DebounceWithDelay", md: md("conveyor_debounce_key", "k", "conveyor_debounce_quiet", "1s", "conveyor_debounce_max_wait", "1m", "conveyor_delay", "1s"), errContains: "combined with conveyor_delay"},
		{name: "DebounceWithUnique", md: md("conveyor_debounce_key", "k", "conveyor_debounce_quiet", "1s", "conveyor_debounce_max_wait", "1m", "conveyor_unique_key", "u"), errContains: "combined with conveyor_unique_key"},
		{name: "DebounceWithGroup", md: md("conveyor_debounce_key", "k", "conveyor_debounce_quiet", "1s", "conveyor_debounce_max_wait", "1m", "conveyor_group", "g"), errContains: "combined with conveyor_group"},
		{name: "ReservedMetadataKey", md: md("_stream_entry_id", "1-1"), errContains: "reserved"},
		{name: "EmptyMetadataKey", md: md("", "v"), errContains: "non-empty"},
		{name: "UUIDWithSpace", uuid: "a b", errContains: "job id"},
		{name: "UUIDEmpty", uuid: "-", errContains: "job id"},
		{name: "UUIDTooLong", uuid: strings.Repeat("u", keys.MaxNameLen+1), errContains: "job id"},
		{name: "PayloadTooLarge", payload: strings.Repeat("p", 101), maxPayload: 100, errIs: pipeline.ErrPayloadTooLarge},
		{name: "MetadataTooLarge", payload: strings.Repeat("p", 50), md: md("big", strings.Repeat("m", 50)), maxPayload: 100, errIs: pipeline.ErrPayloadTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{client: pipeline.ClientConfig{MaxPayloadBytes: tc.maxPayload}, fixedClock: true})
			cfg := pipeline.PublisherConfig{DefaultType: "default-type"}
			if tc.noDefault {
				cfg.DefaultType = ""
			}
			pub := newTestPublisher(t, b.client, cfg)
			uuid := tc.uuid
			switch uuid {
			case "":
				uuid = badUUID
			case "-":
				uuid = ""
			}
			good := newMessage(watermill.NewUUID(), "ok", map[string]string{"conveyor_type": "fine"})
			bad := newMessage(uuid, tc.payload, tc.md)
			err := pub.Publish(b.queue, good, bad, good.Copy())
			require.Error(t, err)
			errIs := tc.errIs
			if errIs == nil {
				errIs = pipeline.ErrInvalid
			}
			require.ErrorIs(t, err, errIs)
			require.Contains(t, err.Error(), fmt.Sprintf("message 1 (uuid %q)", uuid))
			require.Contains(t, err.Error(), tc.errContains)
			require.Empty(t, b.queueKeys(t), "nothing is written")
			insp, err := pipeline.NewInspector(b.rdb, pipeline.InspectorConfig{})
			require.NoError(t, err)
			queues, err := insp.Queues(t.Context())
			require.NoError(t, err)
			for _, s := range queues {
				require.NotEqual(t, b.queue, s.Queue)
			}
		})
	}

	t.Run("InvalidQueue", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		pub := newTestPublisher(t, b.client, pipeline.PublisherConfig{DefaultType: "t"})
		err := pub.Publish("a{b}", message.NewMessage(watermill.NewUUID(), nil))
		require.ErrorIs(t, err, pipeline.ErrInvalid)
		require.Contains(t, err.Error(), "queue name")
	})
	t.Run("NilMessage", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		pub := newTestPublisher(t, b.client, pipeline.PublisherConfig{DefaultType: "t"})
		err := pub.Publish(b.queue, message.NewMessage(watermill.NewUUID(), nil), nil)
		require.ErrorIs(t, err, pipeline.ErrInvalid)
		require.Contains(t, err.Error(), "message 1")
		require.Empty(t, b.queueKeys(t))
	})
}

// Publishing a message again (a retry after an error, a redelivery upstream) returns no error
// and makes no second job; neither does a message repeated within one call.
func TestPublisherRepublishIsIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{fixedClock: true})
	pub := newTestPublisher(t, b.client, pipeline.PublisherConfig{DefaultType: "echo"})
	msgs := []*message.Message{
		newMessage(watermill.NewUUID(), "queued", map[string]string{"k": "v"}),
		newMessage(watermill.NewUUID(), "scheduled", map[string]string{"conveyor_delay": "1h"}),
		newMessage(watermill.NewUUID(), "unique", map[string]string{"conveyor_unique_key": "u"}),
	}
	require.NoError(t, pub.Publish(b.queue, msgs...))
	before := map[string]*pipeline.Job{}
	for _, m := range msgs {
		j, err := b.client.Get(t.Context(), b.queue, m.UUID)
		require.NoError(t, err)
		before[m.UUID] = j
	}
	xlen := b.rdb.XLen(t.Context(), b.q.Stream()).Val()

	// Again, the same messages: nothing new, no error.
	again := make([]*message.Message, len(msgs))
	for i, m := range msgs {
		again[i] = m.Copy()
	}
	require.NoError(t, pub.Publish(b.queue, again...))
	require.NoError(t, pub.Publish(b.queue, again[0]))
	// With a changed payload and type, each is refused (another job under a taken id); the
	// existing jobs stand as they were.
	for i := range msgs {
		msgs[i] = newMessage(msgs[i].UUID, "changed", map[string]string{"conveyor_type": "other"})
	}
	require.ErrorIs(t, pub.Publish(b.queue, msgs...), pipeline.ErrConflict)
	for _, m := range msgs {
		j, err := b.client.Get(t.Context(), b.queue, m.UUID)
		require.NoError(t, err)
		require.Equal(t, before[m.UUID], j)
	}
	require.EqualValues(t, 3, b.stats(t).Enqueued)
	require.Equal(t, xlen, b.rdb.XLen(t.Context(), b.q.Stream()).Val(), "no second stream entry")

	// One message twice in one call is one job.
	twice := newMessage(watermill.NewUUID(), "twice", nil)
	require.NoError(t, pub.Publish(b.queue, twice, twice.Copy()))
	require.EqualValues(t, 4, b.stats(t).Enqueued)
}

// A call with many messages is one round trip: one EnqueueBatch, its script calls pipelined.
func TestPublisherBatchIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rt := redistest.CountCommands(b.rdb).Record()
	pub := newTestPublisher(t, b.client, pipeline.PublisherConfig{DefaultType: "echo"})
	batch := func(n int) []*message.Message {
		msgs := make([]*message.Message, n)
		for i := range msgs {
			msgs[i] = message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(i)))
		}
		return msgs
	}
	// The first call also registers the queue and may load the batch script: two messages,
	// since one plain job goes through enqueue1's script instead, and the batch's would then be
	// loaded below (evalsha, NOSCRIPT, eval) unless another test on the server loaded it first.
	require.NoError(t, pub.Publish(b.queue, batch(2)...))
	rt.Take()

	const n = 1000
	msgs := batch(n)
	require.NoError(t, pub.Publish(b.queue, msgs...))
	trips := rt.Take()
	require.Len(t, trips, 1, "round trips: %v", trips)
	require.Len(t, trips[0], n/100, "one script call per 100 jobs")
	for _, name := range trips[0] {
		require.Equal(t, "evalsha", name)
	}
	require.EqualValues(t, n+2, b.stats(t).Enqueued)
	for _, m := range []*message.Message{msgs[0], msgs[n/2], msgs[n-1]} {
		j, err := b.client.Get(t.Context(), b.queue, m.UUID)
		require.NoError(t, err)
		require.Equal(t, string(m.Payload), string(j.Payload))
	}
}

func TestPublisherClose(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub, err := pipeline.NewPublisher(b.client, pipeline.PublisherConfig{DefaultType: "echo"})
	require.NoError(t, err)
	msg := message.NewMessage(watermill.NewUUID(), nil)
	require.NoError(t, pub.Publish(b.queue, msg))
	require.NoError(t, pub.Close())
	require.NoError(t, pub.Close(), "Close is idempotent")
	require.ErrorIs(t, pub.Publish(b.queue, message.NewMessage(watermill.NewUUID(), nil)), pipeline.ErrPublisherClosed)
	require.ErrorIs(t, pub.Publish(b.queue), pipeline.ErrPublisherClosed)
	// The client and its Redis connection are still open.
	_, err = b.client.Get(t.Context(), b.queue, msg.UUID)
	require.NoError(t, err)
	require.EqualValues(t, 1, b.stats(t).Enqueued)
}

func TestPublisherConfig(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never used: config errors come first
	defer rdb.Close()
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	for _, cfg := range []pipeline.PublisherConfig{
		{DefaultType: "has space"},
		{DefaultType: strings.Repeat("t", keys.MaxNameLen+1)},
		{UniqueTTL: -time.Second},
	} {
		_, err := pipeline.NewPublisher(c, cfg)
		require.ErrorIs(t, err, pipeline.ErrInvalid, "%+v", cfg)
	}
	_, err = pipeline.NewPublisher(c, pipeline.PublisherConfig{})
	require.NoError(t, err, "no DefaultType: every message names its type")
	require.Panics(t, func() { _, _ = pipeline.NewPublisher(nil, pipeline.PublisherConfig{}) })
}

// The control keys of the Client's other options (priority, group, limit key, retention,
// debounce) set them as the Client's options do, and are removed from the job's metadata.
func TestPublisherClientOptionKeys(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		md    map[string]string
		check func(t *testing.T, b *testBundle, j *pipeline.Job)
	}{
		{"Priority", map[string]string{"conveyor_priority": "3"},
			func(t *testing.T, b *testBundle, j *pipeline.Job) {
				require.Equal(t, 3, j.Priority)
				n, err := b.rdb.XLen(t.Context(), b.q.LevelStream(3)).Result()
				require.NoError(t, err)
				require.EqualValues(t, 1, n, "the job is in its level's stream")
			}},
		{"Group", map[string]string{"conveyor_group": "tenant-7"},
			func(t *testing.T, _ *testBundle, j *pipeline.Job) {
				require.Equal(t, "tenant-7", j.Group)
			}},
		{"LimitKey", map[string]string{"conveyor_limit_key": "acct 9"},
			func(t *testing.T, b *testBundle, j *pipeline.Job) {
				got, err := b.rdb.HGet(t.Context(), b.q.Job(j.ID), keys.FieldLimitKey).Result()
				require.NoError(t, err)
				require.Equal(t, "acct 9", got)
			}},
		{"Retention", map[string]string{"conveyor_retention": "90s"},
			func(t *testing.T, b *testBundle, j *pipeline.Job) {
				got, err := b.rdb.HGet(t.Context(), b.q.Job(j.ID), keys.FieldRetention).Result()
				require.NoError(t, err)
				require.Equal(t, "90000", got)
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{fixedClock: true})
			pub := newTestPublisher(t, b.client, pipeline.PublisherConfig{DefaultType: "default-type"})
			md := map[string]string{"tenant": "acme"}
			for k, v := range tc.md {
				md[k] = v
			}
			msg := newMessage(watermill.NewUUID(), "payload", md)
			require.NoError(t, pub.Publish(b.queue, msg))

			j, err := b.client.Get(t.Context(), b.queue, msg.UUID)
			require.NoError(t, err)
			require.Equal(t, "default-type", j.Type)
			require.Equal(t, map[string]string{"tenant": "acme"}, j.Metadata, "control keys are removed")
			tc.check(t, b, j)
		})
	}
}

// A debounced message's job has its window's id, not the message's UUID: the message joins the
// window of a Client publish with the same key, and publishing it again joins it again (the
// last publish's payload and metadata win).
func TestPublisherDebounceKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "reindex", Payload: []byte("v1")},
		pipeline.WithDebounce("doc-42", 2*time.Second, time.Minute))
	require.NoError(t, err)

	pub := newTestPublisher(t, b.client, pipeline.PublisherConfig{DefaultType: "reindex"})
	md := map[string]string{"tenant": "acme", "conveyor_debounce_key": "doc-42",
		"conveyor_debounce_quiet": "2s", "conveyor_debounce_max_wait": "1m"}
	msg := newMessage(watermill.NewUUID(), "v2", md)
	require.NoError(t, pub.Publish(b.queue, msg))
	require.NoError(t, pub.Publish(b.queue, newMessage(msg.UUID, "v3", md)))
	_, err = b.client.Get(t.Context(), b.queue, msg.UUID)
	require.ErrorIs(t, err, pipeline.ErrNotFound, "the job is the window's, not the message's")

	j, err := b.client.Get(t.Context(), b.queue, first.ID)
	require.NoError(t, err)
	require.NotNil(t, j.Debounce)
	require.Equal(t, "doc-42", j.Debounce.Key)
	require.Equal(t, 3, j.Debounce.Publishes)
	require.Equal(t, "v3", string(j.Payload))
	require.Equal(t, map[string]string{"tenant": "acme"}, j.Metadata, "control keys are removed")
	// The window's times are Redis's clock's.
	require.Equal(t, time.Minute, j.Debounce.Until.Sub(j.Debounce.First), "max wait")
	require.GreaterOrEqual(t, j.RunAt.Sub(j.Debounce.First), 2*time.Second, "quiet")
	require.EqualValues(t, 1, b.stats(t).Enqueued)
}
