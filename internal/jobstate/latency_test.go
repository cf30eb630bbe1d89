package jobstate_test

import (
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// A queue's latency is the age, by Redis's clock, of its oldest entry no worker was handed:
// over its levels, with or without a group, 0 once every entry was handed out. Entries are
// added with ids in the past, so that no test waits: the latency is bounded by Redis's clock
// read before and after.
func TestLatency(t *testing.T) {
	t.Parallel()
	for _, tc := range topologies {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := tc.rdb(t)
			ctx := t.Context()
			q := keys.New(keys.DefaultPrefix, redistest.UniqueName(t))
			idle := keys.New(keys.DefaultPrefix, redistest.UniqueName(t))
			// Redis's clock, in ms, on the node of q.
			clock := func() int64 {
				now, err := jobstate.NewStore(rdb, keys.DefaultPrefix).Clock(ctx, q)
				require.NoError(t, err)
				return now.UnixMilli()
			}
			// The latency of q and idle, checked to be age of an entry at ms between two reads of
			// the clock.
			latencyOf := func(ms int64) int64 {
				before := clock()
				got, err := jobstate.Latency(ctx, rdb, []keys.Queue{q, idle})
				require.NoError(t, err)
				after := clock()
				require.Zero(t, got[1], "a queue with no stream")
				if ms > 0 {
					require.GreaterOrEqual(t, got[0], before-ms)
					require.LessOrEqual(t, got[0], after-ms)
				}
				return got[0]
			}
			add := func(level int, ms int64, seq int) {
				require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: q.LevelStream(level),
					ID: strconv.FormatInt(ms, 10) + "-" + strconv.Itoa(seq), Values: []string{"job", "x"}}).Err())
			}
			deliver := func(level int, n int64) {
				require.NoError(t, rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: "c",
					Streams: []string{q.LevelStream(level), ">"}, Count: n, Block: -1}).Err())
			}

			require.Zero(t, latencyOf(0), "no stream")
			now := clock()
			// Level 1: entries 60 s and 50 s old; level 3: one 90 s old. No group yet.
			add(1, now-60_000, 0)
			add(1, now-50_000, 0)
			add(3, now-90_000, 0)
			latencyOf(now - 90_000)
			// The group reads level 3's entry: level 1's oldest is the oldest ready now.
			require.NoError(t, rdb.XGroupCreateMkStream(ctx, q.LevelStream(1), keys.Group, "0").Err())
			require.NoError(t, rdb.XGroupCreateMkStream(ctx, q.LevelStream(3), keys.Group, "0").Err())
			latencyOf(now - 90_000)
			deliver(3, 1)
			latencyOf(now - 60_000)
			deliver(1, 1)
			latencyOf(now - 50_000)
			deliver(1, 1)
			require.Zero(t, latencyOf(0), "every entry handed out")
			// A new entry after the delivered ones: its own age.
			add(1, now-1_000, 0)
			latencyOf(now - 1_000)
		})
	}
}
