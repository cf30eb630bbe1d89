package engine

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

// The resolutions of a queue's history: a bucket of HistoryStepFine kept for
// HistorySpanFine, and one of HistoryStepCoarse kept for HistorySpanCoarse.
const (
	HistoryStepFine   = 5 * time.Second
	HistorySpanFine   = time.Hour
	HistoryStepCoarse = time.Minute
	HistorySpanCoarse = 24 * time.Hour
)

// Resolution is one resolution of the history: its buckets' length, how long they are kept,
// and its name in the keys (keys.Queue.History).
type Resolution struct {
	Step, Span time.Duration
	Name       string
}

// Resolutions are the history's resolutions, finest first.
var Resolutions = [...]Resolution{
	{HistoryStepFine, HistorySpanFine, "5s"},
	{HistoryStepCoarse, HistorySpanCoarse, "1m"},
}

// ResolutionOf is the resolution of buckets step long.
func ResolutionOf(step time.Duration) (Resolution, bool) {
	for _, r := range Resolutions {
		if r.Step == step {
			return r, true
		}
	}
	return Resolution{}, false
}

// BucketStart is the start, in unix seconds, of the bucket of step that holds t.
func BucketStart(t time.Time, step time.Duration) int64 {
	s := int64(step / time.Second)
	u := t.Unix()
	return u - ((u%s)+s)%s
}

// expiry is when the bucket that starts at start leaves r's span, and its key with it.
func (r Resolution) expiry(start int64) time.Time {
	return time.Unix(start, 0).Add(r.Step + r.Span)
}

// Bucket is the outcomes of a history bucket: what a worker counted of one queue in one fine
// bucket, not yet in Redis, or what a reader read back (ReadBucket).
type Bucket struct {
	Completed, Failed, Retried int64
	Wait, Exec                 Histogram
}

// Merge adds o's counts to b's.
func (b *Bucket) Merge(o *Bucket) {
	b.Completed += o.Completed
	b.Failed += o.Failed
	b.Retried += o.Retried
	b.Wait.Merge(&o.Wait)
	b.Exec.Merge(&o.Exec)
}

// HistoryKeys names the buckets of r that a read of queue's history (all queues' when queue
// is empty) covers: from the one that holds since, clamped to r's span, to the last whole one
// at now. first is the start of the first, in unix seconds.
func HistoryKeys(prefix, queue string, r Resolution, since, now time.Time) (first int64, ks []string) {
	secs := int64(r.Step / time.Second)
	last := BucketStart(now, r.Step) - secs
	first = min(max(BucketStart(since, r.Step), BucketStart(now.Add(-r.Span), r.Step)+secs), last)
	q := keys.New(prefix, queue)
	for b := first; b <= last; b += secs {
		if queue == "" {
			ks = append(ks, keys.HistoryAll(prefix, r.Name, b))
		} else {
			ks = append(ks, q.History(r.Name, b))
		}
	}
	return first, ks
}

// ReadBucket reads a bucket's hash as addHistory writes it. A field or value that is not one
// of its own counts nothing.
func ReadBucket(fields map[string]string) Bucket {
	var b Bucket
	for f, v := range fields {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			continue
		}
		switch f {
		case keys.HistoryCompleted:
			b.Completed = n
		case keys.HistoryFailed:
			b.Failed = n
		case keys.HistoryRetried:
			b.Retried = n
		default:
			if c := b.cell(f); c != nil {
				*c += n
			}
		}
	}
	return b
}

// cell is the histogram cell a bucket's field names (keys.HistoryWait or HistoryExec and the
// cell's number); nil for a field that is neither.
func (b *Bucket) cell(f string) *int64 {
	var h *Histogram
	switch {
	case strings.HasPrefix(f, keys.HistoryWait):
		h = &b.Wait
	case strings.HasPrefix(f, keys.HistoryExec):
		h = &b.Exec
	default:
		return nil
	}
	c, err := strconv.Atoi(f[1:])
	if err != nil || c < 0 || c >= HistCells {
		return nil
	}
	return &h[c]
}

type histBin struct {
	queue string
	start int64 // the fine bucket's start, unix seconds
}

