package torture

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/faultproxy"
	"github.com/conveyorq/conveyor/internal/redisproc"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/keyspace"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// Queue is the queue every scenario works in (each run has a redis-server of its own).
const Queue = "torture"

// Options are what a run needs besides its scenario and size.
type Options struct {
	// Bin is the conveyor binary whose `worker` command the worker processes run.
	Bin string
	// Seed seeds the workload and the nemeses' schedule (0: 1).
	Seed uint64
	// Nemeses replaces the scenario's nemeses when not empty.
	Nemeses []string
	// Workers and Concurrency: worker processes and the concurrency of each (3 and 4).
	Workers, Concurrency int
	// Visibility is the workers' visibility timeout (2s).
	Visibility time.Duration
	// Drain bounds the wait for every job to end once the nemeses stopped (60s).
	Drain time.Duration
	// AppendFsync is the redis-server's appendfsync: "always" (the default) or "everysec".
	AppendFsync string
	// Keep keeps the run's directory (ledgers, logs, the AOF); otherwise it is removed when
	// the run passed.
	Keep bool
	// Log hears a line for each step of the run; nil: none.
	Log io.Writer
}

// Result is one scenario's figures, as `conveyor torture --json` prints them, and the report
// behind them.
type Result struct {
	Name                string `json:"name"`
	Jobs                int    `json:"jobs"`
	Faults              int    `json:"faults"`
	Lost                int    `json:"lost"`
	DuplicateCommits    int    `json:"duplicate_commits"`
	DuplicateExecutions int    `json:"duplicate_executions"`
	Early               int    `json:"early"`
	MaxRecoveryMS       int64  `json:"max_recovery_ms"`

	Nemeses  []string      `json:"-"`
	Duration time.Duration `json:"-"`
	Report   Report        `json:"-"`
	Dir      string        `json:"-"` // the run's directory, when kept
}

// run is one scenario's run: its processes and its state.
type run struct {
	opt     Options
	sc      Scenario
	size    Size
	nemeses []string
	dir     string
	ledger  string // the ledger directory
	rng     *rand.Rand
	log     func(format string, args ...any)

	redis   *redisproc.Server  // standalone
	cluster *redisproc.Cluster // TopologyCluster
	proxy   *faultproxy.Proxy
	url     string                // what workers and the producer connect to
	admin   redis.UniversalClient // straight to Redis, for the checks
	moves   int                   // slot moves made, to alternate their batch sizes
	workers []*worker
	all     []*worker  // every worker started, for their logs
	wmu     sync.Mutex // guards workers' slots (and all) while clock-step and a worker nemesis strike at once
	nem     *Writer    // the ledger of the workers' signals and lease warnings (ledger.go's Kill and so on)
	gen     int

	sentinel *redisproc.SentinelSet // TopologySentinel

	// The encryption workload (encryption.go): the keys the processes list, and the producer's
	// client, replaced when they change. slotMu is held by a worker nemesis while it strikes
	// and by the rotation while it restarts a worker, so that neither replaces a worker the
	// other just started.
	keys        *keySet
	slotMu      sync.Mutex
	pmu         sync.Mutex
	pclient     *pipeline.Client
	producerRDB redis.UniversalClient

	uniqueJoined int                                // republished unique keys that returned the first job (the producer's)
	workflows    map[string]pipeline.WorkflowStatus // published workflows and the end status designed
	canceled     int                                // workflow tasks canceled by design
}

// Run runs scenario sc at size, with its nemeses (or opt.Nemeses), and checks it. An error is
// a failure to run (no redis-server, a ledger that cannot be written); a run that breaks an
// invariant returns a Result whose Report has Violations.
func Run(ctx context.Context, sc Scenario, size Size, opt Options) (*Result, error) {
	opt.Seed = max(opt.Seed, 1)
	opt.Workers = cmpPos(opt.Workers, 3)
	opt.Concurrency = cmpPos(opt.Concurrency, 4)
	opt.Visibility = cmpPos(opt.Visibility, 2*time.Second)
	opt.Drain = cmpPos(opt.Drain, time.Minute)
	opt.AppendFsync = cmp.Or(opt.AppendFsync, "always")
	if opt.AppendFsync != "always" && opt.AppendFsync != "everysec" {
		return nil, fmt.Errorf("torture: appendfsync %q: always or everysec", opt.AppendFsync)
	}
	if opt.Bin == "" {
		return nil, errors.New("torture: no conveyor binary to run workers with")
	}
	r := &run{opt: opt, sc: sc, size: size, nemeses: sc.Nemeses, rng: rand.New(rand.NewPCG(opt.Seed, 0x70727475))}
	if len(opt.Nemeses) > 0 {
		r.nemeses = opt.Nemeses
	}
	if err := CheckTopology(sc.Topology, r.nemeses); err != nil {
		return nil, err
	}
	r.log = func(format string, args ...any) {
		if opt.Log != nil {
			fmt.Fprintf(opt.Log, "torture %s: %s\n", sc.Name, fmt.Sprintf(format, args...))
		}
	}
	dir, err := os.MkdirTemp("", "conveyor-torture-"+sc.Name+"-")
	if err != nil {
		return nil, err
	}
	r.dir, r.ledger = dir, filepath.Join(dir, "ledger")
	if sc.Workload.Encryption {
		if r.keys, err = newKeySet(); err != nil {
			return nil, err
		}
	}
	res, err := r.run(ctx)
	if err != nil && ctx.Err() == nil {
		// A nemesis or a process that failed mid-run: its logs and AOFs are the evidence.
		r.log("kept %s", dir)
		return res, fmt.Errorf("%w (its logs are in %s)", err, dir)
	}
	if res != nil && (opt.Keep || res.Report.Failed()) {
		res.Dir = dir
		r.log("kept %s", dir)
	} else {
		_ = os.RemoveAll(dir)
	}
	return res, err
}

