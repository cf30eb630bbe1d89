package pipeline

import (
	"context"
	"time"

	"github.com/conveyorq/conveyor/internal/engine"
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
	first, ks := engine.HistoryKeys(i.cfg.Prefix, queue, r, since, time.Now())
	cmds, err := i.store.ReadHistory(ctx, ks)
	if err != nil {
		return nil, err
	}
	out := &History{Queue: queue, Step: step, Since: time.Unix(first, 0), Points: make([]HistoryPoint, len(cmds))}
	var total engine.Bucket
	for k, cmd := range cmds {
		b := engine.ReadBucket(cmd)
		out.Points[k] = pointOf(out.Since.Add(time.Duration(k)*step), &b)
		total.Merge(&b)
	}
	out.Total = pointOf(out.Since, &total)
	return out, nil
}

func pointOf(at time.Time, b *engine.Bucket) HistoryPoint {
	return HistoryPoint{At: at, Completed: b.Completed, Failed: b.Failed, Retried: b.Retried,
		Wait: latencyOf(&b.Wait), Exec: latencyOf(&b.Exec)}
}
