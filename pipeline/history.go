package pipeline

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/stream"
)

// The resolutions of a queue's history (Inspector.History): a bucket of HistoryStepFine kept
// for HistorySpanFine, and one of HistoryStepCoarse kept for HistorySpanCoarse.
const (
	HistoryStepFine   = 5 * time.Second
	HistorySpanFine   = time.Hour
	HistoryStepCoarse = time.Minute
	HistorySpanCoarse = 24 * time.Hour
)

// DefaultHistoryInterval is how often a worker adds the outcomes it counted to the history
// (WorkerConfig.HistoryInterval).
const DefaultHistoryInterval = 5 * time.Second

// historyRes is one resolution of the history: its buckets' length, how long they are kept,
// and its name in the keys (keys.Queue.History).
type historyRes struct {
	step, span time.Duration
	name       string
}

var historyResolutions = [...]historyRes{
	{HistoryStepFine, HistorySpanFine, "5s"},
	{HistoryStepCoarse, HistorySpanCoarse, "1m"},
}

func resolutionOf(step time.Duration) (historyRes, bool) {
	for _, r := range historyResolutions {
		if r.step == step {
			return r, true
		}
	}
	return historyRes{}, false
}

// bucketStart is the start, in unix seconds, of the bucket of step that holds t.
func bucketStart(t time.Time, step time.Duration) int64 {
	s := int64(step / time.Second)
	u := t.Unix()
	return u - ((u%s)+s)%s
}

// expiry is when the bucket that starts at start leaves r's span, and its key with it.
func (r historyRes) expiry(start int64) time.Time {
	return time.Unix(start, 0).Add(r.step + r.span)
}

// histAgg is what a worker counted of one queue in one fine bucket, not yet in Redis.
type histAgg struct {
	completed, failed, retried int64
	wait, exec                 histogram
}

func (a *histAgg) merge(o *histAgg) {
	a.completed += o.completed
	a.failed += o.failed
	a.retried += o.retried
	a.wait.merge(&o.wait)
	a.exec.merge(&o.exec)
}

type histBin struct {
	queue string
	start int64 // the fine bucket's start, unix seconds
}

// history is a worker's part of its queues' history. The completer tells it the outcomes
// Redis applied, chunk by chunk (written), which it counts in memory. Every interval it adds
// them to the history buckets in Redis in one pipelined call (flush). That is HINCRBY per
// counter and per non-empty histogram cell, at both resolutions. It covers each queue and all
// queues together (keys.HistoryAll). EXPIREAT on each bucket bounds the history. A job's hot
// path gains no call to Redis, and a flush costs a few dozen commands whatever the rate.
//
// A flush that fails is not tried again. The history then misses at most one interval of
// this worker's outcomes (the queues' counters, written by the scripts, miss nothing). A
// worker that is killed loses what it counted since its last flush the same way.
type history struct {
	store  jobstate.Backend
	prefix string
	every  time.Duration
	log    zerolog.Logger
	// now is the worker's wall clock (WorkerConfig.Now), which the bins' starts come from:
	// a bin's expiry is judged by it too.
	now func() time.Time

	mu   sync.Mutex
	bins map[histBin]*histAgg

	failing   bool // the last flush failed: log once a spell
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func newHistory(store jobstate.Backend, every time.Duration, log zerolog.Logger) *history {
	return &history{store: store, prefix: store.Prefix(), every: every, log: log.With().Str("component", "history").Logger(), now: time.Now,
		bins: make(map[histBin]*histAgg), stop: make(chan struct{}), done: make(chan struct{})}
}

// written counts the outcomes among ts that Redis applied (codes, one per transition) at
// time at. It counts completed, retried and dead ones, with their queue wait and execution
// time. The queue wait runs from the time of the stream entry (Redis's clock) to the
// handler's start (the worker's); a skew between the two shifts it. Start marks, snoozes and
// refused transitions count nothing. An unreadable entry counts as dead without times.
func (h *history) written(ts []transition, codes []script.Code, at time.Time) {
	if h == nil || len(ts) == 0 {
		return
	}
	start := bucketStart(at, HistoryStepFine)
	h.mu.Lock()
	defer h.mu.Unlock()
	var a *histAgg
	var name string
	for i := range ts {
		t := &ts[i]
		if t.Op == jobstate.OpStart || t.Op == jobstate.OpSnooze || codes[i] == script.Refused {
			continue
		}
		if a == nil || t.Queue.Name() != name {
			name = t.Queue.Name()
			a = h.bin(name, start)
		}
		switch {
		case t.Op == jobstate.OpDone:
			a.completed++
		case t.Op == jobstate.OpRetry && codes[i] != script.Died:
			a.retried++
		default:
			a.failed++
		}
		if t.Op == jobstate.OpPoison {
			continue
		}
		if e := stream.EntryTime(t.Entry); !e.IsZero() {
			a.wait.add(max(0, t.Began.Sub(e)))
		}
		a.exec.add(t.Took())
	}
}

func (h *history) bin(queue string, start int64) *histAgg {
	k := histBin{queue, start}
	a := h.bins[k]
	if a == nil {
		a = new(histAgg)
		h.bins[k] = a
	}
	return a
}

// run flushes every interval until close.
func (h *history) run() {
	defer close(h.done)
	t := time.NewTicker(h.every)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
			h.flush()
		}
	}
}

