package pipeline_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// replicated is a private master with one replica in sync.
type replicated struct {
	master, replica       *redistest.Server
	masterRdb, replicaRdb *redis.Client
}

func startReplicated(t testing.TB) *replicated {
	t.Helper()
	m := redistest.Start(t, redistest.WithArgs("--repl-diskless-sync-delay", "0"))
	r := redistest.Start(t, redistest.WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(m.Port), "--repl-diskless-sync-delay", "0"))
	s := &replicated{master: m, replica: r, masterRdb: m.Client(t), replicaRdb: r.Client(t)}
	require.Eventually(t, func() bool {
		info, err := s.masterRdb.Info(t.Context(), "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:1\r\n") && strings.Contains(info, ",state=online,")
	}, 20*time.Second, 20*time.Millisecond, "replica in sync")
	return s
}

// onReplica reports whether the replica has job id of queue now.
func (s *replicated) onReplica(t *testing.T, queue, id string) bool {
	t.Helper()
	n, err := s.replicaRdb.Exists(t.Context(), keys.New(keys.DefaultPrefix, queue).Job(id)).Result()
	require.NoError(t, err)
	return n == 1
}

// With WithReplicas, an acknowledged publish is on the replica the moment Enqueue returns;
// asking for more replicas than there are fails with ErrNotReplicated, the job returned.
func TestWithReplicas(t *testing.T) {
	s := startReplicated(t)
	c, err := pipeline.NewClient(s.masterRdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	ctx := t.Context()
	q := redistest.UniqueName(t)

	t.Run("One", func(t *testing.T) {
		j, err := c.Enqueue(ctx, q, pipeline.Task{Type: "t", Payload: []byte(`1`)}, pipeline.WithReplicas(1, 5*time.Second))
		require.NoError(t, err)
		require.True(t, s.onReplica(t, q, j.ID))
	})
	t.Run("Delayed", func(t *testing.T) {
		j, err := c.Enqueue(ctx, q, pipeline.Task{Type: "t"}, pipeline.WithReplicas(1, 5*time.Second), pipeline.WithDelay(time.Hour))
		require.NoError(t, err)
		require.True(t, s.onReplica(t, q, j.ID))
	})
	t.Run("Batch", func(t *testing.T) {
		tasks := make([]pipeline.Task, 250) // three chunks, pipelined
		for i := range tasks {
			tasks[i] = pipeline.Task{Type: "t", Payload: []byte(strconv.Itoa(i))}
		}
		jobs, err := c.EnqueueBatch(ctx, q, tasks, pipeline.WithReplicas(1, 5*time.Second))
		require.NoError(t, err)
		for _, j := range jobs {
			require.True(t, s.onReplica(t, q, j.ID), j.ID)
		}
	})
	t.Run("ClientConfig", func(t *testing.T) {
		cc, err := pipeline.NewClient(s.masterRdb, pipeline.ClientConfig{Replicas: 2, ReplicaTimeout: 50 * time.Millisecond})
		require.NoError(t, err)
		j, err := cc.Enqueue(ctx, q, pipeline.Task{Type: "t"})
		require.ErrorIs(t, err, pipeline.ErrNotReplicated)
		var rerr *pipeline.ReplicationError
		require.ErrorAs(t, err, &rerr)
		require.Equal(t, pipeline.ReplicationError{Wanted: 2, Confirmed: 1, Timeout: 50 * time.Millisecond}, *rerr)
		require.EqualError(t, err, "pipeline: write not confirmed by enough replicas: 1 of 2 replicas confirmed within 50ms")
		require.NotNil(t, j, "the job comes back with the error: it was written")
		got, err := cc.Get(ctx, q, j.ID)
		require.NoError(t, err)
		require.Equal(t, status.Queued, got.Status)
		// WithReplicas(0, 0) waits for none, whatever the client says.
		_, err = cc.Enqueue(ctx, q, pipeline.Task{Type: "t"}, pipeline.WithReplicas(0, 0))
		require.NoError(t, err)
	})
	t.Run("BatchTooFew", func(t *testing.T) {
		jobs, err := c.EnqueueBatch(ctx, q, []pipeline.Task{{Type: "t"}, {Type: "u"}}, pipeline.WithReplicas(2, 20*time.Millisecond))
		require.ErrorIs(t, err, pipeline.ErrNotReplicated)
		require.Len(t, jobs, 2)
		require.True(t, s.onReplica(t, q, jobs[1].ID))
	})
	t.Run("LongerThanReadTimeout", func(t *testing.T) {
		// go-redis reads a pipeline's replies within ReadTimeout; a WAIT may take longer.
		short := redis.NewClient(&redis.Options{Addr: s.master.Addr, ReadTimeout: 100 * time.Millisecond})
		defer short.Close()
		sc, err := pipeline.NewClient(short, pipeline.ClientConfig{})
		require.NoError(t, err)
		_, err = sc.Enqueue(ctx, q, pipeline.Task{Type: "t"}, pipeline.WithReplicas(2, 300*time.Millisecond))
		var rerr *pipeline.ReplicationError
		require.ErrorAs(t, err, &rerr)
		require.NoError(t, rerr.Err)
		require.Equal(t, 1, rerr.Confirmed)
	})
	t.Run("Invalid", func(t *testing.T) {
		for _, opt := range []pipeline.Option{pipeline.WithReplicas(-1, 0), pipeline.WithReplicas(1, -time.Second),
			pipeline.WithReplicas(pipeline.MaxReplicas+1, 0)} {
			_, err := c.Enqueue(ctx, q, pipeline.Task{Type: "t"}, opt)
			require.ErrorIs(t, err, pipeline.ErrInvalid)
		}
		_, err := pipeline.NewClient(s.masterRdb, pipeline.ClientConfig{Replicas: -1})
		require.ErrorIs(t, err, pipeline.ErrInvalid)
	})
}

// A publish that finds its job there already (sent again with its id) waits until the
// replicas have that job, though this call wrote nothing of it: WAIT alone would confirm only
// its own connection's writes, which the replica may have long had.
func TestWithReplicasDuplicateWaitsForTheFirstWrite(t *testing.T) {
	s := startReplicated(t)
	c, err := pipeline.NewClient(s.masterRdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	ctx := t.Context()
	q := redistest.UniqueName(t)
	// Warm the pool: every connection has written and been confirmed.
	for range 5 {
		_, err := c.Enqueue(ctx, q, pipeline.Task{Type: "t"}, pipeline.WithReplicas(1, 5*time.Second))
		require.NoError(t, err)
	}
	pid := s.replica.PID()
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	resumed := make(chan struct{})
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT); <-resumed })

	// Another producer's publish, not waited for: none of c's connections wrote it.
	other, err := pipeline.NewClient(s.master.Client(t), pipeline.ClientConfig{})
	require.NoError(t, err)
	first, err := other.Enqueue(ctx, q, pipeline.Task{Type: "t", Payload: []byte(`"x"`)})
	require.NoError(t, err)
	var continued atomic.Bool // set before the replica may run again
	go func() {
		defer close(resumed)
		time.Sleep(300 * time.Millisecond)
		continued.Store(true)
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}()
	again, err := c.Enqueue(ctx, q, pipeline.Task{Type: "t", Payload: []byte(`"x"`)},
		pipeline.WithID(first.ID), pipeline.WithReplicas(1, 10*time.Second))
	require.NoError(t, err)
	require.True(t, again.Duplicate)
	// A stopped replica cannot be asked what it has: that the call returned only once it ran
	// again is the proof that its confirmation was waited for.
	require.True(t, continued.Load(), "returned while the replica was stopped")
	require.True(t, s.onReplica(t, q, first.ID))
}

