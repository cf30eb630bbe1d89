// Package jobtest seeds jobs in any status for tests. It goes through the very scripts that make
// those statuses in production: pipeline.Client to publish and cancel, internal/jobstate for
// what a worker writes. So no test hand-writes state that a script would write, and that could
// drift from it. River's testfactory is the model.
package jobtest

import (
	"cmp"
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/pipeline/pipelinetest"
	"github.com/conveyorq/conveyor/status"
)

// Opts describes the job to seed. Zero fields take the defaults below.
type Opts struct {
	Prefix  string        // key prefix; default keys.DefaultPrefix
	Task    pipeline.Task // default: type "test", payload "payload"
	Options []pipeline.Option
	// Consumer is the worker (stream consumer) that holds or held the job, for in_progress,
	// completed, failed and retry. Default "jobtest".
	Consumer string
	Result   string        // completed: the result
	Reason   string        // failed, retry: the error; default "seeded failure"
	RetryIn  time.Duration // retry: when the job is due again; default an hour
}

// Seeded is a seeded job: as Client.Get reads it, and the entry a consumer holds (in_progress)
// or held (completed, failed, retry).
type Seeded struct {
	*pipeline.Job
	Entry    string
	Consumer string
}

// Retry is the status Seed takes for a job waiting for its retry after one failed attempt
// (its status reads scheduled).
const Retry status.Status = "retry"

// Seed makes a job of queue in status st (any status, or Retry) and returns it. A waiting job
// is the second task of a chain of two (o.Task), the first queued (Options do not apply).
func Seed(tb testing.TB, rdb redis.UniversalClient, queue string, st status.Status, o Opts) Seeded {
	tb.Helper()
	ctx := context.Background()
	if o.Prefix == "" {
		o.Prefix = keys.DefaultPrefix
	}
	if o.Task.Type == "" {
		o.Task.Type = "test"
		if o.Task.Payload == nil {
			o.Task.Payload = []byte("payload")
		}
	}
	if o.Consumer == "" {
		o.Consumer = "jobtest"
	}
	if o.Reason == "" {
		o.Reason = "seeded failure"
	}
	if o.RetryIn == 0 {
		o.RetryIn = time.Hour
	}
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: o.Prefix})
	require.NoError(tb, err)
	if st == status.Waiting {
		// A chain of two tasks: the second waits for the first, which stays queued.
		first := pipeline.Task{Type: o.Task.Type}
		wf, err := client.Workflow(ctx, queue, pipeline.Chain(first, o.Task))
		require.NoError(tb, err)
		j, err := client.Get(ctx, queue, wf.Tasks[1].JobID)
		require.NoError(tb, err)
		return Seeded{Job: j, Consumer: o.Consumer}
	}
	opts := o.Options
	if st == status.Scheduled {
		opts = append(opts, pipeline.WithDelay(time.Hour))
	}
	j, err := client.Enqueue(ctx, queue, o.Task, opts...)
	require.NoError(tb, err)
	out := Seeded{Job: j, Consumer: o.Consumer}
	get := func() Seeded {
		out.Job, err = client.Get(ctx, queue, j.ID)
		require.NoError(tb, err)
		return out
	}
	switch st {
	case status.Scheduled, status.Queued:
		return get()
	case status.Canceled:
		require.NoError(tb, client.Cancel(ctx, queue, j.ID))
		return get()
	}

	// What a worker does: read the entry in the group, mark the attempt started, then its
	// outcome.
	q := keys.New(o.Prefix, queue)
	// The stream of the job's priority level (WithPriority): level 1's is the queue's stream.
	stream := q.LevelStream(j.Priority)
	if err := rdb.XGroupCreateMkStream(ctx, stream, keys.Group, "0").Err(); err != nil && !rediserr.IsGroupExists(err) {
		require.NoError(tb, err)
	}
	// Read exactly this job's entry: everything before it is delivered too (as a worker
	// reading the stream in order would), so seed in the order a test needs.
	for {
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: o.Consumer,
			Streams: []string{stream, ">"}, Count: 1, Block: -1}).Result()
		require.NoError(tb, err, "the job's entry was delivered already")
		if res[0].Messages[0].ID == j.Entry {
			break
		}
	}
	out.Entry = j.Entry
	now := time.Now()
	ran := jobstate.Ran{ID: j.ID, Entry: j.Entry, Attempt: 1, Started: now, Finished: now}
	t := jobstate.Start(&q, jobstate.StartParams{ID: j.ID, Entry: j.Entry, Attempt: 1, At: now})
	switch st {
	case status.InProgress:
	case status.Completed:
		t = jobstate.Done(&q, jobstate.DoneParams{Ran: ran, Result: o.Result})
	case status.Failed:
		t = jobstate.Dead(&q, jobstate.DeadParams{Ran: ran, Reason: o.Reason})
	case Retry:
		t = jobstate.Retry(&q, jobstate.RetryParams{Ran: ran, Reason: o.Reason, RetryAt: now.Add(o.RetryIn)})
	default:
		tb.Fatalf("jobtest: no such status %q", st)
	}
	b := jobstate.NewStore(rdb, o.Prefix).Batch()
	f := b.Finish(jobstate.FinishConfig{Worker: o.Consumer, Retention: time.Hour,
		MinRetention: time.Minute}, []jobstate.Transition{t})
	require.NoError(tb, b.Exec(ctx))
	codes, err := f.Result()
	require.NoError(tb, err)
	require.Equal(tb, script.OK, codes[0], "the seeded transition was refused")
	return get()
}

// RunWorker runs w until the test ends (then stops it and fails the test if Run returned an
// error), and returns once it consumes: pipelinetest.StartWorker, the users' helper.
func RunWorker(tb testing.TB, w *pipeline.Worker) {
	tb.Helper()
	pipelinetest.StartWorker(tb, w)
}

// Fill publishes n jobs of type typ with payload to queue, in batches of 1,000: a backlog for
// benchmarks to drain.
func Fill(tb testing.TB, c *pipeline.Client, queue, typ string, payload []byte, n int) {
	tb.Helper()
	tasks := make([]pipeline.Task, min(n, 1000))
	for i := range tasks {
		tasks[i] = pipeline.Task{Type: typ, Payload: payload}
	}
	for done := 0; done < n; done += len(tasks) {
		if _, err := c.EnqueueBatch(context.Background(), queue, tasks[:min(len(tasks), n-done)]); err != nil {
			tb.Fatal(err)
		}
	}
}

// WaitCompleted polls queue's completed counter every millisecond until it reaches n: the end
// of a benchmark's drain, cheap enough not to slow what it waits for.
func WaitCompleted(rdb redis.UniversalClient, prefix, queue string, n int) {
	stats := keys.New(cmp.Or(prefix, keys.DefaultPrefix), queue).Stats()
	for {
		if done, _ := rdb.HGet(context.Background(), stats, keys.StatCompleted).Int(); done >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
