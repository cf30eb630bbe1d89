package pipeline

import (
	"testing"
	"time"
)

func TestBackoffDelay(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		b       Backoff
		attempt int
		lo, hi  time.Duration
	}{
		{"defaults, first", Backoff{}, 1, 750 * time.Millisecond, 1250 * time.Millisecond},
		{"defaults, fourth", Backoff{}, 4, 6 * time.Second, 10 * time.Second},
		{"capped", Backoff{Base: time.Second, Max: 5 * time.Second}, 10, 3750 * time.Millisecond, 5 * time.Second},
		{"huge attempt does not overflow", Backoff{Base: time.Second, Max: time.Hour}, 1000, 45 * time.Minute, time.Hour},
		{"max below base is raised to base", Backoff{Base: time.Second, Max: time.Millisecond}, 3, 750 * time.Millisecond, time.Second},
		{"attempt zero acts as first", Backoff{Base: 100 * time.Millisecond}, 0, 75 * time.Millisecond, 125 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for range 200 {
				d := tc.b.Delay(tc.attempt)
				if d < tc.lo || d > tc.hi {
					t.Fatalf("Delay(%d) = %s, want within [%s, %s]", tc.attempt, d, tc.lo, tc.hi)
				}
			}
		})
	}
}

// Consecutive attempts never overlap, so delays grow until the cap, whatever the jitter.
func TestBackoffGrows(t *testing.T) {
	t.Parallel()
	b := Backoff{Base: 100 * time.Millisecond, Max: time.Hour}
	for range 1000 {
		prev := time.Duration(0)
		for attempt := 1; attempt <= 10; attempt++ {
			d := b.Delay(attempt)
			if d <= prev {
				t.Fatalf("attempt %d: %s after %s", attempt, d, prev)
			}
			prev = d
		}
	}
}
