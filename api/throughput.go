package api

import (
	"context"
	"hash/fnv"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/pipeline"
)

// counts are the counters of one queue that the throughput chart shows.
type counts struct{ completed, failed, retried int64 }

// snapshot is the queues' counters at one time: of the first queues by name, up to the
// sampler's bound, and summed over the others.
type snapshot struct {
	at     time.Time
	names  []string // sorted; the previous snapshot's own slice when the queues are the same
	counts []counts // of names
	rest   counts   // summed over the queues past the bound
	restID uint64   // identifies the set of those queues; 0: there are none
}

// lookup returns the counters of queue, trying index i first (the same queue set).
func (s *snapshot) lookup(queue string, i int) (counts, bool) {
	if i >= 0 && i < len(s.names) && s.names[i] == queue {
		return s.counts[i], true
	}
	if j, ok := slices.BinarySearch(s.names, queue); ok {
		return s.counts[j], true
	}
	return counts{}, false
}

// sampler reads every queue's counters every interval (Inspector.Queues: one call, one
// pipeline per 100 queues) into a ring of snapshots covering the window. Rates come from the
// differences of consecutive snapshots, so they cost nothing to ask for and survive a restart
// of the workers. The sampler runs from the Server's first request until its Close.
type sampler struct {
	queues   func(ctx context.Context) ([]*pipeline.QueueStats, error)
	interval time.Duration
	keep     int // snapshots kept: window/interval + 1
	most     int // queues a snapshot keeps apart
	log      zerolog.Logger
	now      func() time.Time

	mu    sync.Mutex
	ring  []snapshot // oldest first
	first chan struct{}
	once  sync.Once
	stop  chan struct{}
	wg    sync.WaitGroup
}

func newSampler(queues func(ctx context.Context) ([]*pipeline.QueueStats, error), interval, window time.Duration, most int, log zerolog.Logger) *sampler {
	return &sampler{queues: queues, interval: interval, keep: int(window/interval) + 1, most: most, log: log,
		now: time.Now, first: make(chan struct{}), stop: make(chan struct{})}
}

// start starts the loop once; after close it does nothing.
func (s *sampler) start() {
	s.once.Do(func() {
		select {
		case <-s.stop:
			close(s.first)
			return
		default:
		}
		s.wg.Add(1)
		go s.loop()
	})
}

// close stops the loop and waits for it. It is idempotent and safe before start.
func (s *sampler) close() {
	s.mu.Lock()
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.mu.Unlock()
	s.once.Do(func() { close(s.first) }) // never started: nobody waits for a first sample
	s.wg.Wait()
}

func (s *sampler) loop() {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	// The first pass at once, so a chart has a baseline by the second.
	s.sample(ctx)
	close(s.first)
	ticker := time.NewTicker(s.interval)
	defer ticker.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-ticker.C:
			s.sample(ctx)
		}
	}
}

// sample reads the counters once and keeps them; a failed read leaves a gap that the next
// sample spans.
func (s *sampler) sample(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.interval)
	defer cancel()
	st, err := s.queues(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn().Err(err).Msg("throughput sample failed")
		}
		return
	}
	slices.SortFunc(st, func(a, b *pipeline.QueueStats) int { return strings.Compare(a.Queue, b.Queue) })
	kept, rest := st[:min(len(st), s.most)], st[min(len(st), s.most):]
	snap := snapshot{at: s.now(), counts: make([]counts, len(kept))}
	s.mu.Lock()
	if n := len(s.ring); n > 0 && slices.EqualFunc(s.ring[n-1].names, kept,
		func(name string, q *pipeline.QueueStats) bool { return name == q.Queue }) {
		snap.names = s.ring[n-1].names
	}
	s.mu.Unlock()
	if snap.names == nil {
		snap.names = make([]string, len(kept))
		for i, q := range kept {
			snap.names[i] = q.Queue
		}
	}
	for i, q := range kept {
		snap.counts[i] = counts{completed: q.Completed, failed: q.Failed, retried: q.Retried}
	}
	if len(rest) > 0 {
		h := fnv.New64a()
		for _, q := range rest {
			snap.rest.completed += q.Completed
			snap.rest.failed += q.Failed
			snap.rest.retried += q.Retried
			_, _ = h.Write([]byte(q.Queue))
			_, _ = h.Write([]byte{0})
		}
		snap.restID = h.Sum64() | 1
	}
	s.add(snap)
}

func (s *sampler) add(snap snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ring = append(s.ring, snap)
	if over := len(s.ring) - s.keep; over > 0 {
		s.ring = append(s.ring[:0], s.ring[over:]...)
	}
}

// rate is one point of the chart: per-second rates over the interval that ends at T.
type rate struct {
	T         int64   `json:"t"`
	Completed float64 `json:"completed"`
	Failed    float64 `json:"failed"`
	Retried   float64 `json:"retried"`
}

// rates returns one point per pair of consecutive snapshots, oldest first, summed over every
// queue, or of one queue when queue is not empty; known reports whether that queue appears
// in any snapshot. A counter that went down (the queue was deleted and made again) counts
// from zero; a queue missing from the earlier snapshot is new and counts from zero too, unless
// that snapshot had queues past the bound, among which it may have been (then the interval
// counts nothing of it). The queues past the bound count in the sum while they stay the same.
func (s *sampler) rates(queue string) (points []rate, known bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	points = []rate{}
	for k := 1; k < len(s.ring); k++ {
		prev, cur := &s.ring[k-1], &s.ring[k]
		secs := cur.at.Sub(prev.at).Seconds()
		if secs <= 0 {
			continue
		}
		var sum counts
		add := func(name string, i int, c counts) {
			p, ok := prev.lookup(name, i)
			if !ok && prev.restID != 0 {
				return
			}
			sum.completed += delta(p.completed, c.completed)
			sum.failed += delta(p.failed, c.failed)
			sum.retried += delta(p.retried, c.retried)
		}
		if queue == "" {
			for i, name := range cur.names {
				add(name, i, cur.counts[i])
			}
			if cur.restID != 0 && cur.restID == prev.restID {
				sum.completed += delta(prev.rest.completed, cur.rest.completed)
				sum.failed += delta(prev.rest.failed, cur.rest.failed)
				sum.retried += delta(prev.rest.retried, cur.rest.retried)
			}
		} else if c, ok := cur.lookup(queue, -1); ok {
			add(queue, -1, c)
		}
		points = append(points, rate{T: cur.at.UnixMilli(),
			Completed: perSecond(sum.completed, secs), Failed: perSecond(sum.failed, secs),
			Retried: perSecond(sum.retried, secs)})
	}
	if queue == "" {
		return points, true
	}
	for i := range s.ring {
		if _, ok := s.ring[i].lookup(queue, -1); ok {
			return points, true
		}
	}
	return points, false
}

func delta(prev, cur int64) int64 {
	if cur < prev {
		return cur // reset
	}
	return cur - prev
}

// perSecond rounds to thousandths: a chart needs no more, and the JSON stays short.
func perSecond(n int64, secs float64) float64 {
	return math.Round(float64(n)/secs*1000) / 1000
}
