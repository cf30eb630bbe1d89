package pipeline

import (
	"cmp"
	"math/rand/v2"
	"time"
)

// Defaults of Backoff.
const (
	defaultBackoffBase = time.Second
	defaultBackoffMax  = 10 * time.Minute
)

// Backoff is the retry delay policy: exponential from Base, capped at Max, with ±25% jitter so
// jobs that failed together do not retry together. Attempt n (1-based) waits about
// Base*2^(n-1): the jitter windows of consecutive attempts do not overlap, so delays grow
// until the cap.
type Backoff struct {
	// Base is the delay after the first failed attempt. Defaults to 1 s.
	Base time.Duration
	// Max caps the delay. Defaults to 10 min.
	Max time.Duration
}

func (b Backoff) withDefaults() Backoff {
	b.Base = cmp.Or(b.Base, defaultBackoffBase)
	b.Max = cmp.Or(b.Max, defaultBackoffMax)
	if b.Max < b.Base {
		b.Max = b.Base
	}
	return b
}

// Delay returns the wait before the retry that follows failed attempt n (1-based).
func (b Backoff) Delay(attempt int) time.Duration {
	b = b.withDefaults()
	d := b.Base
	for i := 1; i < attempt && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	j := time.Duration(float64(d) * (0.75 + 0.5*rand.Float64()))
	return max(time.Millisecond, min(j, b.Max))
}

func msToDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
