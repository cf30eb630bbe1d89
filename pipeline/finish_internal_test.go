package pipeline

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// The completer writes chunks concurrently, so a job's start mark may reach Redis after its
// outcome. finish.lua must then leave the outcome alone and not count a refusal, while a late
// outcome (a stale worker's) is still refused and counted.
func TestFinishLateStartMarkIsIgnored(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := t.Context()
	c := NewClient(rdb, ClientConfig{})
	queue := redistest.UniqueName(t)
	q := keys.New(keys.DefaultPrefix, queue)
	job, err := c.Enqueue(ctx, queue, Task{Type: "t", Payload: []byte("p")})
	require.NoError(t, err)
	require.NoError(t, rdb.XGroupCreateMkStream(ctx, q.Stream(), keys.Group, "0").Err())
	_, err = rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: "w1",
		Streams: []string{q.Stream(), ">"}, Count: 1}).Result()
	require.NoError(t, err)

	comp := newCompleter(rdb, "w1", time.Hour.Milliseconds(), time.Second, finishChunk, 10, zerolog.Nop())
	now := time.Now().UnixMilli()
	run := func(ts ...transition) []int64 {
		call := comp.call(ts)
		codes, err := call.Script.Run(ctx, rdb, call.Keys, call.Args...).Int64Slice()
		require.NoError(t, err)
		return codes
	}
	base := transition{q: &q, id: job.ID, entry: job.Entry, attempt: 1, started: now, finished: now + 5,
		sent: true, payload: []byte("p")}
	done, start := base, base
	done.op, start.op = opDone, opStart

	require.Equal(t, []int64{1}, run(done))
	require.Equal(t, []int64{0}, run(start), "the late start mark changes nothing")
	got, err := c.Get(ctx, queue, job.ID)
	require.NoError(t, err)
	require.Equal(t, StatusCompleted, got.Status)
	st, err := c.Stats(ctx, queue)
	require.NoError(t, err)
	require.Zero(t, st.Refused, "a late start mark is no refusal")

	require.Equal(t, []int64{0}, run(done), "a second outcome for the same entry is refused")
	st, err = c.Stats(ctx, queue)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Refused)
	require.EqualValues(t, 1, st.Completed)
}
