package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// Issue 18's multi-process proof of the flow-control limits: worker processes of the built
// binary, limits set with `conveyor limits set`, and what happened read back from Redis.
//
// The rate test measures over 30 s by default (the window); -limits.rate-window sets
// another, e.g. for a quicker local run:
//
//	go test -race -count=1 -run TestFlowLimitsE2E ./cmd/conveyor/ -args -limits.rate-window 10s
var limitsRateWindow = flag.Duration("limits.rate-window", 30*time.Second,
	"how long TestFlowLimitsE2E/GlobalRate measures the observed rate")

func TestFlowLimitsE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("runs worker processes for half a minute")
	}
	srv := redistest.Shared(t)
	c := &cli{bin: buildCLI(t), url: srv.URL(), rdb: srv.Client(t)}
	// Neither loads the machine much (50 jobs/s, 3 jobs at a time), so they share the time.
	t.Run("GlobalRate", func(t *testing.T) { t.Parallel(); testGlobalRate(t, c) })
	t.Run("GlobalConcurrency", func(t *testing.T) { t.Parallel(); testGlobalConcurrency(t, c) })
}

// GlobalRate: 4 worker processes share one queue's rate limit of 50 jobs a second, with a
// backlog for the whole window. Each job's start time (started_at) is read back: no window of
// one interval holds more than 50 starts, but for the starts granted before it (a rate is at
// most N grants in any window of its interval by Redis's clock: admit.lua's log of grants,
// which internal/jobstate's TestLeaseRateAtMostNInAnyInterval checks exactly), and over the
// window the starts are at most N an interval, again but for those granted before it, and the
// observed rate at least N/(interval + tokenLife), less 15%: a token a worker leases ahead of
// its read counts as granted at the end of its life (pipeline's tokenLife, 100 ms), since its
// job may start then, so a reached rate runs up to tokenLife/interval below N per interval
// (docs/OPERATIONS.md "Limits"). 50/s is far below what 4 workers do on a loaded 2-core machine
// (thousands a second), so the lower bound measures the limit, not the machine.
func testGlobalRate(t *testing.T, c *cli) {
	const (
		rate        = 50
		interval    = time.Second
		workers     = 4
		concurrency = 10
		// started_at is the worker's clock as the handler starts, not the grant's: a worker
		// stalled between the two (under load, for any time) starts late what Redis granted in
		// an earlier interval, and those starts bunch with the next interval's (60 in 999 ms
		// against 50 under two CPU hogs). How many is not a matter of time: a worker reads
		// only into free slots of its --concurrency, so at any moment at most
		// workers*concurrency jobs are granted and not yet started. A rate that let N more
		// through (100 in a second), or the old GCRA's 2N-1 (99), still fails this bound (90).
		heldGranted = workers * concurrency
		// warmup skips the first intervals, where the N starts a rate allows after a quiet
		// interval start at once.
		warmup = 2 * interval
	)
	window := *limitsRateWindow
	require.GreaterOrEqual(t, window, 5*interval, "-limits.rate-window")
	q := redistest.UniqueName(t)
	// Enough for the burst, the warm-up, the window and two intervals more, so that the
	// backlog outlasts the window.
	n := rate + int((warmup+window+2*interval)/interval)*rate
	ids := publishIDs(t, c, "--queue", q, "--type", "noop", "--count", strconv.Itoa(n))
	require.Len(t, ids, n)
	c.ok(t, "limits", "set", q, "--rate", fmt.Sprintf("%d/%s", rate, interval))

	names := make([]string, workers)
	procs := make([]*proc, workers)
	for i := range workers {
		names[i] = fmt.Sprintf("rate-%d", i)
		procs[i] = c.start(t, "worker", "--queue", q, "--name", names[i], "--concurrency", strconv.Itoa(concurrency))
	}
	begin := time.Now()
	waitFor(t, window+warmup+2*time.Minute, 100*time.Millisecond, fmt.Sprintf("%d completed jobs", n), func() bool {
		return c.stats(t, "--queue", q).Completed == int64(n)
	})
	t.Logf("%d jobs at %d/%s took %s", n, rate, interval, time.Since(begin).Round(time.Millisecond))
	for _, p := range procs {
		require.Equal(t, 0, p.stop(t))
	}

	admitted, ran, by := admissions(t, c.rdb, q, ids)
	require.Len(t, admitted, n, "every job has an admission time")
	for _, name := range names {
		require.Positive(t, ran[name], "worker %s ran jobs: the limit held across all %d (ran %v)", name, workers, ran)
	}

	ms := interval.Milliseconds()
	// The most starts a span of span ms may hold: rate in each interval it touches, and the
	// starts granted before it. Stored times are truncated to the ms, so a span of one
	// interval is checked as ms-1.
	allowed := func(span int64) int { return rate*int((span+ms-1)/ms) + heldGranted }
	for _, span := range []int64{ms / 10, ms - 1, 5*ms - 1, admitted[n-1] - admitted[0]} {
		most, at := busiest(admitted, span)
		t.Logf("busiest %d ms: %d starts from %d ms after the first (bound %d, %d without late starts); by worker %v",
			span, most, at-admitted[0], allowed(span), allowed(span)-heldGranted, startsBy(by, at, span))
		require.LessOrEqual(t, most, allowed(span), "starts within %d ms from %d", span, at)
	}

	from := admitted[0] + warmup.Milliseconds()
	to := from + window.Milliseconds()
	require.Less(t, to, admitted[n-1], "the backlog outlasted the window")
	in := 0
	for _, a := range admitted {
		if a >= from && a < to {
			in++
		}
	}
	observed := float64(in) / window.Seconds()
	want := float64(rate) / interval.Seconds()
	t.Logf("observed %.2f jobs/s over %s against a limit of %.0f/s: ratio %.4f; per worker %v",
		observed, window, want, observed/want, ran)
	const tokenLife = 100 * time.Millisecond
	floor := float64(rate) / (interval + tokenLife).Seconds()
	most := float64(rate)*window.Seconds()/interval.Seconds() + heldGranted
	require.LessOrEqual(t, float64(in), most, "starts over %s: the limit never passed (observed %.2f/s)", window, observed)
	// 10x: the floor is 0.6 of what a saturated limiter grants, not 0.85: under two CPU hogs the
	// ratio measured 0.80, and 40 slots of 1 ms handlers still start 50 jobs a second on a
	// machine ten times slower. 0.6 still fails a limiter that grants half its rate (one
	// interval's tokens every two intervals, the shape of a window that never slides).
	require.GreaterOrEqual(t, observed, floor*0.6, "observed rate over %s: the limit reached", window)
}

