package pipeline_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// rotateKeys makes the keys of a rotation test: k1 alone (what the values are sealed under),
// k2 then k1 (the rotation's keyring), and k2 alone (what opens everything after it).
func rotateKeys(t *testing.T) (k1, k21, k2 *keyring.Keyring) {
	t.Helper()
	s1, s2 := make([]byte, keyring.KeySize), make([]byte, keyring.KeySize)
	_, _ = rand.Read(s1)
	_, _ = rand.Read(s2)
	var err error
	k1, err = keyring.New([]string{"k1"}, [][]byte{s1})
	require.NoError(t, err)
	k21, err = keyring.New([]string{"k2", "k1"}, [][]byte{s2, s1})
	require.NoError(t, err)
	k2, err = keyring.New([]string{"k2"}, [][]byte{s2})
	require.NoError(t, err)
	return k1, k21, k2
}

// plainOf is what a test expects each job's values to open to, by job id.
type plainOf struct {
	mu       sync.Mutex
	payloads map[string]string
	results  map[string]string
}

func (p *plainOf) set(m map[string]string, id, v string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m[id] = v
}

// checkSealedUnder scans every key of the server (a test's own: SCAN of the whole keyspace,
// on every master of a cluster) and checks that each stored payload and result, in job hashes,
// stream entries and workflow hashes, is sealed under key k's only key and opens with it to
// what p expects. It returns the number of values checked.
func checkSealedUnder(t *testing.T, rdb redis.UniversalClient, k *keyring.Keyring, p *plainOf) int {
	t.Helper()
	ctx := t.Context()
	var mu sync.Mutex
	n := 0
	check := func(kind keyring.Kind, id, where string, v []byte, want map[string]string) {
		mu.Lock()
		defer mu.Unlock()
		if len(v) == 0 {
			return
		}
		kid, ok := keyring.KeyID(v)
		require.True(t, ok, "%s: %s of job %s is not sealed", where, kind, id)
		require.Equal(t, k.Newest(), kid, "%s: %s of job %s", where, kind, id)
		plain, err := k.Open(kind, id, v)
		require.NoError(t, err, "%s", where)
		p.mu.Lock()
		w, known := want[id]
		p.mu.Unlock()
		require.True(t, known, "%s: job %s's %s is not one the test made", where, id, kind)
		require.Equal(t, w, string(plain), "%s", where)
		n++
	}
	scan := func(ctx context.Context, c redis.Cmdable) error {
		it := c.Scan(ctx, 0, "conveyor:*", 100).Iterator()
		for it.Next(ctx) {
			key := it.Val()
			switch typ := c.Type(ctx, key).Val(); {
			case typ == "hash" && strings.Contains(key, "}:job:"):
				id := key[strings.Index(key, "}:job:")+len("}:job:"):]
				h := c.HGetAll(ctx, key).Val()
				check(keyring.Payload, id, key, join(h, keys.FieldPayload), p.payloads)
				check(keyring.Result, id, key, join(h, keys.FieldResult), p.results)
			case typ == "hash" && strings.Contains(key, "}:wf:"):
				h := c.HGetAll(ctx, key).Val()
				var doc []struct {
					Name string `json:"n"`
					ID   string `json:"id"`
				}
				require.NoError(t, json.Unmarshal([]byte(h[keys.FieldWorkflowDoc]), &doc))
				for _, d := range doc {
					if v, ok := h[keys.WorkflowTaskResult+d.Name]; ok {
						check(keyring.Result, d.ID, key, []byte(v), p.results)
					}
				}
			case typ == "stream":
				for _, m := range c.XRange(ctx, key, "-", "+").Val() {
					id, _ := m.Values[keys.EntryUUID].(string)
					v, _ := m.Values[keys.EntryPayload].(string)
					check(keyring.Payload, id, key+" "+m.ID, []byte(v), p.payloads)
				}
			}
		}
		return it.Err()
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) }))
	} else {
		require.NoError(t, scan(ctx, rdb))
	}
	return n
}

