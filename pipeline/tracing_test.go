package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/conveyorq/conveyor/internal/tracetest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// recorder is a tracer provider that keeps every ended span in memory: one per "process" of a
// test (the producer's, the worker's), as two services would each have their own.
type recorder struct {
	tp *tracetest.Provider
}

func newRecorder(*testing.T) *recorder {
	return &recorder{tp: tracetest.NewProvider()}
}

// spans waits until the recorder holds n spans named name and returns them, oldest first.
func (r *recorder) spans(t *testing.T, name string, n int) tracetest.SpanStubs {
	t.Helper()
	var got tracetest.SpanStubs
	require.Eventually(t, func() bool {
		got = got[:0]
		for _, s := range r.tp.GetSpans() {
			if s.Name == name {
				got = append(got, s)
			}
		}
		return len(got) >= n
	}, 20*time.Second, 2*time.Millisecond, "fewer than %d spans %q", n, name)
	return got
}

func attr(s tracetest.SpanStub, k string) attribute.Value {
	for _, kv := range s.Attributes {
		if string(kv.Key) == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// requireMessaging checks the messaging attributes every Conveyor span has.
func requireMessaging(t *testing.T, s tracetest.SpanStub, kind trace.SpanKind, opType, queue, id string) {
	t.Helper()
	require.Equal(t, kind, s.SpanKind, s.Name)
	require.Equal(t, "conveyor", attr(s, "messaging.system").AsString(), s.Name)
	require.Equal(t, opType, attr(s, "messaging.operation.type").AsString(), s.Name)
	require.Equal(t, queue, attr(s, "messaging.destination.name").AsString(), s.Name)
	require.Equal(t, id, attr(s, "messaging.message.id").AsString(), s.Name)
}

// TestTracingPublishToHandler: a producer's publish span, under its caller's span, is the
// parent of the worker's process span (and of the wait before it), across two clients with
// providers of their own; the handler's context carries the process span.
func TestTracingPublishToHandler(t *testing.T) {
	t.Parallel()
	producer, consumer := newRecorder(t), newRecorder(t)
	b := setup(t, setupOpts{client: pipeline.ClientConfig{TracerProvider: producer.tp}})
	ctx, root := producer.tp.Tracer("test").Start(t.Context(), "request")
	job, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "echo", Payload: []byte("x"),
		Metadata: map[string]string{"k": "v"}})
	require.NoError(t, err)
	root.End()
	require.NotEmpty(t, job.Metadata["traceparent"])
	require.Equal(t, "v", job.Metadata["k"])

	handlerSpan := make(chan trace.SpanContext, 1)
	b.startWorker(t, pipeline.WorkerConfig{TracerProvider: consumer.tp}, map[string]pipeline.HandlerFunc{
		"echo": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			handlerSpan <- trace.SpanContextFromContext(ctx)
			return nil, nil
		}})
	b.waitStatus(t, job.ID, status.Completed)

	pub := producer.spans(t, "publish "+b.queue, 1)[0]
	requireMessaging(t, pub, trace.SpanKindProducer, "send", b.queue, job.ID)
	require.Equal(t, root.SpanContext().SpanID(), pub.Parent.SpanID(), "publish is a child of the caller's span")
	require.Equal(t, root.SpanContext().TraceID(), pub.SpanContext.TraceID())

	proc := consumer.spans(t, "process "+b.queue, 1)[0]
	requireMessaging(t, proc, trace.SpanKindConsumer, "process", b.queue, job.ID)
	require.Equal(t, pub.SpanContext.TraceID(), proc.SpanContext.TraceID(), "one trace from publish to handler")
	require.Equal(t, pub.SpanContext.SpanID(), proc.Parent.SpanID(), "process is a child of publish")
	require.True(t, proc.Parent.IsRemote())
	require.Equal(t, int64(1), attr(proc, "conveyor.job.attempt").AsInt64())
	require.Equal(t, proc.SpanContext.SpanID(), (<-handlerSpan).SpanID(), "the handler's context carries the process span")

	wait := consumer.spans(t, "wait "+b.queue, 1)[0]
	require.Equal(t, pub.SpanContext.SpanID(), wait.Parent.SpanID(), "wait is a child of publish")
	require.False(t, wait.EndTime.After(proc.StartTime), "the wait ends where the attempt starts")
}

