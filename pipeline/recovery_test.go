package pipeline_test

import (
	"context"
	"crypto/sha1"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// TestWorkerKilledHoldingRecoveryLock kills a worker (its Redis connection closes, as in a
// crash) at the moment its recoverer holds the queue's recovery lock and while it runs a job.
// The lock it could not release must live no longer than the worker's lock TTL, which follows
// the visibility timeout unless set (not a fixed 10s), and another worker must then recover
// the job.
func TestWorkerKilledHoldingRecoveryLock(t *testing.T) {
	t.Parallel()
	const vt = 1500 * time.Millisecond
	for _, tc := range []struct {
		name    string
		lockTTL time.Duration // WorkerConfig.RecoveryLockTTL
		want    time.Duration // the lock's TTL
	}{
		{name: "Default", want: time.Second}, // vt/3, raised to a second
		{name: "Configured", lockTTL: 700 * time.Millisecond, want: 700 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := t.Context()
			job, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "hold"})
			require.NoError(t, err)

			victimRDB := redis.NewClient(&redis.Options{Addr: b.addr(t), MaxRetries: -1})
			t.Cleanup(func() { _ = victimRDB.Close() })
			started := make(chan struct{}, 1)
			var armed atomic.Bool
			var once sync.Once
			type kill struct {
				at  time.Time
				ttl time.Duration // of the lock, read as the victim died holding it
			}
			killed := make(chan kill, 1)
			victim, err := pipeline.NewWorker(victimRDB, pipeline.WorkerConfig{
				Queues: []string{b.queue}, Name: "victim", VisibilityTimeout: vt,
				RecoveryInterval: 100 * time.Millisecond, RecoveryLockTTL: tc.lockTTL,
				ShutdownTimeout: 100 * time.Millisecond, Logger: testLogger(t),
				Hooks: pipeline.WorkerHooks{RecoveryLock: func(_ string, held bool) {
					if !held || !armed.Load() {
						return
					}
					// Runs on the recoverer's goroutine, the lock held: the scan and the release
					// that follow fail, as in a crash.
					once.Do(func() {
						ttl, err := b.rdb.PTTL(context.Background(), b.q.RecoveryLock()).Result()
						require.NoError(t, err)
						_ = victimRDB.Close()
						killed <- kill{at: time.Now(), ttl: ttl}
					})
				}},
			})
			require.NoError(t, err)
			victim.Handle("hold", func(ctx context.Context, _ *pipeline.Job) ([]byte, error) {
				select {
				case started <- struct{}{}:
				default:
				}
				<-ctx.Done() // only the kill (and then the test's end) ends it
				return nil, ctx.Err()
			})
			vctx, stopVictim := context.WithCancel(context.Background())
			victimDone := make(chan struct{})
			go func() { defer close(victimDone); _ = victim.Run(vctx) }() // it fails once killed
			t.Cleanup(func() { stopVictim(); <-victimDone })

			select {
			case <-started:
			case <-time.After(30 * time.Second):
				t.Fatal("the victim never started the job")
			}
			armed.Store(true)
			var k kill
			select {
			case k = <-killed:
			case <-time.After(30 * time.Second):
				t.Fatal("the victim never took the recovery lock")
			}
			require.Positive(t, k.ttl, "the lock has no TTL")
			require.LessOrEqual(t, k.ttl, tc.want, "the lock a dead worker leaves blocks recovery this long")

			var firstLock atomic.Int64 // ns after the kill that the rescuer first held the lock
			_, _ = b.startWorker(t, pipeline.WorkerConfig{Name: "rescuer", VisibilityTimeout: vt,
				RecoveryInterval: 100 * time.Millisecond, RecoveryLockTTL: tc.lockTTL,
				Hooks: pipeline.WorkerHooks{RecoveryLock: func(_ string, held bool) {
					if held {
						firstLock.CompareAndSwap(0, int64(time.Since(k.at)))
					}
				}}},
				map[string]pipeline.HandlerFunc{"hold": func(context.Context, *pipeline.Job) ([]byte, error) { return []byte("ok"), nil }})
			j := b.waitStatus(t, job.ID, status.Completed)
			require.Equal(t, "rescuer", j.Worker)
			require.Contains(t, j.LastError, "victim", "not recovered from the victim")
			t.Logf("lock TTL %v at the kill; the rescuer took the lock %v and completed the job %v after it",
				k.ttl, time.Duration(firstLock.Load()).Round(time.Millisecond), time.Since(k.at).Round(time.Millisecond))
		})
	}
}