// changes is Redis's count of writes since its last save, summed over a cluster's masters.
func changes(t *testing.T, rdb redis.UniversalClient) int64 {
	t.Helper()
	var mu sync.Mutex
	var n int64
	read := func(ctx context.Context, c redis.Cmdable) error {
		info, err := c.Info(ctx, "persistence").Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "rdb_changes_since_last_save:"); ok {
				var x int64
				_, err := fmt.Sscan(v, &x)
				mu.Lock()
				n += x
				mu.Unlock()
				return err
			}
		}
		return errors.New("no rdb_changes_since_last_save in INFO")
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		require.NoError(t, cc.ForEachMaster(t.Context(), func(ctx context.Context, c *redis.Client) error { return read(ctx, c) }))
	} else {
		require.NoError(t, read(t.Context(), rdb))
	}
	return n
}

func mustStats(t *testing.T, insp *pipeline.Inspector, queue string) *pipeline.QueueStats {
	t.Helper()
	st, err := insp.Stats(t.Context(), queue)
	require.NoError(t, err)
	return st
}

// join is a hash's field whole, its pieces joined.
func join(h map[string]string, name string) []byte {
	v, ok := h[name]
	if !ok {
		return nil
	}
	for k := 1; len(h[name]) == keys.RecordPiece; k++ {
		p, ok := h[fmt.Sprintf("%s+%d", name, k)]
		if !ok {
			break
		}
		v += p
	}
	return []byte(v)
}

