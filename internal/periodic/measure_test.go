package periodic

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
)

var (
	measureSchedules = flag.Int("periodic.measure-schedules", 0,
		"TestMeasureManySchedules: store this many schedules (0 skips the test)")
	measureDuration = flag.Duration("periodic.measure-duration", 30*time.Second,
		"TestMeasureManySchedules: how long each phase runs")
)

// TestMeasureManySchedules measures a scheduler among many stored schedules on a private
// Redis: first idle (every schedule @yearly: nothing due), its Redis commands a second and the
// CPU it and Redis use; then with ten @every 1s schedules among them, whether each of their
// ticks was enqueued, and how late. It logs the figures (docs/RELIABILITY.md) and fails when a
// tick is missing. Behind a flag: it takes minutes.
//
//	go test -count=1 -run TestMeasureManySchedules -v ./internal/periodic/ -args -periodic.measure-schedules 100000
func TestMeasureManySchedules(t *testing.T) {
	n := *measureSchedules
	if n == 0 {
		t.Skip("-periodic.measure-schedules N runs it")
	}
	ctx := t.Context()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	prefix := "measure"
	store := NewStore(rdb, prefix)
	start := time.Now()
	const chunk = 1000
	require.NoError(t, putScript.Load(ctx, rdb).Err()) // a pipeline's EVALSHA is not retried as EVAL
	for from := 0; from < n; from += chunk {
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for k := from; k < min(from+chunk, n); k++ {
				def := fmt.Sprintf(`{"name":"idle-%d","spec":"@yearly","queue":"q","type":"t","source":"api"}`, k)
				name := fmt.Sprintf("idle-%d", k)
				putScript.EvalSha(ctx, p, []string{keys.Schedules(prefix), keys.ScheduleState(prefix, name),
					keys.SchedulesPaused(prefix), keys.SchedulesDue(prefix), keys.SchedulesNames(prefix)},
					name, def, ms(time.Now()), DefaultMaxSchedules, ms(mustParse(t, "@yearly").Next(time.Now())))
			}
			return nil
		})
		require.NoError(t, err)
	}
	t.Logf("stored %d schedules in %s", n, time.Since(start).Round(time.Millisecond))

	var mu sync.Mutex
	late := map[string]time.Duration{} // tick id -> enqueued after its tick
	enqueue := func(ctx context.Context, d Def, tick time.Time, id string, missed bool) error {
		if err := rdb.SetNX(ctx, prefix+":job:"+id, "1", time.Hour).Err(); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if _, ok := late[id]; !ok {
			late[id] = time.Since(tick)
		}
		return nil
	}
	schedClient := srv.Client(t)
	cmds := redistest.CountCommands(schedClient)
	s, err := New(schedClient, Config{Prefix: prefix, Enqueue: enqueue})
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	defer s.Stop()

	phase := func(name string) {
		before, redisBefore, cpuBefore := cmds.All(), redisCPU(t, rdb), selfCPU()
		t0 := time.Now()
		time.Sleep(*measureDuration) // a measurement over a span of time, not a gate
		took := time.Since(t0).Seconds()
		t.Logf("%s, %d schedules: %.1f commands/s, scheduler process CPU %.2f%% of a core, Redis CPU %.2f%% of a core",
			name, n, float64(cmds.All()-before)/took, 100*(selfCPU()-cpuBefore).Seconds()/took,
			100*(redisCPU(t, rdb)-redisBefore).Seconds()/took)
	}
	phase("idle")

	const ticking = 10
	for k := range ticking {
		require.NoError(t, store.WithMax(n+ticking).Put(ctx, Def{Name: fmt.Sprintf("tick-%d", k), Spec: "@every 1s", Queue: "q", Type: "t"}, time.Now()))
	}
	from := time.Now().Add(2 * time.Second).Truncate(time.Second) // past the first read of the new schedules
	phase("ten @every 1s among them")
	to := time.Now().Add(-2 * time.Second).Truncate(time.Second) // ticks whose enqueue may still be under way are left out
	mu.Lock()
	defer mu.Unlock()
	var want, missing int
	var worst time.Duration
	var lates []string
	for k := range ticking {
		for tick := from; !tick.After(to); tick = tick.Add(time.Second) {
			want++
			d, ok := late[TickID(fmt.Sprintf("tick-%d", k), tick)]
			if !ok {
				missing++
				continue
			}
			worst = max(worst, d)
			if d > time.Second {
				lates = append(lates, d.Round(time.Millisecond).String())
			}
		}
	}
	t.Logf("ticks %s to %s: %d of %d enqueued, the latest %s after its tick; later than 1s: %d %v",
		from.Format(time.TimeOnly), to.Format(time.TimeOnly), want-missing, want, worst.Round(time.Millisecond), len(lates), lates)
	require.Zero(t, missing)
}

func mustParse(t *testing.T, spec string) Spec {
	s, err := Parse(spec)
	require.NoError(t, err)
	return s
}

// selfCPU is the CPU time (user and system) this process used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is the CPU time the server used, from INFO cpu.
func redisCPU(t *testing.T, rdb *redis.Client) time.Duration {
	info, err := rdb.Info(t.Context(), "cpu").Result()
	require.NoError(t, err)
	var sum float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			sum += f
		}
	}
	return time.Duration(sum * float64(time.Second))
}
