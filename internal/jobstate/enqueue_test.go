package jobstate_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/pipeline"
)

// A chunk sent again after a lost reply (go-redis retries it byte for byte) changes nothing:
// the witness, its last generated-id job, exists, so every job is reported as existing.
func TestEnqueueChunkRetryIsIdempotent(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	queue := redistest.UniqueName(t)
	q := keys.New(keys.DefaultPrefix, queue)
	ctx := t.Context()
	now := time.Now()
	gen := 0
	job := func(chosen string, runAt time.Time, unique string) jobstate.NewJob {
		gen++
		j := jobstate.NewJob{ID: "gen-" + strconv.Itoa(gen), Type: "t", Payload: []byte{byte('a' + gen)}, RunAt: runAt}
		if chosen != "" {
			// The same type and payload each time: a chosen id sent again with other
			// bytes is a conflict (CV_CONFLICT), not a repeat.
			j.ID, j.ChosenID, j.Payload = chosen, true, []byte(chosen)
		}
		if unique != "" {
			j.UniqueKey, j.UniqueTTL = unique, time.Hour
		}
		return j
	}

	jobs := []jobstate.NewJob{job("", now, ""), job("chosen-1", now, ""), job("", now, ""),
		job("", now.Add(time.Hour), ""), job("", now, "")}
	call := jobstate.EnqueueCall(q, now, jobs)
	first := enqueueRows(t, len(jobs), call.Script.Run(ctx, rdb, call.Keys, call.Args...))
	require.Len(t, first, 5)
	require.Equal(t, "", first[3], "the delayed one is scheduled")
	for _, i := range []int{0, 1, 2, 4} {
		require.NotEmpty(t, first[i])
		require.NotEqual(t, "=", first[i])
	}

	again := enqueueRows(t, len(jobs), call.Script.Run(ctx, rdb, call.Keys, call.Args...))
	require.Equal(t, []string{"=", "=", "=", "=", "="}, again)
	xlen, err := rdb.XLen(ctx, q.Stream()).Result()
	require.NoError(t, err)
	require.EqualValues(t, 4, xlen, "no entry was added twice")
	enq, err := rdb.HGet(ctx, q.Stats(), keys.StatEnqueued).Int()
	require.NoError(t, err)
	require.Equal(t, 5, enq)

	// A chosen id is still looked up on its own, in a chunk that is otherwise new.
	call = jobstate.EnqueueCall(q, now, []jobstate.NewJob{job("chosen-1", now, ""), job("", now, "")})
	mixed := enqueueRows(t, 2, call.Script.Run(ctx, rdb, call.Keys, call.Args...))
	require.Equal(t, "=", mixed[0])
	require.NotEqual(t, "=", mixed[1])

	// A chunk with unique keys: the last job is refused (its key is held), so it is never
	// created and cannot witness. Sent again, the created jobs are found, nothing is added
	// twice, and the refused one is refused again.
	holder, err := c.Enqueue(ctx, queue, pipeline.Task{Type: "t"}, pipeline.WithUnique("k", time.Hour))
	require.NoError(t, err)
	xlen0, err := rdb.XLen(ctx, q.Stream()).Result()
	require.NoError(t, err)
	call = jobstate.EnqueueCall(q, now, []jobstate.NewJob{job("", now, ""), job("", now, ""), job("", now, "k")})
	first = enqueueRows(t, 3, call.Script.Run(ctx, rdb, call.Keys, call.Args...))
	require.Equal(t, "~"+holder.ID, first[2])
	again = enqueueRows(t, 3, call.Script.Run(ctx, rdb, call.Keys, call.Args...))
	require.Equal(t, []string{"=", "=", "~" + holder.ID}, again)
	xlen, err = rdb.XLen(ctx, q.Stream()).Result()
	require.NoError(t, err)
	require.Equal(t, xlen0+2, xlen, "no entry was added twice")
}

// enqueueRows reads enqueue.lua's reply as one string per job: the entry id when queued, ”
// when scheduled, '=' when the id existed, '~<id>' when job <id> holds the unique key.
func enqueueRows(t *testing.T, n int, cmd *redis.Cmd) []string {
	t.Helper()
	created, err := jobstate.EnqueueReply(cmd, n)
	require.NoError(t, err)
	var rows []string
	for _, c := range created {
		switch c.Code {
		case script.OK:
			rows = append(rows, c.Entry)
		case script.Exists:
			rows = append(rows, "=")
		case script.UniqueHeld:
			rows = append(rows, "~"+c.Holder)
		default:
			t.Fatalf("code %v", c.Code)
		}
	}
	return rows
}

// A closed queue or partition (keys.Queue.Closed: its queue's partition count changed) refuses
// both enqueue scripts with ErrClosed and writes nothing, for a new id and an existing one.
func TestEnqueueRefusedWhenClosed(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := t.Context()
	q := keys.New(keys.DefaultPrefix, redistest.UniqueName(t))
	now := time.Now()
	existing := jobstate.NewJob{ID: "there", Type: "t", Payload: []byte("x"), RunAt: now}
	_, err := jobstate.NewStore(rdb, "").Enqueue1(ctx, q, now, &existing)
	require.NoError(t, err)
	require.NoError(t, rdb.Set(ctx, q.Closed(), "1", time.Hour).Err())

	for _, id := range []string{"new", "there"} {
		j := jobstate.NewJob{ID: id, Type: "t", Payload: []byte("x"), RunAt: now}
		_, err := jobstate.NewStore(rdb, "").Enqueue1(ctx, q, now, &j)
		require.ErrorIs(t, err, jobstate.ErrClosed, "enqueue1 of %s", id)
		call := jobstate.EnqueueCall(q, now, []jobstate.NewJob{j, {ID: "later", Type: "t", RunAt: now.Add(time.Minute), UniqueKey: "u", UniqueTTL: time.Minute}})
		_, err = jobstate.EnqueueReply(call.Script.Run(ctx, rdb, call.Keys, call.Args...), 2)
		require.ErrorIs(t, err, jobstate.ErrClosed, "enqueue of %s", id)
	}
	require.EqualValues(t, 1, rdb.XLen(ctx, q.Stream()).Val(), "only the job from before the flag")
	require.Zero(t, rdb.Exists(ctx, q.Job("new"), q.Job("later"), q.Unique("u"), q.Scheduled()).Val())
	require.Equal(t, "1", rdb.HGet(ctx, q.Stats(), keys.StatEnqueued).Val())

	// Open again, a publish goes through.
	require.NoError(t, rdb.Del(ctx, q.Closed()).Err())
	j := jobstate.NewJob{ID: "new", Type: "t", Payload: []byte("x"), RunAt: now}
	row, err := jobstate.NewStore(rdb, "").Enqueue1(ctx, q, now, &j)
	require.NoError(t, err)
	require.Equal(t, script.OK, row.Code)
}
