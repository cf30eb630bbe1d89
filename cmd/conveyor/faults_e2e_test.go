package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/handlers"
	"github.com/conveyorq/conveyor/internal/faultproxy"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

var faultSpell = flag.Duration("fault-spell", 20*time.Second,
	"how long TestFaultsE2E makes Redis refuse writes or lose replies while jobs flow")

// TestFaultsE2E runs worker processes while Redis misbehaves, and checks that every job a
// producer got an acknowledgement for ends in the state its handler earned, none run twice:
//
//   - OutOfMemory: Redis refuses every write (maxmemory 1) for the spell, while jobs are
//     published (publishes refused meanwhile are retried by the producer) and run;
//   - LostReplies: a proxy between Redis and everyone (workers and producer) drops replies at
//     random for the spell: the request was applied, the client sees a closed connection and
//     go-redis sends it again.
//
// A job's handler earns: echo completes on attempt 1; flaky {"fail_times":1} completes on
// attempt 2; fail with one retry ends failed (dead) on attempt 2. "None twice" is read off
// the attempt count and the queue's counters: a job recovered after a lost lease, or run
// again after a lost delivery, would show one attempt more, or a recovery.
func TestFaultsE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary for a long spell")
	}
	bin := buildCLI(t)
	t.Run("OutOfMemory", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		f := newFaultRun(t, bin, srv.URL(), srv.Client(t))
		f.startWorkers(t)
		f.produce(t, func(ctx context.Context) {
			time.Sleep(*faultSpell / 8)
			restore := srv.RefuseWrites(t)
			defer restore()
			select {
			case <-time.After(*faultSpell):
			case <-ctx.Done():
			}
		})
		f.check(t)
	})
	t.Run("LostReplies", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		proxy := faultproxy.Start(t, srv.Addr)
		f := newFaultRun(t, bin, "redis://"+proxy.Addr()+"/0", srv.Client(t))
		f.startWorkers(t)
		f.produce(t, func(ctx context.Context) {
			time.Sleep(*faultSpell / 8)
			proxy.DropRepliesRandomly(0.05)
			defer proxy.DropRepliesRandomly(0)
			select {
			case <-time.After(*faultSpell):
			case <-ctx.Done():
			}
		})
		f.check(t)
		t.Logf("replies dropped: %d", proxy.Dropped())
		require.Positive(t, proxy.Dropped())
	})
}

// faultRun is one fault scenario: a queue, two worker processes, a producer and its ledger.
type faultRun struct {
	c      *cli          // the binary, pointed at url (maybe a proxy)
	direct *redis.Client // straight to Redis, for the final checks
	queue  string
	procs  []*proc

	mu     sync.Mutex
	ledger map[string]faultJob // acknowledged jobs by id
}

type faultJob struct {
	status  status.Status
	attempt int
}

func newFaultRun(t *testing.T, bin, url string, direct *redis.Client) *faultRun {
	return &faultRun{c: &cli{bin: bin, url: url, rdb: direct}, direct: direct,
		queue: redistest.UniqueName(t), ledger: map[string]faultJob{}}
}

func (f *faultRun) startWorkers(t *testing.T) {
	for i := range 2 {
		p := f.c.start(t, "worker", "--queue", f.queue, "--name", fmt.Sprintf("w%d-%s", i, f.queue),
			"--concurrency", "4", "--backoff-base", "50ms", "--backoff-max", "200ms",
			"--visibility-timeout", "6s", "--recovery-interval", "500ms", "--log-level", "info")
		f.procs = append(f.procs, p)
	}
	for _, p := range f.procs {
		waitFor(t, 20*time.Second, 20*time.Millisecond, "the workers to start", func() bool {
			return strings.Contains(p.output.String(), "worker started")
		})
	}
}

// produce publishes a mix of jobs for the spell plus a little before and after, while fault
// runs (it starts the fault after a while and ends it when it returns). A publish that fails
// is sent again with the same id until Redis acknowledges it; only acknowledged jobs enter the
// ledger.
func (f *faultRun) produce(t *testing.T, fault func(ctx context.Context)) {
	rdb := redis.NewClient(mustParseURL(t, f.c.url))
	defer rdb.Close()
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	faultDone := make(chan struct{})
	go func() { defer close(faultDone); fault(ctx) }()

	kinds := []struct {
		task pipeline.Task
		opts []pipeline.Option
		want faultJob
	}{
		{pipeline.Task{Type: handlers.TypeEcho, Payload: []byte(`{"hello":"world"}`)}, nil,
			faultJob{status.Completed, 1}},
		{pipeline.Task{Type: handlers.TypeFlaky, Payload: []byte(`{"fail_times":1}`)}, []pipeline.Option{pipeline.WithMaxRetries(3)},
			faultJob{status.Completed, 2}},
		{pipeline.Task{Type: handlers.TypeFail, Payload: []byte(`{"message":"earned"}`)}, []pipeline.Option{pipeline.WithMaxRetries(1)},
			faultJob{status.Failed, 2}},
	}
	end := time.Now().Add(*faultSpell + *faultSpell/4)
	refused := 0
	for n := 0; time.Now().Before(end); n++ {
		k := kinds[n%len(kinds)]
		id := fmt.Sprintf("job-%06d", n)
		for {
			_, err := client.Enqueue(ctx, f.queue, k.task, append(k.opts, pipeline.WithID(id))...)
			if err == nil {
				break
			}
			require.NoError(t, ctx.Err())
			require.False(t, errors.Is(err, pipeline.ErrInvalid), "publish %s: %v", id, err)
			refused++
			time.Sleep(50 * time.Millisecond)
		}
		f.mu.Lock()
		f.ledger[id] = k.want
		f.mu.Unlock()
		time.Sleep(15 * time.Millisecond)
	}
	<-faultDone
	t.Logf("published %d jobs; %d publishes were refused and sent again", len(f.ledger), refused)
}

func mustParseURL(t *testing.T, url string) *redis.Options {
	opt, err := redis.ParseURL(url)
	require.NoError(t, err)
	return opt
}

// check waits until every acknowledged job is final, then compares each with what its
// handler earned.
func (f *faultRun) check(t *testing.T) {
	client, err := pipeline.NewClient(f.direct, pipeline.ClientConfig{})
	require.NoError(t, err)
	ctx := t.Context()
	var wrong []string
	waitFor(t, 90*time.Second, 200*time.Millisecond, "every job final", func() bool {
		for id := range f.ledger {
			j, err := client.Get(ctx, f.queue, id)
			if err != nil || !j.Status.Final() {
				return false
			}
		}
		return true
	})
	for id, want := range f.ledger {
		j, err := client.Get(ctx, f.queue, id)
		require.NoError(t, err)
		if j.Status != want.status || j.Attempt != want.attempt {
			wrong = append(wrong, fmt.Sprintf("%s: %s on attempt %d (%s), want %s on attempt %d",
				id, j.Status, j.Attempt, j.LastError, want.status, want.attempt))
		}
	}
	require.Empty(t, wrong, "jobs that did not end as their handler earned")
	s, err := client.Stats(ctx, f.queue)
	require.NoError(t, err)
	require.Zero(t, s.Recovered, "no job was recovered from a live worker")
	require.Zero(t, s.DeadByRecovery)
	require.EqualValues(t, len(f.ledger), s.Enqueued, "no job was enqueued twice")
	for _, p := range f.procs {
		require.Equal(t, 0, p.stop(t), "a worker exits cleanly after the faults")
		require.NotContains(t, p.output.String(), "panic")
	}
}
