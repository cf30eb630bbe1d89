package pipeline

import (
	"math"
	"time"
)

// histCells is the number of cells of a histogram. Cell 0 holds durations under a
// millisecond. Cell c >= 1 holds those from 2^((c-1)/4) ms to 2^(c/4) ms, four cells to a
// doubling. The last cell, from 2^31.5 ms (about 35 days), holds everything longer.
const histCells = 128

// histogram counts durations in fixed log-scale cells. Fixed cells make histograms mergeable:
// the cells of several workers' histograms add up (HINCRBY per cell in a history bucket), and
// any percentile is read from the sum. A percentile is reported as its cell's geometric
// middle, within 9% of the true value above a millisecond (2^(1/8)).
type histogram [histCells]int64

// cellOf is the cell of d.
func cellOf(d time.Duration) int {
	ms := d.Milliseconds()
	if ms < 1 {
		return 0
	}
	return min(histCells-1, 1+int(4*math.Log2(float64(ms))))
}

// cellValue is the duration cell c stands for: the geometric middle of its bounds, half a
// millisecond for cell 0.
func cellValue(c int) time.Duration {
	if c <= 0 {
		return 500 * time.Microsecond
	}
	ms := math.Exp2((float64(c-1) + 0.5) / 4)
	return time.Duration(ms * float64(time.Millisecond)).Round(10 * time.Microsecond)
}

func (h *histogram) add(d time.Duration) { h[cellOf(d)]++ }

func (h *histogram) merge(o *histogram) {
	for c, n := range o {
		h[c] += n
	}
}

// count is how many durations h holds.
func (h *histogram) count() int64 {
	var n int64
	for _, k := range h {
		n += k
	}
	return n
}

// quantile is the duration that a share q (0 < q <= 1) of h's durations does not exceed: the
// value of the cell that holds the ceil(q*n)-th smallest. It is 0 for an empty histogram.
func (h *histogram) quantile(q float64) time.Duration {
	n := h.count()
	if n == 0 {
		return 0
	}
	rank := max(1, int64(math.Ceil(q*float64(n))))
	var seen int64
	for c, k := range h {
		seen += k
		if seen >= rank {
			return cellValue(c)
		}
	}
	return cellValue(histCells - 1)
}
