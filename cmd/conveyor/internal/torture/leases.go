package torture

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/conveyorq/conveyor/keyspace"
)

// leaseLostLogged is the words of a worker's warning that its lease of its queue's limits ran
// out (internal/engine's LeaseBook).
const leaseLostLogged = "lease of its queue's limits ran out"

// logTime is the layout of a worker log's time (internal/cli, with --log-format json).
const logTime = "2006-01-02T15:04:05.000Z07:00"

// killWorker SIGKILLs w for a nemesis and records it (Kill), with whether its lease was still
// in Redis once it was dead.
func (r *run) killWorker(ctx context.Context, w *worker) error {
	at := time.Now().UnixMicro()
	w.kill()
	return r.nem.Write(Record{Kind: Kill, ID: w.name, PID: w.cmd.Process.Pid, At: at, Outcome: r.leaseHeld(ctx, w.name)})
}

// stopWorker SIGSTOPs w for a nemesis, for d, and records it (Stop, then Cont). Whether its
// lease is in Redis is read once every thread of it has stopped: kill returns before.
func (r *run) stopWorker(ctx context.Context, w *worker, d time.Duration) error {
	at := time.Now().UnixMicro()
	_ = w.cmd.Process.Signal(syscall.SIGSTOP)
	held := "gone"
	if w.waitStopped(ctx) {
		held = r.leaseHeld(ctx, w.name)
	}
	err := r.nem.Write(Record{Kind: Stop, ID: w.name, PID: w.cmd.Process.Pid, At: at, Outcome: held})
	sleep(ctx, d)
	_ = w.cmd.Process.Signal(syscall.SIGCONT)
	if cerr := r.nem.Write(Record{Kind: Cont, ID: w.name, PID: w.cmd.Process.Pid, At: time.Now().UnixMicro()}); err == nil {
		err = cerr
	}
	return err
}

// leaseHeld says whether a lease of worker name's is in Redis: "held", else "gone" (none, no
// limits in the run, or no answer). Only the worker makes its lease; it is taken back when it
// ran out (limits.lua's cv_reap_holders).
func (r *run) leaseHeld(ctx context.Context, name string) string {
	if !r.sc.Workload.Limits {
		return "gone"
	}
	hz := keyspace.KeysOf("", Queue, 1)[0].LimitPrefix + "hz:"
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	holders, err := r.admin.ZRange(cctx, hz, 0, -1).Result()
	if err != nil {
		return "gone"
	}
	for _, h := range holders {
		if strings.HasPrefix(h, name+"/") {
			return "held"
		}
	}
	return "gone"
}

// waitStopped waits until every thread of w is stopped (state T in /proc), for up to 20 s. It
// reports whether they did.
func (w *worker) waitStopped(ctx context.Context) bool {
	dir := fmt.Sprintf("/proc/%d/task", w.cmd.Process.Pid)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; sleep(ctx, time.Millisecond) {
		tasks, err := os.ReadDir(dir)
		if err != nil {
			return false
		}
		stopped := true
		for _, task := range tasks {
			stat, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
			if err != nil {
				stopped = false // a thread that just ended: look again
				break
			}
			// The state follows the command, which is in parentheses and may hold spaces.
			f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
			if len(f) == 0 || (f[0] != "T" && f[0] != "t") {
				stopped = false
				break
			}
		}
		if stopped {
			return true
		}
	}
	return false
}

// leaseWarnings records every warning of a lease run out in the logs of the workers started
// (LeaseLost), once they have all exited.
func (r *run) leaseWarnings() error {
	for _, w := range r.all {
		b, err := os.ReadFile(w.out)
		if err != nil {
			return err
		}
		for line := range strings.Lines(string(b)) {
			if !strings.Contains(line, leaseLostLogged) {
				continue
			}
			var e struct {
				Time    string `json:"time"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal([]byte(line), &e); err != nil || !strings.Contains(e.Message, leaseLostLogged) {
				continue
			}
			t, err := time.Parse(logTime, e.Time)
			if err != nil {
				return fmt.Errorf("torture: %s: a lease warning's time: %w", w.out, err)
			}
			if err := r.nem.Write(Record{Kind: LeaseLost, ID: w.name, PID: w.cmd.Process.Pid, At: t.UnixMicro() + LogTick}); err != nil {
				return err
			}
		}
	}
	return nil
}
