package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// logsTopologies are the servers the logs tests run on: a standalone one, and a cluster with a
// queue of three partitions (a job's logs key is in its partition's slot).
var logsTopologies = []struct {
	name       string
	rdb        func(t *testing.T) redis.UniversalClient
	partitions int
}{
	{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }, 1},
	{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client(t) }, 3},
}

// A handler's lines are kept per attempt with the outcome: a retry's and the completion's,
// each with its attempt's number and outcome, through Logf and the zerolog Logger alike. The
// completed job's logs key expires with its record.
func TestJobLogsPerAttempt(t *testing.T) {
	t.Parallel()
	for _, tc := range logsTopologies {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{rdb: tc.rdb(t)})
			ctx := t.Context()
			if tc.partitions > 1 {
				_, err := b.insp.CreateQueue(ctx, b.queue, pipeline.QueueOptions{Partitions: tc.partitions})
				require.NoError(t, err)
			}
			b.startWorker(t, pipeline.WorkerConfig{Retention: time.Hour}, map[string]pipeline.HandlerFunc{
				"t": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
					j.Logf("attempt %d begins", j.Attempt)
					if j.Attempt == 1 {
						j.Logger().Warn().Str("why", "first").Msg("failing")
						return nil, errors.New("boom")
					}
					return []byte(`"ok"`), nil
				},
			})
			j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithMaxRetries(3))
			require.NoError(t, err)
			b.waitStatus(t, j.ID, status.Completed)

			logs, err := b.insp.JobLogs(ctx, b.queue, j.ID)
			require.NoError(t, err)
			require.Len(t, logs, 2)
			require.Equal(t, 1, logs[0].Attempt)
			require.Equal(t, status.AttemptRetried, logs[0].Outcome)
			require.Len(t, logs[0].Lines, 2)
			require.Contains(t, logs[0].Lines[0], `"message":"attempt 1 begins"`)
			require.Contains(t, logs[0].Lines[1], `"level":"warn"`)
			require.Contains(t, logs[0].Lines[1], `"why":"first"`)
			require.Equal(t, 2, logs[1].Attempt)
			require.Equal(t, status.AttemptCompleted, logs[1].Outcome)
			require.Len(t, logs[1].Lines, 1)
			require.Contains(t, logs[1].Lines[0], `"message":"attempt 2 begins"`)
			require.Zero(t, logs[0].Cut+logs[1].Cut)
			require.False(t, logs[1].EndedAt.IsZero())

			if tc.partitions == 1 {
				ttl, err := b.rdb.PTTL(ctx, b.q.Logs(j.ID)).Result()
				require.NoError(t, err)
				rec, err := b.rdb.PTTL(ctx, b.q.Job(j.ID)).Result()
				require.NoError(t, err)
				require.Greater(t, ttl, 50*time.Minute, "the logs expire with the record")
				require.InDelta(t, rec.Seconds(), ttl.Seconds(), 60)
			}

			_, err = b.insp.JobLogs(ctx, b.queue, "no-such-job")
			require.ErrorIs(t, err, pipeline.ErrNotFound)
		})
	}
}

// An attempt keeps its last MaxLogLines lines, and no more than fit in MaxLogBytes; what was
// cut is counted.
func TestJobLogsBounded(t *testing.T) {
	t.Parallel()
	for _, tc := range logsTopologies {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{rdb: tc.rdb(t)})
			ctx := t.Context()
			kib := strings.Repeat("x", 1000)
			b.startWorker(t, pipeline.WorkerConfig{Retention: time.Hour}, map[string]pipeline.HandlerFunc{
				"lines": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
					for i := range pipeline.MaxLogLines + 1 {
						j.Logf("line %03d", i)
					}
					return nil, nil
				},
				"bytes": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
					for i := range 40 { // 40 KiB
						j.Logf("%02d %s", i, kib)
					}
					return nil, nil
				},
			})
			lines, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "lines"})
			require.NoError(t, err)
			bytes, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "bytes"})
			require.NoError(t, err)
			b.waitStatus(t, lines.ID, status.Completed)
			b.waitStatus(t, bytes.ID, status.Completed)

			logs, err := b.insp.JobLogs(ctx, b.queue, lines.ID)
			require.NoError(t, err)
			require.Len(t, logs, 1)
			require.Len(t, logs[0].Lines, pipeline.MaxLogLines)
			require.Equal(t, 1, logs[0].Cut, "one earlier line cut")
			require.Contains(t, logs[0].Lines[0], "line 001")
			require.Contains(t, logs[0].Lines[pipeline.MaxLogLines-1], "line 200")

			logs, err = b.insp.JobLogs(ctx, b.queue, bytes.ID)
			require.NoError(t, err)
			require.Len(t, logs, 1)
			size := 0
			for _, l := range logs[0].Lines {
				size += len(l) + 1
			}
			require.LessOrEqual(t, size, pipeline.MaxLogBytes)
			require.Greater(t, size+len(logs[0].Lines[0])+1, pipeline.MaxLogBytes, "as many as fit are kept")
			require.Equal(t, 40, logs[0].Cut+len(logs[0].Lines))
			require.Contains(t, logs[0].Lines[len(logs[0].Lines)-1], "39 x", "the last lines are kept")
		})
	}
}

