package jobstate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// TestPromoteDuringSlotMigrationKeepsTheJob is what `conveyor torture cluster-slot-move`
// found (its AOFs showed the ZREM on the importing node): while the queue's slot migrates in
// batches, the scheduled set and the stream can already be on the target while a due job's
// hash is still on the source. The source answers promote.lua with ASK (none of its declared
// keys, the set and the stream, is there any more); the target runs it under ASKING, reads
// the job's hash by a name the script does not declare, finds nothing (Redis 7.0 lets a
// script on the importing node read a single missing key), takes the job for gone and removes
// it from the set. Once the hash moves too, the job is 'scheduled' in no set and never runs.
//
// Fixed by the cluster guard (internal/script): on a cluster every script first checks that
// its node is neither migrating nor importing its slot, and is refused with TRYAGAIN (before it
// reads anything) while it is; the caller retries until the move ends. This test failed before
// the guard (the job dropped from the set).
func TestPromoteDuringSlotMigrationKeepsTheJob(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	ctx := t.Context()
	cc := c.Client(t)
	q := keys.New(keys.DefaultPrefix, "migrating")
	client, err := pipeline.NewClient(cc, pipeline.ClientConfig{})
	require.NoError(t, err)
	// A job queued now, so that the stream exists (promote.lua declares it).
	_, err = client.Enqueue(ctx, "migrating", pipeline.Task{Type: "t", Payload: []byte(`{}`)}, pipeline.WithID("j0"))
	require.NoError(t, err)
	due := time.Now().Add(100 * time.Millisecond)
	_, err = client.Enqueue(ctx, "migrating", pipeline.Task{Type: "t", Payload: []byte(`{}`)},
		pipeline.WithID("j1"), pipeline.WithRunAt(due))
	require.NoError(t, err)

	src, dst, slot := c.SlotNodes(t, cc, q.Scheduled())
	id := func(r *redis.Client) string { return r.ClusterMyID(ctx).Val() }
	require.NoError(t, dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", id(src)).Err())
	require.NoError(t, src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", id(dst)).Err())
	// The first batch of the move holds the set and the stream, not the job's hash.
	host, port := dst.Options().Addr[:len("127.0.0.1")], dst.Options().Addr[len("127.0.0.1:"):]
	require.NoError(t, src.Do(ctx, "MIGRATE", host, port, "", 0, 5000, "KEYS", q.Scheduled(), q.Stream()).Err())

	require.Eventually(t, func() bool {
		tm, err := src.Time(ctx).Result()
		return err == nil && !tm.Before(due)
	}, 5*time.Second, 10*time.Millisecond)
	// As a worker's scheduler does: the cluster client follows the source's ASK, and the
	// target refuses the script while it imports the slot. The call retries until its
	// context ends (or script.RetryFor), then hands back the refusal.
	pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = jobstate.NewStore(cc, "").Promote(pctx, q, jobstate.PromoteParams{Limit: 100, Events: events.None})
	cancel()
	require.Error(t, err, "promote ran on a half-moved slot")
	// Refused, or cut by the deadline while a retry was in flight.
	require.True(t, rediserr.Classify(err) == rediserr.ClusterDown || errors.Is(err, context.DeadlineExceeded), "%v", err)

	// Either promoted or still waiting in the set: never dropped from the set while its hash
	// says 'scheduled'.
	pipe := dst.Pipeline() // ASKING holds for the next command of the same connection
	pipe.Do(ctx, "ASKING")
	left := pipe.ZScore(ctx, q.Scheduled(), "j1")
	_, _ = pipe.Exec(ctx)
	st := src.HGet(ctx, q.Job("j1"), "status").Val()
	require.False(t, left.Err() == redis.Nil && st == "scheduled",
		"the job's hash says %q on the source and the scheduled set on the target lost it", st)

	// The move ends (the job's hash too, then the slot is the target's): the retried
	// promotion moves the job into the stream.
	require.NoError(t, src.Do(ctx, "MIGRATE", host, port, "", 0, 5000, "KEYS", q.Job("j0"), q.Job("j1")).Err())
	for _, n := range []*redis.Client{dst, src} {
		require.NoError(t, n.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", id(dst)).Err())
	}
	require.Eventually(t, func() bool {
		_, err := jobstate.NewStore(cc, "").Promote(ctx, q, jobstate.PromoteParams{Limit: 100, Events: events.None})
		return err == nil && dst.HGet(ctx, q.Job("j1"), "status").Val() == "queued"
	}, 10*time.Second, 20*time.Millisecond, "the job was not promoted after the move")
	require.Equal(t, int64(2), dst.XLen(ctx, q.Stream()).Val(), "j0's entry and j1's")
}
