// Command cmdcount measures what one job costs in Redis commands, Redis CPU and Go CPU. It runs
// Conveyor alone on a private redis-server. A busy machine does not move these figures as it
// moves throughput (docs/BENCHMARKS.md, "Issue 16: the live workload's cost, by command count").
//
// Modes (-mode):
//
//	live     the compare bench's live workload: a ready worker (Concurrency 300, ReadBatch 150)
//	         while 4 goroutines publish EnqueueBatch chunks of 100; ends when all completed
//	publish  the same publishes with no worker
//	consume  N jobs preloaded (chunks of 1000), then a worker drains them
//
// Around the measured phase it runs CONFIG RESETSTAT, then reads INFO commandstats and INFO cpu.
// It reads this process's CPU time (getrusage). The worker and the publisher run in this
// process. With -cpuprofile their goroutines carry the pprof label role=worker or
// role=publisher. So `go tool pprof -tagfocus role=worker` splits the profile. It prints the
// process's allocations per job, which a busy machine does not move; -memprofile writes where
// they come from.
//
// The driver polls the stats hash for the completed count (HGET) and reads INFO. Those calls are
// left out of the figures.
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/pipeline"
)

func main() {
	mode := flag.String("mode", "live", "live, publish or consume")
	n := flag.Int("jobs", 100000, "jobs")
	conc := flag.Int("conveyor-concurrency", 300, "WorkerConfig.Concurrency")
	batch := flag.Int("conveyor-batch", 150, "WorkerConfig.ReadBatch")
	addr := flag.String("redis", "", "Redis address (default: start a private redis-server); it is flushed")
	prof := flag.String("cpuprofile", "", "write a CPU profile of the measured phase here")
	flag.StringVar(&memProf, "memprofile", "", "write an allocation profile here at the end of the measured phase, and FILE.start at its start (pprof -base FILE.start FILE)")
	flag.IntVar(&payloadBytes, "payload-bytes", 100, "payload size of every job")
	flag.IntVar(&maxWaiting, "max-waiting", 0, "set the queue's max_waiting (policy reject) before publishing: a bound set and, when large, never reached")
	flag.BoolVar(&single, "single", false, "publish with Enqueue, one job a call, instead of EnqueueBatch chunks")
	flag.BoolVar(&distinct, "distinct", false, "give every job payload bytes of its own (random) instead of one payload for all: Redis's Lua interns equal strings once, a saving real traffic does not see")
	flag.BoolVar(&sealed, "keys", false, "seal payloads and results (ClientConfig.Keys, WorkerConfig.Keys), as the compare bench's conveyor_keys")
	flag.BoolVar(&callgrind, "callgrind", false, "the server at -redis runs under valgrind --tool=callgrind --instr-atstart=no: instrument it during the measured phase only")
	flag.Parse()
	if err := run(*mode, *n, *conc, *batch, *addr, *prof); err != nil {
		fmt.Fprintln(os.Stderr, "cmdcount:", err)
		os.Exit(1)
	}
}

// callgrind, memProf, payloadBytes and sealed: see their flags.
var (
	callgrind    bool
	memProf      string
	payloadBytes int
	sealed       bool
	distinct     bool
	maxWaiting   int
	single       bool
)

// ring is the keyring of -keys: a fixed key, since only the cost is measured.
func ring() *keyring.Keyring {
	if !sealed {
		return nil
	}
	k, err := keyring.Parse("bench AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=")
	if err != nil {
		panic(err)
	}
	return k
}

// instrument turns the callgrind instrumentation of the server's process on or off.
func instrument(ctx context.Context, admin *redis.Client, on bool) error {
	if !callgrind {
		return nil
	}
	info, err := admin.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	pid := ""
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid = v
		}
	}
	arg := map[bool]string{true: "on", false: "off"}[on]
	if out, err := exec.CommandContext(ctx, "callgrind_control", "-i", arg, pid).CombinedOutput(); err != nil {
		return fmt.Errorf("callgrind_control -i %s %s: %v: %s", arg, pid, err, out)
	}
	return nil
}