// History is a worker's part of its queues' history. The completer tells it the outcomes
// Redis applied, chunk by chunk (Written), which it counts in memory. Every interval it adds
// them to the history buckets in Redis in one pipelined call (Flush). That is HINCRBY per
// counter and per non-empty histogram cell, at both resolutions. It covers each queue and all
// queues together (keys.HistoryAll). EXPIREAT on each bucket bounds the history. A job's hot
// path gains no call to Redis, and a flush costs a few dozen commands whatever the rate.
//
// A flush that fails is not tried again. The history then misses at most one interval of
// this worker's outcomes (the queues' counters, written by the scripts, miss nothing). A
// worker that is killed loses what it counted since its last flush the same way.
type History struct {
	store  jobstate.Backend
	prefix string
	every  time.Duration
	log    zerolog.Logger
	// Now is the worker's wall clock, which the bins' starts come from:
	// a bin's expiry is judged by it too.
	Now func() time.Time

	mu   sync.Mutex
	bins map[histBin]*Bucket

	failing   bool // the last flush failed: log once a spell
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// NewHistory returns a flusher of outcomes to the history every interval; run it with Run.
func NewHistory(store jobstate.Backend, every time.Duration, log zerolog.Logger) *History {
	return &History{store: store, prefix: store.Prefix(), every: every, log: log.With().Str("component", "history").Logger(), Now: time.Now,
		bins: make(map[histBin]*Bucket), stop: make(chan struct{}), done: make(chan struct{})}
}

// Written counts the outcomes among ts that Redis applied (codes, one per transition) at
// time at. It counts completed, retried and dead ones, with their queue wait and execution
// time. The queue wait runs from the time of the stream entry (Redis's clock) to the
// handler's start (the worker's); a skew between the two shifts it. Start marks, snoozes and
// refused transitions count nothing. An unreadable entry counts as dead without times.
func (h *History) Written(ts []jobstate.Transition, codes []script.Code, at time.Time) {
	if h == nil || len(ts) == 0 {
		return
	}
	start := BucketStart(at, HistoryStepFine)
	h.mu.Lock()
	defer h.mu.Unlock()
	var a *Bucket
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
			a.Completed++
		case t.Op == jobstate.OpRetry && codes[i] != script.Died:
			a.Retried++
		default:
			a.Failed++
		}
		if t.Op == jobstate.OpPoison {
			continue
		}
		if e := stream.EntryTime(t.Entry); !e.IsZero() {
			a.Wait.Add(max(0, t.Began.Sub(e)))
		}
		a.Exec.Add(t.Took())
	}
}

func (h *History) bin(queue string, start int64) *Bucket {
	k := histBin{queue, start}
	a := h.bins[k]
	if a == nil {
		a = new(Bucket)
		h.bins[k] = a
	}
	return a
}

// Run flushes every interval until Close.
func (h *History) Run() {
	defer close(h.done)
	t := time.NewTicker(h.every)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
			h.Flush()
		}
	}
}

// Close stops Run and flushes what is left.
func (h *History) Close() {
	if h == nil {
		return
	}
	h.closeOnce.Do(func() {
		close(h.stop)
		<-h.done
		h.Flush()
	})
}

// Flush adds what was counted since the last flush to Redis.
func (h *History) Flush() {
	h.mu.Lock()
	bins := h.bins
	if len(bins) == 0 { // asked under the lock: the map stays the completer's
		h.mu.Unlock()
		return
	}
	h.bins = make(map[histBin]*Bucket, len(bins))
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), max(h.every, time.Second))
	defer cancel()
	now := h.Now()
	var buckets []jobstate.HistoryBucket
	all := make(map[int64]*Bucket, 1)
	for b, a := range bins {
		q := keys.New(h.prefix, b.queue)
		buckets = addHistory(buckets, b.start, a, now, q.History)
		t := all[b.start]
		if t == nil {
			t = new(Bucket)
			all[b.start] = t
		}
		t.Merge(a)
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
func addHistory(bs []jobstate.HistoryBucket, start int64, a *Bucket, now time.Time, key func(res string, start int64) string) []jobstate.HistoryBucket {
	for _, r := range Resolutions {
		b := BucketStart(time.Unix(start, 0), r.Step)
		exp := r.expiry(b)
		if !exp.After(now) {
			continue
		}
		hb := jobstate.HistoryBucket{Key: key(r.Name, b), ExpireAt: exp}
		for _, f := range []struct {
			field string
			n     int64
		}{{keys.HistoryCompleted, a.Completed}, {keys.HistoryFailed, a.Failed}, {keys.HistoryRetried, a.Retried}} {
			if f.n > 0 {
				hb.Counts = append(hb.Counts, jobstate.HistoryCount{Field: f.field, N: f.n})
			}
		}
		for c, n := range a.Wait {
			if n > 0 {
				hb.Counts = append(hb.Counts, jobstate.HistoryCount{Field: keys.HistoryWait + strconv.Itoa(c), N: n})
			}
		}
		for c, n := range a.Exec {
			if n > 0 {
				hb.Counts = append(hb.Counts, jobstate.HistoryCount{Field: keys.HistoryExec + strconv.Itoa(c), N: n})
			}
		}
		bs = append(bs, hb)
	}
	return bs
}
