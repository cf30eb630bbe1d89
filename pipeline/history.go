package pipeline

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/conveyorq/conveyor/internal/engine"
	"github.com/conveyorq/conveyor/internal/keys"
)

// The resolutions of a queue's history (Inspector.History): a bucket of HistoryStepFine (5 s)
// kept an hour, and one of HistoryStepCoarse (1 min) kept a day.
const (
	HistoryStepFine   = engine.HistoryStepFine
	HistoryStepCoarse = engine.HistoryStepCoarse
)

// defaultHistoryInterval is how often a worker adds the outcomes it counted to the history
// (WorkerConfig.HistoryInterval).
const defaultHistoryInterval = 5 * time.Second

// Latency is a percentile summary of durations: how many there were and their 50th and 99th
// percentiles, each within 9% (above a millisecond; 500µs stands for anything under one).
type Latency struct {
	Count    int64
	P50, P99 time.Duration
}

func latencyOf(h *engine.Histogram) Latency {
	return Latency{Count: h.Count(), P50: h.Quantile(0.5), P99: h.Quantile(0.99)}
}

// HistoryPoint is one bucket of a queue's history: the outcomes the workers wrote in the
// Step that starts At. It has the queue wait and execution time of those attempts. The queue
// wait runs from publish (or the promotion of a scheduled or retried job) to the handler's
// start.
type HistoryPoint struct {
	At                         time.Time
	Completed, Failed, Retried int64
	Wait, Exec                 Latency
}

// History is a queue's recent throughput and latency, as Inspector.History reads it.
type History struct {
	// Queue is the queue's name; empty for all queues together.
	Queue string
	// Step is the length of each point's bucket.
	Step time.Duration
	// Since is the start of the first point.
	Since time.Time
	// Points has one point per Step from Since to the last whole bucket, oldest first,
	// buckets without outcomes included (as zeros).
	Points []HistoryPoint
	// Total sums the points: its At is Since, its latencies are those of every attempt in
	// the window.
	Total HistoryPoint
}

// History reads the history of queue (of all queues together when queue is empty) from
// since (clamped to the span kept) to now. The resolution step is HistoryStepFine (5 s
// buckets, kept an hour) or HistoryStepCoarse (1 min buckets, kept a day). The workers write
// it as they write outcomes (see WorkerConfig.HistoryInterval), so it outlives any reader. An
// API server started after the jobs ran shows them. It counts the outcomes a worker wrote
// (completed, retried, dead), not those of recovery or cancel.
//
// It is one pipelined read of one small hash per bucket: 180 for the last 15 minutes at the
// fine step. A queue that does not exist has an empty history, not an error; the caller asks
// QueueExists when it matters.
func (i *Inspector) History(ctx context.Context, queue string, step time.Duration, since time.Time) (*History, error) {
	if queue != "" {
		if err := i.check(queue, ""); err != nil {
			return nil, err
		}
	}
	r, ok := engine.ResolutionOf(step)
	if !ok {
		return nil, invalid("history step %s: want %s or %s", step, HistoryStepFine, HistoryStepCoarse)
	}
	now := time.Now()
	last := engine.BucketStart(now, step) - int64(step/time.Second) // the last whole bucket
	first := max(engine.BucketStart(since, step), engine.BucketStart(now.Add(-r.Span), step)+int64(step/time.Second))
	first = min(first, last)
	q := keys.New(i.cfg.Prefix, queue)
	key := func(start int64) string {
		if queue == "" {
			return keys.HistoryAll(i.cfg.Prefix, r.Name, start)
		}
		return q.History(r.Name, start)
	}
	var ks []string
	for b := first; b <= last; b += int64(step / time.Second) {
		ks = append(ks, key(b))
	}
	cmds, err := i.store.ReadHistory(ctx, ks)
	if err != nil {
		return nil, err
	}
	out := &History{Queue: queue, Step: step, Since: time.Unix(first, 0), Points: make([]HistoryPoint, len(cmds))}
	var tw, tx engine.Histogram
	for k, cmd := range cmds {
		var wait, exec engine.Histogram
		p := &out.Points[k]
		p.At = time.Unix(first+int64(k)*int64(step/time.Second), 0)
		for f, v := range cmd {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				continue // not ours: nothing to count
			}
			switch f {
			case keys.HistoryCompleted:
				p.Completed = n
			case keys.HistoryFailed:
				p.Failed = n
			case keys.HistoryRetried:
				p.Retried = n
			default:
				if h := histField(f, &wait, &exec); h != nil {
					*h += n
				}
			}
		}
		p.Wait, p.Exec = latencyOf(&wait), latencyOf(&exec)
		tw.Merge(&wait)
		tx.Merge(&exec)
		out.Total.Completed += p.Completed
		out.Total.Failed += p.Failed
		out.Total.Retried += p.Retried
	}
	out.Total.At = out.Since
	out.Total.Wait, out.Total.Exec = latencyOf(&tw), latencyOf(&tx)
	return out, nil
}

// histField is the cell a history field names, in wait or exec; nil for a field that is none.
func histField(f string, wait, exec *engine.Histogram) *int64 {
	var h *engine.Histogram
	switch {
	case strings.HasPrefix(f, keys.HistoryWait):
		h = wait
	case strings.HasPrefix(f, keys.HistoryExec):
		h = exec
	default:
		return nil
	}
	c, err := strconv.Atoi(f[1:])
	if err != nil || c < 0 || c >= engine.HistCells {
		return nil
	}
	return &h[c]
}
