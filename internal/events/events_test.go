package events_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/redistest"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  string
		want []events.Event
		err  string
	}{
		{name: "one", msg: "completed 1 job-1", want: []events.Event{{ID: "job-1", Status: "completed", Attempt: 1}}},
		{name: "batch", msg: "in_progress 2 a\nfailed 0 entry-1700000000000-0\ncanceled 0 order:42",
			want: []events.Event{{ID: "a", Status: "in_progress", Attempt: 2},
				{ID: "entry-1700000000000-0", Status: "failed"}, {ID: "order:42", Status: "canceled"}}},
		{name: "every status", msg: "scheduled 1 a\nqueued 1 a\nin_progress 1 a\ncompleted 1 a\nfailed 1 a\ncanceled 1 a",
			want: []events.Event{{"a", "scheduled", 1}, {"a", "queued", 1}, {"a", "in_progress", 1},
				{"a", "completed", 1}, {"a", "failed", 1}, {"a", "canceled", 1}}},
		{name: "progress", msg: "progress 2 a\ncompleted 2 a", want: []events.Event{{"a", events.Progress, 2}, {"a", "completed", 2}}},
		{name: "empty", msg: "", err: "empty"},
		{name: "empty line", msg: "completed 1 a\n", err: "not \"status attempt id\""},
		{name: "two fields", msg: "completed 1", err: "not \"status attempt id\""},
		{name: "unknown status", msg: "done 1 a", err: "unknown status"},
		{name: "negative attempt", msg: "completed -1 a", err: "attempt"},
		{name: "leading zero", msg: "completed 01 a", err: "attempt"},
		{name: "plus sign", msg: "completed +1 a", err: "attempt"},
		{name: "huge attempt", msg: "completed 99999999999 a", err: "attempt"},
		{name: "space in id", msg: "completed 1 a b", err: "job id"},
		{name: "bad id", msg: "completed 1 a{b}", err: "job id"},
		{name: "long id", msg: "completed 1 " + strings.Repeat("x", 129), err: "job id"},
		{name: "one bad line spoils all", msg: "completed 1 a\nzzz 1 b", err: "unknown status"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := events.Parse(tc.msg)
			if tc.err != "" {
				require.ErrorIs(t, err, events.ErrMessage)
				require.ErrorContains(t, err, tc.err)
				require.Nil(t, got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.msg, events.Format(got), "Format writes what the scripts write")
		})
	}
}

// Messages arrive from the network: Parse must never panic, and what it accepts must be
// well formed and written back exactly by Format.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"completed 1 a", "in_progress 2 a\nfailed 0 entry-1-0", "", "\n", "x 1 a",
		"completed 1 a b", "queued 00 a", "canceled 1000000000 x:y", "progress 3 a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		evs, err := events.Parse(msg)
		if err != nil {
			if evs != nil {
				t.Fatalf("events %v with error %v", evs, err)
			}
			return
		}
		if len(evs) == 0 {
			t.Fatal("no events and no error")
		}
		for _, e := range evs {
			if e.Attempt < 0 || e.ID == "" || e.Status == "" {
				t.Fatalf("accepted %+v", e)
			}
		}
		if got := events.Format(evs); got != msg {
			t.Fatalf("Format(Parse(%q)) = %q", msg, got)
		}
	})
}

func TestMode(t *testing.T) {
	require.Equal(t, "SPUBLISH", events.Sharded.Command())
	require.Equal(t, "PUBLISH", events.Plain.Command())
	require.Empty(t, events.None.Command())
	require.Equal(t, "sharded", events.Sharded.String())
}

// Detect: Redis 7 has sharded Pub/Sub; a server that refuses the probe (here an ACL user with
// no channel) gets None, so no script calls a command it would refuse; an unreachable server
// is an error, for ModeOf to ask again later.
func TestDetect(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	m, err := events.Detect(ctx, rdb)
	require.NoError(t, err)
	require.Equal(t, events.Sharded, m)

	user := redistest.UniqueName(t)
	require.NoError(t, rdb.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "+@all", "resetchannels").Err())
	t.Cleanup(func() { _ = rdb.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	limited := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: user, Password: "pw"})
	t.Cleanup(func() { _ = limited.Close() })
	m, err = events.Detect(ctx, limited)
	require.NoError(t, err)
	require.Equal(t, events.None, m)

	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	_, err = events.Detect(ctx, down)
	require.Error(t, err)
	require.Equal(t, events.None, events.ModeOf(ctx, down), "None while unknown")
}