// admissions reads back the start time (unix ms) of each job, sorted, how many jobs each
// worker ran, and each worker's start times.
func admissions(t *testing.T, rdb *redis.Client, q string, ids []string) ([]int64, map[string]int, map[string][]int64) {
	t.Helper()
	k := keys.New("conveyor", q)
	ctx := t.Context()
	var out []int64
	ran := map[string]int{}
	by := map[string][]int64{}
	for chunk := range slices.Chunk(ids, 500) {
		pipe := rdb.Pipeline()
		cmds := make([]*redis.SliceCmd, len(chunk))
		for i, id := range chunk {
			cmds[i] = pipe.HMGet(ctx, k.Job(id), keys.FieldStartedAt, keys.FieldWorker)
		}
		_, err := pipe.Exec(ctx)
		require.NoError(t, err)
		for i, cmd := range cmds {
			v := cmd.Val()
			s, ok := v[0].(string)
			require.True(t, ok, "job %s has no %s", chunk[i], keys.FieldStartedAt)
			at, err := strconv.ParseInt(s, 10, 64)
			require.NoError(t, err)
			out = append(out, at)
			w, _ := v[1].(string)
			ran[w]++
			by[w] = append(by[w], at)
		}
	}
	slices.Sort(out)
	return out, ran, by
}

// startsBy says, for each worker, how many of its starts fall in [at, at+span] and the
// longest pause in its starts just before (a worker stalled there, then started what it held
// at once): the evidence when a window holds more than the rate.
func startsBy(by map[string][]int64, at, span int64) map[string]string {
	out := map[string]string{}
	for w, times := range by {
		slices.Sort(times)
		in, gap := 0, int64(0)
		for i, a := range times {
			if a >= at && a <= at+span {
				in++
			}
			if i > 0 && a >= at && times[i-1] < at+span && a <= at+span {
				gap = max(gap, a-times[i-1])
			}
		}
		out[w] = fmt.Sprintf("%d (longest pause before one %d ms)", in, gap)
	}
	return out
}

// busiest returns the most of the sorted times that fall within span ms of one another
// ([a, a+span]), and where such a run starts.
func busiest(times []int64, span int64) (most int, at int64) {
	j := 0
	for i, a := range times {
		for times[j] < a-span {
			j++
		}
		if i-j+1 > most {
			most, at = i-j+1, times[j]
		}
	}
	return most, at
}

