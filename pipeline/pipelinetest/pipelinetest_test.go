package pipelinetest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/pipeline/pipelinetest"
	"github.com/conveyorq/conveyor/status"
)

// recordingTB stands for a test that an assertion should fail: it keeps the failure and stops
// the goroutine, as testing.T.Fatalf does.
type recordingTB struct {
	testing.TB
	mu     sync.Mutex
	failed []string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.failed = append(r.failed, fmt.Sprintf(format, args...))
	r.mu.Unlock()
	runtime.Goexit()
}

// failure runs f with a recordingTB and returns its failure, "" when it passed.
func failure(t *testing.T, f func(tb testing.TB)) string {
	t.Helper()
	r := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return strings.Join(r.failed, "\n")
}

type testBundle struct {
	client *pipeline.Client
	insp   *pipeline.Inspector
}

func setup(t *testing.T) (context.Context, *testBundle) {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	return context.Background(), &testBundle{client: client, insp: insp}
}

func TestRequireEnqueued(t *testing.T) {
	ctx, b := setup(t)
	start := time.Now()
	_, err := b.client.Enqueue(ctx, "emails", pipeline.Task{Type: "welcome", Payload: []byte(`{"to":"ada@example.com","n":1}`),
		Metadata: map[string]string{"tenant": "acme"}},
		pipeline.WithMaxRetries(0), pipeline.WithTimeout(time.Minute), pipeline.WithDelay(time.Hour))
	require.NoError(t, err)
	queued, err := b.client.Enqueue(ctx, "emails", pipeline.Task{Type: "digest", Payload: []byte("plain")}, pipeline.WithID("digest-1"))
	require.NoError(t, err)

	j := pipelinetest.RequireEnqueued(ctx, t, b.insp, "emails", pipelinetest.Want{
		Type: "welcome", Payload: []byte(`{ "n": 1, "to": "ada@example.com" }`), Metadata: map[string]string{"tenant": "acme"},
		Status: status.Scheduled, MaxRetries: new(0), Timeout: time.Minute, NotBefore: start.Add(time.Hour),
	})
	require.Equal(t, "welcome", j.Type)
	require.Equal(t, queued.ID, pipelinetest.RequireEnqueued(ctx, t, b.insp, "emails",
		pipelinetest.Want{Type: "digest", ID: "digest-1", Payload: []byte("plain"), Status: status.Queued}).ID)

	for _, tc := range []struct {
		name string
		want pipelinetest.Want
		says string
	}{
		{"another type", pipelinetest.Want{Type: "farewell"}, `no job of type "farewell"`},
		{"another payload", pipelinetest.Want{Type: "welcome", Payload: []byte(`{"to":"bob@example.com","n":1}`)}, "payload"},
		{"another metadata value", pipelinetest.Want{Type: "welcome", Metadata: map[string]string{"tenant": "initech"}}, "tenant"},
		{"another status", pipelinetest.Want{Type: "digest", Status: status.Failed}, `no job of type "digest"`},
		{"another status by id", pipelinetest.Want{Type: "digest", ID: "digest-1", Status: status.Completed}, "status queued, want completed"},
		{"a final status without an id", pipelinetest.Want{Type: "digest", Status: status.Canceled}, "set Want.ID"},
		{"another retry limit", pipelinetest.Want{Type: "welcome", MaxRetries: new(3)}, "max retries 0, want 3"},
		{"another timeout", pipelinetest.Want{Type: "welcome", Timeout: time.Second}, "timeout 1m0s, want 1s"},
		{"due earlier", pipelinetest.Want{Type: "digest", NotBefore: start.Add(time.Minute)}, "want not before"},
		{"another id", pipelinetest.Want{Type: "digest", ID: "digest-2"}, `no job of type "digest"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := failure(t, func(tb testing.TB) { pipelinetest.RequireEnqueued(ctx, tb, b.insp, "emails", tc.want) })
			require.Contains(t, msg, tc.says)
		})
	}
}

func TestRequireNotEnqueued(t *testing.T) {
	ctx, b := setup(t)
	_, err := b.client.Enqueue(ctx, "emails", pipeline.Task{Type: "welcome", Payload: []byte(`{}`)})
	require.NoError(t, err)
	pipelinetest.RequireNotEnqueued(ctx, t, b.insp, "emails", pipelinetest.Want{Type: "farewell"})
	pipelinetest.RequireNotEnqueued(ctx, t, b.insp, "emails", pipelinetest.Want{Type: "welcome", Status: status.Failed})
	msg := failure(t, func(tb testing.TB) {
		pipelinetest.RequireNotEnqueued(ctx, tb, b.insp, "emails", pipelinetest.Want{Type: "welcome"})
	})
	require.Contains(t, msg, `1 job(s) of type "welcome"`)
}

func TestRun(t *testing.T) {
	ctx := context.Background()
	echo := func(_ context.Context, j *pipeline.Job) ([]byte, error) { return j.Payload, nil }
	fail := func(context.Context, *pipeline.Job) ([]byte, error) { return nil, errors.New("smtp down") }

	r := pipelinetest.Run(ctx, echo, pipelinetest.NewJob("echo", []byte("hi")))
	require.NoError(t, r.Err)
	require.Equal(t, status.Completed, r.Status)
	require.Equal(t, []byte("hi"), r.Output)

	r = pipelinetest.Run(ctx, fail, pipelinetest.NewJob("send", nil))
	require.EqualError(t, r.Err, "smtp down")
	require.Equal(t, status.Scheduled, r.Status, "a failed attempt with retries left is retried")

	last := pipelinetest.NewJob("send", nil)
	last.Attempt = last.MaxRetries + 1
	require.Equal(t, status.Failed, pipelinetest.Run(ctx, fail, last).Status, "the last attempt's failure is final")

	skip := func(context.Context, *pipeline.Job) ([]byte, error) {
		return nil, pipeline.SkipRetry(errors.New("bad address"))
	}
	require.Equal(t, status.Failed, pipelinetest.Run(ctx, skip, pipelinetest.NewJob("send", nil)).Status)

	r = pipelinetest.Run(ctx, func(context.Context, *pipeline.Job) ([]byte, error) { panic("boom") }, pipelinetest.NewJob("send", nil))
	require.EqualError(t, r.Err, "panic: boom")
	require.Equal(t, status.Scheduled, r.Status)

	big := func(context.Context, *pipeline.Job) ([]byte, error) {
		return make([]byte, 1<<20+1), nil // past the worker's default limit, 1 MiB
	}
	r = pipelinetest.Run(ctx, big, pipelinetest.NewJob("report", nil))
	require.ErrorContains(t, r.Err, "exceeds the limit")
	require.Equal(t, status.Failed, r.Status)

	slow := pipelinetest.NewJob("slow", nil)
	slow.Timeout = time.Millisecond
	r = pipelinetest.Run(ctx, func(ctx context.Context, _ *pipeline.Job) ([]byte, error) {
		<-ctx.Done() // the job's timeout ends the handler's context
		return nil, ctx.Err()
	}, slow)
	require.True(t, r.TimedOut)
	require.ErrorIs(t, r.Err, pipelinetest.ErrTimedOut)
	require.ErrorIs(t, r.Err, context.DeadlineExceeded)
	require.Equal(t, status.Scheduled, r.Status)
}

// TestRunLogs: Run keeps what the handler logged as a worker keeps it: bounded and counted,
// nothing logged after it returned, nothing for a handler that logs nothing.
func TestRunLogs(t *testing.T) {
	ctx := context.Background()
	r := pipelinetest.Run(ctx, func(context.Context, *pipeline.Job) ([]byte, error) { return nil, nil }, pipelinetest.NewJob("quiet", nil))
	require.Empty(t, r.Logs)
	require.Zero(t, r.LogsCut)

	r = pipelinetest.Run(ctx, func(_ context.Context, j *pipeline.Job) ([]byte, error) {
		for i := range pipeline.MaxLogLines + 5 {
			j.Logf("line %03d", i)
		}
		return nil, nil
	}, pipelinetest.NewJob("chatty", nil))
	require.Len(t, r.Logs, pipeline.MaxLogLines)
	require.Equal(t, 5, r.LogsCut)
	require.Contains(t, r.Logs[0], "line 005")
	require.Contains(t, r.Logs[pipeline.MaxLogLines-1], fmt.Sprintf("line %03d", pipeline.MaxLogLines+4))

	slow := pipelinetest.NewJob("slow", nil)
	slow.Timeout = time.Millisecond
	r = pipelinetest.Run(ctx, func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
		j.Logf("before")
		<-ctx.Done()
		j.Logf("after the timeout") // Run waits for the handler: kept
		return nil, ctx.Err()
	}, slow)
	require.True(t, r.TimedOut)
	require.Len(t, r.Logs, 2)
	require.Contains(t, r.Logs[0], `"message":"before"`)

	// Lines logged once the handler returned (a goroutine it left) are dropped.
	var late *pipeline.Job
	r = pipelinetest.Run(ctx, func(_ context.Context, j *pipeline.Job) ([]byte, error) {
		late = j
		j.Logf("in time")
		return nil, nil
	}, pipelinetest.NewJob("late", nil))
	late.Logf("too late")
	require.Len(t, r.Logs, 1)

	// A job called without Run logs nowhere, as before.
	j := pipelinetest.NewJob("direct", nil)
	j.Logf("dropped")
	j.Logger().Info().Msg("dropped")
}

func TestWork(t *testing.T) {
	ctx, b := setup(t)
	w, err := pipeline.NewWorker(b.client.Redis(), pipeline.WorkerConfig{Queues: []string{"emails"}})
	require.NoError(t, err)
	w.Handle("welcome", func(_ context.Context, j *pipeline.Job) ([]byte, error) {
		return []byte(`{"sent_to":` + string(j.Payload) + `}`), nil
	})
	w.Handle("reject", func(context.Context, *pipeline.Job) ([]byte, error) {
		return nil, pipeline.SkipRetry(errors.New("no such user"))
	})
	pipelinetest.StartWorker(t, w)

	j := pipelinetest.Work(ctx, t, b.client, "emails", pipeline.Task{Type: "welcome", Payload: []byte(`"ada"`)})
	require.Equal(t, status.Completed, j.Status)
	require.JSONEq(t, `{"sent_to":"ada"}`, string(j.Result))

	j = pipelinetest.Work(ctx, t, b.client, "emails", pipeline.Task{Type: "reject"})
	require.Equal(t, status.Failed, j.Status)
	require.Equal(t, "no such user", j.LastError)
	pipelinetest.RequireEnqueued(ctx, t, b.insp, "emails", pipelinetest.Want{Type: "reject", Status: status.Failed})
}