// finishArgs records the values an item (finish.lua's ARGV[9]) of every finish call a client
// sends, and each item's logs value when the call has them.
type finishArgs struct {
	mu      sync.Mutex
	strides []string
	logs    []string
}

func (h *finishArgs) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *finishArgs) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *finishArgs) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			args := c.Args()
			if !jobstate.IsFinishCall(args) {
				continue
			}
			nkeys, _ := strconv.Atoi(fmt.Sprint(args[2]))
			first := 3 + nkeys + 8 // ARGV[9]
			stride, _ := strconv.Atoi(fmt.Sprint(args[first]))
			h.mu.Lock()
			h.strides = append(h.strides, fmt.Sprint(args[first]))
			for a := first + 1; stride == 11 && a+10 < len(args); a += 11 {
				h.logs = append(h.logs, fmt.Sprint(args[a+10]))
			}
			h.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// A job whose handler logs nothing writes no logs key and no logged flag, and its outcome's
// finish call carries no logs value at all (10 values an item).
func TestJobLogsNothingForSilentJob(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	hook := &finishArgs{}
	rdb.AddHook(hook)
	b := setup(t, setupOpts{rdb: rdb})
	ctx := t.Context()
	b.startWorker(t, pipeline.WorkerConfig{Retention: time.Hour}, map[string]pipeline.HandlerFunc{"t": echo})
	j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t", Payload: []byte("p")})
	require.NoError(t, err)
	b.waitStatus(t, j.ID, status.Completed)

	for _, k := range b.queueKeys(t) {
		require.NotContains(t, k, keys.LogsInfix, "no logs key")
		require.NotEqual(t, b.q.Logged(), k, "no logged flag")
	}
	logs, err := b.insp.JobLogs(ctx, b.queue, j.ID)
	require.NoError(t, err)
	require.Empty(t, logs)
	hook.mu.Lock()
	defer hook.mu.Unlock()
	require.NotEmpty(t, hook.strides, "the outcome went through a finish call")
	for _, s := range hook.strides {
		require.Equal(t, "10", s, "a call with no lines sends no logs value")
	}
	require.Empty(t, hook.logs)
}

// A job's logs go with it: a purge of the dead job, the delete of a job waiting for its retry,
// and a cancel that keeps only a tombstone delete them; the queue's deletion too.
func TestJobLogsDeletedWithJob(t *testing.T) {
	t.Parallel()
	for _, tc := range logsTopologies {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{rdb: tc.rdb(t)})
			ctx := t.Context()
			b.startWorker(t, pipeline.WorkerConfig{Retention: time.Hour,
				Backoff: pipeline.Backoff{Base: time.Hour, Max: time.Hour}}, map[string]pipeline.HandlerFunc{
				"dies": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
					j.Logf("about to die")
					return nil, pipeline.SkipRetry(errors.New("no"))
				},
				"retries": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
					j.Logf("about to fail")
					return nil, errors.New("again later")
				},
			})
			dead, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "dies"})
			require.NoError(t, err)
			retried, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "retries"}, pipeline.WithMaxRetries(5))
			require.NoError(t, err)
			b.waitStatus(t, dead.ID, status.Failed)
			b.waitStatus(t, retried.ID, status.Scheduled)
			for _, id := range []string{dead.ID, retried.ID} {
				logs, err := b.insp.JobLogs(ctx, b.queue, id)
				require.NoError(t, err)
				require.Len(t, logs, 1, "job %s", id)
			}
			logsKeys := func() int {
				n := 0
				for _, k := range b.queueKeys(t) {
					if strings.Contains(k, "}:"+keys.LogsInfix) {
						n++
					}
				}
				return n
			}
			require.Equal(t, 2, logsKeys())
			require.Equal(t, status.AttemptFailed, mustLogs(t, b, dead.ID)[0].Outcome)

			n, err := b.insp.Purge(ctx, b.queue, dead.ID)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.NoError(t, b.insp.Delete(ctx, b.queue, retried.ID))
			require.Zero(t, logsKeys(), "purge and delete take the logs")

			again, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "retries"}, pipeline.WithMaxRetries(5))
			require.NoError(t, err)
			b.waitStatus(t, again.ID, status.Scheduled)
			require.Equal(t, 1, logsKeys())
			require.NoError(t, b.insp.DeleteQueue(ctx, b.queue, true))
			require.Zero(t, logsKeys(), "the queue's deletion takes the logs")
		})
	}
}