// TestRotateKeys: values sealed under k1 in every place a job keeps them (scheduled, waiting
// for a limit's slot, queued at two priority levels and in a fair group's list, waiting in a
// workflow, dead, completed with long results in pieces, canceled, workflows' and batches'
// task results) and values stored plain are all under k2
// after RotateKeys with the keyring "k2, k1", and open with k2 alone to what was published. A
// job a worker holds is left alone and counted running; the run after it ended re-seals it;
// the run after that finds everything current and writes nothing.
func TestRotateKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Start(t).Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			rdb := tc.rdb(t)
			k1, k21, k2 := rotateKeys(t)
			b := setup(t, setupOpts{rdb: rdb})
			idle := b.queue + "-idle" // no worker reads it
			_, err := b.insp.CreateQueue(ctx, idle, pipeline.QueueOptions{Partitions: 3})
			require.NoError(t, err)
			p := &plainOf{payloads: map[string]string{}, results: map[string]string{}}
			n := 0
			publish := func(queue, typ, plain string, seal bool, opts ...pipeline.Option) string {
				n++
				id := fmt.Sprintf("job-%d", n)
				payload := []byte(plain)
				if seal {
					payload = k1.Seal(keyring.Payload, id, payload)
				}
				_, err := b.client.Enqueue(ctx, queue, pipeline.Task{Type: typ, Payload: payload}, append(opts, pipeline.WithID(id))...)
				require.NoError(t, err)
				p.set(p.payloads, id, plain)
				return id
			}
			long := strings.Repeat("a long payload, kept in pieces. ", 12)

			// One "block" job at a time: the second waits in the limit's list, its payload in its hash.
			_, err = b.insp.CreateQueue(ctx, b.queue, pipeline.QueueOptions{})
			require.NoError(t, err)
			require.NoError(t, b.insp.SetLimit(ctx, b.queue, pipeline.Limit{Type: "block", Concurrency: 1}))
			started, release := make(chan string, 1), make(chan struct{})
			open := func(j *pipeline.Job) string {
				plain, err := k21.Open(keyring.Payload, j.ID, j.Payload)
				require.NoError(t, err)
				return string(plain)
			}
			_, stop := b.startWorker(t, pipeline.WorkerConfig{Keys: k21}, map[string]pipeline.HandlerFunc{
				"done": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
					res := "result of " + open(j)
					p.set(p.results, j.ID, res)
					return k1.Seal(keyring.Result, j.ID, []byte(res)), nil
				},
				"fail": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
					return nil, pipeline.SkipRetry(errors.New("fails for good"))
				},
				"block": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
					started <- j.ID
					<-release
					return nil, nil
				},
			})
			var finished []string
			finished = append(finished, publish(b.queue, "done", "short", true), publish(b.queue, "done", long, true),
				publish(b.queue, "done", strings.Repeat("x", keys.RecordPiece), true), publish(b.queue, "done", "plain one", false))
			dead := publish(b.queue, "fail", "dies", true, pipeline.WithMaxRetries(0))
			wf, err := b.client.Workflow(ctx, b.queue, pipeline.Workflow{Tasks: []pipeline.WorkflowTask{
				{Name: "a", Task: pipeline.Task{Type: "done", Payload: []byte("wf a")}},
				{Name: "b", Task: pipeline.Task{Type: "done", Payload: []byte("wf b")}, After: []string{"a"}},
			}})
			require.NoError(t, err)
			bt, err := b.client.Batch(ctx, b.queue, pipeline.Batch{Jobs: []pipeline.Task{
				{Type: "done", Payload: []byte("batch 1")}, {Type: "done", Payload: []byte("batch 2")},
			}, Callback: &pipeline.Task{Type: "done", Payload: []byte("callback")}})
			require.NoError(t, err)
			for _, st := range [][]pipeline.WorkflowTaskState{wf.Tasks, bt.Tasks} {
				for _, task := range st {
					p.set(p.payloads, task.JobID, map[string]string{"a": "wf a", "b": "wf b", "1": "batch 1", "2": "batch 2"}[task.Name]+
						map[bool]string{true: "callback"}[task.Finally])
					finished = append(finished, task.JobID)
				}
			}
			for _, id := range finished {
				b.waitStatus(t, id, status.Completed)
			}
			b.waitStatus(t, dead, status.Failed)
			running := publish(b.queue, "block", "held by a worker", true)
			require.Equal(t, running, <-started)
			limited := publish(b.queue, "block", "waits for the limit", true)
			b.waitStatus(t, limited, status.Scheduled)

			// Where no worker reads: queued at two levels, scheduled, canceled, a waiting task.
			publish(idle, "done", "queued", true)
			publish(idle, "done", "queued too, plain", false)
			publish(idle, "done", "queued at level 3", true, pipeline.WithPriority(3))
			publish(idle, "done", "scheduled", true, pipeline.WithDelay(time.Hour))
			canceled := publish(idle, "done", "canceled", true, pipeline.WithDelay(time.Hour))
			require.NoError(t, b.insp.Cancel(ctx, idle, canceled))
			wf2, err := b.client.Workflow(ctx, idle, pipeline.Workflow{Tasks: []pipeline.WorkflowTask{
				{Name: "a", Task: pipeline.Task{Type: "done", Payload: []byte("first")}},
				{Name: "b", Task: pipeline.Task{Type: "done", Payload: []byte("waits")}, After: []string{"a"}},
			}})
			require.NoError(t, err)
			for _, task := range wf2.Tasks {
				p.set(p.payloads, task.JobID, map[string]string{"a": "first", "b": "waits"}[task.Name])
			}

			// A fair group's window of one: the second job waits in the group's list.
			grouped := b.queue + "-grouped"
			_, err = b.insp.CreateQueue(ctx, grouped, pipeline.QueueOptions{})
			require.NoError(t, err)
			require.NoError(t, b.insp.SetGroups(ctx, grouped, pipeline.GroupChange{Window: 1}))
			publish(grouped, "done", "in the window", true, pipeline.WithGroup("g"))
			publish(grouped, "done", "waits for the window", true, pipeline.WithGroup("g"))
			require.EqualValues(t, 1, mustStats(t, b.insp, grouped).GroupWaiting)

			_, err = b.insp.RotateKeys(ctx, "", nil, pipeline.RotateOptions{})
			require.ErrorIs(t, err, pipeline.ErrInvalid)
			_, err = b.insp.RotateKeys(ctx, "", k21, pipeline.RotateOptions{Batch: pipeline.MaxRotateBatch + 1})
			require.ErrorIs(t, err, pipeline.ErrInvalid)
			_, err = b.insp.RotateKeys(ctx, "no-such-queue", k21, pipeline.RotateOptions{})
			require.ErrorIs(t, err, pipeline.ErrQueueNotFound)
			_, err = b.insp.RotateKeys(ctx, "bad queue", k21, pipeline.RotateOptions{})
			require.ErrorIs(t, err, pipeline.ErrInvalid)
			rep, err := b.insp.RotateKeys(ctx, "", k21, pipeline.RotateOptions{Batch: 2})
			require.NoError(t, err)
			t.Logf("first run: %+v", rep.Total)
			require.Equal(t, "k2", rep.Key)
			require.Equal(t, 1, rep.Places[pipeline.RotateQueued].Running, "the job a worker holds")
			require.Zero(t, rep.Total.Failed)
			require.Zero(t, rep.Total.MovedOn)
			// Queued: two payloads under k1 and the grouped two, the plain one and the first
			// task of the idle workflow (published plain: a task's id is the workflow's to choose).
			require.Equal(t, 4, rep.Places[pipeline.RotateQueued].Resealed)
			require.Equal(t, 2, rep.Places[pipeline.RotateQueued].Sealed)
			require.Equal(t, 2, rep.Places[pipeline.RotateScheduled].Resealed, "the delayed job and the one the limit holds")
			require.Equal(t, 1, rep.Places[pipeline.RotateCanceled].Resealed)
			require.Equal(t, 1, rep.Places[pipeline.RotateWaiting].Sealed)
			require.Equal(t, 1, rep.Places[pipeline.RotateDead].Resealed)
			// The results of the tasks others wait for: the workflow's a, the batch's 1 and 2.
			require.Equal(t, 3, rep.Places[pipeline.RotateWorkflowResults].Resealed)
			// Completed: 3 payloads under k1 and 9 results; 1 plain payload and 5 tasks'.
			require.Equal(t, 3+9, rep.Places[pipeline.RotateCompleted].Resealed)
			require.Equal(t, 1+5, rep.Places[pipeline.RotateCompleted].Sealed)

			close(release)
			b.waitStatus(t, running, status.Completed)
			require.Equal(t, limited, <-started)
			b.waitStatus(t, limited, status.Completed)
			rep, err = b.insp.RotateKeys(ctx, "", k21, pipeline.RotateOptions{})
			require.NoError(t, err)
			require.Equal(t, 1, rep.Total.Changed(), "the job that ran: %+v", rep.Total)
			require.Zero(t, rep.Total.Left())
			checked := checkSealedUnder(t, rdb, k2, p)
			t.Logf("%d values checked", checked)

			// Everything current: a run writes nothing (Redis's count of changes, with no worker).
			require.NoError(t, stop())
			before := changes(t, rdb)
			rep, err = b.insp.RotateKeys(ctx, "", k21, pipeline.RotateOptions{})
			require.NoError(t, err)
			require.Zero(t, rep.Total.Changed())
			require.Zero(t, rep.Total.Left())
			require.Equal(t, checked, rep.Total.Current)
			require.Equal(t, before, changes(t, rdb), "a run with everything current writes nothing")
		})
	}
}

