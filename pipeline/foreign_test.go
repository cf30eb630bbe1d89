package pipeline_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
	"github.com/conveyorq/conveyor/stream"
)

// stockPublish publishes msgs into queue's stream with the stock watermill-redisstream
// Publisher, as a service that knows nothing of Conveyor would.
func (b *testBundle) stockPublish(t *testing.T, msgs ...*message.Message) {
	t.Helper()
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: b.rdb}, watermill.NopLogger{})
	require.NoError(t, err)
	require.NoError(t, pub.Publish(b.q.Stream(), msgs...))
}

func stockMessage(payload string, md map[string]string) *message.Message {
	m := message.NewMessage(watermill.NewUUID(), []byte(payload))
	for k, v := range md {
		m.Metadata.Set(k, v)
	}
	return m
}

// Messages that a service publishes with the stock watermill-redisstream Publisher into a
// queue's stream are adopted as jobs on first delivery, instead of landing in the dead set as
// unreadable: their type from the conveyor_type metadata key, or the worker's DefaultType;
// retried, fenced and finished like any job.
func TestStockPublisherMessagesAreAdopted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	typed := stockMessage(`{"n":1}`, map[string]string{pipeline.MetaKeyType: "echo", "trace": "abc"})
	untyped := stockMessage(`{"n":2}`, nil)
	flaky := stockMessage(`{"n":3}`, map[string]string{pipeline.MetaKeyType: "flaky", pipeline.MetaKeyMaxRetries: "2"})
	b.stockPublish(t, typed, untyped, flaky)

	b.startWorker(t, pipeline.WorkerConfig{DefaultType: "echo"}, map[string]pipeline.HandlerFunc{
		"echo": echo,
		"flaky": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
			if j.Attempt == 1 {
				return nil, errors.New("first attempt fails")
			}
			return j.Payload, nil
		},
	})
	for _, m := range []*message.Message{typed, untyped, flaky} {
		j := b.waitStatus(t, m.UUID, status.Completed)
		require.Equal(t, string(m.Payload), string(j.Result))
		require.Equal(t, string(m.Payload), string(j.Payload))
	}
	j, err := b.client.Get(ctx, b.queue, typed.UUID)
	require.NoError(t, err)
	require.Equal(t, "echo", j.Type)
	require.Equal(t, 1, j.Attempt)
	require.Equal(t, "abc", j.Metadata["trace"])
	j, err = b.client.Get(ctx, b.queue, flaky.UUID)
	require.NoError(t, err)
	require.Equal(t, 2, j.Attempt, "retried like any job")
	require.Equal(t, 2, j.MaxRetries)
	s := b.stats(t)
	require.EqualValues(t, 3, s.Enqueued)
	require.EqualValues(t, 3, s.Completed)
	require.EqualValues(t, 1, s.Retried)
	require.Zero(t, s.Poison)
}

// A message of another publisher with no type, on a worker with no DefaultType, is kept in the
// dead set, saying why; one whose id names a job living on another entry is kept as a record
// of its own.
func TestStockPublisherMessagesWithoutTypeGoDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	existing, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "hold"}, pipeline.WithDelay(time.Hour))
	require.NoError(t, err)
	untyped := stockMessage("no type", nil)
	imposter := message.NewMessage(existing.ID, []byte("imposter"))
	imposter.Metadata.Set(pipeline.MetaKeyType, "echo")
	b.stockPublish(t, untyped, imposter)
	b.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{"echo": echo})
	require.Eventually(t, func() bool { return b.stats(t).Dead == 2 }, 10*time.Second, 10*time.Millisecond)
	j, err := b.client.Get(ctx, b.queue, untyped.UUID)
	require.NoError(t, err)
	require.Equal(t, status.Failed, j.Status)
	require.Contains(t, j.LastError, pipeline.MetaKeyType)
	require.Equal(t, "no type", string(j.Payload))
	got, err := b.client.Get(ctx, b.queue, existing.ID)
	require.NoError(t, err)
	require.Equal(t, status.Scheduled, got.Status, "the job the imposter names is untouched")
}

