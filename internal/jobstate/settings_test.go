package jobstate_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// A record changes in one step with its notice, its revision rises with every change, and a
// queue paused by the legacy set (an older version) stays paused through its first change.
func TestSettingsRecord(t *testing.T) {
	t.Parallel()
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		testSettingsRecord(t, redistest.Client(t))
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		testSettingsRecord(t, redistest.StartCluster(t).Client(t))
	})
}

func testSettingsRecord(t *testing.T, rdb redis.UniversalClient) {
	ctx := t.Context()
	prefix := "cv" + redistest.UniqueName(t)
	s := jobstate.NewStore(rdb, prefix)
	legacy, fresh := "legacy", "fresh"
	require.NoError(t, rdb.SAdd(ctx, keys.Paused(prefix), legacy).Err())

	got, err := s.ReadSettings(ctx, []string{legacy, fresh})
	require.NoError(t, err)
	require.Equal(t, []jobstate.Settings{{Queue: legacy, Paused: true, Fields: map[string]string{}},
		{Queue: fresh, Fields: map[string]string{}}}, got, "no records: the legacy set says")

	ps, err := s.SubscribeSettings(ctx)
	require.NoError(t, err)
	defer ps.Close()
	notices := ps.Channel()

	// A first change of another control keeps the legacy pause.
	ch, err := s.UpdateSettings(ctx, legacy, jobstate.SettingsChange{Set: map[string]string{"x": "1"}})
	require.NoError(t, err)
	require.Equal(t, jobstate.SettingsChanged{Rev: 1, WasPaused: true}, ch)
	q, rev, token, err := jobstate.SettingsNotice((<-notices).Payload)
	require.NoError(t, err)
	require.Equal(t, []any{legacy, int64(1), ""}, []any{q, rev, token})

	yes, no := true, false
	ch, err = s.UpdateSettings(ctx, fresh, jobstate.SettingsChange{Paused: &yes, Token: "tok"})
	require.NoError(t, err)
	require.Equal(t, jobstate.SettingsChanged{Rev: 1}, ch)
	q, rev, token, err = jobstate.SettingsNotice((<-notices).Payload)
	require.NoError(t, err)
	require.Equal(t, []any{fresh, int64(1), "tok"}, []any{q, rev, token})

	got, err = s.ReadSettings(ctx, []string{legacy, fresh})
	require.NoError(t, err)
	require.Equal(t, []jobstate.Settings{{Queue: legacy, Rev: 1, Paused: true, Fields: map[string]string{"x": "1"}},
		{Queue: fresh, Rev: 1, Paused: true, Fields: map[string]string{}}}, got)

	// Resuming clears the listing's index too; deleting a field removes it.
	ch, err = s.UpdateSettings(ctx, legacy, jobstate.SettingsChange{Paused: &no, Delete: []string{"x"}})
	require.NoError(t, err)
	require.Equal(t, jobstate.SettingsChanged{Rev: 2, WasPaused: true}, ch)
	<-notices
	paused, err := jobstate.PausedQueues(ctx, rdb, prefix)
	require.NoError(t, err)
	require.Equal(t, map[string]bool{fresh: true}, paused)
	require.NoError(t, s.BumpSettings(ctx, legacy))
	<-notices
	got, err = s.ReadSettings(ctx, []string{legacy})
	require.NoError(t, err)
	require.Equal(t, jobstate.Settings{Queue: legacy, Rev: 3, Fields: map[string]string{}}, got[0])

	_, err = s.UpdateSettings(ctx, legacy, jobstate.SettingsChange{Set: map[string]string{jobstate.SettingRev: "9"}})
	require.Error(t, err, "the revision is the store's own")
}

func TestSettingsNoticeRefusesGarbage(t *testing.T) {
	t.Parallel()
	for _, msg := range []string{"", "q", "x tok q"} {
		_, _, _, err := jobstate.SettingsNotice(msg)
		require.ErrorIs(t, err, jobstate.ErrSettingsNotice, msg)
	}
}