// close stops run and flushes what is left.
func (h *history) close() {
	if h == nil {
		return
	}
	h.closeOnce.Do(func() {
		close(h.stop)
		<-h.done
		h.flush()
	})
}

// flush adds what was counted since the last flush to Redis.
func (h *history) flush() {
	h.mu.Lock()
	bins := h.bins
	if len(bins) == 0 { // asked under the lock: the map stays the completer's
		h.mu.Unlock()
		return
	}
	h.bins = make(map[histBin]*histAgg, len(bins))
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), max(h.every, time.Second))
	defer cancel()
	now := h.now()
	var buckets []jobstate.HistoryBucket
	all := make(map[int64]*histAgg, 1)
	for b, a := range bins {
		q := keys.New(h.prefix, b.queue)
		buckets = addHistory(buckets, b.start, a, now, q.History)
		t := all[b.start]
		if t == nil {
			t = new(histAgg)
			all[b.start] = t
		}
		t.merge(a)
	}
	for start, a := range all {
		buckets = addHistory(buckets, start, a, now, func(res string, start int64) string { return keys.HistoryAll(h.prefix, res, start) })
	}
	err := h.store.AddHistory(ctx, buckets)
	switch {
	case err != nil && !h.failing:
		h.failing = true
		h.log.Warn().Err(rediserr.Wrap("history", err)).Int("queues", len(bins)).
			Msg("could not add outcomes to the queues' history; that interval is missing from it")
	case err == nil && h.failing:
		h.failing = false
		h.log.Info().Msg("adding outcomes to the queues' history again")
	}
}

// addHistory appends to bs what adds a to its bucket at each resolution, named by key, with
// the bucket's expiry. The a was counted in the fine bucket that starts at start. A bucket
// that has left its span already is skipped.
func addHistory(bs []jobstate.HistoryBucket, start int64, a *histAgg, now time.Time, key func(res string, start int64) string) []jobstate.HistoryBucket {
	for _, r := range historyResolutions {
		b := bucketStart(time.Unix(start, 0), r.step)
		exp := r.expiry(b)
		if !exp.After(now) {
			continue
		}
		hb := jobstate.HistoryBucket{Key: key(r.name, b), ExpireAt: exp}
		for _, f := range []struct {
			field string
			n     int64
		}{{keys.HistoryCompleted, a.completed}, {keys.HistoryFailed, a.failed}, {keys.HistoryRetried, a.retried}} {
			if f.n > 0 {
				hb.Counts = append(hb.Counts, jobstate.HistoryCount{Field: f.field, N: f.n})
			}
		}
		for c, n := range a.wait {
			if n > 0 {
				hb.Counts = append(hb.Counts, jobstate.HistoryCount{Field: keys.HistoryWait + strconv.Itoa(c), N: n})
			}
		}
		for c, n := range a.exec {
			if n > 0 {
				hb.Counts = append(hb.Counts, jobstate.HistoryCount{Field: keys.HistoryExec + strconv.Itoa(c), N: n})
			}
		}
		bs = append(bs, hb)
	}
	return bs
}

// Latency is a percentile summary of durations: how many there were and their 50th and 99th
// percentiles, each within 9% (above a millisecond; 500µs stands for anything under one).
type Latency struct {
	Count    int64
	P50, P99 time.Duration
}

func latencyOf(h *histogram) Latency {
	return Latency{Count: h.count(), P50: h.quantile(0.5), P99: h.quantile(0.99)}
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
	r, ok := resolutionOf(step)
	if !ok {
		return nil, invalid("history step %s: want %s or %s", step, HistoryStepFine, HistoryStepCoarse)
	}
	now := time.Now()
	last := bucketStart(now, step) - int64(step/time.Second) // the last whole bucket
	first := max(bucketStart(since, step), bucketStart(now.Add(-r.span), step)+int64(step/time.Second))
	first = min(first, last)
	q := keys.New(i.cfg.Prefix, queue)
	key := func(start int64) string {
		if queue == "" {
			return keys.HistoryAll(i.cfg.Prefix, r.name, start)
		}
		return q.History(r.name, start)
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
	var tw, tx histogram
	for k, cmd := range cmds {
		var wait, exec histogram
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
		tw.merge(&wait)
		tx.merge(&exec)
		out.Total.Completed += p.Completed
		out.Total.Failed += p.Failed
		out.Total.Retried += p.Retried
	}
	out.Total.At = out.Since
	out.Total.Wait, out.Total.Exec = latencyOf(&tw), latencyOf(&tx)
	return out, nil
}

// histField is the cell a history field names, in wait or exec; nil for a field that is none.
func histField(f string, wait, exec *histogram) *int64 {
	var h *histogram
	switch {
	case strings.HasPrefix(f, keys.HistoryWait):
		h = wait
	case strings.HasPrefix(f, keys.HistoryExec):
		h = exec
	default:
		return nil
	}
	c, err := strconv.Atoi(f[1:])
	if err != nil || c < 0 || c >= histCells {
		return nil
	}
	return &h[c]
}
