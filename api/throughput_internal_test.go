package api

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/pipeline"
)

func TestSamplerRates(t *testing.T) {
	t.Parallel()
	var stats []*pipeline.QueueStats
	var fail error
	s := newSampler(func(context.Context) ([]*pipeline.QueueStats, error) { return stats, fail },
		5*time.Second, 20*time.Second, DefaultThroughputQueues, zerolog.Nop())
	t0 := time.UnixMilli(1_700_000_000_000)
	now := t0
	s.now = func() time.Time { return now }
	step := func(d time.Duration, st ...*pipeline.QueueStats) {
		now = now.Add(d)
		stats = st
		s.sample(t.Context())
	}
	q := func(name string, completed, failed, retried int64) *pipeline.QueueStats {
		return &pipeline.QueueStats{Queue: name, Completed: completed, Failed: failed, Retried: retried}
	}

	step(0, q("a", 100, 10, 1))
	points, known := s.rates("")
	require.True(t, known)
	require.Empty(t, points, "one sample is a baseline, no rate yet")
	require.NotNil(t, points, "samples is [] in JSON, not null")

	step(5*time.Second, q("a", 150, 15, 6), q("b", 10, 0, 0)) // b is new: it counts from zero
	step(5*time.Second, q("a", 150, 15, 6), q("b", 20, 0, 0))
	fail = errors.New("redis down")
	step(5 * time.Second) // a failed read leaves a gap
	fail = nil
	step(5*time.Second, q("a", 5, 0, 0), q("b", 30, 0, 0)) // a was deleted and made again

	points, _ = s.rates("")
	require.Equal(t, []rate{
		{T: t0.Add(5 * time.Second).UnixMilli(), Completed: 12, Failed: 1, Retried: 1},
		{T: t0.Add(10 * time.Second).UnixMilli(), Completed: 2},
		{T: t0.Add(20 * time.Second).UnixMilli(), Completed: 1.5},
	}, points)

	points, known = s.rates("b")
	require.True(t, known)
	require.Equal(t, []float64{2, 2, 1}, []float64{points[0].Completed, points[1].Completed, points[2].Completed})
	_, known = s.rates("c")
	require.False(t, known)

	// The window keeps window/interval+1 samples: the oldest go.
	for range 10 {
		step(5*time.Second, q("a", 5, 0, 0))
	}
	points, _ = s.rates("")
	require.Len(t, points, 4)
	require.Equal(t, now.UnixMilli(), points[3].T)

	require.Equal(t, 0.333, perSecond(1, 3), "rates are rounded to thousandths")
}

func TestSamplerStartStop(t *testing.T) {
	t.Parallel()
	reads := make(chan struct{}, 100)
	s := newSampler(func(context.Context) ([]*pipeline.QueueStats, error) {
		select {
		case reads <- struct{}{}:
		default:
		}
		return nil, nil
	}, time.Millisecond, time.Second, DefaultThroughputQueues, zerolog.Nop())
	s.close() // before start: nothing runs, nothing waits
	s.start()
	<-s.first
	require.Empty(t, reads)

	s = newSampler(func(context.Context) ([]*pipeline.QueueStats, error) {
		select {
		case reads <- struct{}{}:
		default:
		}
		return nil, nil
	}, time.Millisecond, time.Second, DefaultThroughputQueues, zerolog.Nop())
	s.start()
	s.start()
	<-s.first
	<-reads
	<-reads // it keeps sampling
	s.close()
	s.close()
}

// A sample keeps the counters of its first queues by name, up to the bound, apart, and sums
// the others: the total counts them while they stay the same queues, a queue that moves from
// the sum to the kept ones does not count its whole counter as one interval's, and samples of
// the same queues share one slice of names.
func TestSamplerBound(t *testing.T) {
	t.Parallel()
	var stats []*pipeline.QueueStats
	s := newSampler(func(context.Context) ([]*pipeline.QueueStats, error) { return stats, nil },
		time.Second, time.Minute, 2, zerolog.Nop())
	now := time.UnixMilli(1_700_000_000_000)
	s.now = func() time.Time { return now }
	step := func(st ...*pipeline.QueueStats) {
		now = now.Add(time.Second)
		stats = st
		s.sample(t.Context())
	}
	q := func(name string, completed int64) *pipeline.QueueStats {
		return &pipeline.QueueStats{Queue: name, Completed: completed}
	}
	step(q("d", 1000), q("b", 10), q("a", 10), q("c", 100))
	step(q("a", 11), q("b", 12), q("c", 103), q("d", 1004))
	step(q("b", 13), q("c", 104), q("d", 1005)) // a is gone: c moves from the sum to the kept
	require.Len(t, s.ring[0].names, 2)
	require.Equal(t, []string{"a", "b"}, s.ring[0].names)
	require.Same(t, &s.ring[0].names[0], &s.ring[1].names[0], "the same queues share their names")

	points, known := s.rates("")
	require.True(t, known)
	require.Equal(t, []float64{1 + 2 + 3 + 4, 1}, []float64{points[0].Completed, points[1].Completed},
		"the sum counts c and d while they stay summed; then c is not counted from zero, d's sum changed set")
	points, known = s.rates("c")
	require.True(t, known)
	require.Equal(t, []float64{0, 0}, []float64{points[0].Completed, points[1].Completed})
	_, known = s.rates("d")
	require.False(t, known, "d was never kept apart")
}
