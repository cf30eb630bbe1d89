package pipeline_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// queueReads is a go-redis hook that counts the XREADGROUPs begun and ended on the streams of
// each queue (by the queue's name in the stream key's hash tag, partitions included), and on
// each stream (by its key).
type queueReads struct {
	mu           sync.Mutex
	begun, ended map[string]int
	prefix       string
	queues       []string
}

func newQueueReads(prefix string, queues ...string) *queueReads {
	return &queueReads{begun: map[string]int{}, ended: map[string]int{}, prefix: prefix, queues: queues}
}

func (*queueReads) DialHook(next redis.DialHook) redis.DialHook { return next }
func (*queueReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *queueReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "xreadgroup" {
			return next(ctx, cmd)
		}
		q, key := "", ""
		for _, a := range cmd.Args() {
			s, ok := a.(string)
			if !ok || !strings.HasPrefix(s, h.prefix+":{") {
				continue
			}
			tag := strings.TrimPrefix(s, h.prefix+":{")
			tag = tag[:strings.IndexByte(tag, '}')]
			q, _, _ = strings.Cut(tag, "#")
			key = s
		}
		h.mu.Lock()
		h.begun[q]++
		h.begun[key]++
		h.mu.Unlock()
		defer func() {
			h.mu.Lock()
			h.ended[q]++
			h.ended[key]++
			h.mu.Unlock()
		}()
		return next(ctx, cmd)
	}
}

// reads is how many reads of queue (a queue's name or a stream's key) began, and whether none
// is under way.
func (h *queueReads) reads(queue string) (begun int, idle bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.begun[queue], h.begun[queue] == h.ended[queue]
}

