package jobstate_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/script"
)

// The scripts build a queue's group keys from its job key prefix (lua/groups.lua cv_group_prefix);
// keys.Queue names the same keys. A grouped enqueue past the window proves both agree: the
// first job is in the set keys.Queue.GroupWindow names, the second in the list GroupWaiting
// names, and the settings ReadGroupSettings reads are the ones the script obeyed.
func TestGroupKeysMatchTheScripts(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := t.Context()
	q := keys.New(keys.DefaultPrefix, redistest.UniqueName(t))
	require.NoError(t, jobstate.SetGroupSettings(ctx, rdb, []keys.Queue{q}, jobstate.GroupChange{Window: 1}))
	now := time.Now()
	jobs := []jobstate.NewJob{{ID: "j1", Type: "t", RunAt: now, Group: "g"}, {ID: "j2", Type: "t", RunAt: now, Group: "g"},
		{ID: "j3", Type: "t", RunAt: now}}
	c := jobstate.EnqueueCall(q, now, jobs)
	rows, err := jobstate.EnqueueReply(c.Script.Run(ctx, rdb, c.Keys, c.Args...), len(jobs))
	require.NoError(t, err)
	require.Equal(t, script.OK, rows[0].Code)
	require.NotEmpty(t, rows[0].Entry)
	require.Equal(t, script.OK, rows[1].Code)
	require.Empty(t, rows[1].Entry, "the window holds one")
	require.NotEmpty(t, rows[2].Entry, "a job without a group is held to nothing")

	in, err := rdb.SMembers(ctx, q.GroupWindow("g")).Result()
	require.NoError(t, err)
	require.Equal(t, []string{"j1"}, in)
	wait, err := rdb.LRange(ctx, q.GroupWaiting("g"), 0, -1).Result()
	require.NoError(t, err)
	require.Equal(t, []string{"j2"}, wait)
	for _, k := range []string{q.GroupsActive(), q.GroupsWaiting()} {
		require.Equal(t, []string{"g"}, rdb.SMembers(ctx, k).Val(), k)
	}
	require.EqualValues(t, 1, rdb.Exists(ctx, q.Grouped()).Val())
	h := rdb.HMGet(ctx, q.Job("j2"), keys.FieldStatus, keys.FieldGroup, keys.FieldEntry).Val()
	require.Equal(t, []any{"queued", "g", nil}, h)
	st, err := jobstate.NewStore(rdb, "").ReadStats(ctx, []keys.Queue{q})
	require.NoError(t, err)
	require.EqualValues(t, 1, st[0].GroupWaiting)
	require.EqualValues(t, 3, st[0].Queued)
	set, err := jobstate.ReadGroupSettings(ctx, rdb, q)
	require.NoError(t, err)
	require.EqualValues(t, 1, set.Window)
	gs, total, err := jobstate.NewStore(rdb, "").ReadGroups(ctx, []keys.Queue{q}, 0)
	require.NoError(t, err)
	require.Equal(t, []jobstate.GroupCount{{Group: "g", InWindow: 1, Waiting: 1}}, gs)
	require.Equal(t, 1, total)
}
