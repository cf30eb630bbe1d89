package pipeline_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/faultproxy"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/pipeline/pipelinetest"
	"github.com/conveyorq/conveyor/status"
)

// beatEvery is the tests' heartbeat interval: the record expires after three.
const beatEvery = 100 * time.Millisecond

// workersOf sets up a prefix of the test's own (the listing is per prefix, and the package's
// tests share one server) with its Client and Inspector.
func workersOf(t *testing.T, rdb redis.UniversalClient) (prefix string, client *pipeline.Client, insp *pipeline.Inspector) {
	t.Helper()
	prefix = redistest.UniqueName(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: prefix})
	require.NoError(t, err)
	insp, err = pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: prefix})
	require.NoError(t, err)
	return prefix, client, insp
}

// waitWorkers polls the listing until ok holds of it, and returns it.
func waitWorkers(t *testing.T, insp *pipeline.Inspector, what string, ok func([]pipeline.WorkerInfo) bool) []pipeline.WorkerInfo {
	t.Helper()
	var last []pipeline.WorkerInfo
	require.Eventually(t, func() bool {
		ws, err := insp.Workers(context.Background())
		if err != nil {
			return false
		}
		last = ws
		return ok(ws)
	}, 20*time.Second, 10*time.Millisecond, "%s (last listing: %+v)", what, last)
	return last
}

// A running worker's record lists it with its jobs while they run, and is gone the moment the
// worker stops.
func TestWorkersHeartbeat(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix, client, insp := workersOf(t, rdb)
	ctx := t.Context()
	queue := "hb"

	started := make(chan string, 3)
	release := make(chan struct{})
	cfg := pipeline.WorkerConfig{Prefix: prefix, Queues: []string{queue, "other"}, Concurrency: 4, Name: "hb-worker",
		HeartbeatInterval: beatEvery}
	_, stop := startWorkerOn(t, rdb, cfg, map[string]pipeline.HandlerFunc{"block": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
		started <- j.ID
		<-release
		return nil, nil
	}})
	// Listed at start, before anything runs.
	ws := waitWorkers(t, insp, "the worker is listed", func(ws []pipeline.WorkerInfo) bool { return len(ws) == 1 })
	w := ws[0]
	host, _ := os.Hostname()
	require.Equal(t, "hb-worker", w.Name)
	require.Equal(t, host, w.Host)
	require.Equal(t, os.Getpid(), w.PID)
	require.NotEmpty(t, w.Version)
	require.Equal(t, []string{queue, "other"}, w.Queues)
	require.Equal(t, 4, w.Concurrency)
	require.Empty(t, w.Running)
	require.Equal(t, beatEvery, w.HeartbeatInterval)
	require.False(t, w.Started.IsZero())
	require.False(t, w.LastHeartbeat.Before(w.Started))
	require.Less(t, w.HeartbeatAge, 3*beatEvery)

	var ids []string
	for range 3 {
		j, err := client.Enqueue(ctx, queue, pipeline.Task{Type: "block"})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	for range 3 {
		<-started
	}
	ws = waitWorkers(t, insp, "the record lists the running jobs", func(ws []pipeline.WorkerInfo) bool {
		return len(ws) == 1 && len(ws[0].Running) == 3
	})
	for _, r := range ws[0].Running {
		require.Contains(t, ids, r.ID)
		require.Equal(t, queue, r.Queue)
		require.Equal(t, "block", r.Type)
		require.False(t, r.Started.IsZero())
	}
	require.Zero(t, ws[0].RunningMore)
	readers, err := insp.QueueReaders(ctx, queue)
	require.NoError(t, err)
	require.Len(t, readers, 1)
	readers, err = insp.QueueReaders(ctx, "nobody-reads-this")
	require.NoError(t, err)
	require.Empty(t, readers)

	close(release)
	require.NoError(t, stop())
	// Removed by the graceful stop itself: no TTL to wait for.
	ws, err = insp.Workers(ctx)
	require.NoError(t, err)
	require.Empty(t, ws)
	n, err := rdb.Exists(ctx, keys.WorkerBeat(prefix, "hb-worker"), keys.Workers(prefix)).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the record and the index are gone")
}

