package torture

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"syscall"
	"time"

	"github.com/conveyorq/conveyor/keyspace"
	"github.com/conveyorq/conveyor/pipeline"
)

// The nemeses. Each strikes when the run's schedule says and heals before it returns. A
// killed process is restarted, a stopped one resumed. So they compose. A scenario's nemeses
// are drawn by the seeded generator, one a tick. One tick in three, a worker nemesis and a
// Redis or network one strike at once.
const (
	// NemesisKillWorker SIGKILLs one worker process and starts another in its place.
	NemesisKillWorker = "kill-worker"
	// NemesisStopWorker SIGSTOPs one worker for longer than the visibility timeout, then
	// SIGCONTs it: its jobs run elsewhere meanwhile, and its late outcomes must be refused.
	NemesisStopWorker = "stop-worker"
	// NemesisTermWorker SIGTERMs one worker (it drains for its shutdown timeout and puts back
	// what did not finish) and starts another in its place.
	NemesisTermWorker = "term-worker"
	// NemesisRedisRestart SIGKILLs the redis-server and starts it again on the same port and
	// AOF (appendfsync always: every acknowledged write is on disk before its reply).
	NemesisRedisRestart = "redis-restart"
	// NemesisRedisStop SIGSTOPs the redis-server for 1 to 2.5 s, then SIGCONTs it.
	NemesisRedisStop = "redis-stop"
	// NemesisProxyReset makes the proxy between Redis and every client (workers and producer)
	// lose the next replies (the command applied, its answer never seen) and cut every
	// connection.
	NemesisProxyReset = "proxy-reset"
	// NemesisScriptFlush empties Redis's script cache (SCRIPT FLUSH): every EVALSHA fails
	// with NOSCRIPT until the client sends the script again.
	NemesisScriptFlush = "script-flush"
	// NemesisMaxmemory sets Redis's maxmemory just above its used_memory (policy noeviction)
	// for 1 to 3 s, so that writes are refused with OOM, then restores it: workers must keep
	// their outcomes and write them again, the producer publish again, nothing lost.
	NemesisMaxmemory = "maxmemory"
)

// NemesisLoseJob is the suite's self-test, not a fault Conveyor is meant to survive. It
// deletes the latest-due scheduled job behind Conveyor's back (ZPOPMAX of the scheduled set,
// DEL of its record). So the checker must find one job lost, and the run must fail. It proves
// the checks are not vacuous; no scenario uses it.
const NemesisLoseJob = "lose-job"

// Nemeses names every nemesis, for --nemesis.
var Nemeses = []string{NemesisKillWorker, NemesisStopWorker, NemesisTermWorker,
	NemesisRedisRestart, NemesisRedisStop, NemesisProxyReset, NemesisScriptFlush}

func init() { Nemeses = append(Nemeses, NemesisMaxmemory) }

// NemesisClockStep steps one worker's wall clock (WorkerConfig.Now, through its clock file:
// Clock) forward or back by 2 to 30 s, holds it a tick or two, then steps it back to the
// true time. What the worker stamps moves (attempt times, retry due times, history); due
// times, promotion, recovery and leases are Redis's clock and must not. It cuts nothing
// short: it allows no duplicate execution.
const NemesisClockStep = "clock-step"

// MaxClockStep is the largest step NemesisClockStep makes.
const MaxClockStep = 30 * time.Second

func init() { Nemeses = append(Nemeses, NemesisClockStep) }

// clockStep is NemesisClockStep. It runs beside a worker nemesis, which may replace the
// stepped worker meanwhile: the step then ends with its process, and the heal writes to a
// file nobody reads.
func (r *run) clockStep(ctx context.Context, rng *rand.Rand) error {
	r.wmu.Lock()
	w := r.workers[rng.IntN(len(r.workers))]
	r.wmu.Unlock()
	step := 2*time.Second + time.Duration(rng.Int64N(int64(MaxClockStep-2*time.Second)+1)).Truncate(time.Millisecond)
	if rng.IntN(2) == 0 {
		step = -step
	}
	if err := WriteOffset(w.clock, step); err != nil {
		return err
	}
	r.log("clock-step: %s's clock %+.3fs", w.name, step.Seconds())
	lo, hi := time.Second, 3*time.Second // a tick or two of strikeUntil's schedule
	if r.size.Duration < 10*time.Second {
		lo, hi = 500*time.Millisecond, 1500*time.Millisecond
	}
	sleep(ctx, lo+time.Duration(rng.Int64N(int64(2*hi-lo))))
	return WriteOffset(w.clock, 0) // the heal, whether or not ctx ended
}

