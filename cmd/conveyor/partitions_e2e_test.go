package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// A partitioned queue through the binary, run from TestE2E: 'queues create --partitions',
// publish (the jobs spread over the partitions), a worker that reads them all, status without
// naming a partition, and a change of the count refused while jobs are unfinished.
func testPartitions(t *testing.T, c *cli) {
	q := redistest.UniqueName(t)
	require.Equal(t, "queue "+q+": 3 partitions\n", c.ok(t, "queues", "create", q, "--partitions", "3"))
	require.Equal(t, "queue "+q+": 3 partitions\n", c.ok(t, "queues", "create", q, "--partitions", "3"), "the same count again")
	c.refused(t, 2, "--partitions 0", "queues", "create", q, "--partitions", "0")
	c.refused(t, 2, "want exactly one queue name", "queues", "create", "--partitions", "2")
	c.refused(t, 2, "--drain 6s", "queues", "create", q, "--partitions", "2", "--drain", "6s")

	ids := strings.Fields(c.ok(t, "publish", "--queue", q, "--type", "echo", "--payload", `{"p":1}`, "--count", "60"))
	require.Len(t, ids, 60)
	for i := range 3 {
		n, err := c.rdb.XLen(t.Context(), keys.New(keys.DefaultPrefix, keys.PartitionName(q, i, 3)).Stream()).Result()
		require.NoError(t, err)
		require.Positive(t, n, "partition %d got none of the 60 jobs", i)
	}
	require.EqualValues(t, 60, c.stats(t, "--queue", q).Queued, "stats sum the partitions")
	c.refused(t, 1, "unfinished jobs", "queues", "create", q, "--partitions", "4")

	w := c.start(t, "worker", "--queue", q)
	waitFor(t, 60*time.Second, 100*time.Millisecond, "60 completed jobs", func() bool {
		return c.stats(t, "--queue", q).Completed == 60
	})
	for _, id := range []string{ids[0], ids[29], ids[59]} {
		j := c.status(t, "--queue", q, id)
		require.Equal(t, "completed", j.Status)
		require.Equal(t, q, j.Queue, "the user's queue, not the partition")
		require.JSONEq(t, `{"p":1}`, string(j.Result))
		require.Equal(t, q, c.status(t, id).Queue, "status without --queue looks in every partition of every queue")
	}
	require.Equal(t, 0, w.stop(t))
	// The finished records stay for their retention, in keys a new layout would not read.
	c.refused(t, 1, "60 finished records", "queues", "create", q, "--partitions", "4", "--drain", "100ms")
	c.ok(t, "queues", "delete", q)
	require.Equal(t, "queue "+q+": 4 partitions\n", c.ok(t, "queues", "create", q, "--partitions", "4"), "an empty queue may change")
}

// testPartitionChangeUnderLoad, run from TestE2E: a `conveyor serve` process (a producer with
// a warm partition-count cache) takes POSTs without pause while this process changes the
// queue's count 1 -> 3 -> 1, with one worker running throughout, never restarted. Every job
// serve acknowledged (202) must run, on that worker, which follows each change by itself.
// Before the closed flags, serve kept publishing to the layout just left for up to 5 s, where
// no worker read any more; before workers followed changes, the jobs of the new layout waited
// for a worker started after the change.
func testPartitionChangeUnderLoad(t *testing.T, c *cli) {
	ctx := t.Context()
	queue := redistest.UniqueName(t)
	insp, err := pipeline.NewInspector(c.rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	var ran sync.Map      // job ids the worker ran
	var ranN atomic.Int64 // how many
	w, err := pipeline.NewWorker(c.rdb, pipeline.WorkerConfig{Queues: []string{queue}, Concurrency: 20,
		Retention: pipeline.RetainNone, MinRetention: time.Millisecond, FlushInterval: time.Millisecond,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)})
	require.NoError(t, err)
	w.Handle("t", func(_ context.Context, j *pipeline.Job) ([]byte, error) {
		ran.Store(j.ID, true)
		ranN.Add(1)
		return nil, nil
	})
	wctx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(wctx) }()
	select {
	case <-w.Ready():
	case err := <-workerDone:
		t.Fatalf("worker: %v", err)
	}

	p := startServe(t, c, serveEnv(c.url, ""), "serve", "--addr", "127.0.0.1:0", "--redis", c.url)
	url := "http://" + logged(t, p, serveAddr, "serve's address in its log") + "/v1/queues/" + queue + "/jobs"
	var mu sync.Mutex
	var acked []string
	stopPub := make(chan struct{})
	pubDone := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stopPub:
				pubDone <- nil
				return
			default:
			}
			res, err := http.Post(url, "application/json", strings.NewReader(`{"type":"t"}`))
			if err != nil {
				pubDone <- err
				return
			}
			body, _ := io.ReadAll(res.Body)
			_ = res.Body.Close()
			if res.StatusCode != http.StatusAccepted {
				continue // refused (its layout changing for too long): not acknowledged
			}
			var j struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(body, &j); err != nil || j.ID == "" {
				pubDone <- fmt.Errorf("202 without a job: %s", body)
				return
			}
			mu.Lock()
			acked = append(acked, j.ID)
			mu.Unlock()
		}
	}()
	waitFor(t, 60*time.Second, time.Millisecond, "20 jobs run", func() bool { return ranN.Load() >= 20 })
	for _, n := range []int{3, 1} {
		// The change waits, with the old layout closed, for the jobs in it to run.
		waitFor(t, 60*time.Second, 10*time.Millisecond, fmt.Sprintf("the change to %d partitions", n), func() bool {
			_, err := insp.CreateQueue(ctx, queue, pipeline.QueueOptions{Partitions: n, Drain: 2 * time.Second})
			if err != nil && !errors.Is(err, pipeline.ErrQueueBusy) {
				require.NoError(t, err)
			}
			return err == nil
		})
		// The old layout was empty when the change went through: what runs now was published
		// to the new one, and the same worker runs it.
		before := ranN.Load()
		waitFor(t, 60*time.Second, time.Millisecond, fmt.Sprintf("20 jobs of the layout of %d partitions run", n),
			func() bool { return ranN.Load() >= before+20 })
	}
	close(stopPub)
	require.NoError(t, <-pubDone)
	mu.Lock()
	ids := slices.Clone(acked)
	mu.Unlock()
	waitFor(t, 60*time.Second, 20*time.Millisecond, "every acknowledged job to run", func() bool {
		for _, id := range ids {
			if _, ok := ran.Load(id); !ok {
				return false
			}
		}
		return true
	})
	t.Logf("%d jobs acknowledged and run over the changes 1 -> 3 -> 1", len(ids))
	stopWorker()
	require.NoError(t, <-workerDone)
	require.Equal(t, 0, p.stop(t))
}