func mustLogs(t *testing.T, b *testBundle, id string) []pipeline.AttemptLog {
	t.Helper()
	logs, err := b.insp.JobLogs(t.Context(), b.queue, id)
	require.NoError(t, err)
	return logs
}

// A job canceled while it waits for its retry keeps its logs, expiring with its record.
func TestJobLogsCanceledExpireWithRecord(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	b.startWorker(t, pipeline.WorkerConfig{Retention: time.Hour,
		Backoff: pipeline.Backoff{Base: time.Hour, Max: time.Hour}}, map[string]pipeline.HandlerFunc{
		"t": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			j.Logf("failing")
			return nil, errors.New("again later")
		},
	})
	j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithMaxRetries(5))
	require.NoError(t, err)
	b.waitStatus(t, j.ID, status.Scheduled)
	ttl, err := b.rdb.PTTL(ctx, b.q.Logs(j.ID)).Result()
	require.NoError(t, err)
	require.Equal(t, time.Duration(-1), ttl, "a waiting job's logs do not expire")
	require.NoError(t, b.client.Cancel(ctx, b.queue, j.ID))
	ttl, err = b.rdb.PTTL(ctx, b.q.Logs(j.ID)).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 50*time.Minute)
	require.Len(t, mustLogs(t, b, j.ID), 1)
}

// A Job no worker handed out (a handler called by a test) logs nowhere, without failing.
func TestJobLogsOutsideWorker(t *testing.T) {
	t.Parallel()
	j := &pipeline.Job{ID: "x"}
	j.Logf("nothing %d", 1)
	j.Logger().Info().Msg("nothing")
}

// A snoozed run keeps its lines (outcome snooze) beside the run after it, which has its attempt
// number too. An attempt that ran past its timeout keeps what it logged before; a handler that
// ignores its context and logs on loses the later lines.
func TestJobLogsSnoozeAndTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	late := make(chan struct{})
	logged := make(chan struct{})
	var runs atomic.Int32
	b.startWorker(t, pipeline.WorkerConfig{Retention: time.Hour}, map[string]pipeline.HandlerFunc{
		"snoozes": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			if runs.Add(1) == 1 {
				j.Logf("not yet")
				return nil, pipeline.Snooze(time.Millisecond)
			}
			j.Logf("now")
			return nil, nil
		},
		"slow": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			if j.Attempt > 1 {
				return nil, nil
			}
			j.Logf("before the timeout")
			<-ctx.Done()
			<-late // the worker gave up on it meanwhile: the attempt was written
			j.Logf("after the timeout")
			close(logged)
			return nil, ctx.Err()
		},
	})
	sj, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "snoozes"})
	require.NoError(t, err)
	slow, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "slow"}, pipeline.WithTimeout(50*time.Millisecond),
		pipeline.WithMaxRetries(1))
	require.NoError(t, err)

	b.waitStatus(t, slow.ID, status.Completed)
	close(late)
	<-logged
	logs := mustLogs(t, b, slow.ID)
	require.Len(t, logs, 1, "the second attempt logged nothing")
	require.Equal(t, 1, logs[0].Attempt)
	require.Equal(t, status.AttemptRetried, logs[0].Outcome)
	require.Len(t, logs[0].Lines, 1)
	require.Contains(t, logs[0].Lines[0], "before the timeout")

	b.waitStatus(t, sj.ID, status.Completed)
	logs = mustLogs(t, b, sj.ID)
	require.Len(t, logs, 2)
	require.Equal(t, status.AttemptSnoozed, logs[0].Outcome)
	require.Equal(t, 1, logs[0].Attempt)
	require.Contains(t, logs[0].Lines[0], "not yet")
	require.Equal(t, status.AttemptCompleted, logs[1].Outcome)
	require.Equal(t, 1, logs[1].Attempt, "a snooze is not counted")
	require.Contains(t, logs[1].Lines[0], "now")
}

