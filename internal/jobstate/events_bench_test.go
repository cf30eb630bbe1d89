package jobstate_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// BenchmarkFinishEvents times finish.lua calls of chunk start and chunk done transitions (a
// worker's chunks: 50 in a drain, a few when jobs trickle in as in the live workload) with events off, on for jobs nobody waits on (the common case: nothing is announced),
// and on for jobs all marked watched (one SPUBLISH a call), rotating call by call so that a
// loaded machine's drift weighs on all alike, and reports each mode's time per transition (the
// round trip included, the same for all). Rerun with
//
//	go test -run '^$' -bench FinishEvents -benchtime 1000x -count 6 ./internal/jobstate/
func BenchmarkFinishEvents(b *testing.B) {
	for _, chunk := range []int{1, 50} {
		b.Run(fmt.Sprintf("chunk=%d", chunk), func(b *testing.B) { benchFinishEvents(b, chunk) })
	}
}

func benchFinishEvents(b *testing.B, chunk int) {
	rdb := redistest.Client(b)
	queue := redistest.UniqueName(b)
	q := keys.New(keys.DefaultPrefix, queue)
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(b, err)
	cfg := jobstate.FinishConfig{Worker: "w1", Retention: time.Hour, MinRetention: time.Minute}
	if err := rdb.XGroupCreateMkStream(b.Context(), q.Stream(), keys.Group, "0").Err(); err != nil {
		b.Fatal(err)
	}
	var spent [3]time.Duration
	modes := [3]events.Mode{events.None, events.Sharded, events.Sharded}
	tasks := make([]pipeline.Task, chunk)
	for i := range tasks {
		tasks[i] = pipeline.Task{Type: "t", Payload: []byte(`{"user":12345,"action":"send-welcome-email"}`)}
	}
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		jobs, err := c.EnqueueBatch(b.Context(), queue, tasks)
		if err != nil {
			b.Fatal(err)
		}
		res, err := rdb.XReadGroup(b.Context(), &redis.XReadGroupArgs{Group: keys.Group, Consumer: "w1",
			Streams: []string{q.Stream(), ">"}, Count: int64(chunk), Block: -1}).Result()
		if err != nil || len(res[0].Messages) != chunk {
			b.Fatal(err, res)
		}
		entries := make([]string, chunk)
		for k, m := range res[0].Messages {
			entries[k] = m.ID
		}
		now := time.Now()
		starts := make([]jobstate.Transition, chunk)
		dones := make([]jobstate.Transition, chunk)
		for k, j := range jobs {
			starts[k] = jobstate.Start(&q, jobstate.StartParams{ID: j.ID, Entry: entries[k], Attempt: 1, At: now})
			dones[k] = jobstate.Done(&q, jobstate.DoneParams{Ran: ran(j.ID, entries[k], now), Result: ""}).WithPayload(string(tasks[k].Payload))
		}
		m := i % 3
		cfg.Events = modes[m]
		// The queue's watching flag only in the watched mode: a wait marks it with the job.
		if _, err := rdb.Pipelined(b.Context(), func(p redis.Pipeliner) error {
			if m != 2 {
				p.Del(b.Context(), q.Watching())
				return nil
			}
			p.Set(b.Context(), q.Watching(), "1", 0)
			for _, j := range jobs {
				p.HSet(b.Context(), q.Job(j.ID), keys.FieldWatched, "1")
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 := time.Now()
		for _, ts := range [][]jobstate.Transition{starts, dones} {
			call := jobstate.FinishCall(cfg, ts)
			if err := call.Script.Run(b.Context(), rdb, call.Keys, call.Args...).Err(); err != nil {
				b.Fatal(err)
			}
		}
		spent[m] += time.Since(t0)
	}
	for m, name := range []string{"none", "sharded-unwatched", "sharded-watched"} {
		calls := (b.N + 2 - m) / 3 // the iterations i with i%3 == m
		if calls == 0 {
			continue
		}
		b.ReportMetric(float64(spent[m].Nanoseconds())/float64(calls*2*chunk)/1000, "us/transition-"+name)
	}
}
