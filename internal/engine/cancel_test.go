package engine

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/status"
	"github.com/conveyorq/conveyor/stream"
)

// The running jobs of one id in two queues chain under the id and leave it in any order; the
// canceled events of jobs not running here are kept at most recentMax, and for a lease
// interval only.
func TestCancelsBookkeeping(t *testing.T) {
	t.Parallel()
	c := NewCancels(nil, zerolog.Nop(), 10*time.Second, time.Now)
	qa, qb := keys.New("p", "a"), keys.New("p", "b")
	msg := func(q keys.Queue) *message.Message {
		m := message.NewMessage("job-1", nil)
		m.Metadata[stream.StreamKey] = q.Stream()
		m.Metadata[stream.EntryIDKey] = "1-0"
		return m
	}
	a := c.Register(&qa, nil, msg(qa), "t")
	b := c.Register(&qb, nil, msg(qb), "t")
	require.Equal(t, b, c.running["job-1"])
	require.Equal(t, a, b.next)
	c.Done(a)
	require.Equal(t, b, c.running["job-1"])
	require.Nil(t, b.next)
	c.Done(b)
	require.Empty(t, c.running)

	now := time.Now()
	for i := range recentMax + 10 {
		c.rememberLocked(runKey{qa.Events(), string(rune('a'+i%26)) + time.Duration(i).String()}, now)
	}
	require.Len(t, c.recent, recentMax)
	c.rememberLocked(runKey{qa.Events(), "late"}, now.Add(c.keepRecent()))
	require.Len(t, c.recent, 1, "older than a lease interval: dropped")
}

// A cancel heard before its job was handed to its handler (the read and the event race on two
// connections) is acted on when the job registers: its record is read, and its delivery
// revoked with ErrJobCanceled.
func TestCancelHeardBeforeRegister(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := t.Context()
	q := keys.New(keys.DefaultPrefix, redistest.UniqueName(t))
	c := NewCancels(jobstate.NewStore(rdb, keys.DefaultPrefix), zerolog.Nop(), 10*time.Second, time.Now)
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: q.Stream(), Values: []any{
		stream.FieldUUID, "job-1", stream.FieldPayload, "", stream.FieldMetadata, ""}}).Err())
	sub, err := stream.NewSubscriber(stream.Config{Client: rdb, Group: keys.Group, ManualSettle: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	msgs, err := sub.Subscribe(ctx, q.Stream())
	require.NoError(t, err)
	msg := <-msgs
	require.NoError(t, rdb.HSet(ctx, q.Job("job-1"), keys.FieldStatus, string(status.Canceled)).Err())

	c.Heard(q.Events())([]events.Event{{ID: "job-1", Status: "canceled", Attempt: 1}})
	c.Heard(q.Events())([]events.Event{{ID: "job-2", Status: "completed", Attempt: 1}}) // not a cancel: not kept
	require.Len(t, c.recent, 1)
	rj := c.Register(&q, sub, msg, "t")
	defer c.Done(rj)
	select {
	case <-msg.Context().Done():
		require.ErrorIs(t, context.Cause(msg.Context()), ErrJobCanceled)
	case <-time.After(10 * time.Second):
		t.Fatal("the cancel heard before was not acted on")
	}
	require.Empty(t, c.recent)
	sub.Settle(msg)
}