// A message of another publisher is recoverable like any job: adopted by a worker that then
// died, it runs again elsewhere (its lost attempt counted, in Conveyor's layout); taken by a
// worker that died before adopting it, it is put back as it was and adopted by the next.
func TestStockPublisherMessagesAreRecovered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	adopted := stockMessage("adopted", map[string]string{pipeline.MetaKeyType: "echo"})
	taken := stockMessage("taken", map[string]string{pipeline.MetaKeyType: "echo"})
	b.stockPublish(t, adopted, taken)
	require.NoError(t, b.rdb.XGroupCreateMkStream(ctx, b.q.Stream(), keys.Group, "0").Err())
	res, err := b.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: "lost",
		Streams: []string{b.q.Stream(), ">"}, Count: 2, Block: -1}).Result()
	require.NoError(t, err)
	entries := res[0].Messages
	require.Len(t, entries, 2)
	// The lost worker adopted the first before it died.
	_, err = jobstate.NewStore(b.rdb, "").Adopt(ctx, b.q, jobstate.AdoptParams{Job: jobstate.Foreign{ID: adopted.UUID, Entry: entries[0].ID,
		Type: "echo", MaxRetries: 5, CreatedAt: time.Now()}, Now: time.Now(), Worker: "lost"})
	require.NoError(t, err)

	b.startWorker(t, pipeline.WorkerConfig{VisibilityTimeout: 600 * time.Millisecond, RecoveryInterval: 50 * time.Millisecond},
		map[string]pipeline.HandlerFunc{"echo": echo})
	j := b.waitStatus(t, adopted.UUID, status.Completed)
	require.Equal(t, 2, j.Attempt, "the lost attempt counts")
	require.Contains(t, j.LastError, "lost")
	require.Equal(t, "adopted", string(j.Result))
	j = b.waitStatus(t, taken.UUID, status.Completed)
	require.Equal(t, 1, j.Attempt, "no attempt ran before it was adopted")
	require.Equal(t, "taken", string(j.Result))
	require.EqualValues(t, 2, b.stats(t).Recovered)
}

// entryOf returns the stream entry that carries message uuid.
func (b *testBundle) entryOf(t *testing.T, uuid string) redis.XMessage {
	t.Helper()
	all, err := b.rdb.XRange(t.Context(), b.q.Stream(), "-", "+").Result()
	require.NoError(t, err)
	for _, e := range all {
		if e.Values[keys.EntryUUID] == uuid {
			return e
		}
	}
	t.Fatalf("no stream entry carries %s", uuid)
	return redis.XMessage{}
}