// Job.Logger and Job.Logf are safe for concurrent use: the goroutines of one handler each log,
// and every line is kept (run it under -race).
func TestJobLogsConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	b.startWorker(t, pipeline.WorkerConfig{Retention: time.Hour}, map[string]pipeline.HandlerFunc{
		"t": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 10 {
						if i%2 == 0 {
							j.Logf("g%d line %d", g, i)
						} else {
							j.Logger().Debug().Int("g", g).Int("i", i).Msg("line")
						}
					}
				}()
			}
			wg.Wait()
			return nil, nil
		},
	})
	j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
	require.NoError(t, err)
	b.waitStatus(t, j.ID, status.Completed)
	logs := mustLogs(t, b, j.ID)
	require.Len(t, logs, 1)
	require.Len(t, logs[0].Lines, 80)
}

// A job kept only as a tombstone (no retention) keeps no lines: the earlier attempts' go too.
func TestJobLogsTombstoneKeepsNone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	b.startWorker(t, pipeline.WorkerConfig{Retention: pipeline.RetainNone}, map[string]pipeline.HandlerFunc{
		"t": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			j.Logf("attempt %d", j.Attempt)
			if j.Attempt == 1 {
				return nil, errors.New("again")
			}
			return nil, nil
		},
	})
	j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithMaxRetries(2))
	require.NoError(t, err)
	b.waitStatus(t, j.ID, status.Completed)
	n, err := b.rdb.Exists(ctx, b.q.Logs(j.ID)).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the retried attempt's lines went with the record")
	require.Empty(t, mustLogs(t, b, j.ID))
}

// A progress report writes the lines logged since the last one: the running attempt's logs
// show them, and its outcome's item replaces them (one item an attempt). A job canceled while
// it ran keeps the lines of its last report, as its canceled attempt's.
func TestJobLogsWithProgress(t *testing.T) {
	t.Parallel()
	for _, tc := range logsTopologies {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{rdb: tc.rdb(t)})
			ctx := t.Context()
			reported := make(chan struct{}, 2)
			release := make(chan struct{})
			b.startWorker(t, pipeline.WorkerConfig{Retention: time.Hour}, map[string]pipeline.HandlerFunc{
				"t": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
					j.Logf("before the report")
					if err := j.Progress(ctx, 10, "reported"); err != nil {
						return nil, err
					}
					j.Logf("after the report")
					reported <- struct{}{}
					if string(j.Payload) == "until canceled" {
						<-ctx.Done()
						return nil, ctx.Err()
					}
					select {
					case <-release:
					case <-ctx.Done():
						return nil, ctx.Err()
					}
					j.Logf("done")
					return nil, nil
				},
			})
			j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
			require.NoError(t, err)
			<-reported
			logs := mustLogs(t, b, j.ID)
			require.Len(t, logs, 1)
			require.Equal(t, status.AttemptRunning, logs[0].Outcome)
			require.Len(t, logs[0].Lines, 1, "only what the report wrote")
			require.Contains(t, logs[0].Lines[0], "before the report")
			close(release)
			b.waitStatus(t, j.ID, status.Completed)
			logs = mustLogs(t, b, j.ID)
			require.Len(t, logs, 1, "the outcome's item replaced the running one")
			require.Equal(t, status.AttemptCompleted, logs[0].Outcome)
			require.Len(t, logs[0].Lines, 3)

			canceled, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t", Payload: []byte("until canceled")})
			require.NoError(t, err)
			<-reported
			require.NoError(t, b.client.Cancel(ctx, b.queue, canceled.ID))
			logs = mustLogs(t, b, canceled.ID)
			require.Len(t, logs, 1)
			require.Equal(t, status.AttemptCanceled, logs[0].Outcome)
			require.Len(t, logs[0].Lines, 1)
		})
	}
}
