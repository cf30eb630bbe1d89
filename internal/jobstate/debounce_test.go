package jobstate_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// debounce.lua joins only a never-started scheduled job its key names; promote.lua ends the
// window; a key left naming a job that ran since (a retry is scheduled again) starts a new one;
// a closed layout refuses and writes nothing. Times are Redis's.
func TestDebounceScript(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := t.Context()
	q := keys.New(keys.DefaultPrefix, redistest.UniqueName(t))
	n := 0
	publish := func(key string, quiet, maxWait time.Duration) jobstate.Debounced {
		t.Helper()
		n++
		j := jobstate.NewJob{ID: "j" + string(rune('a'+n)), Type: "t", Payload: []byte{byte('0' + n)}, MaxRetries: 1,
			Debounce: key, DebounceQuiet: quiet, DebounceMaxWait: maxWait}
		c := jobstate.DebounceCall(q, &j)
		d, err := jobstate.DebounceReply(c.Script.Run(ctx, rdb, c.Keys, c.Args...))
		require.NoError(t, err)
		return d
	}

	// A window capped by its max wait: a second publish with a longer quiet is due at first + max wait.
	a := publish("k", time.Hour, time.Hour)
	require.False(t, a.Joined)
	require.Equal(t, a.CreatedAt.Add(time.Hour), a.RunAt)
	b := publish("k", 2*time.Hour, time.Hour)
	require.True(t, b.Joined)
	require.Equal(t, a.ID, b.ID)
	require.Equal(t, a.Until, b.RunAt, "never later than first + max wait")
	require.Equal(t, 2, b.Publishes)
	require.EqualValues(t, 2, b.Version)
	payload, err := rdb.HGet(ctx, q.Job(a.ID), keys.FieldPayload).Result()
	require.NoError(t, err)
	require.Equal(t, "2", payload)

	// A short window, promoted by the scheduler's script when Redis's clock reaches it.
	s := publish("s", time.Millisecond, time.Millisecond)
	require.Eventually(t, func() bool {
		p, err := jobstate.NewStore(rdb, "").Promote(ctx, q, jobstate.PromoteParams{Limit: 100, Events: events.None})
		return err == nil && p.Moved == 1
	}, 10*time.Second, time.Millisecond)
	exists, err := rdb.Exists(ctx, q.Debounce("s")).Result()
	require.NoError(t, err)
	require.Zero(t, exists, "the promotion ended the window")
	h, err := rdb.HMGet(ctx, q.Job(s.ID), keys.FieldStatus, keys.FieldEnqueuedAt, keys.FieldRunAt).Result()
	require.NoError(t, err)
	require.Equal(t, "queued", h[0])
	require.GreaterOrEqual(t, h[1].(string), h[2].(string), "promoted no earlier than due (same digit count)")
	s2 := publish("s", time.Hour, time.Hour)
	require.False(t, s2.Joined)
	require.NotEqual(t, s.ID, s2.ID)

	// A key left naming a job that has run (scheduled again for a retry): a new window.
	require.NoError(t, rdb.HSet(ctx, q.Job(s2.ID), keys.FieldAttempt, "1").Err())
	s3 := publish("s", time.Hour, time.Hour)
	require.False(t, s3.Joined)
	require.NotEqual(t, s2.ID, s3.ID)

	// A closed layout: refused, nothing written.
	require.NoError(t, rdb.Set(ctx, q.Closed(), "1", time.Minute).Err())
	j := jobstate.NewJob{ID: "closed", Type: "t", Debounce: "k", DebounceQuiet: time.Second, DebounceMaxWait: time.Second}
	c := jobstate.DebounceCall(q, &j)
	_, err = jobstate.DebounceReply(c.Script.Run(ctx, rdb, c.Keys, c.Args...))
	require.ErrorIs(t, err, jobstate.ErrClosed)
	pubs, err := rdb.HGet(ctx, q.Job(a.ID), keys.FieldDebouncePubs).Result()
	require.NoError(t, err)
	require.Equal(t, "2", pubs)
	st, err := rdb.HGetAll(ctx, q.Stats()).Result()
	require.NoError(t, err)
	require.Equal(t, "4", st[keys.StatEnqueued])
	require.Equal(t, "1", st[keys.StatDebounced])
}
