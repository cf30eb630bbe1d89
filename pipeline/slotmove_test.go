package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"regexp"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

var slotmoveUnsafe = flag.Bool("slotmove.unsafe", false,
	"run TestSlotMigrationUnderLoad/Live and /LiveOneBatch: the queue's slot migrated while its producer and worker run (Live fails today: see docs/RELIABILITY.md)")

var slotmoveRedirects = flag.Int("slotmove.redirects", 3, "the cluster client's MaxRedirects in TestSlotMigrationUnderLoad (go-redis's default is 3)")

// slotLedger is the test's own record, apart from Redis: the publishes Redis acknowledged and
// every handler run, so that the check after the migration does not trust the queue's state.
type slotLedger struct {
	mu      sync.Mutex
	acked   map[string]string // id -> kind ("plain", "delayed", "flaky", "unique")
	pubErrs []string          // publishes that returned an error (their jobs may or may not exist)
	runs    map[string]int    // handler starts per id
	done    map[string]int    // successful handler returns per id
	doneN   atomic.Int64
	tokens  chan struct{} // bounds the jobs in flight: taken by a publish, given back by a completion
}

func newSlotLedger(inFlight int) *slotLedger {
	l := &slotLedger{acked: map[string]string{}, runs: map[string]int{}, done: map[string]int{},
		tokens: make(chan struct{}, inFlight)}
	for range inFlight {
		l.tokens <- struct{}{}
	}
	return l
}

func (l *slotLedger) handler(_ context.Context, j *pipeline.Job) ([]byte, error) {
	l.mu.Lock()
	l.runs[j.ID]++
	if j.Type == "flaky" && j.Attempt == 1 {
		l.mu.Unlock()
		return nil, errors.New("first attempt fails")
	}
	l.done[j.ID]++
	first := l.done[j.ID] == 1
	l.mu.Unlock()
	if first {
		l.doneN.Add(1)
		select {
		case l.tokens <- struct{}{}:
		default:
		}
	}
	return nil, nil
}

// produce publishes until ctx ends: plain jobs, delayed ones (due within 200 ms), jobs whose
// first attempt fails, jobs with a unique key, and batches of three; at most the ledger's in-flight bound unfinished.
func (l *slotLedger) produce(ctx context.Context, c *pipeline.Client, queue string) {
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-l.tokens:
		}
		kind, opts := "plain", []pipeline.Option{pipeline.WithRetention(time.Hour)}
		switch i % 10 {
		case 5:
			kind = "unique" // its unique key, freed by finish.lua, is built inside Lua
			opts = append(opts, pipeline.WithUnique(fmt.Sprint("u", i), time.Hour))
		case 6, 7:
			kind = "delayed"
			opts = append(opts, pipeline.WithDelay(time.Duration(i%5)*50*time.Millisecond))
		case 8:
			kind = "flaky"
			opts = append(opts, pipeline.WithMaxRetries(3))
		}
		var ids []string
		var err error
		if i%10 == 9 {
			// A batch takes three tokens' worth of room: take two more.
			for range 2 {
				select {
				case <-ctx.Done():
					return
				case <-l.tokens:
				}
			}
			var jobs []*pipeline.Job
			jobs, err = c.EnqueueBatch(ctx, queue, []pipeline.Task{{Type: "plain"}, {Type: "plain"}, {Type: "plain"}}, opts...)
			for _, j := range jobs {
				ids = append(ids, j.ID)
			}
		} else {
			var j *pipeline.Job
			j, err = c.Enqueue(ctx, queue, pipeline.Task{Type: kind, Payload: []byte(fmt.Sprint(i))}, opts...)
			if j != nil {
				ids = append(ids, j.ID)
			}
		}
		l.mu.Lock()
		if err != nil {
			if ctx.Err() == nil {
				l.pubErrs = append(l.pubErrs, err.Error())
			}
		} else {
			for _, id := range ids {
				l.acked[id] = kind
			}
		}
		l.mu.Unlock()
	}
}

