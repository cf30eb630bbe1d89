package pipeline_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/metakey"
	"github.com/conveyorq/conveyor/pipeline"
)

// TestPeriodicWorkers runs a schedule registered in code by two workers over a partitioned
// queue: each tick is one job, with the tick's id and metadata, run once.
func TestPeriodicWorkers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			rdb := tc.rdb(t)
			prefix, queue := redistest.UniqueName(t), "periodic"
			insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: prefix})
			require.NoError(t, err)
			_, err = insp.CreateQueue(ctx, queue, pipeline.QueueOptions{Partitions: 3})
			require.NoError(t, err)

			var mu sync.Mutex
			runs := map[string]int{}
			ticks := make(chan string, 100)
			h := func(_ context.Context, j *pipeline.Job) ([]byte, error) {
				mu.Lock()
				runs[j.ID]++
				mu.Unlock()
				assert.Equal(t, "tick", j.Metadata[metakey.Schedule])
				tick, err := time.Parse(time.RFC3339, j.Metadata[metakey.ScheduleTick])
				assert.NoError(t, err)
				assert.Equal(t, fmt.Sprintf("cron:tick:%d", tick.Unix()), j.ID)
				assert.Equal(t, `{"n":1}`, string(j.Payload))
				ticks <- j.ID
				return nil, nil
			}
			cfg := pipeline.WorkerConfig{Prefix: prefix, Queues: []string{queue}, Periodic: []pipeline.Periodic{
				{Name: "tick", Spec: "@every 1s", Queue: queue, Type: "tick", Payload: []byte(`{"n":1}`)},
			}}
			for k := range 2 {
				cfg.Name = fmt.Sprintf("w%d", k)
				startWorkerOn(t, rdb, cfg, map[string]pipeline.HandlerFunc{"tick": h})
			}
			var seen []int64
			for len(seen) < 3 {
				select {
				case id := <-ticks:
					sec, err := strconv.ParseInt(strings.TrimPrefix(id, "cron:tick:"), 10, 64)
					require.NoError(t, err)
					seen = append(seen, sec)
				case <-time.After(30 * time.Second):
					t.Fatalf("ticks run after 30s: %v", seen)
				}
			}
			mu.Lock()
			for id, n := range runs {
				require.Equal(t, 1, n, "%s ran %d times", id, n)
			}
			mu.Unlock()

			list, err := insp.Schedules(ctx)
			require.NoError(t, err)
			require.Len(t, list, 1)
			s := list[0]
			require.Equal(t, "worker", s.Source)
			require.Equal(t, pipeline.MissedSkip, s.Missed)
			require.True(t, strings.HasPrefix(s.LastJob, "cron:tick:"), s.LastJob)
			require.False(t, s.LastRunAt.IsZero())
			require.Equal(t, s.LastTick.Add(time.Second), s.NextRunAt)
		})
	}
}

