package pipeline_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/hostile"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// hostileTask turns a hostile.Job into the library's terms.
func hostileTask(j hostile.Job) (pipeline.Task, []pipeline.Option) {
	t := pipeline.Task{Type: j.Type, Metadata: j.Metadata}
	if j.Payload != "" {
		t.Payload = []byte(j.Payload)
	}
	var opts []pipeline.Option
	if j.ID != "" {
		opts = append(opts, pipeline.WithID(j.ID))
	}
	if j.Delay != 0 {
		opts = append(opts, pipeline.WithDelay(j.Delay))
	}
	if !j.RunAt.IsZero() {
		opts = append(opts, pipeline.WithRunAt(j.RunAt))
	}
	if j.HasRetries {
		opts = append(opts, pipeline.WithMaxRetries(j.MaxRetries))
	}
	if j.Timeout != 0 {
		opts = append(opts, pipeline.WithTimeout(j.Timeout))
	}
	if j.UniqueKey != "" || j.HasUnique {
		opts = append(opts, pipeline.WithUnique(j.UniqueKey, j.UniqueTTL))
	}
	if j.DebounceKey != "" || j.HasDebounce {
		opts = append(opts, pipeline.WithDebounce(j.DebounceKey, j.DebounceQuiet, j.DebounceMaxWait))
	}
	return t, opts
}

// requireRefused checks a hostile input's error: ErrInvalid, with every wanted phrase.
func requireRefused(t *testing.T, err error, wants []string) {
	t.Helper()
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	for _, w := range wants {
		require.Contains(t, strings.ToLower(err.Error()), strings.ToLower(w))
	}
}

// hostileServer is a private server holding one queue with a job in every place (queued,
// scheduled, dead), so that a refused call would have something to change.
func hostileServer(t *testing.T) (*redis.Client, *pipeline.Client, *pipeline.Inspector) {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	ctx := t.Context()
	_, err = c.Enqueue(ctx, "hostile", pipeline.Task{Type: "echo"}, pipeline.WithID("queued"))
	require.NoError(t, err)
	_, err = c.Enqueue(ctx, "hostile", pipeline.Task{Type: "echo"}, pipeline.WithID("later"), pipeline.WithDelay(time.Hour))
	require.NoError(t, err)
	return rdb, c, insp
}

// TestHostilePublish runs every hostile publish through Enqueue, EnqueueBatch alone and
// EnqueueBatch behind a valid task: each is refused with ErrInvalid and a message naming the
// problem, and nothing is written (not even the valid task, nor the queue's name).
func TestHostilePublish(t *testing.T) {
	t.Parallel()
	rdb, c, _ := hostileServer(t)
	for _, tc := range hostile.Cases("hostile") {
		t.Run(tc.Name, func(t *testing.T) {
			tc.SkipAt(t, hostile.Library)
			task, opts := hostileTask(tc.Job)
			ctx := t.Context()
			hostile.NothingWritten(t, rdb, func() {
				_, err := c.Enqueue(ctx, tc.Job.Queue, task, opts...)
				requireRefused(t, err, tc.Wants(hostile.Library))
				task.Opts = opts
				_, err = c.EnqueueBatch(ctx, tc.Job.Queue, []pipeline.Task{task})
				requireRefused(t, err, tc.Wants(hostile.Library))
				_, err = c.EnqueueBatch(ctx, tc.Job.Queue, []pipeline.Task{{Type: "echo"}, task})
				requireRefused(t, err, tc.Wants(hostile.Library))
			})
		})
	}
}