// hookedClient is a new client to the same Redis as rdb (standalone or cluster), with hook.
func hookedClient(t *testing.T, rdb redis.UniversalClient, hook redis.Hook) redis.UniversalClient {
	t.Helper()
	var c redis.UniversalClient
	switch r := rdb.(type) {
	case *redis.Client:
		c = redis.NewClient(r.Options())
	case *redis.ClusterClient:
		c = redis.NewClusterClient(r.Options())
	default:
		t.Fatalf("client %T", rdb)
	}
	c.AddHook(hook)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestPauseResume pauses a partitioned queue under a running worker, on a standalone server and
// on the 3-master cluster: the worker stops reading it (and only it) within one read, the job
// running when the pause landed finishes, a job due during the pause is promoted and waits,
// and after Resume every job runs. The state outlives the worker: a new worker started on the
// paused queue reads nothing of it until Resume.
func TestPauseResume(t *testing.T) {
	t.Parallel()
	onStandaloneAndCluster(t, testPauseResume)
}

func testPauseResume(t *testing.T, rdb redis.UniversalClient) {
	ctx := t.Context()
	prefix := redistest.UniqueName(t)
	const q, other = "paused", "other"
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: prefix})
	require.NoError(t, err)
	require.ErrorIs(t, insp.Pause(ctx, q), pipeline.ErrQueueNotFound)
	_, err = insp.CreateQueue(ctx, q, pipeline.QueueOptions{Partitions: 3})
	require.NoError(t, err)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: prefix})
	require.NoError(t, err)

	started := make(chan string, 100) // ids of the jobs of q that started
	ran := make(chan string, 100)     // ids of the jobs of other that ran
	gate := make(chan struct{})
	var opened sync.Once
	open := func() { opened.Do(func() { close(gate) }) }
	t.Cleanup(open) // before the worker's stop, which waits for the job
	blocking := make(chan struct{}, 1)
	handlers := map[string]pipeline.HandlerFunc{
		"block": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			blocking <- struct{}{}
			<-gate
			return nil, nil
		},
		"run": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
			if j.Queue == q {
				started <- j.ID
			} else {
				ran <- j.ID
			}
			return nil, nil
		},
	}
	cfg := pipeline.WorkerConfig{Prefix: prefix, Queues: []string{q, other}, Concurrency: 4,
		PauseCheckInterval: 100 * time.Millisecond}

	// waitPaused waits until the worker has the pause and no read of q is under way (one
	// under way when the pause landed may finish), and returns q's read count then.
	waitPaused := func(t *testing.T, w *pipeline.Worker, h *queueReads) int {
		t.Helper()
		require.Eventually(t, func() bool { return pipeline.PausedTopics(w)[q] }, 10*time.Second, time.Millisecond)
		var qReads int
		require.Eventually(t, func() bool {
			var idle bool
			qReads, idle = h.reads(q)
			return idle
		}, 10*time.Second, time.Millisecond)
		return qReads
	}
	// noneStarts checks that the worker reads q no more while it reads other on: a job of
	// other runs, and other's reads go on, while q's read count stays at qReads and no job
	// of q starts.
	noneStarts := func(t *testing.T, h *queueReads, qReads int) {
		t.Helper()
		j, err := client.Enqueue(ctx, other, pipeline.Task{Type: "run"})
		require.NoError(t, err)
		select {
		case id := <-ran:
			require.Equal(t, j.ID, id)
		case <-time.After(10 * time.Second):
			t.Fatal("a job of the queue not paused did not run")
		}
		otherReads, _ := h.reads(other)
		require.Eventually(t, func() bool { n, _ := h.reads(other); return n >= otherReads+3 }, 10*time.Second, time.Millisecond)
		now, _ := h.reads(q)
		assert.Equal(t, qReads, now, "XREADGROUP on a paused queue")
		select {
		case id := <-started:
			t.Fatalf("job %s of the paused queue started", id)
		default:
		}
	}

	h := newQueueReads(prefix, q, other)
	w, stop := startWorkerOn(t, hookedClient(t, rdb, h), cfg, handlers)
	running, err := client.Enqueue(ctx, q, pipeline.Task{Type: "block"})
	require.NoError(t, err)
	<-blocking

	require.NoError(t, insp.Pause(ctx, q))
	require.NoError(t, insp.Pause(ctx, q)) // idempotent
	qReads := waitPaused(t, w, h)
	paused, err := insp.Paused(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{q}, paused)
	var queued []string
	for range 5 {
		j, err := client.Enqueue(ctx, q, pipeline.Task{Type: "run"})
		require.NoError(t, err)
		queued = append(queued, j.ID)
	}
	due, err := client.Enqueue(ctx, q, pipeline.Task{Type: "run"}, pipeline.WithDelay(50*time.Millisecond))
	require.NoError(t, err)
	queued = append(queued, due.ID)
	// The scheduler goes on: the job due during the pause is promoted and waits, queued.
	require.Eventually(t, func() bool {
		j, err := client.Get(ctx, q, due.ID)
		return err == nil && j.Status == status.Queued
	}, 10*time.Second, time.Millisecond)
	noneStarts(t, h, qReads)

	st, err := insp.Stats(ctx, q)
	require.NoError(t, err)
	assert.True(t, st.Paused)
	assert.EqualValues(t, 6, st.Queued)
	all, err := insp.Queues(ctx)
	require.NoError(t, err)
	for _, s := range all {
		assert.Equal(t, s.Queue == q, s.Paused, s.Queue)
	}

	// The job running when the pause landed finishes.
	open()
	require.Eventually(t, func() bool {
		j, err := client.Get(ctx, q, running.ID)
		return err == nil && j.Status == status.Completed
	}, 10*time.Second, time.Millisecond)

	require.NoError(t, insp.Resume(ctx, q))
	require.NoError(t, insp.Resume(ctx, q)) // idempotent
	assert.ElementsMatch(t, queued, receiveIDs(t, started, len(queued)))
	st, err = insp.Stats(ctx, q)
	require.NoError(t, err)
	assert.False(t, st.Paused)

	// The state is in Redis: a worker started on a paused queue takes nothing of it.
	require.NoError(t, stop())
	require.NoError(t, insp.Pause(ctx, q))
	queued = queued[:0]
	for range 3 {
		j, err := client.Enqueue(ctx, q, pipeline.Task{Type: "run"})
		require.NoError(t, err)
		queued = append(queued, j.ID)
	}
	h = newQueueReads(prefix, q, other)
	w, _ = startWorkerOn(t, hookedClient(t, rdb, h), cfg, handlers)
	require.Zero(t, waitPaused(t, w, h), "a worker started on a paused queue read it")
	noneStarts(t, h, 0)
	require.NoError(t, insp.Resume(ctx, q))
	assert.ElementsMatch(t, queued, receiveIDs(t, started, len(queued)))
}

// receiveIDs receives n ids from ch.
func receiveIDs(t *testing.T, ch <-chan string, n int) []string {
	t.Helper()
	var ids []string
	for range n {
		select {
		case id := <-ch:
			ids = append(ids, id)
		case <-time.After(15 * time.Second):
			t.Fatalf("%d of %d jobs started", len(ids), n)
		}
	}
	return ids
}