func TestScheduleAdmin(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rdb := redistest.Client(t)
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: redistest.UniqueName(t), Now: func() time.Time { return now }})
	require.NoError(t, err)

	for _, bad := range []pipeline.Periodic{
		{Name: "", Spec: "@daily", Queue: "q", Type: "t"},
		{Name: "a:b", Spec: "@daily", Queue: "q", Type: "t"},
		{Name: "a", Spec: "@every 10ms", Queue: "q", Type: "t"},
		{Name: "a", Spec: "61 * * * *", Queue: "q", Type: "t"},
		{Name: "a", Spec: "@daily", Queue: "q{x}", Type: "t"},
		{Name: "a", Spec: "@daily", Queue: "q", Type: ""},
		{Name: "a", Spec: "@daily", Queue: "q", Type: "t", Missed: "twice"},
	} {
		require.ErrorIs(t, insp.CreateSchedule(ctx, bad), pipeline.ErrInvalid, "%+v", bad)
	}
	p := pipeline.Periodic{Name: "report", Spec: "CRON_TZ=Europe/Berlin 0 0 9 * * *", Queue: "reports", Type: "report", Payload: []byte(`{}`), Missed: pipeline.MissedRunOnce}
	require.NoError(t, insp.CreateSchedule(ctx, p))
	got, err := insp.GetSchedule(ctx, "report")
	require.NoError(t, err)
	require.Equal(t, p, got.Periodic)
	require.Equal(t, "api", got.Source)
	require.Equal(t, time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC), got.NextRunAt.UTC(), "9:00 in Berlin is 8:00 UTC in March")
	require.True(t, got.LastRunAt.IsZero())

	require.NoError(t, insp.PauseSchedule(ctx, "report"))
	got, err = insp.GetSchedule(ctx, "report")
	require.NoError(t, err)
	require.True(t, got.Paused)
	require.True(t, got.NextRunAt.IsZero())
	now = now.Add(48 * time.Hour)
	require.NoError(t, insp.ResumeSchedule(ctx, "report"))
	got, err = insp.GetSchedule(ctx, "report")
	require.NoError(t, err)
	require.False(t, got.Paused)
	require.Equal(t, time.Date(2026, 3, 4, 8, 0, 0, 0, time.UTC), got.NextRunAt.UTC(), "a resume drops the ticks of the pause")

	list, err := insp.Schedules(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.NoError(t, insp.DeleteSchedule(ctx, "report"))
	for _, err := range []error{insp.DeleteSchedule(ctx, "report"), insp.PauseSchedule(ctx, "report"), insp.ResumeSchedule(ctx, "report")} {
		require.ErrorIs(t, err, pipeline.ErrScheduleNotFound)
	}
	_, err = insp.GetSchedule(ctx, "report")
	require.ErrorIs(t, err, pipeline.ErrScheduleNotFound)
	require.ErrorIs(t, insp.DeleteSchedule(ctx, "a:b"), pipeline.ErrInvalid)
}

func TestWorkerRefusesBadPeriodic(t *testing.T) {
	t.Parallel()
	_, err := pipeline.NewWorker(redistest.Client(t), pipeline.WorkerConfig{Periodic: []pipeline.Periodic{{Name: "x", Spec: "nope", Queue: "q", Type: "t"}}})
	require.ErrorIs(t, err, pipeline.ErrInvalid)
}

// A worker that finds ticks missed while no worker ran: the MissedRunOnce schedule's one job
// says so in its metadata, and a tick whose job exists already with another payload (the
// schedule was changed after that job was written) counts as enqueued: the schedule moves on.
func TestPeriodicMissedAndConflictingTick(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rdb := redistest.Client(t)
	prefix, queue := redistest.UniqueName(t), "periodic"
	// Stored five minutes ago by the Inspector's clock: every tick since is due, those older
	// than PeriodicGrace missed.
	stored := time.Now().Add(-5 * time.Minute)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: prefix, Now: func() time.Time { return stored }})
	require.NoError(t, err)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: prefix})
	require.NoError(t, err)
	for _, name := range []string{"missed", "conflict"} {
		require.NoError(t, insp.CreateSchedule(ctx, pipeline.Periodic{Name: name, Spec: "@every 20s", Queue: queue, Type: "t",
			Payload: []byte(`{"v":2}`), Missed: pipeline.MissedRunOnce}))
	}
	first := func(name string) string {
		s, err := insp.GetSchedule(ctx, name)
		require.NoError(t, err)
		return fmt.Sprintf("cron:%s:%d", name, s.NextRunAt.Unix())
	}
	missedID, conflictID := first("missed"), first("conflict")
	// The conflicting schedule's missed job exists, from an older definition.
	_, err = client.Enqueue(ctx, queue, pipeline.Task{Type: "t", Payload: []byte(`{"v":1}`)}, pipeline.WithID(conflictID))
	require.NoError(t, err)

	var mu sync.Mutex
	ticked, dropped := map[string]int{}, map[string]int{}
	hooks := pipeline.WorkerHooks{
		ScheduleTick: func(schedule string, late time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			ticked[schedule]++
			assert.Positive(t, late, "a late tick's lateness")
		},
		ScheduleMissed: func(schedule string, ticks int, once bool) {
			mu.Lock()
			defer mu.Unlock()
			dropped[schedule] += ticks
			assert.True(t, once)
		},
	}
	startWorkerOn(t, rdb, pipeline.WorkerConfig{Prefix: prefix, Queues: []string{"unrelated"}, Hooks: hooks}, map[string]pipeline.HandlerFunc{"t": echo})
	require.Eventually(t, func() bool {
		s, err := insp.GetSchedule(ctx, "conflict")
		require.NoError(t, err)
		return s.LastJob != "" && s.LastJob != conflictID
	}, 30*time.Second, 10*time.Millisecond, "the conflicting tick was absorbed and the schedule went on")
	j, err := client.Get(ctx, queue, conflictID)
	require.NoError(t, err)
	require.JSONEq(t, `{"v":1}`, string(j.Payload), "the existing job is left as it was")

	var missed *pipeline.Job
	require.Eventually(t, func() bool {
		missed, err = client.Get(ctx, queue, missedID)
		return err == nil
	}, 30*time.Second, 10*time.Millisecond, "the missed ticks' job")
	require.Equal(t, "true", missed.Metadata[metakey.ScheduleMissed])
	require.Equal(t, "missed", missed.Metadata[metakey.Schedule])
	// A late tick within the grace is a job of its own, without the mark.
	s, err := insp.GetSchedule(ctx, "missed")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		s, err = insp.GetSchedule(ctx, "missed")
		require.NoError(t, err)
		return s.LastJob != "" && s.LastJob != missedID
	}, 30*time.Second, 10*time.Millisecond)
	late, err := client.Get(ctx, queue, s.LastJob)
	require.NoError(t, err)
	require.NotContains(t, late.Metadata, metakey.ScheduleMissed)
	// The hooks (metrics.Worker's series) heard of both: about 12 ticks missed, 3 late each.
	mu.Lock()
	defer mu.Unlock()
	for _, name := range []string{"missed", "conflict"} {
		require.Positive(t, ticked[name], name)
		require.GreaterOrEqual(t, dropped[name], 10, name)
	}
}