// TestRotateKeysUnderLoad: a rotation while a producer publishes and two workers consume (some
// jobs delayed, some retried once, so that values move between the stream, the scheduled set and
// the records while they are re-sealed) loses nothing: every job completes exactly once with
// its payload, and a run afterwards leaves every value under the newest key.
func TestRotateKeysUnderLoad(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Start(t).Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			rdb := tc.rdb(t)
			k1, k21, k2 := rotateKeys(t)
			b := setup(t, setupOpts{rdb: rdb})
			_, err := b.insp.CreateQueue(ctx, b.queue, pipeline.QueueOptions{Partitions: 2})
			require.NoError(t, err)
			const n = 600
			p := &plainOf{payloads: map[string]string{}, results: map[string]string{}}
			plain := func(i int) string { return fmt.Sprintf("payload %d %s", i, strings.Repeat("z", i%150)) }
			for i := range n {
				p.payloads[fmt.Sprintf("load-%d", i)] = plain(i)
			}

			rotating := make(chan struct{})
			var mu sync.Mutex
			runs := map[string]int{}
			done := make(chan string, n)
			handler := func(_ context.Context, j *pipeline.Job) ([]byte, error) {
				<-rotating
				got, err := k21.Open(keyring.Payload, j.ID, j.Payload)
				if err != nil || string(got) != p.payloads[j.ID] {
					return nil, pipeline.SkipRetry(fmt.Errorf("payload of %s: %q, %v", j.ID, got, err))
				}
				var i int
				_, _ = fmt.Sscanf(j.ID, "load-%d", &i)
				if i%5 == 0 && j.Attempt == 1 {
					return nil, errors.New("once more")
				}
				mu.Lock()
				runs[j.ID]++
				mu.Unlock()
				done <- j.ID
				return nil, nil
			}
			cfg := pipeline.WorkerConfig{Keys: k21, Concurrency: 4, Backoff: pipeline.Backoff{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}}
			_, stop1 := b.startWorker(t, cfg, map[string]pipeline.HandlerFunc{"load": handler})
			_, stop2 := b.startWorker(t, cfg, map[string]pipeline.HandlerFunc{"load": handler})

			publish := func(from, to int) error {
				for i := from; i < to; i++ {
					id := fmt.Sprintf("load-%d", i)
					opts := []pipeline.Option{pipeline.WithID(id)}
					if i%3 == 1 {
						opts = append(opts, pipeline.WithDelay(time.Duration(i%7)*10*time.Millisecond))
					}
					if i%4 == 2 {
						opts = append(opts, pipeline.WithPriority(2))
					}
					if _, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "load",
						Payload: k1.Seal(keyring.Payload, id, []byte(plain(i)))}, opts...); err != nil {
						return err
					}
				}
				return nil
			}
			require.NoError(t, publish(0, n/3))
			produced := make(chan error, 1)
			rotated := make(chan error, 1)
			go func() {
				close(rotating) // the handlers start with the rotation
				rep, err := b.insp.RotateKeys(ctx, "", k21, pipeline.RotateOptions{Batch: 10})
				t.Logf("the run under load: %+v", rep.Total)
				rotated <- err
			}()
			go func() { produced <- publish(n/3, n) }()
			require.NoError(t, <-produced)
			require.NoError(t, <-rotated)

			seen := map[string]bool{}
			timeout := time.After(30 * time.Second)
			for len(seen) < n {
				select {
				case id := <-done:
					seen[id] = true
				case <-timeout:
					for i := range n {
						id := fmt.Sprintf("load-%d", i)
						if !seen[id] {
							j, err := b.client.Get(ctx, b.queue, id)
							if err == nil {
								t.Logf("%s: %s attempt %d entry-less? %q", id, j.Status, j.Attempt, j.LastError)
							} else {
								t.Logf("%s: %v", id, err)
							}
						}
					}
					t.Fatalf("%d of %d jobs completed", len(seen), n)
				}
			}
			require.NoError(t, stop1())
			require.NoError(t, stop2())
			mu.Lock()
			for id, c := range runs {
				require.Equal(t, 1, c, "job %s completed %d times", id, c)
			}
			mu.Unlock()
			for i := range n {
				j := waitJob(t, b.client, b.queue, fmt.Sprintf("load-%d", i), status.Completed)
				got, err := k21.Open(keyring.Payload, j.ID, j.Payload)
				require.NoError(t, err)
				require.Equal(t, plain(i), string(got))
			}
			rep, err := b.insp.RotateKeys(ctx, "", k21, pipeline.RotateOptions{})
			require.NoError(t, err)
			require.Zero(t, rep.Total.Left(), "%+v", rep.Total)
			require.Equal(t, n, checkSealedUnder(t, rdb, k2, p))
		})
	}
}

