package api_test

import (
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// longPolls starts a ?wait= request for each id and returns a function that waits for their
// answers (each 200) and returns them with the time each arrived.
func (e *apiEnv) longPolls(ids []string, wait string) func() ([]apiJob, []time.Time) {
	e.t.Helper()
	results := make([]apiJob, len(ids))
	at := make([]time.Time, len(ids))
	codes := make([]int, len(ids))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: len(ids)}}
	e.t.Cleanup(client.CloseIdleConnections)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(e.t.Context(), "GET", e.http.URL+e.jobs()+"/"+id+"?wait="+wait, nil)
			res, err := client.Do(req)
			if err != nil {
				codes[i] = -1
				return
			}
			defer res.Body.Close()
			codes[i] = res.StatusCode
			_ = json.NewDecoder(res.Body).Decode(&results[i])
			at[i] = time.Now()
		})
	}
	return func() ([]apiJob, []time.Time) {
		wg.Wait()
		for i := range ids {
			require.Equal(e.t, http.StatusOK, codes[i], "poll %d", i)
		}
		return results, at
	}
}

// enqueueN publishes n echo jobs through rdb and returns their ids.
func (e *apiEnv) enqueueN(rdb redis.UniversalClient, n int) []string {
	e.t.Helper()
	other, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: e.prefix})
	require.NoError(e.t, err)
	ids := make([]string, 0, n)
	for len(ids) < n {
		tasks := make([]pipeline.Task, min(500, n-len(ids)))
		for i := range tasks {
			tasks[i] = pipeline.Task{Type: "echo", Payload: []byte(`{"i":1}`)}
		}
		jobs, err := other.EnqueueBatch(e.t.Context(), e.queue, tasks)
		require.NoError(e.t, err)
		for _, j := range jobs {
			ids = append(ids, j.ID)
		}
	}
	return ids
}

