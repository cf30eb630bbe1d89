package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/metrics"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/metakey"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/pipeline/pipelinetest"
	"github.com/conveyorq/conveyor/status"
)

// Watermill's own metrics middleware (components/metrics) counts an attempt as a failure when
// the handler chain returns an error. Before, the worker's handler always returned nil, so
// every failed or dead job counted as a success.
func TestWatermillMetricsMiddlewareCountsFailures(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	reg := prometheus.NewRegistry()
	mw := metrics.NewPrometheusMetricsBuilder(reg, "test", "").NewRouterMiddleware().Middleware

	w, err := pipeline.NewWorker(b.rdb, pipeline.WorkerConfig{Queues: []string{b.queue}, Logger: testLogger(t),
		Backoff: pipeline.Backoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond}})
	require.NoError(t, err)
	w.Use(mw)
	w.Handle("ok", echo)
	w.Handle("flaky", func(_ context.Context, j *pipeline.Job) ([]byte, error) {
		if j.Attempt == 1 {
			return nil, errors.New("first attempt fails")
		}
		return nil, nil
	})
	w.Handle("dead", func(context.Context, *pipeline.Job) ([]byte, error) { return nil, errors.New("always") })
	var ids []string
	for _, task := range []struct {
		typ  string
		opts []pipeline.Option
	}{{"ok", nil}, {"ok", nil}, {"ok", nil}, {"flaky", nil}, {"flaky", nil},
		{"dead", []pipeline.Option{pipeline.WithMaxRetries(0)}}, {"dead", []pipeline.Option{pipeline.WithMaxRetries(0)}}} {
		j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: task.typ}, task.opts...)
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	runWorker(t, w)
	for i, id := range ids {
		want := status.Completed
		if i >= 5 {
			want = status.Failed
		}
		b.waitStatus(t, id, want)
	}
	// 3 ok + 2 flaky second attempts succeeded; 2 flaky first attempts and 2 dead failed.
	require.Eventually(t, func() bool {
		ok, fail := histogramCounts(t, reg)
		return ok == 5 && fail == 4
	}, 5*time.Second, 10*time.Millisecond)
}

// The middleware reads the router's names from a job's context as under Watermill's router
// (message.HandlerNameFromCtx and its kin; the metrics middleware labels by handler name). The
// worker runs jobs on its subscriber's runners, not on the router's goroutines, which set them.
func TestMiddlewareSeesRouterNames(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w, err := pipeline.NewWorker(b.rdb, pipeline.WorkerConfig{Queues: []string{b.queue}, Logger: testLogger(t)})
	require.NoError(t, err)
	seen := make(chan []string, 1)
	w.Use(func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			ctx := msg.Context()
			seen <- []string{message.HandlerNameFromCtx(ctx), message.SubscribeTopicFromCtx(ctx),
				message.SubscriberNameFromCtx(ctx), message.PublisherNameFromCtx(ctx)}
			return h(msg)
		}
	})
	w.Handle("ok", echo)
	j, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "ok"})
	require.NoError(t, err)
	runWorker(t, w)
	b.waitStatus(t, j.ID, status.Completed)
	require.Equal(t, []string{"conveyor:" + b.queue, b.q.Stream(), "stream.Subscriber",
		"message.disabledPublisher"}, <-seen)
}

// histogramCounts reads Watermill's handler histogram: attempts that succeeded and failed.
func histogramCounts(t *testing.T, reg *prometheus.Registry) (ok, fail uint64) {
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "test_handler_execution_time_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "success" && l.GetValue() == "true" {
					ok += m.GetHistogram().GetSampleCount()
				} else if l.GetName() == "success" {
					fail += m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return ok, fail
}

