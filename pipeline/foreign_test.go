package pipeline_test

import (
	"context"
	"errors"
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
)

// stockPublish publishes msgs into queue's stream with the stock watermill-redisstream
// Publisher, as a service that knows nothing of Conveyor would.
func (b *bundle) stockPublish(t *testing.T, msgs ...*message.Message) {
	t.Helper()
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: b.rdb}, watermill.NopLogger{})
	require.NoError(t, err)
	require.NoError(t, pub.Publish(b.keys.Stream(), msgs...))
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
		j := b.waitStatus(t, m.UUID, pipeline.StatusCompleted)
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
	require.Equal(t, pipeline.StatusFailed, j.Status)
	require.Contains(t, j.LastError, pipeline.MetaKeyType)
	require.Equal(t, "no type", string(j.Payload))
	got, err := b.client.Get(ctx, b.queue, existing.ID)
	require.NoError(t, err)
	require.Equal(t, pipeline.StatusScheduled, got.Status, "the job the imposter names is untouched")
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
	require.NoError(t, b.rdb.XGroupCreateMkStream(ctx, b.keys.Stream(), keys.Group, "0").Err())
	res, err := b.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: "lost",
		Streams: []string{b.keys.Stream(), ">"}, Count: 2, Block: -1}).Result()
	require.NoError(t, err)
	entries := res[0].Messages
	require.Len(t, entries, 2)
	// The lost worker adopted the first before it died.
	_, err = jobstate.Adopt(ctx, b.rdb, b.keys, jobstate.Foreign{ID: adopted.UUID, Entry: entries[0].ID,
		Type: "echo", MaxRetries: 5, CreatedAt: time.Now().UnixMilli()}, time.Now().UnixMilli(), "lost")
	require.NoError(t, err)

	b.startWorker(t, pipeline.WorkerConfig{VisibilityTimeout: 600 * time.Millisecond, RecoveryInterval: 50 * time.Millisecond},
		map[string]pipeline.HandlerFunc{"echo": echo})
	j := b.waitStatus(t, adopted.UUID, pipeline.StatusCompleted)
	require.Equal(t, 2, j.Attempt, "the lost attempt counts")
	require.Contains(t, j.LastError, "lost")
	require.Equal(t, "adopted", string(j.Result))
	j = b.waitStatus(t, taken.UUID, pipeline.StatusCompleted)
	require.Equal(t, 1, j.Attempt, "no attempt ran before it was adopted")
	require.Equal(t, "taken", string(j.Result))
	require.EqualValues(t, 2, b.stats(t).Recovered)
}