// The control keys of a message of the stock Publisher follow pipeline.Publisher's rules: a due
// time schedules the job for then (its entry leaves the stream, nothing runs now), a unique key
// is taken or the message is refused as a duplicate (no job, its entry dropped), and a bad value
// sends the message to the dead set with a reason naming the key. Every row failed before
// (the message ran at once) except the two bad retry count and timeout rows, which pass as
// they did.
func TestStockPublisherControlKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	holder, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "echo"},
		pipeline.WithDelay(time.Hour), pipeline.WithUnique("taken", time.Hour))
	require.NoError(t, err)

	inHour := time.Now().Add(time.Hour)
	atSecond := inHour.Truncate(time.Second)
	fromEntry := func(d time.Duration) func(time.Time) time.Time {
		return func(e time.Time) time.Time { return e.Add(d) }
	}
	at := func(t time.Time) func(time.Time) time.Time { return func(time.Time) time.Time { return t } }
	const refused = status.Status("refused as a duplicate")
	cases := []struct {
		name   string
		md     map[string]string
		status status.Status
		runAt  func(entry time.Time) time.Time // status.Scheduled: the due time
		unique string                          // a unique key the job must hold
		reason string                          // status.Failed: what last_error names
	}{
		{name: "delay", md: map[string]string{pipeline.MetaKeyDelay: "1h"}, status: status.Scheduled, runAt: fromEntry(time.Hour)},
		{name: "run_at in unix ms", md: map[string]string{pipeline.MetaKeyRunAt: strconv.FormatInt(inHour.UnixMilli(), 10)},
			status: status.Scheduled, runAt: at(time.UnixMilli(inHour.UnixMilli()))},
		{name: "run_at in RFC 3339", md: map[string]string{pipeline.MetaKeyRunAt: atSecond.UTC().Format(time.RFC3339)},
			status: status.Scheduled, runAt: at(atSecond)},
		{name: "delay with a unique key", md: map[string]string{pipeline.MetaKeyDelay: "90m", pipeline.MetaKeyUniqueKey: "mine", pipeline.MetaKeyUniqueTTL: "2h"},
			status: status.Scheduled, runAt: fromEntry(90 * time.Minute), unique: "mine"},
		{name: "unique key held", md: map[string]string{pipeline.MetaKeyUniqueKey: "taken"}, status: refused},
		{name: "delay not a duration", md: map[string]string{pipeline.MetaKeyDelay: "garbage"}, status: status.Failed, reason: pipeline.MetaKeyDelay},
		{name: "delay negative", md: map[string]string{pipeline.MetaKeyDelay: "-1s"}, status: status.Failed, reason: pipeline.MetaKeyDelay},
		{name: "run_at not a time", md: map[string]string{pipeline.MetaKeyRunAt: "tomorrow"}, status: status.Failed, reason: pipeline.MetaKeyRunAt},
		{name: "run_at after MaxRunAt", md: map[string]string{pipeline.MetaKeyRunAt: strconv.FormatInt(pipeline.MaxRunAt.UnixMilli()+1, 10)},
			status: status.Failed, reason: pipeline.MetaKeyRunAt},
		{name: "delay and run_at", md: map[string]string{pipeline.MetaKeyDelay: "1h", pipeline.MetaKeyRunAt: "0"}, status: status.Failed, reason: pipeline.MetaKeyRunAt},
		{name: "unique ttl without a key", md: map[string]string{pipeline.MetaKeyUniqueTTL: "1h"}, status: status.Failed, reason: pipeline.MetaKeyUniqueTTL},
		{name: "unique ttl zero", md: map[string]string{pipeline.MetaKeyUniqueKey: "z", pipeline.MetaKeyUniqueTTL: "0s"}, status: status.Failed, reason: pipeline.MetaKeyUniqueTTL},
		{name: "unique key too long", md: map[string]string{pipeline.MetaKeyUniqueKey: strings.Repeat("k", 129)}, status: status.Failed, reason: pipeline.MetaKeyUniqueKey},
		{name: "unknown control key", md: map[string]string{"conveyor_delays": "1h"}, status: status.Failed, reason: "conveyor_delays"},
		{name: "retry count not a number", md: map[string]string{pipeline.MetaKeyMaxRetries: "x"}, status: status.Failed, reason: pipeline.MetaKeyMaxRetries},
		{name: "timeout not a duration", md: map[string]string{pipeline.MetaKeyTimeout: "soon"}, status: status.Failed, reason: pipeline.MetaKeyTimeout},
	}
	msgs := make([]*message.Message, len(cases))
	for i, c := range cases {
		msgs[i] = stockMessage(c.name, c.md)
	}
	b.stockPublish(t, msgs...)
	entries := make([]redis.XMessage, len(cases))
	for i, m := range msgs {
		entries[i] = b.entryOf(t, m.UUID)
	}

	var ran sync.Map
	b.startWorker(t, pipeline.WorkerConfig{DefaultType: "echo"}, map[string]pipeline.HandlerFunc{
		"echo": func(_ context.Context, j *pipeline.Job) ([]byte, error) { ran.Store(j.ID, true); return nil, nil },
	})
	for i, c := range cases {
		m, e := msgs[i], entries[i]
		if c.status == refused {
			require.Eventually(t, func() bool {
				left, err := b.rdb.XRange(ctx, b.q.Stream(), e.ID, e.ID).Result()
				require.NoError(t, err)
				return len(left) == 0
			}, 15*time.Second, 5*time.Millisecond, "%s: the refused message's entry stays", c.name)
			_, err := b.client.Get(ctx, b.queue, m.UUID)
			require.ErrorIs(t, err, pipeline.ErrNotFound, "%s: a refused message makes no job", c.name)
			continue
		}
		j := b.waitStatus(t, m.UUID, c.status)
		switch c.status {
		case status.Scheduled:
			due := c.runAt(stream.EntryTime(e.ID)).UnixMilli()
			require.Equal(t, due, j.RunAt.UnixMilli(), c.name)
			score, err := b.rdb.ZScore(ctx, b.q.Scheduled(), m.UUID).Result()
			require.NoError(t, err, c.name)
			require.EqualValues(t, due, score, c.name)
			require.Equal(t, c.name, string(j.Payload), "%s: the payload moves into the job's record", c.name)
			require.Equal(t, "echo", j.Type, c.name)
			left, err := b.rdb.XRange(ctx, b.q.Stream(), e.ID, e.ID).Result()
			require.NoError(t, err)
			require.Empty(t, left, "%s: the entry leaves the stream", c.name)
			if c.unique != "" {
				require.Equal(t, m.UUID, b.rdb.Get(ctx, b.q.Unique(c.unique)).Val(), c.name)
			}
		case status.Failed:
			require.Contains(t, j.LastError, c.reason, c.name)
			require.Equal(t, c.name, string(j.Payload), c.name)
		}
	}
	for i, c := range cases {
		_, ok := ran.Load(msgs[i].UUID)
		require.False(t, ok, "%s: the handler ran", c.name)
	}
	require.Equal(t, holder.ID, b.rdb.Get(ctx, b.q.Unique("taken")).Val(), "the holder keeps its key")
	s := b.stats(t)
	require.EqualValues(t, 1+4, s.Enqueued, "the holder and the four scheduled messages")
}