// A worker that dies without cleaning up (here: cut off from Redis, as a SIGKILL leaves it)
// drops out of the listing once its record's TTL, three beats, has passed.
func TestWorkersHeartbeatExpires(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	proxy := faultproxy.Start(t, srv.Addr)
	wrdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = wrdb.Close() })
	rdb := redistest.Client(t)
	prefix, _, insp := workersOf(t, rdb)

	cfg := pipeline.WorkerConfig{Prefix: prefix, Queues: []string{"hb"}, Name: "doomed", HeartbeatInterval: beatEvery,
		ShutdownTimeout: 100 * time.Millisecond}
	_, stop := startWorkerOn(t, wrdb, cfg, map[string]pipeline.HandlerFunc{"echo": echo})
	waitWorkers(t, insp, "the worker is listed", func(ws []pipeline.WorkerInfo) bool { return len(ws) == 1 })

	proxy.Refuse(true)
	proxy.CutAll()
	ws := waitWorkers(t, insp, "the silent worker drops out", func(ws []pipeline.WorkerInfo) bool { return len(ws) == 0 })
	require.Empty(t, ws)
	// The listing pruned the index of it.
	n, err := rdb.ZCard(t.Context(), keys.Workers(prefix)).Result()
	require.NoError(t, err)
	require.Zero(t, n)
	proxy.Refuse(false)
	require.NoError(t, stop())
}

// The record is bounded: it lists MaxHeartbeatRunning running jobs and counts the rest; the
// index keeps no member long past its record.
func TestWorkersHeartbeatBounded(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix, client, insp := workersOf(t, rdb)
	ctx := t.Context()
	queue := "hb"

	// Members left by workers gone long ago: one a beat prunes (expired over a minute ago),
	// one a listing prunes (no record).
	index := keys.Workers(prefix)
	require.NoError(t, rdb.ZAdd(ctx, index, redis.Z{Score: float64(time.Now().Add(-time.Hour).UnixMilli()), Member: "ancient"},
		redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "recordless"}).Err())

	total := pipeline.MaxHeartbeatRunning + 5
	started := make(chan struct{}, total)
	release := make(chan struct{})
	cfg := pipeline.WorkerConfig{Prefix: prefix, Queues: []string{queue}, Concurrency: total, Name: "busy", HeartbeatInterval: beatEvery}
	_, stop := startWorkerOn(t, rdb, cfg, map[string]pipeline.HandlerFunc{"block": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
		started <- struct{}{}
		<-release
		return nil, nil
	}})
	require.Eventually(t, func() bool {
		_, err := rdb.ZScore(ctx, index, "ancient").Result()
		return err == redis.Nil
	}, 20*time.Second, 10*time.Millisecond, "a beat prunes the member expired an hour ago")

	tasks := make([]pipeline.Task, total)
	for k := range tasks {
		tasks[k] = pipeline.Task{Type: "block"}
	}
	_, err := client.EnqueueBatch(ctx, queue, tasks)
	require.NoError(t, err)
	for range total {
		<-started
	}
	ws := waitWorkers(t, insp, "the record counts every running job", func(ws []pipeline.WorkerInfo) bool {
		return len(ws) == 1 && len(ws[0].Running)+ws[0].RunningMore == total
	})
	require.Len(t, ws[0].Running, pipeline.MaxHeartbeatRunning)
	require.Equal(t, 5, ws[0].RunningMore)
	for k := 1; k < len(ws[0].Running); k++ {
		require.False(t, ws[0].Running[k].Started.Before(ws[0].Running[k-1].Started), "longest-running first")
	}
	rec, err := rdb.Get(ctx, keys.WorkerBeat(prefix, "busy")).Result()
	require.NoError(t, err)
	t.Logf("a record listing %d running jobs: %d bytes", pipeline.MaxHeartbeatRunning, len(rec))
	require.Less(t, len(rec), 16<<10, "the record's size is bounded by the cap")
	members, err := rdb.ZRange(ctx, index, 0, -1).Result()
	require.NoError(t, err)
	require.Equal(t, []string{"busy"}, members, "the listing pruned the member without a record")
	close(release)
	require.NoError(t, stop())
}

// The heartbeat can be turned off, and a bad interval is refused.
func TestWorkersHeartbeatConfig(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix, _, insp := workersOf(t, rdb)
	_, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Prefix: prefix, HeartbeatInterval: -time.Second})
	require.ErrorIs(t, err, pipeline.ErrInvalid)

	w, _ := startWorkerOn(t, rdb, pipeline.WorkerConfig{Prefix: prefix, Queues: []string{"hb"}, DisableHeartbeat: true},
		map[string]pipeline.HandlerFunc{"echo": echo})
	// Ready means the session's services started: a heartbeat would have written its first beat.
	<-w.Ready()
	ws, err := insp.Workers(t.Context())
	require.NoError(t, err)
	require.Empty(t, ws)
}