// pauseEnv is what the pause tests around one worker share: a prefix of the test's own, the
// queue pauseQ (to be paused) beside pauseOther, an Inspector and a Client, and, once
// startWorker ran, the ids of pauseQ's jobs that started and of pauseOther's that ran, and a
// count of the worker's reads of each queue.
type pauseEnv struct {
	insp         *pipeline.Inspector
	client       *pipeline.Client
	started, ran chan string
	reads        *queueReads
	rdb          redis.UniversalClient
	prefix       string
}

const pauseQ, pauseOther = "paused", "other"

// newPauseEnv makes the env, pauseQ created with partitions.
func newPauseEnv(t *testing.T, partitions int) *pauseEnv {
	t.Helper()
	e := &pauseEnv{rdb: redistest.Client(t), prefix: redistest.UniqueName(t),
		started: make(chan string, 100), ran: make(chan string, 100)}
	e.reads = newQueueReads(e.prefix, pauseQ, pauseOther)
	var err error
	e.insp, err = pipeline.NewInspector(e.rdb, pipeline.InspectorConfig{Prefix: e.prefix})
	require.NoError(t, err)
	_, err = e.insp.CreateQueue(t.Context(), pauseQ, pipeline.QueueOptions{Partitions: partitions})
	require.NoError(t, err)
	e.client, err = pipeline.NewClient(e.rdb, pipeline.ClientConfig{Prefix: e.prefix})
	require.NoError(t, err)
	return e
}

// startWorker runs a worker of both queues (cfg's Prefix and Queues are the env's) on a
// client that counts its reads, whose "run" handler reports each job to started or ran.
func (e *pauseEnv) startWorker(t *testing.T, cfg pipeline.WorkerConfig) *pipeline.Worker {
	t.Helper()
	cfg.Prefix, cfg.Queues = e.prefix, []string{pauseQ, pauseOther}
	w, _ := startWorkerOn(t, hookedClient(t, e.rdb, e.reads), cfg,
		map[string]pipeline.HandlerFunc{"run": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
			if j.Queue == pauseQ {
				e.started <- j.ID
			} else {
				e.ran <- j.ID
			}
			return nil, nil
		}})
	return w
}

// enqueue publishes a "run" job to queue and returns its id.
func (e *pauseEnv) enqueue(t *testing.T, queue string, opts ...pipeline.Option) string {
	t.Helper()
	j, err := e.client.Enqueue(t.Context(), queue, pipeline.Task{Type: "run"}, opts...)
	require.NoError(t, err)
	return j.ID
}

// readsOn checks that the worker reads on while pauseQ is paused: a job of pauseOther runs,
// and n more reads of pauseOther begin, while no job of pauseQ starts (what says of it).
func (e *pauseEnv) readsOn(t *testing.T, n int, what string) {
	t.Helper()
	id := e.enqueue(t, pauseOther)
	select {
	case got := <-e.ran:
		require.Equal(t, id, got)
	case <-time.After(10 * time.Second):
		t.Fatal("a job of the queue not paused did not run")
	}
	otherReads, _ := e.reads.reads(pauseOther)
	require.Eventually(t, func() bool { k, _ := e.reads.reads(pauseOther); return k >= otherReads+n }, 10*time.Second, time.Millisecond)
	select {
	case got := <-e.started:
		t.Fatalf("job %s of the paused queue started: %s", got, what)
	default:
	}
}

// TestPausePriorityLevels: a paused queue starts no job of any level, 2 to 4 included (the
// pause watcher pauses every level's stream of every partition, not only the queue's level-1
// stream), whether the jobs were queued before the worker started or during the pause; after
// Resume every one runs.
func TestPausePriorityLevels(t *testing.T) {
	t.Parallel()
	e := newPauseEnv(t, 2)
	ctx := t.Context()
	var queued []string
	for level := 2; level <= 4; level++ {
		queued = append(queued, e.enqueue(t, pauseQ, pipeline.WithPriority(level)), e.enqueue(t, pauseQ, pipeline.WithPriority(level)))
	}
	require.NoError(t, e.insp.Pause(ctx, pauseQ))

	w := e.startWorker(t, pipeline.WorkerConfig{Concurrency: 4, PauseCheckInterval: 100 * time.Millisecond})
	require.Eventually(t, func() bool { return pipeline.PausedTopics(w)[pauseQ] }, 10*time.Second, time.Millisecond)
	for level := 2; level <= 4; level++ {
		queued = append(queued, e.enqueue(t, pauseQ, pipeline.WithPriority(level)))
	}
	// The worker reads on: a job of the other queue runs, and three more reads of it end,
	// while no job of the paused queue starts.
	e.readsOn(t, 3, "queued before or during the pause")
	require.NoError(t, e.insp.Resume(ctx, pauseQ))
	assert.ElementsMatch(t, queued, receiveIDs(t, e.started, len(queued)))
}