// GlobalConcurrency: 4 worker processes, each able to run 4 jobs at once, share a concurrency
// limit of 3 on their queue; one is SIGKILLed while it runs jobs. Two counts of what runs are
// kept while the jobs drain:
//   - the limit's slot set in Redis, sampled every 10 ms (as the issue asks): workers lease
//     slots into it (admit.lua) before the handlers that use them run, and give them back
//     after (leases.lua), or lose them when they die and their lease runs out, so the set
//     holds a slot for every job that may be running (and the workers' spare ones);
//   - the jobs' handlers themselves: each job is an http job whose request this test serves and
//     holds for a while, so the server counts exactly how many handlers are in their request
//     at once, every change seen rather than sampled, independently of the limit's own
//     bookkeeping (a slot given back too early would show here, not in the set).
//
// Neither may exceed 3. The killed worker's slots stay taken until its lease runs out (the
// visibility timeout, 2 s here) and another worker takes them back; its jobs come back
// through the recoverer (scanning every 500 ms) and run again elsewhere, every job completes,
// none runs twice at once, and only the killed worker's jobs run twice at all.
func testGlobalConcurrency(t *testing.T, c *cli) {
	const (
		limit   = 3
		workers = 4
		n       = 24
		hold    = 800 * time.Millisecond
		victim  = "conc-0"
	)
	q := redistest.UniqueName(t)
	ctx := t.Context()
	hs := newHeldServer(hold)
	t.Cleanup(hs.Close)

	tasks := make([]pipeline.Task, n)
	for i := range tasks {
		id := fmt.Sprintf("%s-%02d", q, i)
		payload, err := json.Marshal(map[string]string{"url": hs.URL + "/job/" + id})
		require.NoError(t, err)
		tasks[i] = pipeline.Task{Type: "http", Payload: payload, Opts: []pipeline.Option{pipeline.WithID(id)}}
	}
	jobs, err := c.client(t).EnqueueBatch(ctx, q, tasks)
	require.NoError(t, err)
	c.ok(t, "limits", "set", q, "--concurrency", strconv.Itoa(limit))

	slots := keys.New("conveyor", q).LimitPrefix() + "c:q" // the slot set of the queue scope
	var maxSlots, samples atomic.Int64
	sampleErr := make(chan error, 1)
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
			used, err := c.rdb.SCard(context.Background(), slots).Result()
			if err != nil {
				sampleErr <- err
				return
			}
			samples.Add(1)
			if used > maxSlots.Load() {
				maxSlots.Store(used)
			}
		}
	}()
	stop := sync.OnceFunc(func() { close(stopSampling); <-sampled })
	t.Cleanup(stop)

	procs := map[string]*proc{}
	for i := range workers {
		name := fmt.Sprintf("conc-%d", i)
		procs[name] = c.start(t, workerArgs(q, name, "--concurrency", "4", "--http-allow", "127.0.0.1")...)
	}
	// The victim's slots: the names its sessions leased ("<worker name>/<session>#<n>").
	victimSlots := func() int {
		names, err := c.rdb.SMembers(ctx, slots).Result()
		require.NoError(t, err)
		n := 0
		for _, name := range names {
			if strings.HasPrefix(name, victim+"/") {
				n++
			}
		}
		return n
	}
	// The victim's jobs: started on it and not finished (in_progress).
	victimJobs := func() map[string]bool {
		out := map[string]bool{}
		for _, j := range jobs {
			if got := c.job(t, q, j.ID); got.Status == status.InProgress && got.Worker == victim {
				out[j.ID] = true
			}
		}
		return out
	}
	// Mid-run: the victim runs a job (in its handler's request) in a slot of its lease.
	waitFor(t, 30*time.Second, 10*time.Millisecond, victim+" running a job in a slot", func() bool {
		for id := range victimJobs() {
			if hs.running(id) {
				return victimSlots() > 0
			}
		}
		return false
	})
	procs[victim].kill(t)
	killed := time.Now()
	held := victimJobs() // they run again elsewhere once recovered
	require.NotEmpty(t, held)
	waitFor(t, 30*time.Second, 10*time.Millisecond, "the killed worker's slots given back", func() bool {
		return victimSlots() == 0
	})
	back := time.Since(killed)
	t.Logf("%d slots of the killed worker back after %s", len(held), back.Round(time.Millisecond))
	// The recovery time: the visibility timeout plus a scan interval, with 4 s on the side a
	// loaded machine cannot help (the recoverer's clock check, process scheduling).
	require.Less(t, back, 2*time.Second+500*time.Millisecond+4*time.Second, "slots back within the recovery time")

	waitFor(t, 60*time.Second, 50*time.Millisecond, fmt.Sprintf("%d completed jobs", n), func() bool {
		return c.stats(t, "--queue", q).Completed == int64(n)
	})
	for name, p := range procs {
		if name != victim {
			require.Equal(t, 0, p.stop(t))
		}
	}
	stop()
	select {
	case err := <-sampleErr:
		require.NoError(t, err, "sampling %s", slots)
	default:
	}

	maxRunning, twice, runs, done := hs.report()
	t.Logf("at most %d slots taken (%d samples), at most %d handlers running; %d recovered jobs",
		maxSlots.Load(), samples.Load(), maxRunning, len(held))
	require.EqualValues(t, limit, maxSlots.Load(), "slots taken at once: the limit reached, never passed")
	if maxRunning > limit {
		// Who ran what, and when: a worker that ran two of the jobs in flight at the peak
		// points at its lease book (a slot of its own used twice, as the keeper's forgetting
		// once did: pipeline's TestLeaseForgottenInstanceNumbersNotAskedAgain).
		for _, j := range jobs {
			got := c.job(t, q, j.ID)
			t.Logf("%s: worker %s, attempt %d, started %s", j.ID, got.Worker, got.Attempt, got.StartedAt.Format("15:04:05.000"))
		}
	}
	require.Equal(t, limit, maxRunning, "handlers running at once: the limit reached, never passed (at %s; worker killed at %s)",
		hs.maxAtString(), killed.Format("15:04:05.000"))
	require.Empty(t, twice, "jobs running twice at once")
	for _, j := range jobs {
		got := c.job(t, q, j.ID)
		require.Equal(t, status.Completed, got.Status, j.ID)
		if held[j.ID] {
			// Its request may have been served in full before the kill, with the outcome
			// not yet written: then it is served twice.
			require.Equal(t, 2, got.Attempt, "a killed worker's job runs again")
			require.Contains(t, got.LastError, victim)
			require.Contains(t, []int{1, 2}, done[j.ID], "job %s: requests served in full", j.ID)
			continue
		}
		require.Equal(t, 1, done[j.ID], "job %s: requests served in full", j.ID)
		if got.Attempt == 1 {
			require.Equal(t, 1, runs[j.ID], "job %s ran once", j.ID)
			continue
		}
		// A job the victim had read but not yet started when it died is recovered too.
		require.Equal(t, 2, got.Attempt, j.ID)
		require.Contains(t, got.LastError, victim, j.ID)
	}
	empty, err := c.rdb.SCard(ctx, slots).Result()
	require.NoError(t, err)
	require.Zero(t, empty, "every slot given back")
}