// On a cluster WAIT goes to the master that took the job (found by its queue's slot), in the
// same round trip; the test cluster has no replicas, so none confirms.
func TestWithReplicasCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	cc := cl.Client(t)
	c, err := pipeline.NewClient(cc, pipeline.ClientConfig{})
	require.NoError(t, err)
	ctx := t.Context()
	q := redistest.UniqueName(t)
	// Register the queue and load both enqueue scripts: a first EVALSHA answered NOSCRIPT is
	// sent again, with its own WAIT.
	_, err = c.Enqueue(ctx, q, pipeline.Task{Type: "t"})
	require.NoError(t, err)
	_, err = c.EnqueueBatch(ctx, q, []pipeline.Task{{Type: "t"}, {Type: "t"}})
	require.NoError(t, err)

	waits := func() map[string]int {
		var mu sync.Mutex
		out := map[string]int{}
		require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			info, err := n.Info(ctx, "commandstats").Result()
			if err != nil {
				return err
			}
			calls := 0
			if _, rest, ok := strings.Cut(info, "cmdstat_wait:calls="); ok {
				calls, _ = strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			}
			mu.Lock()
			defer mu.Unlock()
			out[n.Options().Addr] = calls
			return nil
		}))
		return out
	}
	before := waits()
	j, err := c.Enqueue(ctx, q, pipeline.Task{Type: "t"}, pipeline.WithReplicas(1, 10*time.Millisecond))
	var rerr *pipeline.ReplicationError
	require.ErrorAs(t, err, &rerr)
	require.Equal(t, 0, rerr.Confirmed)
	_, err = c.EnqueueBatch(ctx, q, []pipeline.Task{{Type: "t"}, {Type: "t"}}, pipeline.WithReplicas(1, 10*time.Millisecond))
	require.ErrorIs(t, err, pipeline.ErrNotReplicated)
	after := waits()

	owner, err := cc.MasterForKey(ctx, keys.New(keys.DefaultPrefix, q).Stream())
	require.NoError(t, err)
	require.Contains(t, after, owner.Options().Addr, "the queue's master is among those counted")
	for addr, n := range after {
		want := 0
		if addr == owner.Options().Addr {
			want = 2
		}
		require.Equal(t, want, n-before[addr], "WAITs on %s (the queue's master is %s)", addr, owner.Options().Addr)
	}
	got, err := c.Get(ctx, q, j.ID)
	require.NoError(t, err)
	require.Equal(t, status.Queued, got.Status)

	// A batch over 3 partitions goes to several masters: one WAIT on each that took jobs.
	// A name whose partitions are not all on one master (1 in 9 random names are).
	var pq string
	for i := 0; pq == ""; i++ {
		name := redistest.UniqueName(t) + "-p" + strconv.Itoa(i)
		masters := map[string]bool{}
		for k := range 3 {
			node, err := cc.MasterForKey(ctx, keys.New(keys.DefaultPrefix, keys.PartitionName(name, k, 3)).Stream())
			require.NoError(t, err)
			masters[node.Options().Addr] = true
		}
		if len(masters) > 1 {
			pq = name
		}
	}
	insp, err := pipeline.NewInspector(cc, pipeline.InspectorConfig{})
	require.NoError(t, err)
	_, err = insp.CreateQueue(ctx, pq, pipeline.QueueOptions{Partitions: 3})
	require.NoError(t, err)
	tasks := make([]pipeline.Task, 30)
	for i := range tasks {
		tasks[i] = pipeline.Task{Type: "t"}
	}
	_, err = c.EnqueueBatch(ctx, pq, tasks) // loads the script on every master
	require.NoError(t, err)
	before = waits()
	jobs, err := c.EnqueueBatch(ctx, pq, tasks, pipeline.WithReplicas(1, 10*time.Millisecond))
	require.ErrorIs(t, err, pipeline.ErrNotReplicated)
	after = waits()
	want := map[string]int{}
	for _, j := range jobs {
		part := keys.New(keys.DefaultPrefix, keys.PartitionName(pq, keys.PartitionOf(j.ID, 3), 3))
		node, err := cc.MasterForKey(ctx, part.Stream())
		require.NoError(t, err)
		want[node.Options().Addr] = 1
	}
	require.Greater(t, len(want), 1, "the partitions sit on several masters")
	for addr, n := range after {
		require.Equal(t, want[addr], n-before[addr], "WAITs on %s", addr)
	}
}

