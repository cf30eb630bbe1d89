package engine

import (
	"math"
	"time"
)

// HistCells is the number of cells of a Histogram. Cell 0 holds durations under a
// millisecond. Cell c >= 1 holds those from 2^((c-1)/4) ms to 2^(c/4) ms, four cells to a
// doubling. The last cell, from 2^31.5 ms (about 35 days), holds everything longer.
const HistCells = 128

// Histogram counts durations in fixed log-scale cells. Fixed cells make histograms mergeable:
// the cells of several workers' histograms add up (HINCRBY per cell in a history bucket), and
// any percentile is read from the sum. A percentile is reported as its cell's geometric
// middle, within 9% of the true value above a millisecond (2^(1/8)).
type Histogram [HistCells]int64

// cellOf is the cell of d.
func cellOf(d time.Duration) int {
	ms := d.Milliseconds()
	if ms < 1 {
		return 0
	}
	return min(HistCells-1, 1+int(4*math.Log2(float64(ms))))
}

// CellValue is the duration cell c stands for: the geometric middle of its bounds, half a
// millisecond for cell 0.
func CellValue(c int) time.Duration {
	if c <= 0 {
		return 500 * time.Microsecond
	}
	ms := math.Exp2((float64(c-1) + 0.5) / 4)
	return time.Duration(ms * float64(time.Millisecond)).Round(10 * time.Microsecond)
}

// Add counts d.
func (h *Histogram) Add(d time.Duration) { h[cellOf(d)]++ }

// Merge adds o's counts to h's.
func (h *Histogram) Merge(o *Histogram) {
	for c, n := range o {
		h[c] += n
	}
}

// Count is how many durations h holds.
func (h *Histogram) Count() int64 {
	var n int64
	for _, k := range h {
		n += k
	}
	return n
}

// Quantile is the duration that a share q (0 < q <= 1) of h's durations does not exceed: the
// value of the cell that holds the ceil(q*n)-th smallest. It is 0 for an empty Histogram.
func (h *Histogram) Quantile(q float64) time.Duration {
	n := h.Count()
	if n == 0 {
		return 0
	}
	rank := max(1, int64(math.Ceil(q*float64(n))))
	var seen int64
	for c, k := range h {
		seen += k
		if seen >= rank {
			return CellValue(c)
		}
	}
	return CellValue(HistCells - 1)
}