// TestRotateKeysResumes: a run interrupted after two of its writes returns the context's error
// with what it did counted, and the next run re-seals the rest: nothing is lost or re-sealed
// twice.
func TestRotateKeysResumes(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	k1, k21, k2 := rotateKeys(t)
	b := setup(t, setupOpts{rdb: rdb})
	p := &plainOf{payloads: map[string]string{}, results: map[string]string{}}
	const n = 30
	for i := range n {
		id := fmt.Sprintf("r-%d", i)
		plain := fmt.Sprintf("payload %d", i)
		_, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "t", Payload: k1.Seal(keyring.Payload, id, []byte(plain))},
			pipeline.WithID(id))
		require.NoError(t, err)
		p.payloads[id] = plain
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	writes := 0
	redistest.CountCommands(rdb).Observe(func(cmd redis.Cmder) {
		// A reseal.lua call: EVALSHA sha numkeys keys... group mode ...
		args := cmd.Args()
		if len(args) < 4 || cmd.Name() != "evalsha" {
			return
		}
		nk, _ := args[2].(int)
		if 3+nk+1 < len(args) && args[3+nk] == keys.Group && args[4+nk] == "E" {
			if writes++; writes == 2 {
				cancel()
			}
		}
	})
	rep, err := b.insp.RotateKeys(ctx, b.queue, k21, pipeline.RotateOptions{Batch: 5})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 10, rep.Total.Resealed, "two writes of five")
	rep, err = b.insp.RotateKeys(t.Context(), b.queue, k21, pipeline.RotateOptions{Batch: 5})
	require.NoError(t, err)
	require.Equal(t, n-10, rep.Total.Resealed)
	require.Equal(t, 10, rep.Total.Current)
	require.Equal(t, n, checkSealedUnder(t, rdb, k2, p))
}

