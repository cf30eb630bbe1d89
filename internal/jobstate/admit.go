package jobstate

import (
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
)

var (
	//go:embed admit.lua
	admitSrc    string
	admitScript = script.New(admitSrc)
)

// AdmitItem is one job a worker read and holds the stream entry of, to admit before its
// handler runs: its id, entry, type and the attempt the entry starts.
type AdmitItem struct {
	ID, Entry, Type string
	Attempt         int
}

// Admission is admit.lua's answer for one job: Code script.OK (granted: run it; its
// concurrency slots are taken), script.Deferred (over a limit: the job is scheduled again
// and its entry gone, so the worker settles the message without running it; Due is when a
// rate frees, zero when it waits for a concurrency slot) or script.Refused (the job moved on;
// nothing to run).
type Admission struct {
	Code script.Code
	Due  time.Time
}

// AdmitCall is one admit.lua call holding items, all of queue q, to q's limits.
func AdmitCall(q *keys.Queue, items []AdmitItem) script.Call {
	ks := make([]string, 0, 4+len(items))
	ks = append(ks, q.Stream(), q.Scheduled(), q.Stats(), q.Limits())
	args := make([]any, 0, 4+4*len(items))
	args = append(args, keys.Group, q.LimitPrefix(), q.Wake(), q.JobPrefix())
	for i := range items {
		it := &items[i]
		ks = append(ks, q.Job(it.ID))
		args = append(args, it.ID, it.Entry, it.Type, strconv.Itoa(it.Attempt))
	}
	return script.Call{Script: admitScript, Keys: ks, Args: args}
}

// AdmitReply reads the reply of an AdmitCall of n items.
func AdmitReply(cmd *redis.Cmd, n int) ([]Admission, error) {
	r, err := decode("admit", cmd)
	if err == nil {
		err = r.want(2 * n)
	}
	if err != nil {
		return nil, err
	}
	out := make([]Admission, n)
	for k := range out {
		out[k].Code = script.Code(r.int(2 * k))
		switch out[k].Code {
		case script.OK, script.Refused:
		case script.Deferred:
			if s := r.str(2*k + 1); s != "" {
				ms, err := strconv.ParseInt(s, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("admit: due time %q: %w", s, err)
				}
				out[k].Due = time.UnixMilli(ms)
			}
		default:
			return nil, fmt.Errorf("admit: unexpected reply code %v", out[k].Code)
		}
	}
	return out, nil
}