// WorkerInfo's JSON is the wire form of the CLI and the API: times in unix ms, arrays never null.
func TestWorkerInfoJSON(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123)
	w := pipeline.WorkerInfo{Name: "w1", Host: "h", PID: 7, Version: "v1.2.3", Types: []string{"a", "b"}, Concurrency: 2, Started: at, LastHeartbeat: at.Add(time.Second),
		HeartbeatAge: 1500 * time.Millisecond, HeartbeatInterval: 5 * time.Second,
		Running: []pipeline.RunningJob{{ID: "j1", Queue: "q", Type: "t", Started: at}}, RunningMore: 3}
	b, err := json.Marshal(w)
	require.NoError(t, err)
	require.JSONEq(t, `{"name":"w1","host":"h","pid":7,"version":"v1.2.3","queues":[],"types":["a","b"],"concurrency":2,
		"running":[{"id":"j1","queue":"q","type":"t","started_at":1700000000123}],"running_more":3,
		"started_at":1700000000123,"heartbeat_at":1700000001123,"heartbeat_age_ms":1500,"heartbeat_interval_ms":5000}`, string(b))
	var back pipeline.WorkerInfo
	require.NoError(t, json.Unmarshal(b, &back))
	w.Queues = []string{}
	require.Equal(t, fmt.Sprint(w), fmt.Sprint(back))
}

// Deleting a queue a live worker reads: QueueReaders names the worker (what `queues delete`
// warns with), and the worker, whose blocked read Redis ends with "UNBLOCKED the stream key no
// longer exists", makes the stream and its group again, saying so, without an error line or a
// "reconnected" one (Redis never went away), and runs the queue's next job.
func TestDeleteQueueWhileWorkerReads(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix, client, insp := workersOf(t, rdb)
	ctx := t.Context()
	var logs lockedBuffer
	w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Prefix: prefix, Queues: []string{"dq"}, Name: "reader",
		HeartbeatInterval: beatEvery, Logger: zerolog.New(&logs)})
	require.NoError(t, err)
	w.Handle("echo", echo)
	pipelinetest.StartWorker(t, w)
	j, err := client.Enqueue(ctx, "dq", pipeline.Task{Type: "echo"})
	require.NoError(t, err)
	waitJob(t, client, "dq", j.ID, status.Completed)
	waitWorkers(t, insp, "the worker is listed", func(ws []pipeline.WorkerInfo) bool { return len(ws) == 1 })

	require.NoError(t, insp.DeleteQueue(ctx, "dq", true))
	readers, err := insp.QueueReaders(ctx, "dq")
	require.NoError(t, err)
	require.Len(t, readers, 1)
	require.Equal(t, "reader", readers[0].Name)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "made them again") },
		20*time.Second, 10*time.Millisecond, "the worker says it made the stream again")

	j, err = client.Enqueue(ctx, "dq", pipeline.Task{Type: "echo"})
	require.NoError(t, err)
	waitJob(t, client, "dq", j.ID, status.Completed)
	require.NotContains(t, logs.String(), "reconnected")
	require.NotContains(t, logs.String(), `"level":"error"`)
}

// On a cluster the workers' keys share one slot ({:workers}): the beat's MULTI and the
// listing's pipeline run there, and a graceful stop removes the record.
func TestWorkersHeartbeatCluster(t *testing.T) {
	t.Parallel()
	rdb := redistest.StartCluster(t).Client(t)
	prefix, client, insp := workersOf(t, rdb)
	require.Equal(t, keys.Slot(keys.Workers(prefix)), keys.Slot(keys.WorkerBeat(prefix, "any-name")))

	started := make(chan struct{}, 1)
	release := make(chan struct{})
	cfg := pipeline.WorkerConfig{Prefix: prefix, Queues: []string{"hb"}, Name: "cluster-worker", HeartbeatInterval: beatEvery}
	_, stop := startWorkerOn(t, rdb, cfg, map[string]pipeline.HandlerFunc{"block": func(context.Context, *pipeline.Job) ([]byte, error) {
		started <- struct{}{}
		<-release
		return nil, nil
	}})
	j, err := client.Enqueue(t.Context(), "hb", pipeline.Task{Type: "block"})
	require.NoError(t, err)
	<-started
	ws := waitWorkers(t, insp, "the worker is listed with its job", func(ws []pipeline.WorkerInfo) bool {
		return len(ws) == 1 && len(ws[0].Running) == 1
	})
	require.Equal(t, "cluster-worker", ws[0].Name)
	require.Equal(t, j.ID, ws[0].Running[0].ID)
	close(release)
	require.NoError(t, stop())
	ws, err = insp.Workers(t.Context())
	require.NoError(t, err)
	require.Empty(t, ws)
}