// strike applies nemesis n once and heals it. It returns how many processes whose attempts
// it may have cut short it touched: a worker fault one worker, a Redis or network fault every
// worker.
func (r *run) strike(ctx context.Context, n string, rng *rand.Rand) (touched int, err error) {
	switch n {
	case NemesisKillWorker, NemesisTermWorker, NemesisStopWorker:
		r.slotMu.Lock() // the encryption workload's rotation restarts workers too
		defer r.slotMu.Unlock()
		i := rng.IntN(len(r.workers))
		r.wmu.Lock()
		w := r.workers[i]
		r.wmu.Unlock()
		switch n {
		case NemesisKillWorker:
			kerr := r.killWorker(ctx, w)
			err = errors.Join(kerr, r.replaceWorker(i))
		case NemesisTermWorker:
			w.term()
			err = r.replaceWorker(i)
		case NemesisStopWorker:
			err = r.stopWorker(ctx, w, r.opt.Visibility+time.Second)
		}
		return 1, err
	case NemesisRedisRestart:
		r.redis.Kill()
		return len(r.workers), r.redis.Restart()
	case NemesisRedisStop:
		if err := r.redis.Signal(syscall.SIGSTOP); err != nil {
			return 0, err
		}
		sleep(ctx, time.Second+time.Duration(rng.IntN(1500))*time.Millisecond)
		return len(r.workers), r.redis.Signal(syscall.SIGCONT)
	case NemesisProxyReset:
		r.proxy.DropNextReplies(1 + rng.IntN(5))
		r.proxy.CutAll()
		return len(r.workers), nil
	case NemesisScriptFlush:
		return len(r.workers), r.admin.ScriptFlush(ctx).Err()
	case NemesisMaxmemory:
		return len(r.workers), r.maxmemorySpell(ctx, rng)
	case NemesisClockStep:
		return 0, r.clockStep(ctx, rng)
	case NemesisSlotMove, NemesisReplicaPromote, NemesisMasterKill:
		return r.strikeCluster(ctx, n, rng)
	case NemesisSentinelFailover, NemesisSentinelMasterKill:
		return r.strikeSentinel(ctx, n)
	case NemesisLoseJob:
		q := keyspace.KeysOf(pipeline.DefaultPrefix, Queue, 1)[0]
		zs, err := r.admin.ZPopMax(ctx, q.Scheduled).Result()
		if err != nil || len(zs) == 0 {
			return 0, err
		}
		id, _ := zs[0].Member.(string)
		r.log("lose-job deleted scheduled job %s", id)
		return 0, r.admin.Del(ctx, q.JobPrefix+id).Err()
	}
	return 0, nil
}

// maxmemorySpell sets maxmemory a little above used_memory, so that the next writes are
// refused (OOM command not allowed when used memory > 'maxmemory'), for 1 to 3 s, then sets
// it back to unlimited. A restart of Redis meanwhile (another nemesis) forgets the setting,
// which only ends the spell early.
func (r *run) maxmemorySpell(ctx context.Context, rng *rand.Rand) error {
	info, err := r.admin.InfoMap(ctx, "memory").Result()
	if err != nil {
		return err
	}
	used, err := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
	if err != nil {
		return fmt.Errorf("used_memory: %w", err)
	}
	if err := r.admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		return err
	}
	if err := r.admin.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+64<<10, 10)).Err(); err != nil {
		return err
	}
	sleep(ctx, time.Second+time.Duration(rng.IntN(2000))*time.Millisecond)
	if st, err := r.admin.InfoMap(ctx, "errorstats").Result(); err == nil {
		r.log("maxmemory spell: %s", cmp.Or(st["Errorstats"]["errorstat_OOM"], "no write refused yet"))
	}
	// The restore must not give up with the run's context: a spell left on fails the drain.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for {
		err := r.admin.ConfigSet(rctx, "maxmemory", "0").Err()
		if err == nil || rctx.Err() != nil {
			return err
		}
		sleep(rctx, 50*time.Millisecond)
	}
}

// replaceWorker starts a worker in slot i, under wmu: clock-step, which may strike at once,
// reads the slots.
func (r *run) replaceWorker(i int) error {
	w, err := r.startWorker()
	r.wmu.Lock()
	r.workers[i] = w
	r.wmu.Unlock()
	return err
}

// workerNemesis tells the nemeses that strike one worker from those that strike Redis or
// the network (every worker at once).
func workerNemesis(n string) bool {
	return n == NemesisKillWorker || n == NemesisStopWorker || n == NemesisTermWorker
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