// The stored schedules are bounded (InspectorConfig.MaxSchedules) and listed a page at a time.
func TestSchedulesBoundAndPages(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rdb := redistest.Client(t)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: redistest.UniqueName(t), MaxSchedules: 5})
	require.NoError(t, err)
	for k := range 5 {
		require.NoError(t, insp.CreateSchedule(ctx, pipeline.Periodic{Name: fmt.Sprintf("s%d", k), Spec: "@daily", Queue: "q", Type: "t"}))
	}
	err = insp.CreateSchedule(ctx, pipeline.Periodic{Name: "s5", Spec: "@daily", Queue: "q", Type: "t"})
	require.ErrorIs(t, err, pipeline.ErrTooManySchedules)
	require.ErrorContains(t, err, `schedule "s5" is new and 5 are stored`)
	_, err = insp.GetSchedule(ctx, "s5")
	require.ErrorIs(t, err, pipeline.ErrScheduleNotFound)
	require.NoError(t, insp.CreateSchedule(ctx, pipeline.Periodic{Name: "s0", Spec: "@hourly", Queue: "q", Type: "t"}), "a replacement is no new schedule")

	var names []string
	cursor := ""
	for pages := 1; ; pages++ {
		p, err := insp.SchedulesPage(ctx, pipeline.Page{Cursor: cursor, Limit: 2})
		require.NoError(t, err)
		for _, s := range p.Schedules {
			names = append(names, s.Name)
		}
		if p.Next == "" {
			require.Equal(t, 3, pages)
			break
		}
		cursor = p.Next
	}
	require.Equal(t, []string{"s0", "s1", "s2", "s3", "s4"}, names)
	p, err := insp.SchedulesPage(ctx, pipeline.Page{})
	require.NoError(t, err)
	require.Len(t, p.Schedules, 5)
	require.Empty(t, p.Next)
	for _, bad := range []pipeline.Page{{Cursor: "a:b"}, {Limit: -1}, {Limit: pipeline.MaxPageLimit + 1}} {
		_, err := insp.SchedulesPage(ctx, bad)
		require.ErrorIs(t, err, pipeline.ErrInvalid, "%+v", bad)
	}
	_, err = pipeline.NewInspector(rdb, pipeline.InspectorConfig{MaxSchedules: -1})
	require.ErrorIs(t, err, pipeline.ErrInvalid)
}
