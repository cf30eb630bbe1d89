package stream

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// levelread.lua names the first lower stream with undelivered entries by its position among
// the lower streams (1 for the first), which the reader maps back to that stream: an answer
// off by one names another level, or none.
func TestLevelsReadNamesTheLowerStreamWithEntries(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rdb := redistest.Client(t)
	base := redistest.UniqueName(t)
	top, l1, l2 := "{"+base+"}:3", "{"+base+"}:1", "{"+base+"}:2"
	for _, s := range []string{top, l1, l2} {
		require.NoError(t, rdb.XGroupCreateMkStream(ctx, s, "g", "0").Err())
	}
	read := func() any {
		t.Helper()
		v, err := levelReadScript.Run(ctx, rdb, []string{top, l1, l2}, "g", "c", 1).Result()
		require.NoError(t, err)
		return v
	}
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: l2, Values: []string{"k", "v"}}).Err())
	require.EqualValues(t, 2, read(), "the second lower stream has an entry")
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: l1, Values: []string{"k", "v"}}).Err())
	require.EqualValues(t, 1, read(), "the first lower stream is named first")
}