func (r *run) run(ctx context.Context) (*Result, error) {
	if r.sc.Topology == TopologyCluster {
		return r.runCluster(ctx)
	}
	if r.sc.Topology == TopologySentinel {
		return r.runSentinel(ctx)
	}
	var err error
	// appendfsync always: a reply means the write is on disk. So a SIGKILL of the server
	// loses no acknowledged job. Everysec may lose the last second's writes on a crash of
	// the host. A crash of the process alone loses nothing either way: the kernel has them.
	r.redis, err = redisproc.Start(filepath.Join(r.dir, "redis"), "--appendonly", "yes", "--appendfsync", r.opt.AppendFsync)
	if err != nil {
		return nil, err
	}
	defer r.redis.Stop()
	target := r.redis.Addr
	if slices.Contains(r.nemeses, NemesisProxyReset) {
		if r.proxy, err = faultproxy.New(r.redis.Addr); err != nil {
			return nil, err
		}
		defer r.proxy.Close()
		target = r.proxy.Addr()
	}
	r.url = "redis://" + target + "/0"
	r.admin = redis.NewClient(&redis.Options{Addr: r.redis.Addr})
	defer r.admin.Close()
	producerRDB := redis.NewClient(&redis.Options{Addr: target})
	defer producerRDB.Close()
	return r.start(ctx, producerRDB, fmt.Sprintf("redis pid %d (appendfsync %s)", r.redis.PID(), r.opt.AppendFsync))
}

// start runs the scenario once its topology is up: the producer's client on producerRDB (its
// own connections, which the caller closes) and ledger, the queue's partitions and limits,
// then work. topology says what runs, for the log.
func (r *run) start(ctx context.Context, producerRDB redis.UniversalClient, topology string) (*Result, error) {
	k, err := r.keys.keyring()
	if err != nil {
		return nil, err
	}
	client, err := pipeline.NewClient(producerRDB, pipeline.ClientConfig{Keys: k})
	if err != nil {
		return nil, err
	}
	r.producerRDB, r.pclient = producerRDB, client
	led, err := OpenWriter(r.ledger, "producer")
	if err != nil {
		return nil, err
	}
	defer led.Close()
	if err := r.setupWorkload(ctx); err != nil {
		return nil, err
	}
	r.log("%s, nemeses %s, %d jobs over %s", topology, strings.Join(r.nemeses, ","), r.size.Jobs, r.size.Duration)
	return r.work(ctx, led)
}

