package jobstate_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// BenchmarkFinishIndex times finish.lua calls of a worker's chunk of 50 completions with the
// index of completed jobs off (IndexCap -1, as before Issue 20) and on, with a small cap (1,000)
// so that every call past the first 20 also trims as many as it adds: the hot path's cost of the
// index. The modes rotate call by call, so that a loaded machine's drift weighs on both alike;
// each reports its time per completion (the round trip included, the same for both). Rerun with
//
//	go test -run '^$' -bench FinishIndex -benchtime 2000x -count 5 ./internal/jobstate/
func BenchmarkFinishIndex(b *testing.B) {
	const chunk = 50
	rdb := redistest.Client(b)
	queue := redistest.UniqueName(b)
	q := keys.New(keys.DefaultPrefix, queue)
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(b, err)
	require.NoError(b, rdb.XGroupCreateMkStream(b.Context(), q.Stream(), keys.Group, "0").Err())
	tasks := make([]pipeline.Task, chunk)
	for i := range tasks {
		tasks[i] = pipeline.Task{Type: "t", Payload: []byte(`{"user":12345,"action":"send-welcome-email"}`)}
	}
	caps := [2]int{-1, 1000}
	var spent [2]time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		jobs, err := c.EnqueueBatch(b.Context(), queue, tasks)
		require.NoError(b, err)
		res, err := rdb.XReadGroup(b.Context(), &redis.XReadGroupArgs{Group: keys.Group, Consumer: "w1",
			Streams: []string{q.Stream(), ">"}, Count: chunk, Block: -1}).Result()
		require.NoError(b, err)
		require.Len(b, res[0].Messages, chunk)
		now := time.Now()
		dones := make([]jobstate.Transition, chunk)
		for k, j := range jobs {
			dones[k] = jobstate.Done(&q, jobstate.DoneParams{Ran: ran(j.ID, res[0].Messages[k].ID, now)}).
				WithPayload(string(tasks[k].Payload))
		}
		m := i % 2
		call := jobstate.FinishCall(jobstate.FinishConfig{Worker: "w1", Retention: time.Hour,
			MinRetention: time.Minute, IndexCap: caps[m]}, dones)
		b.StartTimer()
		t0 := time.Now()
		if err := call.Script.Run(b.Context(), rdb, call.Keys, call.Args...).Err(); err != nil {
			b.Fatal(err)
		}
		spent[m] += time.Since(t0)
	}
	for m, name := range []string{"noindex", "index"} {
		if calls := (b.N + 1 - m) / 2; calls > 0 {
			b.ReportMetric(float64(spent[m].Nanoseconds())/float64(calls*chunk)/1000, "us/job-"+name)
		}
	}
}