// TestRotateKeysCursor: runs bounded by RotateOptions.Max, each going on from the last one's
// cursor, go through every value exactly once: their counts add up to those of one run
// through everything (each value re-sealed once, none counted current, none twice), over two
// queues of three partitions and every place a queue with no worker keeps values in (the
// scheduled set, two priority levels of the stream, a fair group's list, a waiting workflow
// task, the canceled index). Once all is current, bounded runs count each value current
// once: the entries a run adds at a stream's back are not read again.
func TestRotateKeysCursor(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rdb := redistest.Start(t).Client(t)
	k1, k21, k2 := rotateKeys(t)
	b := setup(t, setupOpts{rdb: rdb})
	p := &plainOf{payloads: map[string]string{}, results: map[string]string{}}
	n := 0
	queues := []string{b.queue + "-a", b.queue + "-b"}
	for _, queue := range queues {
		_, err := b.insp.CreateQueue(ctx, queue, pipeline.QueueOptions{Partitions: 3})
		require.NoError(t, err)
		require.NoError(t, b.insp.SetGroups(ctx, queue, pipeline.GroupChange{Window: 1}))
		publish := func(plain string, opts ...pipeline.Option) string {
			n++
			id := fmt.Sprintf("job-%d", n)
			_, err := b.client.Enqueue(ctx, queue, pipeline.Task{Type: "t", Payload: k1.Seal(keyring.Payload, id, []byte(plain))},
				append(opts, pipeline.WithID(id))...)
			require.NoError(t, err)
			p.set(p.payloads, id, plain)
			return id
		}
		for i := range 4 {
			publish(fmt.Sprintf("queued %d", i))
			publish(fmt.Sprintf("queued at 3, %d", i), pipeline.WithPriority(3))
			publish(fmt.Sprintf("scheduled %d", i), pipeline.WithDelay(time.Hour))
			publish(fmt.Sprintf("grouped %d", i), pipeline.WithGroup("g"))
		}
		require.NoError(t, b.insp.Cancel(ctx, queue, publish("canceled", pipeline.WithDelay(time.Hour))))
		wf, err := b.client.Workflow(ctx, queue, pipeline.Workflow{Tasks: []pipeline.WorkflowTask{
			{Name: "a", Task: pipeline.Task{Type: "t", Payload: []byte("first")}},
			{Name: "b", Task: pipeline.Task{Type: "t", Payload: []byte("waits")}, After: []string{"a"}},
		}})
		require.NoError(t, err)
		for _, task := range wf.Tasks {
			p.set(p.payloads, task.JobID, map[string]string{"a": "first", "b": "waits"}[task.Name])
		}
	}
	values := len(p.payloads)

	// runs goes through everything in runs of at most max values, and sums their counts.
	runs := func(batch, max int) (sum pipeline.RotateCounts, calls int) {
		cursor := ""
		for {
			calls++
			require.Less(t, calls, 10*values, "the runs do not end")
			rep, err := b.insp.RotateKeys(ctx, "", k21, pipeline.RotateOptions{Batch: batch, Max: max, Cursor: cursor})
			require.NoError(t, err)
			sum.Resealed += rep.Total.Resealed
			sum.Sealed += rep.Total.Sealed
			sum.Current += rep.Total.Current
			sum.MovedOn += rep.Total.MovedOn
			sum.Running += rep.Total.Running
			sum.Failed += rep.Total.Failed
			if cursor = rep.Cursor; cursor == "" {
				return sum, calls
			}
		}
	}
	sum, calls := runs(1, 1)
	t.Logf("%d runs: %+v", calls, sum)
	require.Greater(t, calls, 5, "a bound of one value stops each run at its first batch")
	require.Equal(t, pipeline.RotateCounts{Resealed: values - 4, Sealed: 4}, sum, "the workflows' tasks were published plain")
	require.Equal(t, values, checkSealedUnder(t, rdb, k2, p))

	sum, _ = runs(2, 3)
	require.Equal(t, pipeline.RotateCounts{Current: values}, sum, "everything is current, each value counted once")
	rep, err := b.insp.RotateKeys(ctx, "", k21, pipeline.RotateOptions{})
	require.NoError(t, err)
	require.Empty(t, rep.Cursor, "no bound: one run through everything")
	require.Equal(t, values, rep.Total.Current)

	_, err = b.insp.RotateKeys(ctx, "", k21, pipeline.RotateOptions{Cursor: "not a cursor"})
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	rep, err = b.insp.RotateKeys(ctx, queues[0], k21, pipeline.RotateOptions{Max: 1})
	require.NoError(t, err)
	require.NotEmpty(t, rep.Cursor)
	_, err = b.insp.RotateKeys(ctx, queues[1], k21, pipeline.RotateOptions{Cursor: rep.Cursor})
	require.ErrorIs(t, err, pipeline.ErrInvalid, "a cursor of another queue's run")
	_, err = b.insp.RotateKeys(ctx, "", k21, pipeline.RotateOptions{Cursor: rep.Cursor})
	require.ErrorIs(t, err, pipeline.ErrInvalid, "a cursor of one queue's run, in a run over every queue")
	_, err = b.insp.RotateKeys(ctx, "", k21, pipeline.RotateOptions{Max: -1})
	require.ErrorIs(t, err, pipeline.ErrInvalid)
}