// A delayed message of the stock Publisher runs once due, not before: by Redis's clock (the
// scheduler's), no earlier than its entry's time plus the delay. Failed before: it ran at once.
func TestStockPublisherDelayedMessageRunsWhenDue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const delay = 300 * time.Millisecond
	m := stockMessage("later", map[string]string{pipeline.MetaKeyType: "echo", pipeline.MetaKeyDelay: delay.String()})
	b.stockPublish(t, m)
	due := stream.EntryTime(b.entryOf(t, m.UUID).ID).Add(delay)
	started := make(chan time.Time, 1)
	b.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{
		"echo": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
			started <- time.Now()
			return j.Payload, nil
		},
	})
	j := b.waitStatus(t, m.UUID, status.Completed)
	require.False(t, (<-started).Before(due), "ran before it was due")
	require.Equal(t, 1, j.Attempt)
	require.Equal(t, "later", string(j.Result))
	require.Equal(t, due.UnixMilli(), j.RunAt.UnixMilli())
}

// A message of the stock Publisher with a unique key holds it while it runs and frees it when
// it ends; then the key takes a new message again. Failed before: the key was never taken.
func TestStockPublisherUniqueKeyHeldWhileRunning(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	running, release := make(chan string, 2), make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	b.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{
		"hold": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
			running <- j.ID
			<-release
			return nil, nil
		},
	})
	t.Cleanup(free) // before the worker's stop, on a failure
	md := map[string]string{pipeline.MetaKeyType: "hold", pipeline.MetaKeyUniqueKey: "report-7"}
	first := stockMessage("first", md)
	b.stockPublish(t, first)
	require.Equal(t, first.UUID, <-running)
	require.Equal(t, first.UUID, b.rdb.Get(ctx, b.q.Unique("report-7")).Val())
	pttl := b.rdb.PTTL(ctx, b.q.Unique("report-7")).Val()
	require.Greater(t, pttl, pipeline.DefaultUniqueTTL-time.Minute, "held for DefaultUniqueTTL")

	dup := stockMessage("dup", md)
	b.stockPublish(t, dup)
	// Only the running job's entry is left once the duplicate's is dropped.
	require.Eventually(t, func() bool { return b.rdb.XLen(ctx, b.q.Stream()).Val() == 1 },
		15*time.Second, 5*time.Millisecond, "the duplicate's entry stays")
	_, err := b.client.Get(ctx, b.queue, dup.UUID)
	require.ErrorIs(t, err, pipeline.ErrNotFound)

	free()
	b.waitStatus(t, first.UUID, status.Completed)
	require.Zero(t, b.rdb.Exists(ctx, b.q.Unique("report-7")).Val(), "freed when the job ends")
	again := stockMessage("again", md)
	b.stockPublish(t, again)
	require.Equal(t, again.UUID, <-running)
	b.waitStatus(t, again.UUID, status.Completed)
}