// TestPauseTakesEffectBeforeReturn is the newcomer's case of issue 30: a job published right
// after Pause returned ran (1 of 6 trials, 216 ms after the worker logged the pause), picked
// up by the blocking read under way when the pause landed. Pause now returns once every live
// worker reading the queue has confirmed that it reads the queue no more (its reads under way
// ended), so a job published after it never starts until Resume. Each round pauses while a
// read of the queue is under way, publishes at once, and checks that the job does not start
// while the worker reads another queue on; then resumes and sees it run.
func TestPauseTakesEffectBeforeReturn(t *testing.T) {
	t.Parallel()
	e := newPauseEnv(t, 0)
	ctx := t.Context()
	e.startWorker(t, pipeline.WorkerConfig{Concurrency: 4})
	for round := range 6 {
		// A read of q is under way.
		require.Eventually(t, func() bool { _, idle := e.reads.reads(pauseQ); return !idle }, 10*time.Second, time.Millisecond)
		require.NoError(t, e.insp.Pause(ctx, pauseQ))
		id := e.enqueue(t, pauseQ)
		e.readsOn(t, 2, fmt.Sprintf("round %d: published after Pause returned", round))
		require.NoError(t, e.insp.Resume(ctx, pauseQ))
		assert.Equal(t, []string{id}, receiveIDs(t, e.started, 1))
	}
}

// TestPauseConfirmed: PauseConfirmed names the live workers reading the queue and those that
// did not confirm in time: here a worker whose record is live but which does not run (a copy
// of the running worker's record under another name). A timeout under a millisecond is
// ErrInvalid, and nothing is paused.
func TestPauseConfirmed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	_, err := b.insp.PauseConfirmed(ctx, b.queue, 0)
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	w, _ := b.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{"t": echo})
	rec := b.workerRecord(t, w)
	paused, err := b.insp.Paused(ctx)
	require.NoError(t, err)
	assert.NotContains(t, paused, b.queue)

	pc, err := b.insp.PauseConfirmed(ctx, b.queue, 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, pipeline.PauseConfirmation{Workers: []string{w.Name()}, Unconfirmed: []string{}}, pc)

	ghost := b.addGhost(t, rec)
	pc, err = b.insp.PauseConfirmed(ctx, b.queue, 300*time.Millisecond)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{w.Name(), ghost}, pc.Workers)
	assert.Equal(t, []string{ghost}, pc.Unconfirmed)
}

