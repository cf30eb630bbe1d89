package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// near reports whether got is within the histogram's error (9%, plus rounding) of want.
func near(t *testing.T, want, got time.Duration, what string) {
	t.Helper()
	require.InDelta(t, float64(want), float64(got), 0.095*float64(want), "%s: want about %s, got %s", what, want, got)
}

// The percentiles of a known distribution come out within the histogram's error, and two
// histograms merged answer as one Histogram of all their durations would.
func TestHistogramQuantiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		fill     func(h *Histogram)
		p50, p99 time.Duration
	}{
		{"uniform 1..10000 ms", func(h *Histogram) {
			for ms := 1; ms <= 10000; ms++ {
				h.Add(time.Duration(ms) * time.Millisecond)
			}
		}, 5 * time.Second, 9900 * time.Millisecond},
		{"one value", func(h *Histogram) {
			for range 7 {
				h.Add(250 * time.Millisecond)
			}
		}, 250 * time.Millisecond, 250 * time.Millisecond},
		{"a slow tail", func(h *Histogram) {
			for range 980 {
				h.Add(20 * time.Millisecond)
			}
			for range 20 {
				h.Add(3 * time.Second)
			}
		}, 20 * time.Millisecond, 3 * time.Second},
		{"days", func(h *Histogram) { h.Add(72 * time.Hour) }, 72 * time.Hour, 72 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h Histogram
			tc.fill(&h)
			near(t, tc.p50, h.Quantile(0.5), "p50")
			near(t, tc.p99, h.Quantile(0.99), "p99")
		})
	}
	var empty Histogram
	require.Zero(t, empty.Quantile(0.5))
	var sub Histogram
	sub.Add(300 * time.Microsecond)
	require.Equal(t, 500*time.Microsecond, sub.Quantile(0.5), "under a millisecond")
	var huge Histogram
	huge.Add(1000 * time.Hour * 24)
	require.Equal(t, CellValue(HistCells-1), huge.Quantile(1), "past the last cell")

	// Merged: the even milliseconds in one Histogram, the odd ones in another.
	var even, odd, all Histogram
	for ms := 1; ms <= 5000; ms++ {
		d := time.Duration(ms) * time.Millisecond
		all.Add(d)
		if ms%2 == 0 {
			even.Add(d)
		} else {
			odd.Add(d)
		}
	}
	even.Merge(&odd)
	require.Equal(t, all, even)
}