// work starts the workers, runs the producer and the nemeses, drains and checks: the run on
// whichever topology its caller started.
func (r *run) work(ctx context.Context, led *Writer) (*Result, error) {
	var err error
	if r.nem, err = OpenWriter(r.ledger, "nemeses"); err != nil {
		return nil, err
	}
	defer r.nem.Close()
	for range r.opt.Workers {
		w, err := r.startWorker()
		if err != nil {
			return nil, err
		}
		r.workers = append(r.workers, w)
	}
	defer func() {
		for _, w := range r.workers {
			w.kill()
		}
	}()
	r.log("workers %s", r.pids())

	begin := time.Now()
	// The producer publishes over the first 70% of the run; delayed jobs are due by 90% of it.
	var acked []string
	var perr error
	var pwg sync.WaitGroup
	pctx, pcancel := context.WithTimeout(ctx, r.size.Duration+r.opt.Drain)
	defer pwg.Wait()
	defer pcancel() // first: a run that ends early ends its producer too
	pwg.Go(func() { acked, perr = r.produce(pctx, led, begin) })
	var restarts int
	var rerr error
	var rwg sync.WaitGroup
	// Closed when the nemeses are done: the rotation goes on while any strikes, those that
	// strike once more after the run's duration too.
	struck := make(chan struct{})
	if r.keys != nil {
		rwg.Go(func() { restarts, rerr = r.rotateKeys(pctx, begin, struck) })
	}

	faults, maxRecovery, bound, err := r.strikeUntil(ctx, begin)
	close(struck)
	rwg.Wait()
	if err != nil {
		return nil, err
	}
	if rerr != nil {
		return nil, rerr
	}
	// A restart by the rotation SIGTERMs its worker, which may cut its attempts short.
	bound += restarts * r.opt.Concurrency
	if r.proxy != nil {
		r.proxy.DropNextReplies(0)
	}
	pwg.Wait()
	if perr != nil {
		return nil, perr
	}
	r.log("%d faults; %d jobs acknowledged; %d unique keys published again returned their first job; draining",
		faults, len(acked), r.uniqueJoined)
	if err := r.drain(ctx, len(acked)-r.canceled); err != nil {
		r.log("drain: %v", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	leaks := r.goroutines(ctx)
	for _, w := range r.workers {
		w.term()
	}
	r.workers = nil
	var sealing []string
	if r.keys != nil {
		// The operator's last step: rerun the rotation until nothing is left; then the old key
		// could go, which the end state's reads with NewKey alone stand for.
		minute := make(chan struct{})
		stop := time.AfterFunc(time.Minute, func() { close(minute) })
		err := r.rotateUntilDone(ctx, "final rotation", begin, minute, true)
		stop.Stop()
		if err != nil {
			sealing = append(sealing, err.Error())
		}
	}

	end, err := r.observe(ctx, acked, led, time.Since(begin))
	if err != nil {
		return nil, err
	}
	end.Goroutines = leaks
	end.Sealing = append(sealing, end.Sealing...)
	if err := led.Close(); err != nil {
		return nil, err
	}
	if err := r.leaseWarnings(); err != nil {
		return nil, err
	}
	if err := r.nem.Close(); err != nil {
		return nil, err
	}
	recs, torn, err := ReadDir(r.ledger)
	if err != nil {
		return nil, err
	}
	if torn > 0 {
		r.log("%d torn ledger lines skipped", torn)
	}
	rep := Check(recs, end, bound)
	r.log("checked: %d ok of %d, %d dead as designed, %d final outcomes without a commit record, %d indeterminate publishes, %d keys (bound %d)",
		rep.OK, rep.Jobs, len(end.Dead), rep.Unwitnessed, rep.Indeterminate, end.Keys, end.KeyBound)
	if len(r.workflows) > 0 {
		r.log("%d workflows, %d of them ended otherwise than designed; %d tasks out of order", len(r.workflows), len(end.Workflows), len(rep.OutOfOrder))
	}
	if end.ConcurrencyLimit > 0 {
		r.log("%s: at most %d attempts running at once by the ledger (limit %d); %d attempts not counted (their workers' leases may have run out, or their ends are unknown)",
			LimitedType, rep.MaxConcurrent, end.ConcurrencyLimit, rep.Uncounted)
	}
	return &Result{
		Name: r.sc.Name, Jobs: rep.Jobs, Faults: faults, Lost: len(rep.Lost),
		DuplicateCommits: len(rep.DuplicateCommits), DuplicateExecutions: rep.DuplicateExecutions,
		Early: len(rep.Early), MaxRecoveryMS: maxRecovery.Milliseconds(),
		Nemeses: r.nemeses, Duration: time.Since(begin), Report: rep,
	}, nil
}

// produce publishes the workload's jobs, each retried under its own id until acknowledged,
// and records each acknowledgement. It returns the acknowledged ids.
func (r *run) produce(ctx context.Context, led *Writer, begin time.Time) ([]string, error) {
	rng := rand.New(rand.NewPCG(r.opt.Seed, 0x70726f64))
	n := r.size.Jobs
	spread := r.size.Duration * 7 / 10
	acked := make([]string, 0, n)
	first, switched := r.producer(), 0
	if r.keys != nil {
		defer func() {
			r.log("%d jobs published under %s, %d under %s", len(acked)-switched, OldKey, switched, NewKey)
		}()
	}
	for i := range n {
		if at := begin.Add(spread * time.Duration(i) / time.Duration(n)); time.Until(at) > 0 {
			sleep(ctx, time.Until(at))
		}
		id := fmt.Sprintf("%s-%d-%d", r.sc.Name, r.opt.Seed, i)
		client := r.producer() // its keys may have changed (encryption)
		if client != first {
			switched++
		}
		work := Work{MS: 5 + rng.IntN(25), Echo: r.keys != nil}
		ack := Record{Kind: Ack, ID: id, Expect: "completed", Need: 1}
		opts := []pipeline.Option{pipeline.WithID(id), pipeline.WithMaxRetries(20)}
		unique := ""
		task := pipeline.Task{Type: JobType}
		if r.sc.Workload.Limits && rng.IntN(4) == 0 {
			task.Type, ack.Type = LimitedType, LimitedType
		}
		switch p := rng.IntN(100); {
		case p < 20: // delayed, due by 90% of the run
			left := max(time.Until(begin.Add(r.size.Duration*9/10)), 0)
			ack.Due = time.Now().Add(time.Duration(rng.Int64N(int64(left) + 1))).UnixMilli()
			opts = append(opts, pipeline.WithRunAt(time.UnixMilli(ack.Due)))
		case p < 32: // fails 1 or 2 times, then succeeds
			work.Fail = 1 + rng.IntN(2)
			ack.Need = work.Fail + 1
		case p < 38: // always fails: two attempts, then the dead set
			work.Dead = true
			ack.Expect, ack.Need = "failed", 2
			opts[1] = pipeline.WithMaxRetries(1)
		case p < 43: // a unique key, due at least 500 ms on: published twice (below)
			unique = "u-" + id
			left := max(time.Until(begin.Add(r.size.Duration*9/10)), 0)
			ack.Due = time.Now().Add(500*time.Millisecond + time.Duration(rng.Int64N(int64(left)+1))).UnixMilli()
			opts = append(opts, pipeline.WithRunAt(time.UnixMilli(ack.Due)), pipeline.WithUnique(unique, time.Hour))
		}
		task.Payload, _ = json.Marshal(work)
		ack.Sum = Digest(task.Payload)
		if _, err := r.publish(ctx, client, task, opts); err != nil {
			if ctx.Err() == nil {
				return nil, err
			}
			if werr := led.Write(Record{Kind: Indeterminate, ID: id, At: time.Now().UnixMicro()}); werr != nil {
				return nil, werr
			}
			return acked, nil
		}
		ack.At = time.Now().UnixMicro()
		if err := led.Write(ack); err != nil {
			return nil, err
		}
		acked = append(acked, id)
		if r.sc.Workload.Workflows && i%30 == 29 {
			ids, err := r.publishWorkflow(ctx, client, led, rng, fmt.Sprintf("%s-%d-wf%d", r.sc.Name, r.opt.Seed, i/30))
			if err != nil {
				return nil, err
			}
			acked = append(acked, ids...)
		}
		if unique != "" {
			// The same unique key again under another id while the first job waits for its
			// due time: the publish must return the first job, and make none. A second job
			// would run unacknowledged, which the checker reports as unexpected. Once the due
			// time has passed before the answer, the first may have ended and freed the key:
			// either answer is right then.
			again := id + "-again"
			j, err := r.publish(ctx, client, task, []pipeline.Option{pipeline.WithID(again),
				pipeline.WithUnique(unique, time.Hour), pipeline.WithRunAt(time.UnixMilli(ack.Due)), pipeline.WithMaxRetries(20)})
			switch {
			case err != nil && ctx.Err() == nil:
				return nil, err
			case err != nil || time.Now().UnixMilli() >= ack.Due:
				if werr := led.Write(Record{Kind: Indeterminate, ID: again, At: time.Now().UnixMicro()}); werr != nil {
					return nil, werr
				}
			case j.ID != id:
				r.log("unique key %s held by %s made a second job %s", unique, id, j.ID)
			default:
				r.uniqueJoined++
			}
		}
	}
	return acked, nil
}

// publish enqueues one job, sending it again after an error (the same id: a copy that was
// applied is found, not made twice) until it is acknowledged or ctx ends.
func (r *run) publish(ctx context.Context, client *pipeline.Client, task pipeline.Task, opts []pipeline.Option) (*pipeline.Job, error) {
	if r.cluster != nil || r.sentinel != nil {
		// Durable publish: acknowledged only once the queue's master's replica has the job,
		// so that a failover (the replica promoted, the master killed) loses no acknowledged
		// job; without it Redis's asynchronous replication may lose the last writes.
		opts = append(slices.Clone(opts), pipeline.WithReplicas(1, time.Second))
	}
	for {
		j, err := client.Enqueue(ctx, Queue, task, opts...)
		if err == nil {
			return j, nil
		}
		if errors.Is(err, pipeline.ErrInvalid) || ctx.Err() != nil {
			return nil, err
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

// strikeUntil runs the nemeses on their seeded schedule until the run's duration is over.
// Then it runs each nemesis the schedule left out once, alone. A short run (CI's) has a few
// ticks. A random draw among three or four nemeses can spend them without one of them, and
// the run would pass without trying it. It returns the faults made, the longest recovery and
// the duplicate executions they allow. A recovery runs from a fault's start until Redis
// counts a completion after it healed.
func (r *run) strikeUntil(ctx context.Context, begin time.Time) (faults int, maxRecovery time.Duration, bound int, err error) {
	lo, hi := time.Second, 3*time.Second
	if r.size.Duration < 10*time.Second {
		lo, hi = 500*time.Millisecond, 1500*time.Millisecond
	}
	struckOnce := map[string]bool{}
	for {
		wait := lo + time.Duration(r.rng.Int64N(int64(hi-lo)))
		var names []string
		if time.Since(begin)+wait >= r.size.Duration || len(r.nemeses) == 0 {
			sleep(ctx, max(r.size.Duration-time.Since(begin), 0))
			for _, n := range r.nemeses {
				if !struckOnce[n] {
					names = []string{n}
					break
				}
			}
			if names == nil || ctx.Err() != nil {
				return faults, maxRecovery, bound, ctx.Err()
			}
			r.log("%s has not struck yet: it strikes once more after the run's %s", names[0], r.size.Duration)
			sleep(ctx, lo)
		} else {
			sleep(ctx, wait)
			// One nemesis a tick; one tick in three, when the scenario has both kinds, a worker
			// nemesis and a Redis or network one strike at once.
			names = []string{r.nemeses[r.rng.IntN(len(r.nemeses))]}
			if r.rng.IntN(3) == 0 {
				var others []string
				for _, m := range r.nemeses {
					if workerNemesis(m) != workerNemesis(names[0]) {
						others = append(others, m)
					}
				}
				if len(others) > 0 {
					names = append(names, others[r.rng.IntN(len(others))])
				}
			}
		}
		if ctx.Err() != nil {
			return faults, maxRecovery, bound, ctx.Err()
		}
		for _, n := range names {
			struckOnce[n] = true
		}
		// Each strike draws from its own generator, seeded here, so that two at once need not
		// share one.
		rngs := make([]*rand.Rand, len(names))
		for i := range rngs {
			rngs[i] = rand.New(rand.NewPCG(r.rng.Uint64(), r.rng.Uint64()))
		}
		struck := time.Now()
		touched := make([]int, len(names))
		errs := make([]error, len(names))
		var wg sync.WaitGroup
		for i, n := range names {
			wg.Go(func() {
				touched[i], errs[i] = r.strike(ctx, n, rngs[i])
				if errs[i] != nil {
					errs[i] = fmt.Errorf("nemesis %s: %w", n, errs[i])
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return faults, maxRecovery, bound, err
		}
		for _, t := range touched {
			faults++
			bound += t * r.opt.Concurrency
		}
		n := strings.Join(names, "+")
		rec := r.recovery(ctx, struck)
		maxRecovery = max(maxRecovery, rec)
		if rec > 0 {
			r.log("%s at %s, a job completed %s after it struck", n, struck.Sub(begin).Round(time.Millisecond), rec.Round(time.Millisecond))
		} else {
			r.log("%s at %s, with no job waiting to run", n, struck.Sub(begin).Round(time.Millisecond))
		}
	}
}

// recovery waits until Redis counts a completion made after now (the fault healed), and
// returns how long that was after struck; 0 when no job is waiting to run, or after 30 s.
func (r *run) recovery(ctx context.Context, struck time.Time) time.Duration {
	var before int64 = -1
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		st, err := r.stats(ctx)
		if err == nil {
			if before < 0 {
				before = st.Completed
				if st.Queued+st.InProgress == 0 {
					return 0
				}
			} else if st.Completed > before {
				return time.Since(struck)
			}
		}
		sleep(ctx, 10*time.Millisecond)
	}
	return 0
}

func (r *run) stats(ctx context.Context) (*pipeline.QueueStats, error) {
	c, err := pipeline.NewClient(r.admin, pipeline.ClientConfig{})
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return c.Stats(cctx, Queue)
}

// drain waits until no job is scheduled, queued or running and as many have ended as were
// acknowledged. It also stops when nothing was scheduled, queued or running for 2 s. Then
// nothing more can happen: jobs are missing, which the checker will say. It stops, too, when
// opt.Drain passed.
func (r *run) drain(ctx context.Context, acked int) error {
	deadline := time.Now().Add(r.opt.Drain)
	var idleSince time.Time
	for {
		st, err := r.stats(ctx)
		idle := err == nil && st.Scheduled+st.Queued+st.InProgress == 0
		if idle && st.Completed+st.Dead >= int64(acked) {
			return nil
		}
		switch {
		case !idle:
			idleSince = time.Time{}
		case idleSince.IsZero():
			idleSince = time.Now()
		case time.Since(idleSince) > 2*time.Second:
			return fmt.Errorf("idle with %d completed and %d dead of %d acknowledged", st.Completed, st.Dead, acked)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if err != nil {
				return err
			}
			return fmt.Errorf("not drained after %s: %d scheduled, %d queued, %d in progress, %d completed, %d dead of %d",
				r.opt.Drain, st.Scheduled, st.Queued, st.InProgress, st.Completed, st.Dead, acked)
		}
		sleep(ctx, 50*time.Millisecond)
	}
}

// observe reads every acknowledged job's final state into the producer's ledger, and the end
// state of Redis.
func (r *run) observe(ctx context.Context, acked []string, led *Writer, elapsed time.Duration) (EndState, error) {
	client, err := pipeline.NewClient(r.admin, pipeline.ClientConfig{})
	if err != nil {
		return EndState{}, err
	}
	var newOnly *keyring.Keyring
	if r.keys != nil {
		// The client has no keys: what it reads is what Redis stores.
		if newOnly, err = r.keys.newOnly(); err != nil {
			return EndState{}, err
		}
	}
	for _, id := range acked {
		rec := Record{Kind: Observed, ID: id, Outcome: "missing"}
		j, err := client.Get(ctx, Queue, id)
		switch {
		case errors.Is(err, pipeline.ErrNotFound):
		case err != nil:
			return EndState{}, err
		default:
			rec.Outcome, rec.Attempt = string(j.Status), j.Attempt
			if newOnly != nil {
				observeSealed(&rec, j, newOnly)
			}
		}
		rec.At = time.Now().UnixMicro()
		if err := led.Write(rec); err != nil {
			return EndState{}, err
		}
	}
	var end EndState
	st, err := client.Stats(ctx, Queue)
	if err != nil {
		return end, err
	}
	end.Queued, end.InProgress, end.Scheduled = st.Queued, st.InProgress, st.Scheduled
	for _, q := range r.partitions() {
		p, err := r.admin.XPending(ctx, q.Stream, q.Group).Result()
		if err != nil && !strings.Contains(err.Error(), "NOGROUP") {
			return end, err
		}
		if p != nil {
			end.Pending += p.Count
		}
	}
	insp, err := pipeline.NewInspector(r.admin, pipeline.InspectorConfig{})
	if err != nil {
		return end, err
	}
	page := pipeline.Page{Limit: 1000}
	for {
		jp, err := insp.List(ctx, Queue, status.Failed, page)
		if err != nil {
			return end, err
		}
		for _, j := range jp.Jobs {
			end.Dead = append(end.Dead, j.ID)
		}
		if jp.Next == "" {
			break
		}
		page.Cursor = jp.Next
	}
	// Its own small server, or cluster: every master's keys, and every partition's unique
	// keys on whichever master holds them.
	var mu sync.Mutex
	err = r.eachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		var held int64
		for _, q := range r.partitions() {
			uniq, err := m.Keys(ctx, q.UniquePrefix+"*").Result()
			if err != nil {
				return err
			}
			held += int64(len(uniq))
		}
		n, err := m.DBSize(ctx).Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		end.UniqueKeys += held
		end.Keys += n
		return nil
	})
	if err != nil {
		return end, err
	}
	// Every acknowledged job's record is kept for the workers' retention; the rest is the
	// queue's own keys and its throughput history, which grows with time only.
	span := elapsed
	if slices.Contains(r.nemeses, NemesisClockStep) {
		// A stepped worker bins its outcomes by its own clock: up to a step before the run's
		// start or after its end.
		span += 2 * MaxClockStep
	}
	end.KeyBound = int64(len(acked)) + KeysPerQueue*int64(len(r.partitions())) + HistoryKeys(span) + int64(len(r.workflows))
	for _, id := range slices.Sorted(maps.Keys(r.workflows)) {
		ws, err := client.GetWorkflow(ctx, Queue, id)
		switch {
		case err != nil:
			end.Workflows = append(end.Workflows, fmt.Sprintf("%s: %v", id, err))
		case ws.Status != r.workflows[id]:
			end.Workflows = append(end.Workflows, fmt.Sprintf("%s ended %s, designed to end %s", id, ws.Status, r.workflows[id]))
		}
	}
	if r.sc.Workload.Limits {
		end.ConcurrencyLimit = LimitConcurrency
	}
	if r.keys != nil {
		end.SealKey = NewKey
		if end.Sealing, err = r.scanSealed(ctx, NewKey); err != nil {
			return end, err
		}
	}
	return end, nil
}

// publishWorkflow publishes workflow id, of the next kind in turn, sending it again after an
// error (the same id: a copy applied is found, not made twice) until acknowledged, and
// records each task's acknowledgement with its dependencies. It returns the tasks' job ids.
func (r *run) publishWorkflow(ctx context.Context, client *pipeline.Client, led *Writer, rng *rand.Rand, id string) ([]string, error) {
	work := func(w Work) pipeline.Task {
		p, _ := json.Marshal(w)
		return pipeline.Task{Type: JobType, Payload: p, Opts: []pipeline.Option{pipeline.WithMaxRetries(20)}}
	}
	ok := func() pipeline.Task { return work(Work{MS: 5 + rng.IntN(25)}) }
	dead := work(Work{MS: 5, Dead: true})
	dead.Opts = []pipeline.Option{pipeline.WithMaxRetries(1)}
	status := pipeline.WorkflowCompleted
	expect := map[string]string{} // task name: designed end, when not completed
	var wf pipeline.Workflow
	batch := false
	switch kind := len(r.workflows) % 4; kind {
	case 0, 1: // a diamond; the second one's b dies, and d, waiting for it, is canceled
		b := ok()
		if kind == 1 {
			b, status = dead, pipeline.WorkflowFailed
			expect["b"], expect["d"] = "failed", "canceled"
		}
		wf = pipeline.Workflow{Tasks: []pipeline.WorkflowTask{
			{Name: "a", Task: ok()}, {Name: "b", Task: b, After: []string{"a"}},
			{Name: "c", Task: ok(), After: []string{"a"}}, {Name: "d", Task: ok(), After: []string{"b", "c"}}}}
	case 2: // a fan-out of 50 and their join
		wf.Tasks = append(wf.Tasks, pipeline.WorkflowTask{Name: "root", Task: ok()})
		var all []string
		for k := range 50 {
			n := fmt.Sprintf("f%d", k)
			all = append(all, n)
			wf.Tasks = append(wf.Tasks, pipeline.WorkflowTask{Name: n, Task: ok(), After: []string{"root"}})
		}
		wf.Tasks = append(wf.Tasks, pipeline.WorkflowTask{Name: "join", Task: ok(), After: all})
	case 3: // a batch of 10, the 4th dying, and its callback
		batch, status = true, pipeline.WorkflowFailed
		expect["4"] = "failed"
		b := pipeline.Batch{ID: id}
		var all []string
		for k := range 10 {
			t := ok()
			if k == 3 {
				t = dead
			}
			b.Jobs = append(b.Jobs, t)
			all = append(all, strconv.Itoa(k+1))
		}
		cb := ok()
		b.Callback = &cb
		for k, t := range b.Jobs {
			wf.Tasks = append(wf.Tasks, pipeline.WorkflowTask{Name: strconv.Itoa(k + 1), Task: t})
		}
		// The library names a batch's callback task "callback" (pipeline.Batch).
		wf.Tasks = append(wf.Tasks, pipeline.WorkflowTask{Name: "callback", Task: cb, After: all, Finally: true})
		for {
			_, err := client.Batch(ctx, Queue, b)
			if err == nil {
				break
			}
			if errors.Is(err, pipeline.ErrInvalid) || ctx.Err() != nil {
				return nil, err
			}
			sleep(ctx, 20*time.Millisecond)
		}
	}
	wf.ID = id
	for !batch {
		_, err := client.Workflow(ctx, Queue, wf)
		if err == nil {
			break
		}
		if errors.Is(err, pipeline.ErrInvalid) || ctx.Err() != nil {
			return nil, err
		}
		sleep(ctx, 20*time.Millisecond)
	}
	if r.workflows == nil {
		r.workflows = map[string]pipeline.WorkflowStatus{}
	}
	r.workflows[id] = status
	at := time.Now().UnixMicro()
	ids := make([]string, 0, len(wf.Tasks))
	for _, t := range wf.Tasks {
		ack := Record{Kind: Ack, ID: id + "." + t.Name, At: at, Expect: cmp.Or(expect[t.Name], "completed"), Need: 1, Finally: t.Finally}
		switch ack.Expect {
		case "failed":
			ack.Need = 2
		case "canceled":
			r.canceled++
		}
		for _, a := range t.After {
			ack.After = append(ack.After, id+"."+a)
		}
		if err := led.Write(ack); err != nil {
			return nil, err
		}
		ids = append(ids, ack.ID)
	}
	return ids, nil
}

// setupWorkload creates the queue with the scenario's partitions and sets its limits, before
// any worker or producer uses it.
func (r *run) setupWorkload(ctx context.Context) error {
	w := r.sc.Workload
	if w.Partitions <= 1 && !w.Limits {
		return nil
	}
	insp, err := pipeline.NewInspector(r.admin, pipeline.InspectorConfig{})
	if err != nil {
		return err
	}
	// A limit needs its queue to exist.
	if _, err := insp.CreateQueue(ctx, Queue, pipeline.QueueOptions{Partitions: max(w.Partitions, 1)}); err != nil {
		return fmt.Errorf("torture: creating the queue (%d partitions): %w", w.Partitions, err)
	}
	if w.Limits {
		l := pipeline.Limit{Type: LimitedType, Concurrency: LimitConcurrency, Rate: LimitRate, Interval: time.Second}
		if err := insp.SetLimit(ctx, Queue, l); err != nil {
			return fmt.Errorf("torture: setting the limit: %w", err)
		}
	}
	return nil
}

// partitions are the keys of every partition of the queue (the queue alone when it has none).
func (r *run) partitions() []keyspace.QueueKeys {
	return keyspace.KeysOf(pipeline.DefaultPrefix, Queue, r.sc.Workload.Partitions)
}

// worker is one worker process, signalled by its recorded pid only.
type worker struct {
	name    string
	metrics string // where it serves /metrics (go_goroutines), once metricsAddr has read it
	cmd     *exec.Cmd
	done    chan struct{}
	out     string // its log file
	clock   string // its clock file (--torture-clock-file), with the clock-step nemesis
}

// startWorker starts a worker process: the conveyor binary's worker command, with the torture
// handler writing to the run's ledger.
func (r *run) startWorker() (*worker, error) {
	r.wmu.Lock()
	r.gen++
	name := fmt.Sprintf("w%d", r.gen)
	r.wmu.Unlock()
	out := filepath.Join(r.dir, "logs", name+".log")
	if err := os.MkdirAll(filepath.Dir(out), 0o700); err != nil {
		return nil, err
	}
	f, err := os.Create(out)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	args := []string{"worker", "--redis", r.url}
	if r.cluster != nil {
		args = append(args, "--cluster")
	}
	cmd := exec.Command(r.opt.Bin, append(args, "--prefix", pipeline.DefaultPrefix,
		"--queue", Queue, "--name", name, "--concurrency", fmt.Sprint(r.opt.Concurrency),
		"--visibility-timeout", r.opt.Visibility.String(), "--recovery-interval", "500ms",
		"--backoff-base", "100ms", "--backoff-max", "400ms", "--shutdown-timeout", "1s",
		"--heartbeat-interval", "0", "--log-level", "info", "--log-format", "json",
		// Port 0: the worker binds a port of its own and logs it (metricsAddr). A port found
		// free here and passed on could be taken by another process before the worker bound it
		// (scenarios run side by side): maxmemory's survivors twice had no /metrics under load.
		"--metrics-addr", "127.0.0.1:0", "--torture-ledger", r.ledger)...)
	clock := ""
	if slices.Contains(r.nemeses, NemesisClockStep) {
		clock = filepath.Join(r.dir, "clock", name)
		if err := os.MkdirAll(filepath.Dir(clock), 0o700); err != nil {
			return nil, err
		}
		cmd.Args = append(cmd.Args, "--torture-clock-file", clock)
	}
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "CONVEYOR_") }), r.keys.env()...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = redisproc.SysProcAttr() // dies with this process
	if err := redisproc.StartCmd(cmd); err != nil {
		return nil, fmt.Errorf("torture: starting a worker: %w", err)
	}
	w := &worker{name: name, cmd: cmd, done: make(chan struct{}), out: out, clock: clock}
	r.wmu.Lock()
	r.all = append(r.all, w)
	r.wmu.Unlock()
	go func() {
		_ = cmd.Wait()
		close(w.done)
	}()
	return w, nil
}

// kill SIGKILLs the worker (resuming it first is not needed: SIGKILL ends a stopped process)
// and waits until it is reaped.
func (w *worker) kill() {
	select {
	case <-w.done:
		return
	default:
	}
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	<-w.done
}

// term SIGTERMs the worker once it has installed its signal handler (its first log line), and
// waits for it to drain and exit; after 15 s it is killed.
func (w *worker) term() {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, _ := os.ReadFile(w.out); strings.Contains(string(b), "starting worker") {
			break
		}
		select {
		case <-w.done:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	_ = w.cmd.Process.Signal(syscall.SIGCONT)
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(15 * time.Second):
		w.kill()
	}
}

func (r *run) pids() string {
	var s []string
	for _, w := range r.workers {
		s = append(s, fmt.Sprint(w.cmd.Process.Pid))
	}
	return strings.Join(s, ",")
}

func cmpPos[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// GoroutineSlack is how many more goroutines than a fresh worker's a worker that lived
// through the run may have, idle, before it counts as leaking. Its connections and
// subscriptions may differ in number. A goroutine per fault would not stay within it for long.
const GoroutineSlack = 25

// goroutines compares each surviving worker's goroutines, idle after the drain, with those of
// a fresh worker started now and idle too (each read from go_goroutines on its /metrics until
// two reads 200 ms apart agree). It returns a line for each worker over the slack, or for a
// reading that failed.
func (r *run) goroutines(ctx context.Context) []string {
	control, err := r.startWorker()
	if err != nil {
		return []string{fmt.Sprintf("no control worker: %v", err)}
	}
	defer control.term()
	base, err := control.steadyGoroutines(ctx)
	if err != nil {
		return []string{fmt.Sprintf("control worker: %v", err)}
	}
	var out []string
	for _, w := range r.workers {
		n, err := w.steadyGoroutines(ctx)
		switch {
		case err != nil:
			out = append(out, fmt.Sprintf("%s: %v%s", w.name, err, w.exited()))
		case n > base+GoroutineSlack:
			out = append(out, fmt.Sprintf("%s has %d goroutines idle, a fresh worker %d (slack %d)", w.name, n, base, GoroutineSlack))
		default:
			r.log("%s has %d goroutines idle, a fresh worker %d", w.name, n, base)
		}
	}
	return out
}

// exited says, for a report, whether the worker's process had exited and how its log ends. A
// survivor whose metrics cannot be read may have died without a nemesis. Two loaded test runs
// of maxmemory saw it, and the test's removed directory kept nothing else to tell why.
func (w *worker) exited() string {
	select {
	case <-w.done:
	default:
		return " (its process is running)"
	}
	b, _ := os.ReadFile(w.out)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return fmt.Sprintf(" (its process had exited: %s; its log ends: %s)", w.cmd.ProcessState, strings.Join(lines[max(len(lines)-3, 0):], " | "))
}

// steadyGoroutines reads go_goroutines from the worker's /metrics until two reads 200 ms
// apart agree, for up to 10 s.
func (w *worker) steadyGoroutines(ctx context.Context) (int, error) {
	last := -1
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; sleep(ctx, 200*time.Millisecond) {
		var n int
		n, err = w.readGoroutines(ctx)
		if err != nil {
			continue
		}
		if n == last {
			return n, nil
		}
		last = n
	}
	if err == nil {
		err = cmp.Or(ctx.Err(), errors.New("go_goroutines did not settle in 10s"))
	}
	return 0, err
}

// metricsLogged is the worker's log line naming the address its /metrics listens on
// (internal/cli's serveMetrics, with --log-format json).
const metricsLogged = "serving Prometheus metrics"

// metricsAddr returns the address the worker's /metrics listens on, from its log line. It
// waits for that line, or for the worker's exit, for up to a minute. A worker logs it within
// a second of its start here, so a machine ten times slower has room.
func (w *worker) metricsAddr(ctx context.Context) (string, error) {
	if w.metrics != "" {
		return w.metrics, nil
	}
	for deadline := time.Now().Add(time.Minute); ; sleep(ctx, 20*time.Millisecond) {
		exited := false
		select {
		case <-w.done:
			exited = true // read the log once more: the line may have come before the exit
		default:
		}
		b, _ := os.ReadFile(w.out)
		for line := range strings.Lines(string(b)) {
			var e struct {
				Message string `json:"message"`
				Addr    string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &e) == nil && e.Message == metricsLogged && e.Addr != "" {
				w.metrics = e.Addr
				return e.Addr, nil
			}
		}
		switch {
		case exited:
			return "", errors.New("exited before it served /metrics")
		case ctx.Err() != nil:
			return "", ctx.Err()
		case time.Now().After(deadline):
			return "", fmt.Errorf("no %q line in its log within a minute", metricsLogged)
		}
	}
}

func (w *worker) readGoroutines(ctx context.Context) (int, error) {
	addr, err := w.metricsAddr(ctx)
	if err != nil {
		return 0, err
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, errors.New("no go_goroutines in /metrics")
}