// Idle long polls cost Redis (nearly) nothing, however many: 1,500 requests waiting on jobs
// that do not end send a bounded number of commands while they wait (the fallback's, at most
// events.DefaultFallbackRate a second for all of them, and at most one read each when their
// subscription is confirmed after their first read), and about two per request in all (a
// read when it starts, one when its job ends). The commands are counted on the API's own Redis
// client, not timed. Before job events (issue 16, defect 8) the poller read every waited-for
// job every 100 ms: 15,000 commands a second for 1,500 waiters, and this test failed.
func TestIdleLongPollsCostBoundedCommands(t *testing.T) {
	t.Parallel()
	const waiters = 1500
	srv := redistest.Shared(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	count := redistest.CountCommands(rdb)
	e := setup(t, setupOpts{clientRdb: rdb})
	ids := e.enqueueN(redistest.Client(t), waiters)

	start := count.All()
	answers := e.longPolls(ids, "60s")
	require.Eventually(t, func() bool { return e.api.Waiting() == waiters }, 60*time.Second, 10*time.Millisecond,
		"every request waits")
	require.Eventually(t, func() bool { return count.All()-start >= waiters }, 60*time.Second, 10*time.Millisecond,
		"every request read its job once")
	idle0, t0 := count.All(), time.Now()
	// The span is what is measured, not something waited for: whatever it lasts on a loaded
	// machine, the bound below scales with it.
	time.Sleep(time.Second)
	idle1, span := count.All(), time.Since(t0)
	idle := idle1 - idle0
	// At most one read a waiter from its subscription's confirmation (when that came after
	// the waiter's first read: a loaded machine), and the fallback's.
	bound := int64(waiters) + int64(span.Seconds()*events.DefaultFallbackRate) + 5
	t.Logf("%d idle long polls: %d commands in %s (bound %d); %d to start them", waiters, idle,
		span.Round(time.Millisecond), bound, idle0-start)
	require.LessOrEqual(t, idle, bound, "idle waiters must not cost commands per waiter")

	e.worker()
	results, _ := answers()
	for _, j := range results {
		require.Equal(t, "completed", j.Status)
	}
	total := count.All() - start
	t.Logf("%d long polls in all: %d commands, %.2f a poll", waiters, total, float64(total)/waiters)
	require.LessOrEqual(t, total, int64(3*waiters)+bound, "about two reads a long poll, three at most")
}

var measureLongPolls = flag.Bool("measure-long-polls", false,
	"measure idle long polls' Redis commands per second and the time from a job's end to its long poll's answer (docs/BENCHMARKS.md)")

// TestMeasureLongPolls measures, on a private redis-server, what docs/BENCHMARKS.md reports
// under "Job events and long polls": the server's commands per second (INFO stats
// total_commands_processed) with 1,500 idle ?wait=60s long polls, and the time from each job's
// completion (its completed_at, set by the worker's finish.lua call) to its long poll's answer
// arriving at the HTTP client. Run it with
//
//	go test -count=1 -run TestMeasureLongPolls -measure-long-polls -v ./api/
func TestMeasureLongPolls(t *testing.T) {
	if !*measureLongPolls {
		t.Skip("a measurement: run with -measure-long-polls")
	}
	const waiters = 1500
	srv := redistest.Start(t)
	e := setup(t, setupOpts{rdb: srv.Client(t)})
	ids := e.enqueueN(srv.Client(t), waiters)
	info := srv.Client(t)
	commands := func() int64 {
		s, err := info.Info(t.Context(), "stats").Result()
		require.NoError(t, err)
		for line := range strings.SplitSeq(s, "\r\n") {
			if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		t.Fatal("no total_commands_processed")
		return 0
	}

	evalsha := func() int64 {
		s, err := info.Info(t.Context(), "commandstats").Result()
		require.NoError(t, err)
		for line := range strings.SplitSeq(s, "\r\n") {
			if v, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
				v, _, _ = strings.Cut(v, ",")
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		return 0
	}
	require.NoError(t, info.ConfigResetStat(t.Context()).Err())
	answers := e.longPolls(ids, "60s")
	require.Eventually(t, func() bool { return e.api.Waiting() == waiters }, time.Minute, 10*time.Millisecond)
	// Idle once every poll read its job (get.lua, an EVALSHA) once.
	require.Eventually(t, func() bool { return evalsha() >= waiters }, time.Minute, 10*time.Millisecond)
	// The window starts once the fallback's first round is due (each wait's first fallback
	// read comes events.DefaultFallback after it started), so it sees the steady state.
	time.Sleep(events.DefaultFallback)
	const window = 15 * time.Second
	require.NoError(t, info.ConfigResetStat(t.Context()).Err())
	c0, t0 := commands(), time.Now()
	time.Sleep(window)
	c1, span := commands(), time.Since(t0)
	stats, err := info.Info(t.Context(), "commandstats").Result()
	require.NoError(t, err)
	t.Logf("commands in the window:\n%s", stats)
	// The INFO call that read c1 is one of them.
	perSec := float64(c1-c0-1) / span.Seconds()

	// Complete the jobs a few at a time, so the measure is of the wake-up, not of a worker
	// draining 1,500 jobs at once.
	w, err := pipeline.NewWorker(srv.Client(t), pipeline.WorkerConfig{Queues: []string{e.queue}, Prefix: e.prefix, Concurrency: 4})
	require.NoError(t, err)
	w.Handle("echo", func(_ context.Context, j *pipeline.Job) ([]byte, error) {
		time.Sleep(2 * time.Millisecond)
		return nil, nil
	})
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	results, answeredAt := answers()
	stop()
	<-done
	lat := make([]time.Duration, 0, waiters)
	for i := range ids {
		require.Equal(t, "completed", results[i].Status)
		lat = append(lat, answeredAt[i].Sub(time.UnixMilli(results[i].CompletedAt)))
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))].Round(100 * time.Microsecond) }
	t.Logf("%d idle long polls: %.1f Redis commands/s over %s (server-wide, INFO stats)", waiters, perSec, span.Round(time.Millisecond))
	t.Logf("completion to answer (completed_at has 1 ms resolution): p50 %s p90 %s p99 %s max %s",
		q(0.5), q(0.9), q(0.99), lat[len(lat)-1].Round(100*time.Microsecond))
}
