package api

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/pipeline"
)

// A burst of publishes costs one read of the sightings; the next read comes once they are
// sightingsTTL old, and Redis's clock moves on with the server's between reads. A failed read
// is kept as long.
func TestSightingsCache(t *testing.T) {
	t.Parallel()
	redisNow := time.Date(2026, 12, 7, 13, 0, 0, 0, time.UTC)
	var reads atomic.Int64
	var fail atomic.Bool
	var mu sync.Mutex
	clock := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	c := sightingsCache{
		read: func(context.Context) (pipeline.Sightings, error) {
			reads.Add(1)
			if fail.Load() {
				return pipeline.Sightings{}, errors.New("down")
			}
			return pipeline.Sightings{Now: redisNow, Window: time.Minute}, nil
		},
		now: func() time.Time { mu.Lock(); defer mu.Unlock(); return clock },
	}
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }

	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			s, err := c.get(t.Context())
			require.NoError(t, err)
			require.Equal(t, redisNow, s.Now)
		})
	}
	wg.Wait()
	require.Equal(t, int64(1), reads.Load(), "a burst read once")

	advance(sightingsTTL - time.Millisecond)
	s, err := c.get(t.Context())
	require.NoError(t, err)
	require.Equal(t, int64(1), reads.Load())
	require.Equal(t, redisNow.Add(sightingsTTL-time.Millisecond), s.Now, "Redis's clock moves on between reads")

	fail.Store(true)
	advance(time.Millisecond)
	_, err = c.get(t.Context())
	require.Error(t, err)
	_, err = c.get(t.Context())
	require.Error(t, err)
	require.Equal(t, int64(2), reads.Load(), "a failed read is kept too")
}

func TestWarningValue(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ text, want string }{
		{`plain`, `199 conveyor "plain"`},
		{`queue "emials"`, `199 conveyor "queue \"emials\""`},
		{"back\\slash and\nnewline", `199 conveyor "back\\slash and newline"`},
	} {
		require.Equal(t, c.want, warningValue(c.text))
	}
}