// TestPauseWaitRoundTrips: PauseConfirmed learns of the confirmations from their notices
// (keys.PauseAckChannel), reading the stored ones only every 500 ms and once at the end,
// instead of every 10 ms as it did (about 100 reads in a 1 s wait). Two running workers and
// one that never confirms (a live record of a worker that does not run) keep the wait to its
// whole 1 s bound, so the count does not hang on when the workers' reads end: the queue's
// check, its readers, the pause and its notice, and at most three reads of the
// confirmations (two rechecks and the last one). A slower machine makes fewer reads, not
// more. A pause the two workers confirm costs no more. Both workers confirm in each case,
// within the wait.
func TestPauseWaitRoundTrips(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	cmds := &redistest.Commands{}
	insp, err := pipeline.NewInspector(hookedClient(t, b.rdb, cmds), pipeline.InspectorConfig{})
	require.NoError(t, err)
	var names []string
	var rec string
	for range 2 {
		w, _ := b.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{"t": echo})
		rec = b.workerRecord(t, w)
		names = append(names, w.Name())
	}
	// fixed is what a pause costs but its wait, and the reads of the confirmations among it
	// (QueueReaders reads the worker records): QueueExists, QueueReaders, SADD, PUBLISH.
	fixed := func() (trips, reads int64) {
		before := cmds.Named("hgetall")

		trips = cmds.During(func() {
			_, err := insp.QueueExists(ctx, b.queue)
			require.NoError(t, err)
			_, err = insp.QueueReaders(ctx, b.queue)
			require.NoError(t, err)
		})
		return trips + 2, cmds.Named("hgetall") - before
	}
	const maxReads = 3
	var pc pipeline.PauseConfirmation
	// A resume of the running queue runs the settings script: the pauses below then find it
	// loaded, with no NOSCRIPT fallback (one more trip) in the first.
	require.NoError(t, insp.Resume(ctx, b.queue))
	fixedTrips, fixedReads := fixed()
	// The fixed part varies by one SISMEMBER (the queue registry's read is skipped when an
	// earlier read of the call found the queue), so it gets one trip of slack. The wait reads
	// the stored confirmations once a recheck until the notices come. A loaded machine delays
	// the workers' notices, so that bound is one read per recheck of the time the wait took.
	reads := cmds.Named("hgetall")
	start := time.Now()
	trips := cmds.During(func() { pc, err = insp.PauseConfirmed(ctx, b.queue, 10*time.Second) })
	rechecks := int64(time.Since(start) / pipeline.PauseAckRecheck)
	reads = cmds.Named("hgetall") - reads - fixedReads
	require.NoError(t, err)
	assert.ElementsMatch(t, names, pc.Workers)
	assert.Empty(t, pc.Unconfirmed)
	t.Logf("a pause two workers confirm: %d round trips (%d fixed), %d reads of the confirmations in %d rechecks", trips, fixedTrips, reads, rechecks)
	assert.LessOrEqual(t, reads, max(maxReads, rechecks+1), "reads of the confirmations while two workers confirm")
	assert.LessOrEqual(t, trips-reads, fixedTrips+1, "a pause two workers confirm, but its reads of the confirmations")

	ghost := b.addGhost(t, rec)
	fixedTrips, fixedReads = fixed()
	reads = cmds.Named("hgetall")
	trips = cmds.During(func() { pc, err = insp.PauseConfirmed(ctx, b.queue, time.Second) })
	reads = cmds.Named("hgetall") - reads - fixedReads
	require.NoError(t, err)
	assert.ElementsMatch(t, append(names, ghost), pc.Workers)
	assert.Equal(t, []string{ghost}, pc.Unconfirmed)
	t.Logf("a 1 s wait for a worker that never confirms: %d round trips (%d fixed), %d reads of the confirmations", trips, fixedTrips, reads)
	assert.LessOrEqual(t, reads, int64(maxReads), "reads of the confirmations in a 1 s wait")
	assert.LessOrEqual(t, trips-reads, fixedTrips+1, "a 1 s wait for a worker that never confirms, but its reads of the confirmations")
}

// workerRecord waits for w's heartbeat record (Inspector.Workers) and returns it.
func (b *testBundle) workerRecord(t *testing.T, w *pipeline.Worker) string {
	t.Helper()
	var rec string
	require.Eventually(t, func() bool {
		var err error
		rec, err = b.rdb.Get(t.Context(), keys.WorkerBeat(keys.DefaultPrefix, w.Name())).Result()
		return err == nil
	}, 10*time.Second, time.Millisecond)
	return rec
}

// addGhost adds, until the test ends, a live record of a worker that does not run (rec, a
// running worker's record, under another name) and returns its name: a reader of the same
// queues that never confirms a pause.
func (b *testBundle) addGhost(t *testing.T, rec string) string {
	t.Helper()
	ctx := t.Context()
	name := "ghost-" + b.queue
	var fields map[string]any
	require.NoError(t, json.Unmarshal([]byte(rec), &fields))
	fields["name"] = name
	ghost, err := json.Marshal(fields)
	require.NoError(t, err)
	require.NoError(t, b.rdb.Set(ctx, keys.WorkerBeat(keys.DefaultPrefix, name), ghost, time.Minute).Err())
	require.NoError(t, b.rdb.ZAdd(ctx, keys.Workers(keys.DefaultPrefix),
		redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: name}).Err())
	t.Cleanup(func() {
		b.rdb.ZRem(context.Background(), keys.Workers(keys.DefaultPrefix), name)
		b.rdb.Del(context.Background(), keys.WorkerBeat(keys.DefaultPrefix, name))
	})
	return name
}