// A user's middleware sees each attempt's outcome as a *pipeline.JobError: a duration and an
// error per job type, telling retry from dead, and the timeout.
func TestMiddlewareSeesOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	type seen struct {
		typ     string
		outcome pipeline.Outcome // 0 when completed
		timeout bool
		took    time.Duration
		wrapped bool // the handler's own error is in the chain
	}
	var mu sync.Mutex
	var got []seen
	handlerErr := errors.New("handler said no")
	w, err := pipeline.NewWorker(b.rdb, pipeline.WorkerConfig{Queues: []string{b.queue}, Logger: testLogger(t),
		Backoff: pipeline.Backoff{Base: time.Hour}})
	require.NoError(t, err)
	w.Use(func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			start := time.Now()
			msgs, err := h(msg)
			s := seen{typ: msg.Metadata.Get(metakey.EntryType), took: time.Since(start)}
			var jerr *pipeline.JobError
			if errors.As(err, &jerr) {
				s.outcome, s.timeout, s.wrapped = jerr.Outcome, jerr.Timeout, errors.Is(err, handlerErr)
			}
			mu.Lock()
			got = append(got, s)
			mu.Unlock()
			return msgs, err
		}
	})
	w.Handle("ok", echo)
	w.Handle("retry", func(context.Context, *pipeline.Job) ([]byte, error) { return nil, handlerErr })
	w.Handle("skip", func(context.Context, *pipeline.Job) ([]byte, error) { return nil, pipeline.SkipRetry(handlerErr) })
	w.Handle("slow", func(ctx context.Context, _ *pipeline.Job) ([]byte, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	for _, task := range []struct {
		typ  string
		opts []pipeline.Option
	}{{"ok", nil}, {"retry", nil}, {"skip", nil}, {"slow", []pipeline.Option{pipeline.WithTimeout(20 * time.Millisecond), pipeline.WithMaxRetries(0)}}} {
		_, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: task.typ}, task.opts...)
		require.NoError(t, err)
	}
	runWorker(t, w)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 4 }, 10*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	byType := map[string]seen{}
	for _, s := range got {
		byType[s.typ] = s
	}
	require.Zero(t, byType["ok"].outcome)
	require.Equal(t, pipeline.OutcomeRetry, byType["retry"].outcome)
	require.True(t, byType["retry"].wrapped)
	require.Equal(t, pipeline.OutcomeDead, byType["skip"].outcome)
	require.True(t, byType["skip"].wrapped)
	require.Equal(t, pipeline.OutcomeDead, byType["slow"].outcome)
	require.True(t, byType["slow"].timeout)
	require.GreaterOrEqual(t, byType["slow"].took, 20*time.Millisecond)
}

// A middleware that refuses a job (returns an error without calling the next handler) costs
// the job an attempt, with the middleware's error: before, the job stayed pending, unrenewed,
// until recovery took it after the visibility timeout.
func TestMiddlewareRefusalIsAFailedAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	w, err := pipeline.NewWorker(b.rdb, pipeline.WorkerConfig{Queues: []string{b.queue}, Logger: testLogger(t),
		Backoff: pipeline.Backoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond}})
	require.NoError(t, err)
	w.Use(refuseMarked)
	w.Handle("ok", echo)
	j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "ok", Metadata: map[string]string{"refuse": "yes"}},
		pipeline.WithMaxRetries(1))
	require.NoError(t, err)
	runWorker(t, w)
	got := b.waitStatus(t, j.ID, status.Failed)
	require.Equal(t, 2, got.Attempt)
	require.Contains(t, got.LastError, "refused by middleware: rate limited")
	s := b.stats(t)
	require.EqualValues(t, 1, s.Retried)
	require.Zero(t, s.Recovered)
}

// runWorker runs w until the test ends.
func runWorker(t *testing.T, w *pipeline.Worker) {
	t.Helper()
	pipelinetest.StartWorker(t, w)
}

// The payload stored with a job's outcome, and run by its next attempt, is the payload that
// was published, whatever middleware or the handler did to the message's bytes. Before, for
// payloads up to 8 KiB the worker sent back msg.Payload after middleware ran, so a middleware
// that decoded it in place changed what was stored and what the retry ran on.
func TestStoredPayloadIsThePublishedOne(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	w, err := pipeline.NewWorker(b.rdb, pipeline.WorkerConfig{Queues: []string{b.queue}, Logger: testLogger(t),
		Backoff: pipeline.Backoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond}})
	require.NoError(t, err)
	w.Use(func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			for i := range msg.Payload { // "decodes" in place
				msg.Payload[i] ^= 0x20
			}
			return h(msg)
		}
	})
	var mu sync.Mutex
	var seen []string
	w.Handle("t", func(_ context.Context, j *pipeline.Job) ([]byte, error) {
		mu.Lock()
		seen = append(seen, string(j.Payload))
		mu.Unlock()
		copy(j.Payload, "XXXX") // and the handler scribbles on it too
		if j.Attempt == 1 {
			return nil, errors.New("try again")
		}
		return nil, nil
	})
	j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t", Payload: []byte("hello")})
	require.NoError(t, err)
	runWorker(t, w)
	got := b.waitStatus(t, j.ID, status.Completed)
	require.Equal(t, "hello", string(got.Payload), "the stored payload is the published one")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"HELLO", "HELLO"}, seen, "each attempt's middleware decodes the published bytes")
}