// WorkerConfig.Replicas: outcomes are written and waited for; those the replicas do not
// confirm are counted, and the jobs complete all the same.
func TestWorkerReplicas(t *testing.T) {
	s := startReplicated(t)
	b := setup(t, setupOpts{rdb: s.masterRdb})
	c, q, ctx := b.client, b.queue, t.Context()
	w, stop := b.startWorker(t, pipeline.WorkerConfig{Queues: []string{q}, Replicas: 1, ReplicaTimeout: 50 * time.Millisecond},
		map[string]pipeline.HandlerFunc{"echo": echo})
	defer func() { require.NoError(t, stop()) }()

	j, err := c.Enqueue(ctx, q, pipeline.Task{Type: "echo", Payload: []byte(`1`)})
	require.NoError(t, err)
	b.waitStatus(t, j.ID, status.Completed)
	require.Zero(t, w.UnreplicatedWrites())

	require.NoError(t, s.replica.Kill())
	j, err = c.Enqueue(ctx, q, pipeline.Task{Type: "echo", Payload: []byte(`2`)})
	require.NoError(t, err)
	b.waitStatus(t, j.ID, status.Completed)
	require.Eventually(t, func() bool { return w.UnreplicatedWrites() > 0 }, 10*time.Second, 10*time.Millisecond)

	_, err = pipeline.NewWorker(s.masterRdb, pipeline.WorkerConfig{Queues: []string{q}, Replicas: -1})
	require.ErrorIs(t, err, pipeline.ErrInvalid)
}

// BenchmarkEnqueueReplicas measures what WithReplicas(1) costs a publish against a master with
// one replica, both on loopback: one producer publishing one job at a time, 16 producers at
// once, and batches of 100. Run
//
//	go test -run=NONE -bench=EnqueueReplicas -benchtime=20000x ./pipeline/
func BenchmarkEnqueueReplicas(b *testing.B) {
	s := startReplicated(b)
	c, err := pipeline.NewClient(s.masterRdb, pipeline.ClientConfig{})
	require.NoError(b, err)
	q := redistest.UniqueName(b)
	for _, v := range []struct {
		name string
		opts []pipeline.Option
	}{{"NoWait", nil}, {"WithReplicas1", []pipeline.Option{pipeline.WithReplicas(1, time.Second)}}} {
		b.Run(v.name+"/One", func(b *testing.B) {
			for range b.N {
				if _, err := c.Enqueue(b.Context(), q, pipeline.Task{Type: "noop", Payload: payload100}, v.opts...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
		b.Run(v.name+"/Parallel16", func(b *testing.B) {
			b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Enqueue(context.Background(), q, pipeline.Task{Type: "noop", Payload: payload100}, v.opts...); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
		b.Run(v.name+"/Batch100", func(b *testing.B) {
			tasks := make([]pipeline.Task, 100)
			for i := range tasks {
				tasks[i] = pipeline.Task{Type: "noop", Payload: payload100}
			}
			for done := 0; done < b.N; done += len(tasks) {
				if _, err := c.EnqueueBatch(b.Context(), q, tasks[:min(len(tasks), b.N-done)], v.opts...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}