// heldServer serves the http jobs of testGlobalConcurrency: each request at /job/<id> is held
// (the job's id) for hold, or until its client goes away as a SIGKILLed worker's does, while
// the server counts the requests in flight, in total and per job.
type heldServer struct {
	*httptest.Server
	hold       time.Duration
	mu         sync.Mutex
	inFlight   map[string]int       // by job id
	since      map[string]time.Time // when the job's latest request came
	total, max int
	maxAt      string         // the requests in flight when max was reached: job@time of each
	twice      []string       // jobs seen in two requests at once
	runs, done map[string]int // requests started and held to the end, by job id
}

func newHeldServer(hold time.Duration) *heldServer {
	hs := &heldServer{hold: hold, inFlight: map[string]int{}, since: map[string]time.Time{},
		runs: map[string]int{}, done: map[string]int{}}
	hs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		job := strings.TrimPrefix(r.URL.Path, "/job/")
		hs.mu.Lock()
		hs.inFlight[job]++
		hs.since[job] = time.Now()
		hs.runs[job]++
		if hs.inFlight[job] > 1 {
			hs.twice = append(hs.twice, job)
		}
		hs.total++
		if hs.total > hs.max {
			// Which requests, since when: tells a stale request of a killed worker from a
			// slot handed out twice when the limit is passed.
			at := []string{}
			for j, n := range hs.inFlight {
				if n > 0 {
					at = append(at, j+"@"+hs.since[j].Format("15:04:05.000"))
				}
			}
			slices.Sort(at)
			hs.maxAt = fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), at)
		}
		hs.max = max(hs.max, hs.total)
		hs.mu.Unlock()
		held := false
		select {
		case <-time.After(hold):
			held = true
		case <-r.Context().Done():
		}
		hs.mu.Lock()
		hs.inFlight[job]--
		hs.total--
		if held {
			hs.done[job]++
		}
		hs.mu.Unlock()
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	return hs
}

// running reports whether a request of the job with id is in flight and has most of its hold
// ahead of it: a worker killed now dies in the middle of the job, not at its end.
func (hs *heldServer) running(id string) bool {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return hs.inFlight[id] > 0 && time.Since(hs.since[id]) < hs.hold/2
}

// maxAtString says when the most requests were in flight, and which.
func (hs *heldServer) maxAtString() string {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return hs.maxAt
}

// report returns the most requests in flight at once, the jobs seen twice at once, and the
// requests started and held to the end, by job id.
func (hs *heldServer) report() (most int, twice []string, runs, done map[string]int) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return hs.max, slices.Clone(hs.twice), hs.runs, hs.done
}