// TestWorkerRenewsLeasesWithinVisibilityTimeout: while a handler runs, the worker renews its
// entry's lease every third of the visibility timeout, so the entry's idle time in the pending
// list stays under two thirds of it (where recoverers start listing entries) for the whole
// run. A renewal every visibility timeout or later would let recoverers take live jobs. The
// test waits for the renewals themselves (its hook on the worker's client), not for a span.
func TestWorkerRenewsLeasesWithinVisibilityTimeout(t *testing.T) {
	t.Parallel()
	const vt, renewals = 1500 * time.Millisecond, 6 // six renewals: two visibility timeouts
	b := setup(t)
	ctx := t.Context()
	// The worker's own client, whose renewals of the held entry (renew.lua, kept) are the events
	// the test counts.
	renewSrc, err := os.ReadFile("../stream/renew.lua")
	require.NoError(t, err)
	renewSHA := fmt.Sprintf("%x", sha1.Sum(renewSrc))
	wrdb := redis.NewClient(&redis.Options{Addr: b.addr(t)})
	t.Cleanup(func() { _ = wrdb.Close() })
	var (
		mu      sync.Mutex
		entry   string      // the held job's entry, once enqueued
		renewed []time.Time // when each renewal that kept it returned
		enough  = make(chan struct{})
	)
	redistest.CountCommands(wrdb).Observe(func(cmd redis.Cmder) {
		args := cmd.Args()
		if !strings.EqualFold(cmd.Name(), "evalsha") || len(args) < 2 || args[1] != renewSHA {
			return
		}
		kept, err := cmd.(*redis.Cmd).StringSlice()
		mu.Lock()
		defer mu.Unlock()
		if err == nil && entry != "" && slices.Contains(kept, entry) {
			if renewed = append(renewed, time.Now()); len(renewed) == renewals {
				close(enough)
			}
		}
	})
	running := make(chan struct{})
	release := make(chan struct{})
	startWorkerOn(t, wrdb, pipeline.WorkerConfig{Queues: []string{b.queue}, VisibilityTimeout: vt, DisableRecovery: true},
		map[string]pipeline.HandlerFunc{"hold": func(context.Context, *pipeline.Job) ([]byte, error) {
			close(running)
			<-release
			return nil, nil
		}})
	job, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "hold"})
	require.NoError(t, err)
	mu.Lock()
	entry = job.Entry
	mu.Unlock()
	select {
	case <-running:
	case <-time.After(30 * time.Second):
		t.Fatal("the job never started")
	}
	select {
	case <-enough:
	case <-time.After(30 * vt):
		t.Fatalf("fewer than %d renewals of the running job's lease in %s", renewals, 30*vt)
	}
	close(release)
	done := b.waitStatus(t, job.ID, status.Completed)
	require.Equal(t, 1, done.Attempt, "the job ran once: its lease was never lost")

	// The gaps between renewals: about a third of the visibility timeout each. The median, so
	// that a stall of this loaded host (a late tick) does not count; a worker renewing every
	// visibility timeout, or every other tick, has a median of 2/3 of it or more.
	mu.Lock()
	gaps := make([]time.Duration, 0, len(renewed)-1)
	for i := 1; i < len(renewed); i++ {
		gaps = append(gaps, renewed[i].Sub(renewed[i-1]))
	}
	mu.Unlock()
	slices.Sort(gaps)
	median := gaps[len(gaps)/2]
	t.Logf("gaps between renewals %v (visibility timeout %v)", gaps, vt)
	require.Less(t, median, vt/2, "the lease is not renewed every third of the visibility timeout")
}

// TestWorkerOutcomesAfterItsClientClosed: a worker whose Redis client is closed under it (the
// demo's crash) while hundreds of jobs finish gives their outcomes up, leaving the jobs to
// recovery, without its two outcome writers racing on their shared bookkeeping (the race
// detector saw them write one map at once).
func TestWorkerOutcomesAfterItsClientClosed(t *testing.T) {
	t.Parallel()
	const n = 400
	b := setup(t)
	rdb := redis.NewClient(&redis.Options{Addr: b.addr(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	var started atomic.Int64
	release := make(chan struct{})
	w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{b.queue}, Concurrency: n,
		DisableRecovery: true, DisableScheduler: true, ShutdownTimeout: 10 * time.Second})
	require.NoError(t, err)
	w.Handle("hold", func(context.Context, *pipeline.Job) ([]byte, error) {
		started.Add(1)
		<-release
		return nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }() // it fails: its client is closed
	t.Cleanup(func() { cancel(); <-done })
	tasks := make([]pipeline.Task, n)
	for i := range tasks {
		tasks[i] = pipeline.Task{Type: "hold"}
	}
	_, err = b.client.EnqueueBatch(t.Context(), b.queue, tasks)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return started.Load() == n }, 60*time.Second, 10*time.Millisecond)
	require.NoError(t, rdb.Close())
	close(release)
	cancel()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the worker did not stop")
	}
	require.Equal(t, int64(n), b.stats(t).InProgress, "outcomes written through a closed client")
}