// TestTracingRetry: attempt 1 fails (its span records the error and a retry event), attempt 2
// completes; both process spans are children of the one publish span.
func TestTracingRetry(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	b := setup(t, setupOpts{client: pipeline.ClientConfig{TracerProvider: rec.tp}})
	job, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "flaky"}, pipeline.WithMaxRetries(3))
	require.NoError(t, err)
	b.startWorker(t, pipeline.WorkerConfig{TracerProvider: rec.tp}, map[string]pipeline.HandlerFunc{
		"flaky": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
			if j.Attempt == 1 {
				return nil, errors.New("boom")
			}
			return nil, nil
		}})
	b.waitStatus(t, job.ID, status.Completed)

	pub := rec.spans(t, "publish "+b.queue, 1)[0]
	procs := rec.spans(t, "process "+b.queue, 2)
	require.Len(t, procs, 2)
	for i, p := range procs {
		require.Equal(t, pub.SpanContext.TraceID(), p.SpanContext.TraceID(), "attempt %d in the publish's trace", i+1)
		require.Equal(t, pub.SpanContext.SpanID(), p.Parent.SpanID(), "attempt %d a child of publish", i+1)
		require.Equal(t, int64(i+1), attr(p, "conveyor.job.attempt").AsInt64())
	}
	first, second := procs[0], procs[1]
	require.Equal(t, codes.Error, first.Status.Code)
	require.Equal(t, "retry", attr(first, "conveyor.job.outcome").AsString())
	var events []string
	for _, e := range first.Events {
		events = append(events, e.Name)
	}
	require.Contains(t, events, "exception", "the error is recorded")
	require.Contains(t, events, "retry")
	require.NotEqual(t, codes.Error, second.Status.Code)
}

// TestTracingRecovery: a worker dies holding a job; the rescuer's recoverer records a recover
// span linked to the job's publish span, and the attempt it then runs is in the publish's
// trace.
func TestTracingRecovery(t *testing.T) {
	t.Parallel()
	const vt = 600 * time.Millisecond
	rec := newRecorder(t)
	b := setup(t, setupOpts{client: pipeline.ClientConfig{TracerProvider: rec.tp}})
	ctx := t.Context()
	job, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "gate"})
	require.NoError(t, err)

	victimRDB := redis.NewClient(&redis.Options{Addr: b.addr(t), MaxRetries: -1})
	t.Cleanup(func() { _ = victimRDB.Close() })
	started := make(chan struct{}, 1)
	victim, err := pipeline.NewWorker(victimRDB, pipeline.WorkerConfig{Queues: []string{b.queue}, Name: "victim",
		VisibilityTimeout: vt, DisableRecovery: true, ShutdownTimeout: 100 * time.Millisecond, Logger: testLogger(t)})
	require.NoError(t, err)
	victim.Handle("gate", func(ctx context.Context, _ *pipeline.Job) ([]byte, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	vctx, stopVictim := context.WithCancel(context.Background())
	victimDone := make(chan struct{})
	go func() { defer close(victimDone); _ = victim.Run(vctx) }()
	t.Cleanup(func() { stopVictim(); <-victimDone })
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the victim never started the job")
	}
	_ = victimRDB.Close() // a crash: no renewal, no outcome

	b.startWorker(t, pipeline.WorkerConfig{Name: "rescuer", VisibilityTimeout: vt, RecoveryInterval: 100 * time.Millisecond,
		TracerProvider: rec.tp}, map[string]pipeline.HandlerFunc{"gate": echo})
	j := b.waitStatus(t, job.ID, status.Completed)
	require.Contains(t, j.LastError, "victim")

	pub := rec.spans(t, "publish "+b.queue, 1)[0]
	rs := rec.spans(t, "recover "+b.queue, 1)[0]
	requireMessaging(t, rs, trace.SpanKindProducer, "send", b.queue, job.ID)
	require.Equal(t, "queued", attr(rs, "conveyor.recovery.outcome").AsString())
	require.NotEqual(t, pub.SpanContext.TraceID(), rs.SpanContext.TraceID(), "the recover span is the recoverer's")
	require.Len(t, rs.Links, 1)
	require.Equal(t, pub.SpanContext.TraceID(), rs.Links[0].SpanContext.TraceID(), "linked to the job's trace")
	require.Equal(t, pub.SpanContext.SpanID(), rs.Links[0].SpanContext.SpanID(), "linked to the publish span")

	proc := rec.spans(t, "process "+b.queue, 1)[0] // the victim records nothing
	require.Equal(t, pub.SpanContext.TraceID(), proc.SpanContext.TraceID(), "the recovered attempt is in the publish's trace")
	require.Equal(t, pub.SpanContext.SpanID(), proc.Parent.SpanID())
	require.Equal(t, int64(2), attr(proc, "conveyor.job.attempt").AsInt64())
	require.False(t, proc.StartTime.Before(rs.StartTime), "the recovery comes before the attempt it made possible")
}

// TestTracingWithoutProvider: with no provider set, a publish under a caller's span forwards
// that span context to the handler (a remote span context), and a publish without one adds
// nothing to the job's metadata.
func TestTracingWithoutProvider(t *testing.T) {
	t.Parallel()
	b := setup(t)
	caller := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6},
		TraceFlags: trace.FlagsSampled})
	traced, err := b.client.Enqueue(trace.ContextWithRemoteSpanContext(t.Context(), caller), b.queue, pipeline.Task{Type: "t"})
	require.NoError(t, err)
	plain, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "t"})
	require.NoError(t, err)
	require.Equal(t, "00-01020300000000000000000000000000-0405060000000000-01", traced.Metadata["traceparent"])
	require.Nil(t, plain.Metadata, "no provider, no span: nothing added")

	got := make(chan trace.SpanContext, 2)
	var n atomic.Int32
	b.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{"t": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
		n.Add(1)
		if j.ID == traced.ID {
			got <- trace.SpanContextFromContext(ctx)
		}
		return nil, nil
	}})
	b.waitStatus(t, traced.ID, status.Completed)
	sc := <-got
	require.Equal(t, caller.TraceID(), sc.TraceID())
	require.Equal(t, caller.SpanID(), sc.SpanID())
	require.True(t, sc.IsRemote())
}