// waitDone waits until n more jobs than now have completed, or fails after d.
func (l *slotLedger) waitDone(ctx context.Context, n int64, d time.Duration) error {
	want := l.doneN.Load() + n
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for l.doneN.Load() < want {
		select {
		case <-ctx.Done():
			return fmt.Errorf("no progress while the slot is half-moved: %d of %d completions", l.doneN.Load(), want)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// logCapture keeps the worker's warning and error lines (each a fault the worker saw).
type logCapture struct {
	mu    sync.Mutex
	lines []string
}

func (c *logCapture) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(`"level":"warn"`)) || bytes.Contains(p, []byte(`"level":"error"`)) {
		c.mu.Lock()
		c.lines = append(c.lines, string(bytes.TrimSpace(p)))
		c.mu.Unlock()
	}
	return len(p), nil
}

// TestSlotMigrationUnderLoad moves a busy queue's slot to another master and back, in small
// MIGRATE batches with work between them, so that the slot stays half-moved (keys on both
// nodes; clients see ASK, then MOVED) while jobs are published, promoted, retried and
// finished. The check uses the test's own ledger: every acknowledged job completed exactly
// once, none left queued or in progress, no pending entries, the counters consistent, and no
// key of the slot left behind on a master that does not own it.
//
// Safe is the operator procedure of docs/OPERATIONS.md ("Resharding"): pause the queue and
// stop publishing, let running jobs finish, migrate, resume. Live migrates in batches of 8
// keys with everything running: nothing is lost, but the queue stalls while the slot is
// half-moved (every script is refused with TRYAGAIN then: Redis Cluster refuses a multi-key
// command whose keys are split or missing, and the cluster guard, internal/script, refuses
// the rest), and it fails its check that no publish returns an error: a publish waits up to
// script.RetryFor (10 s), and this slot stays half-moved for ~50 s (docs/RELIABILITY.md).
// LiveOneBatch moves every key in one MIGRATE and sets the owner at once. Both run only with
// -slotmove.unsafe.
func TestSlotMigrationUnderLoad(t *testing.T) {
	t.Run("Safe", func(t *testing.T) { slotMigration(t, false, 8) })
	t.Run("Live", func(t *testing.T) {
		if !*slotmoveUnsafe {
			t.Skip("fails its no-publish-error check (a publish waits 10 s, the slot stays half-moved ~50 s); run with -slotmove.unsafe")
		}
		slotMigration(t, true, 8)
	})
	t.Run("LiveOneBatch", func(t *testing.T) {
		if !*slotmoveUnsafe {
			t.Skip("passes here, but only because the window between the one MIGRATE and SETSLOT NODE is a few ms; run with -slotmove.unsafe")
		}
		slotMigration(t, true, 1_000_000)
	})
}

// slotMigration runs the test: live or the safe procedure, batch keys a MIGRATE.
func slotMigration(t *testing.T, live bool, batch int) {
	c := redistest.StartCluster(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, MaxRedirects: *slotmoveRedirects})
	t.Cleanup(func() { _ = cc.Close() })
	ctx := t.Context()
	queue := redistest.UniqueName(t)
	q := keys.New(keys.DefaultPrefix, queue)
	client, err := pipeline.NewClient(cc, pipeline.ClientConfig{})
	require.NoError(t, err)
	insp, err := pipeline.NewInspector(cc, pipeline.InspectorConfig{})
	require.NoError(t, err)
	slot := int(cc.ClusterKeySlot(ctx, q.Stream()).Val())
	home, err := redistest.MasterOf(ctx, cc, q.Stream())
	require.NoError(t, err)
	away := c.Addrs[0]
	if away == home {
		away = c.Addrs[1]
	}

	led := newSlotLedger(60)
	logs := &logCapture{}
	w, err := pipeline.NewWorker(cc, pipeline.WorkerConfig{
		Queues: []string{queue}, Concurrency: 8,
		VisibilityTimeout: 3 * time.Second, RecoveryInterval: 200 * time.Millisecond,
		Backoff: pipeline.Backoff{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond},
		Logger:  zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), logs)).Level(zerolog.WarnLevel),
	})
	require.NoError(t, err)
	for _, typ := range []string{"plain", "delayed", "flaky", "unique"} {
		w.Handle(typ, led.handler)
	}
	wctx, stopWorker := context.WithCancel(context.Background())
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(wctx) }()
	defer func() {
		stopWorker()
		require.NoError(t, <-wdone)
	}()
	select {
	case <-w.Ready():
	case err := <-wdone:
		t.Fatalf("worker stopped at start: %v", err)
	}

	pctx, stopProducer := context.WithCancel(ctx)
	pdone := make(chan struct{})
	go func() { defer close(pdone); led.produce(pctx, client, queue) }()
	defer func() { stopProducer(); <-pdone }()
	require.NoError(t, led.waitDone(ctx, 100, 30*time.Second), "warm-up")

	// between keeps the slot half-moved while the queue works: live, until 15 more jobs
	// complete or 1 s passes (a half-moved slot stalls most of Conveyor's scripts: TRYAGAIN,
	// see docs/RELIABILITY.md, so the wait is bounded and the stalls counted); safe (nothing
	// runs), nothing to wait for.
	batches, stalls := 0, 0
	between := func(ctx context.Context, _ int) error {
		batches++
		if !live || batch > 1000 {
			return nil
		}
		if led.waitDone(ctx, 15, time.Second) != nil {
			stalls++
		}
		return nil
	}
	var moveErrs []string
	move := func(to string) {
		if !live {
			// The safe procedure: stop publishing, pause the queue, let it drain.
			stopProducer()
			<-pdone
			require.NoError(t, insp.Pause(ctx, queue))
			require.Eventually(t, func() bool {
				st, err := insp.Stats(ctx, queue)
				return err == nil && st.InProgress == 0 && st.Scheduled == 0
			}, 30*time.Second, 10*time.Millisecond)
		}
		if err := c.MigrateSlot(ctx, slot, to, redistest.SlotMove{Batch: batch, Between: between}); err != nil {
			moveErrs = append(moveErrs, err.Error())
		}
		if !live {
			require.NoError(t, insp.Resume(ctx, queue))
			pctx, stopProducer = context.WithCancel(ctx)
			pdone = make(chan struct{})
			go func() { defer close(pdone); led.produce(pctx, client, queue) }()
		}
		require.NoError(t, led.waitDone(ctx, 50, 30*time.Second), "work after the move to %s", to)
	}
	move(away)
	move(home)
	stopProducer()
	<-pdone

	// Every acknowledged job completes (or the wait ends, and the checks below say which not).
	led.mu.Lock()
	acked := make(map[string]string, len(led.acked))
	for id, k := range led.acked {
		acked[id] = k
	}
	pubErrs := append([]string(nil), led.pubErrs...)
	led.mu.Unlock()
	allDone := func() bool {
		led.mu.Lock()
		defer led.mu.Unlock()
		for id := range acked {
			if led.done[id] == 0 {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(20 * time.Second)
	for !allDone() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}

	var lost, dupDone, extraRuns, notCompleted, partial []string
	led.mu.Lock()
	for id, kind := range acked {
		switch {
		case led.done[id] == 0:
			lost = append(lost, id+" ("+kind+")")
		case led.done[id] > 1:
			dupDone = append(dupDone, fmt.Sprintf("%s x%d", id, led.done[id]))
		}
		want := 1
		if kind == "flaky" {
			want = 2
		}
		if led.runs[id] > want {
			extraRuns = append(extraRuns, fmt.Sprintf("%s %d runs", id, led.runs[id]))
		}
	}
	unexpected := 0
	for id := range led.runs {
		if _, ok := acked[id]; !ok {
			unexpected++
		}
	}
	led.mu.Unlock()
	for id, kind := range acked {
		j, err := client.Get(ctx, queue, id)
		switch {
		case err != nil:
			notCompleted = append(notCompleted, fmt.Sprintf("%s (%s): %v", id, kind, err))
		case j.Status != status.Completed:
			notCompleted = append(notCompleted, fmt.Sprintf("%s (%s): %s", id, kind, j.Status))
		case j.Type != kind || j.CreatedAt.IsZero():
			partial = append(partial, fmt.Sprintf("%s: type %q created %v", id, j.Type, j.CreatedAt))
		}
	}
	st, err := insp.Stats(ctx, queue)
	require.NoError(t, err)
	pending, err := cc.XPending(ctx, q.Stream(), keys.Group).Result()
	require.NoError(t, err)
	// Keys of the slot on a master that does not own it: left behind (written on the source
	// after its last batch moved) and unreachable, or moved back and forth without their
	// neighbours.
	stray := map[string][]string{}
	for _, addr := range c.Addrs {
		if addr == home {
			continue
		}
		n := redis.NewClient(&redis.Options{Addr: addr})
		ks, err := n.ClusterGetKeysInSlot(ctx, slot, 1000).Result()
		_ = n.Close()
		require.NoError(t, err)
		if len(ks) > 0 {
			stray[addr] = ks
		}
	}
	// Every job ended, so finish.lua freed every unique key (keys it finds inside Lua).
	owner := redis.NewClient(&redis.Options{Addr: home})
	uniques, err := owner.Keys(ctx, q.UniquePrefix()+"*").Result()
	_ = owner.Close()
	require.NoError(t, err)
	logs.mu.Lock()
	warnings := append([]string(nil), logs.lines...)
	logs.mu.Unlock()

	// summary counts the distinct messages (script hashes dropped).
	sha := regexp.MustCompile(`script: [0-9a-f]{40}|"(worker|tries|failing_for|retry_in|outcomes_waiting|jobs)":("[^"]*"|[0-9]+),?|[0-9A-Z]{26}`)
	summary := func(lines []string) []string {
		n := map[string]int{}
		for _, l := range lines {
			n[sha.ReplaceAllString(l, "")]++
		}
		var out []string
		for l, k := range n {
			out = append(out, fmt.Sprintf("%4d x %s", k, l))
		}
		sort.Strings(out)
		return out
	}
	short := func(s []string) []string {
		sort.Strings(s)
		if len(s) > 10 {
			return append(s[:10], fmt.Sprintf("... %d in all", len(s)))
		}
		return s
	}
	t.Logf("live=%v: %d jobs acknowledged, %d migrate batches (%d with fewer than 15 completions in 1 s); publish errors %d, lost %d, duplicate completions %d, extra runs %d, unexpected %d, not completed %d, partial records %d, stray keys %d, worker warnings %d",
		live, len(acked), batches, stalls, len(pubErrs), len(lost), len(dupDone), len(extraRuns), unexpected, len(notCompleted), len(partial), len(stray), len(warnings))
	t.Logf("stats: %+v; pending %d", *st, pending.Count)
	for _, s := range [][]string{pubErrs, moveErrs, warnings} {
		for _, line := range summary(s) {
			t.Log(line)
		}
	}

	require.Empty(t, moveErrs, "the migration")
	require.Empty(t, short(lost), "acknowledged jobs never completed")
	require.Empty(t, short(dupDone), "jobs completed twice")
	// Duplicate executions need a lease lost, which a migration alone does not cause.
	require.Empty(t, short(extraRuns), "runs beyond each job's own attempts")
	require.Zero(t, unexpected, "runs of jobs never acknowledged")
	require.Empty(t, short(notCompleted), "jobs not completed in Redis")
	require.Empty(t, short(partial), "job records missing fields")
	require.Empty(t, stray, "keys of the slot on a master that does not own it")
	require.Empty(t, short(uniques), "unique keys of ended jobs")
	require.EqualValues(t, 0, pending.Count, "pending entries")
	require.Zero(t, st.Queued+st.InProgress+st.Scheduled+st.Dead, "jobs left waiting: %+v", *st)
	flaky := 0
	for _, k := range acked {
		if k == "flaky" {
			flaky++
		}
	}
	require.EqualValues(t, len(acked), st.Enqueued, "enqueued counter")
	require.EqualValues(t, len(acked), st.Completed, "completed counter")
	require.EqualValues(t, flaky, st.Retried, "retried counter")
	require.Zero(t, st.Failed+st.Recovered+st.Refused+st.Poison, "dead, recovered, refused, poison")
	// Last, so that a failure here says every check of the jobs' safety above passed.
	require.Empty(t, short(pubErrs), "errors returned to the producer")
}