func run(mode string, n, conc, batch int, addr, prof string) error {
	ctx := context.Background()
	if addr == "" {
		srv, err := redistest.StartProcess()
		if err != nil {
			return err
		}
		defer srv.Stop()
		addr = srv.Addr
	}
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	if err := admin.FlushAll(ctx).Err(); err != nil {
		return err
	}
	const queue = "cmdcount"
	prdb := redis.NewClient(&redis.Options{Addr: addr})
	defer prdb.Close()
	pubSent, workSent := newCounter(), newCounter()
	prdb.AddHook(pubSent)
	client, err := pipeline.NewClient(prdb, pipeline.ClientConfig{Keys: ring()})
	if err != nil {
		return err
	}
	stats := keys.New(client.Prefix(), queue).Stats()
	if maxWaiting > 0 {
		in, err := pipeline.NewInspector(prdb, pipeline.InspectorConfig{})
		if err != nil {
			return err
		}
		if _, err := in.CreateQueue(ctx, queue, pipeline.QueueOptions{}); err != nil {
			return err
		}
		if _, err := in.UpdateQueue(ctx, queue, pipeline.QueuePatch{MaxWaiting: &maxWaiting}); err != nil {
			return err
		}
	}
	payload := []byte(strings.Repeat("x", payloadBytes))

	if mode == "consume" {
		if err := publish(ctx, client, queue, n, 1000, 1, payload); err != nil {
			return err
		}
	}
	var handled atomic.Int64
	var stop func() error
	if mode != "publish" {
		var err error
		if stop, err = startWorker(ctx, addr, queue, conc, batch, &handled, workSent); err != nil {
			return err
		}
	}

	var polls int64
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		return err
	}
	if prof != "" {
		f, err := os.Create(prof)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	if err := instrument(ctx, admin, true); err != nil {
		return err
	}
	pubSent.active.Store(true)
	workSent.active.Store(true)
	if memProf != "" {
		// The measured phase's allocations alone: pprof -base FILE.start FILE.
		if err := writeHeap(memProf + ".start"); err != nil {
			return err
		}
	}
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0 := selfCPU()
	t0 := time.Now()
	if mode != "consume" {
		var err error
		pprof.Do(ctx, pprof.Labels("role", "publisher"), func(ctx context.Context) {
			err = publish(ctx, client, queue, n, 100, 4, payload)
		})
		if err != nil {
			return err
		}
	}
	if mode != "publish" {
		for {
			polls++
			done, err := admin.HGet(ctx, stats, "completed").Int64()
			if err != nil && err != redis.Nil {
				return err
			}
			if done >= int64(n) {
				break
			}
			if time.Since(t0) > 10*time.Minute {
				return fmt.Errorf("%d of %d completed after 10m", done, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wall := time.Since(t0)
	cpu := selfCPU() - cpu0
	runtime.ReadMemStats(&ms1)
	allocs := ms1.Mallocs - ms0.Mallocs
	bytes := ms1.TotalAlloc - ms0.TotalAlloc
	pubSent.active.Store(false)
	workSent.active.Store(false)
	if err := instrument(ctx, admin, false); err != nil {
		return err
	}
	if prof != "" {
		pprof.StopCPUProfile()
	}
	if memProf != "" {
		if err := writeHeap(memProf); err != nil {
			return err
		}
	}
	cmdstats, err := admin.Info(ctx, "commandstats").Result()
	if err != nil {
		return err
	}
	cpuInfo, err := admin.Info(ctx, "cpu").Result()
	if err != nil {
		return err
	}
	if stop != nil {
		if err := stop(); err != nil {
			return err
		}
	}
	report(mode, n, wall, cpu, polls, cmdstats, cpuInfo, pubSent, workSent)
	fmt.Printf("go allocs/job %.1f, go alloc bytes/job %.0f (the whole process: in consume mode the worker and the driver's polls)\n",
		float64(allocs)/float64(n), float64(bytes)/float64(n))
	return nil
}

// writeHeap writes the allocation profile (pprof -sample_index=alloc_space or alloc_objects).
func writeHeap(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("allocs").WriteTo(f, 0)
}

// publish sends n jobs with EnqueueBatch in chunks of size from g goroutines, as the compare
// bench's Live (size 100, 4 goroutines) and Preload (1000, 1) do.
func publish(ctx context.Context, c *pipeline.Client, queue string, n, size, g int, payload []byte) error {
	tasks := make([]pipeline.Task, size)
	for i := range tasks {
		tasks[i] = pipeline.Task{Type: "noop", Payload: payload}
	}
	var claimed atomic.Int64
	errs := make(chan error, g)
	for range g {
		go func() {
			for {
				end := claimed.Add(int64(size))
				start := end - int64(size)
				if start >= int64(n) {
					errs <- nil
					return
				}
				chunk := tasks[:min(end, int64(n))-start]
				if distinct {
					chunk = make([]pipeline.Task, len(chunk))
					for i := range chunk {
						p := make([]byte, len(payload))
						_, _ = rand.Read(p)
						chunk[i] = pipeline.Task{Type: "noop", Payload: p}
					}
				}
				if single {
					for _, t := range chunk {
						if _, err := c.Enqueue(ctx, queue, t); err != nil {
							errs <- err
							return
						}
					}
					continue
				}
				if _, err := c.EnqueueBatch(ctx, queue, chunk); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var first error
	for range g {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func startWorker(ctx context.Context, addr, queue string, conc, batch int, handled *atomic.Int64, sent *counter) (func() error, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	rdb.AddHook(sent)
	w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{
		Queues:          []string{queue},
		Concurrency:     conc,
		ReadBatch:       batch,
		ShutdownTimeout: 5 * time.Second,
		Logger:          zerolog.New(os.Stderr).Level(zerolog.WarnLevel),
		Keys:            ring(),
	})
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	w.Handle("noop", func(context.Context, *pipeline.Job) ([]byte, error) {
		handled.Add(1)
		return nil, nil
	})
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go pprof.Do(wctx, pprof.Labels("role", "worker"), func(ctx context.Context) { done <- w.Run(ctx) })
	select {
	case <-w.Ready():
	case err := <-done:
		cancel()
		return nil, fmt.Errorf("worker stopped before ready: %v", err)
	}
	return func() error {
		cancel()
		err := <-done
		rdb.Close()
		return err
	}, nil
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// report prints the per-job figures and the commands, by calls, as markdown rows.
func report(mode string, n int, wall, cpu time.Duration, polls int64, cmdstats, cpuInfo string, pubSent, workSent *counter) {
	type row struct {
		name        string
		calls, usec float64
	}
	var rows []row
	var total float64
	for _, line := range strings.Split(cmdstats, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		r := row{name: name}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			f, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				r.calls = f
			case "usec":
				r.usec = f
			}
		}
		switch name { // the driver's own
		case "hget":
			r.calls -= float64(polls)
		case "info", "config":
			continue
		}
		if r.calls <= 0 {
			continue
		}
		rows = append(rows, r)
		total += r.calls
	}
	redisCPU := 0.0
	for _, line := range strings.Split(cpuInfo, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			redisCPU += f
		}
	}
	slices.SortFunc(rows, func(a, b row) int { return int(b.calls - a.calls) })
	per := func(x float64) float64 { return x / float64(n) }
	fmt.Printf("mode %s, %d jobs, %.1fs: redis commands/job %.3f (commandstats, a script's own calls counted too), redis cpu us/job %.2f, go cpu us/job %.2f\n",
		mode, n, wall.Seconds(), per(total), per(redisCPU*1e6), float64(cpu.Microseconds())/float64(n))
	fmt.Println("publisher sent/job", pubSent.String(n))
	fmt.Println("worker sent/job", workSent.String(n))
	fmt.Println("| command | calls/job | usec/job |")
	fmt.Println("|---|---:|---:|")
	for _, r := range rows {
		fmt.Printf("| %s | %.4f | %.3f |\n", r.name, per(r.calls), per(r.usec))
	}
}

// counter is a go-redis hook that counts the commands a client sends, by name, and the round
// trips. A script call is named by its SHA's first 8 digits and its first key's last part.
type counter struct {
	mu     sync.Mutex
	by     map[string]int64
	trips  int64
	active atomic.Bool
}

func newCounter() *counter { return &counter{by: map[string]int64{}} }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(cmd)
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.count(cmds...)
		return next(ctx, cmds)
	}
}

func (c *counter) count(cmds ...redis.Cmder) {
	if !c.active.Load() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trips++
	for _, cmd := range cmds {
		name := cmd.Name()
		if args := cmd.Args(); (name == "evalsha" || name == "eval") && len(args) > 3 {
			sha := fmt.Sprint(args[1])
			if name == "eval" {
				sha = "src"
			}
			k := fmt.Sprint(args[3])
			if i := strings.LastIndexAny(k, "}:"); i >= 0 {
				k = k[i+1:]
			}
			name = fmt.Sprintf("%s[%.8s %s]", name, sha, k)
		}
		c.by[name]++
	}
}

func (c *counter) String(n int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var total int64
	names := make([]string, 0, len(c.by))
	for k, v := range c.by {
		names = append(names, k)
		total += v
	}
	slices.SortFunc(names, func(a, b string) int { return int(c.by[b] - c.by[a]) })
	var b strings.Builder
	fmt.Fprintf(&b, "%.3f in %.3f round trips:", float64(total)/float64(n), float64(c.trips)/float64(n))
	for _, k := range names {
		fmt.Fprintf(&b, " %s %.4f", k, float64(c.by[k])/float64(n))
	}
	return b.String()
}