// TestTracingPublisher: a Watermill message whose context carries a span, and one whose
// metadata carries a traceparent, are linked from the Publisher's one publish span, whose
// context the jobs carry to the handler.
func TestTracingPublisher(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	b := setup(t, setupOpts{client: pipeline.ClientConfig{TracerProvider: rec.tp}})
	pub, err := pipeline.NewPublisher(b.client, pipeline.PublisherConfig{DefaultType: "t"})
	require.NoError(t, err)
	ctx, upstream := rec.tp.Tracer("test").Start(t.Context(), "watermill handler")
	m1 := message.NewMessage(pipeline.NewID(), []byte("1"))
	m1.SetContext(ctx)
	other := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{9}, TraceFlags: trace.FlagsSampled})
	m2 := message.NewMessage(pipeline.NewID(), []byte("2"))
	m2.Metadata.Set("traceparent", "00-09000000000000000000000000000000-0900000000000000-01")
	require.NoError(t, pub.Publish(b.queue, m1, m2))
	upstream.End()

	span := rec.spans(t, "publish "+b.queue, 1)[0]
	require.Equal(t, upstream.SpanContext().SpanID(), span.Parent.SpanID(), "a child of the first message's span")
	require.Equal(t, int64(2), attr(span, "messaging.batch.message_count").AsInt64())
	var linked []trace.SpanID
	for _, l := range span.Links {
		linked = append(linked, l.SpanContext.SpanID())
	}
	require.ElementsMatch(t, []trace.SpanID{upstream.SpanContext().SpanID(), other.SpanID()}, linked)

	b.startWorker(t, pipeline.WorkerConfig{TracerProvider: rec.tp}, map[string]pipeline.HandlerFunc{"t": echo})
	b.waitStatus(t, m1.UUID, status.Completed)
	b.waitStatus(t, m2.UUID, status.Completed)
	for _, p := range rec.spans(t, "process "+b.queue, 2) {
		require.Equal(t, span.SpanContext.SpanID(), p.Parent.SpanID(), "each job's attempt is a child of the publish span")
	}
}

// TestTracingWorkflowDependency: a workflow is one trace (every task's process span a child of
// the workflow's publish span), and a task's process span links to the process spans of the
// tasks it waited for: D's to B's and C's in a diamond.
func TestTracingWorkflowDependency(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	b := setup(t, setupOpts{client: pipeline.ClientConfig{TracerProvider: rec.tp}})
	b.startWorker(t, pipeline.WorkerConfig{TracerProvider: rec.tp, Concurrency: 4}, map[string]pipeline.HandlerFunc{"step": echo})
	task := pipeline.Task{Type: "step", Metadata: map[string]string{"k": "v"}}
	st, err := b.client.Workflow(t.Context(), b.queue, pipeline.Workflow{Tasks: []pipeline.WorkflowTask{
		{Name: "A", Task: task},
		{Name: "B", Task: task, After: []string{"A"}},
		{Name: "C", Task: task, After: []string{"A"}},
		{Name: "D", Task: task, After: []string{"B", "C"}},
	}})
	require.NoError(t, err)
	b.waitWorkflow(t, st.ID, pipeline.WorkflowCompleted)

	pub := rec.spans(t, "publish "+b.queue, 1)[0]
	procs := map[string]tracetest.SpanStub{}
	for _, p := range rec.spans(t, "process "+b.queue, 4) {
		procs[attr(p, "messaging.message.id").AsString()] = p
	}
	require.Len(t, procs, 4)
	for id, p := range procs {
		require.Equal(t, pub.SpanContext.TraceID(), p.SpanContext.TraceID(), "%s in the workflow's trace", id)
		require.Equal(t, pub.SpanContext.SpanID(), p.Parent.SpanID(), "%s a child of the workflow's publish", id)
	}
	linked := func(id string) []trace.SpanID {
		var out []trace.SpanID
		for _, l := range procs[st.ID+"."+id].Links {
			out = append(out, l.SpanContext.SpanID())
		}
		return out
	}
	require.Empty(t, linked("A"), "A waited for nothing")
	require.Equal(t, []trace.SpanID{procs[st.ID+".A"].SpanContext.SpanID()}, linked("B"))
	require.ElementsMatch(t, []trace.SpanID{procs[st.ID+".B"].SpanContext.SpanID(), procs[st.ID+".C"].SpanContext.SpanID()}, linked("D"))
	j, err := b.client.Get(t.Context(), b.queue, st.ID+".D")
	require.NoError(t, err)
	require.Equal(t, "v", j.Metadata["k"], "the task's own metadata kept beside the links")
}