// TestHostileNames passes every hostile queue name and job id to each Client and Inspector
// method that takes one: ErrInvalid naming the problem, nothing written.
func TestHostileNames(t *testing.T) {
	t.Parallel()
	rdb, c, insp := hostileServer(t)
	type call struct {
		name string
		f    func(ctx context.Context, queue, id string) error
	}
	byQueue := []call{
		{"Client.Get", func(ctx context.Context, q, id string) error { _, err := c.Get(ctx, q, id); return err }},
		{"Client.Cancel", func(ctx context.Context, q, id string) error { return c.Cancel(ctx, q, id) }},
		{"Client.Stats", func(ctx context.Context, q, _ string) error { _, err := c.Stats(ctx, q); return err }},
		{"Inspector.Stats", func(ctx context.Context, q, _ string) error { _, err := insp.Stats(ctx, q); return err }},
		{"Inspector.Get", func(ctx context.Context, q, id string) error { _, err := insp.Get(ctx, q, id); return err }},
		{"Inspector.Cancel", func(ctx context.Context, q, id string) error { return insp.Cancel(ctx, q, id) }},
		{"Inspector.List", func(ctx context.Context, q, _ string) error {
			_, err := insp.List(ctx, q, status.Queued, pipeline.Page{})
			return err
		}},
		{"Inspector.Replay", func(ctx context.Context, q, id string) error { return insp.Replay(ctx, q, id) }},
		{"Inspector.ReplayAll", func(ctx context.Context, q, _ string) error { _, err := insp.ReplayAll(ctx, q); return err }},
		{"Inspector.Purge", func(ctx context.Context, q, id string) error { _, err := insp.Purge(ctx, q, id); return err }},
		{"Inspector.PurgeAll", func(ctx context.Context, q, _ string) error { _, err := insp.PurgeAll(ctx, q, 0); return err }},
		{"Inspector.PurgeAllDryRun", func(ctx context.Context, q, _ string) error { _, err := insp.PurgeAllDryRun(ctx, q, 0); return err }},
		{"Inspector.PurgeDryRun", func(ctx context.Context, q, id string) error { _, err := insp.PurgeDryRun(ctx, q, id); return err }},
		{"Inspector.QueueExists", func(ctx context.Context, q, _ string) error { _, err := insp.QueueExists(ctx, q); return err }},
		{"Inspector.DeleteQueue", func(ctx context.Context, q, _ string) error { return insp.DeleteQueue(ctx, q, true) }},
		{"Inspector.CreateQueue", func(ctx context.Context, q, _ string) error {
			_, err := insp.CreateQueue(ctx, q, pipeline.QueueOptions{Partitions: 2})
			return err
		}},
	}
	byID := []call{
		{"Client.Get", func(ctx context.Context, q, id string) error { _, err := c.Get(ctx, q, id); return err }},
		{"Client.Cancel", func(ctx context.Context, q, id string) error { return c.Cancel(ctx, q, id) }},
		{"Inspector.Get", func(ctx context.Context, q, id string) error { _, err := insp.Get(ctx, q, id); return err }},
		{"Inspector.Find", func(ctx context.Context, _, id string) error { _, _, err := insp.Find(ctx, id); return err }},
		{"Inspector.Cancel", func(ctx context.Context, q, id string) error { return insp.Cancel(ctx, q, id) }},
		{"Inspector.Replay", func(ctx context.Context, q, id string) error { return insp.Replay(ctx, q, id) }},
		{"Inspector.Purge", func(ctx context.Context, q, id string) error { _, err := insp.Purge(ctx, q, "queued", id); return err }},
		{"Inspector.PurgeDryRun", func(ctx context.Context, q, id string) error { _, err := insp.PurgeDryRun(ctx, q, id); return err }},
	}
	for _, n := range hostile.BadQueues() {
		for _, m := range byQueue {
			t.Run("Queue/"+n.Name+"/"+m.name, func(t *testing.T) {
				hostile.NothingWritten(t, rdb, func() {
					requireRefused(t, m.f(t.Context(), n.Value, "queued"), []string{"queue name", n.Want})
				})
			})
		}
	}
	for _, n := range hostile.BadIDs() {
		for _, m := range byID {
			t.Run("ID/"+n.Name+"/"+m.name, func(t *testing.T) {
				hostile.NothingWritten(t, rdb, func() {
					err := m.f(t.Context(), "hostile", n.Value)
					if n.Value == "" && errors.Is(err, pipeline.ErrNotFound) {
						t.Fatalf("an empty id was looked up instead of refused")
					}
					requireRefused(t, err, []string{"job id", n.Want})
				})
			})
		}
	}
}

// TestHostileExtremes publishes valid jobs at every limit: each is accepted and reads back as
// sent (timeouts in whole milliseconds, the stored resolution, and one under a millisecond as
// one millisecond rather than none: it read back as no timeout before).
func TestHostileExtremes(t *testing.T) {
	t.Parallel()
	_, c, _ := hostileServer(t)
	for _, e := range hostile.Extremes("hostile") {
		t.Run(e.Name, func(t *testing.T) {
			e.SkipAt(t, hostile.Library)
			task, opts := hostileTask(e.Job)
			j, err := c.Enqueue(t.Context(), e.Job.Queue, task, opts...)
			require.NoError(t, err)
			got, err := c.Get(t.Context(), e.Job.Queue, j.ID)
			require.NoError(t, err)
			require.Equal(t, e.Job.Type, got.Type)
			if e.Job.ID != "" {
				require.Equal(t, e.Job.ID, got.ID)
			}
			if len(e.Job.Metadata) > 0 {
				require.Equal(t, e.Job.Metadata, got.Metadata)
			}
			if e.Job.HasRetries {
				require.Equal(t, e.Job.MaxRetries, got.MaxRetries)
			}
			if e.Job.Timeout > 0 {
				want := max(time.Millisecond, e.Job.Timeout.Truncate(time.Millisecond))
				require.Equal(t, want, got.Timeout)
				require.Equal(t, got.Timeout, j.Timeout, "Enqueue's job and the stored one differ")
			}
			if !e.Job.RunAt.IsZero() {
				require.True(t, e.Job.RunAt.Equal(got.RunAt), "run at %s, want %s", got.RunAt, e.Job.RunAt)
				require.Equal(t, status.Scheduled, got.Status)
			}
		})
	}
}

// TestHostileLimitsAgree checks that the table's limits are the library's.
func TestHostileLimitsAgree(t *testing.T) {
	t.Parallel()
	require.Equal(t, keys.MaxNameLen, hostile.MaxNameLen)
	require.Equal(t, pipeline.MaxMetadataEntries, hostile.MaxMetadataEntries)
	require.Equal(t, pipeline.MaxMetadataBytes, hostile.MaxMetadataBytes)
	require.Equal(t, pipeline.MaxMaxRetries, hostile.MaxMaxRetries)
	require.True(t, pipeline.MaxRunAt.Equal(hostile.MaxRunAt))
}
