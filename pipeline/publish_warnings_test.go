package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// A publish to a queue no live worker read, or of a type none handled, is warned about; a
// right one is not. The sightings outlive the worker's record: a worker that stopped a moment
// ago still counts, for the window.
func TestPublishWarnings(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix, _, insp := workersOf(t, rdb)
	ctx := t.Context()

	// Before any worker beat, nothing is known.
	got, err := insp.PublishWarnings(ctx, "emails", "echo")
	require.NoError(t, err)
	require.Equal(t, []string{`no worker has read queue "emails" in the last 10m0s (no worker has sent a heartbeat in that time)`}, got)

	noop := func(context.Context, *pipeline.Job) ([]byte, error) { return nil, nil }
	// startWorkerOn returns once the worker is Ready, after its first beat.
	_, stop := startWorkerOn(t, rdb, pipeline.WorkerConfig{Prefix: prefix, Queues: []string{"emails", "default"}, Name: "w1"},
		map[string]pipeline.HandlerFunc{"echo": noop, "sleep": noop})
	_, stop2 := startWorkerOn(t, rdb, pipeline.WorkerConfig{Prefix: prefix, Queues: []string{"reports"}, Name: "w2"},
		map[string]pipeline.HandlerFunc{"render": noop})
	defer func() { _ = stop2() }()

	cases := []struct {
		name  string
		queue string
		types []string
		want  []string
	}{
		{"RightQueueAndType", "emails", []string{"echo"}, nil},
		{"TypeHandledOnAnotherQueue", "emails", []string{"render"}, nil},
		{"NoTypes", "default", nil, nil},
		{"QueueTypo", "emials", []string{"echo"},
			[]string{`no worker has read queue "emials" in the last 10m0s (known queues read: default, emails, reports)`}},
		{"QueueTypoAndTypeTypo", "emials", []string{"ecoh"},
			[]string{`no worker has read queue "emials" in the last 10m0s (known queues read: default, emails, reports)`}},
		{"TypeTypo", "emails", []string{"ecoh"},
			[]string{`no worker has handled type "ecoh" on any queue in the last 10m0s (did you mean "echo"?)`}},
		{"UnknownTypeOnceEach", "emails", []string{"echo", "resize", "resize", "slep"}, []string{
			`no worker has handled type "resize" on any queue in the last 10m0s`,
			`no worker has handled type "slep" on any queue in the last 10m0s (did you mean "sleep"?)`}},
	}
	check := func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				got, err := insp.PublishWarnings(ctx, c.queue, c.types...)
				require.NoError(t, err)
				require.Equal(t, c.want, got)
			})
		}
	}
	t.Run("Live", check)

	// The worker stops: its record is gone at once, its sightings stay.
	require.NoError(t, stop())
	ws, err := insp.Workers(ctx)
	require.NoError(t, err)
	require.Len(t, ws, 1)
	t.Run("AfterStop", check)

	// The beats keep the sets bounded: a sighting older than a day is dropped by the next beat.
	old := float64(time.Now().Add(-25 * time.Hour).UnixMilli())
	require.NoError(t, rdb.ZAdd(ctx, keys.SeenQueues(prefix), redis.Z{Score: old, Member: "gone"}).Err())
	_, stop3 := startWorkerOn(t, rdb, pipeline.WorkerConfig{Prefix: prefix, Queues: []string{"reports"}, Name: "w3"},
		map[string]pipeline.HandlerFunc{"render": noop})
	defer func() { _ = stop3() }()
	_, err = rdb.ZScore(ctx, keys.SeenQueues(prefix), "gone").Result()
	require.Error(t, err, "a day-old sighting was kept")
}

// The window is the Inspector's: a sighting older than it does not count, and the warning
// says the window.
func TestPublishWarningsWindow(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 7, 13, 0, 0, 0, time.UTC)
	many := map[string]time.Time{}
	for i := range 12 {
		many[fmt.Sprintf("q%02d", i)] = now
	}
	cases := []struct {
		name  string
		s     pipeline.Sightings
		queue string
		types []string
		want  []string
	}{
		{"JustInside", pipeline.Sightings{Queues: map[string]time.Time{"a": now.Add(-time.Minute)},
			Types: map[string]time.Time{"t": now.Add(-time.Minute)}, Now: now, Window: time.Minute}, "a", []string{"t"}, nil},
		{"JustOutside", pipeline.Sightings{Queues: map[string]time.Time{"a": now.Add(-time.Minute - time.Millisecond), "b": now},
			Now: now, Window: time.Minute}, "a", []string{"t"},
			[]string{`no worker has read queue "a" in the last 1m0s (known queues read: b)`}},
		{"StaleType", pipeline.Sightings{Queues: map[string]time.Time{"a": now},
			Types: map[string]time.Time{"t": now.Add(-time.Hour)}, Now: now, Window: 5 * time.Minute}, "a", []string{"t", ""},
			[]string{`no worker has handled type "t" on any queue in the last 5m0s`}},
		{"ManyQueues", pipeline.Sightings{Queues: many, Now: now, Window: time.Minute}, "q", nil,
			[]string{`no worker has read queue "q" in the last 1m0s (known queues read: q00, q01, q02, q03, q04, q05, q06, q07, q08, q09 and 2 more)`}},
		{"FarFromEveryType", pipeline.Sightings{Queues: map[string]time.Time{"a": now},
			Types: map[string]time.Time{"echo": now}, Now: now, Window: time.Minute}, "a", []string{"ec"},
			[]string{`no worker has handled type "ec" on any queue in the last 1m0s`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, c.s.PublishWarnings(c.queue, c.types...))
		})
	}
}

// The window is configurable, within how long the beats keep what they saw.
func TestPublishWarningWindowConfig(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	for _, w := range []time.Duration{-time.Second, 25 * time.Hour} {
		_, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{PublishWarningWindow: w})
		require.ErrorIs(t, err, pipeline.ErrInvalid, "window %s", w)
	}
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: redistest.UniqueName(t), PublishWarningWindow: time.Hour})
	require.NoError(t, err)
	s, err := insp.Sightings(t.Context())
	require.NoError(t, err)
	require.Equal(t, time.Hour, s.Window)
	require.Greater(t, s.Now.Year(), 2000, "Redis's clock")
}
