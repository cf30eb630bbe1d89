package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// TestResendAcrossKeySwitch: a job published under k1 and published again, with the same
// plaintext, by a Client whose keyring lists k2 first (a retry after a lost reply that spans a
// redeploy) finds its job, by Enqueue, EnqueueBatch and the Watermill Publisher, whether the
// payload is in the stream entry (queued) or in the hash (scheduled): no conflict and no second
// job. Another plaintext still conflicts, and a Client without k1 gets a conflict that names it.
func TestResendAcrossKeySwitch(t *testing.T) {
	standaloneAndCluster(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		k1, k21, k2 := testKeys(t, "k1"), testKeys(t, "k2", "k1"), testKeys(t, "k2")
		b := setup(t, setupOpts{rdb: rdb, client: pipeline.ClientConfig{Keys: k1}})
		after, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Keys: k21})
		require.NoError(t, err)
		without, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Keys: k2})
		require.NoError(t, err)

		queued := pipeline.Task{Type: "enc", Payload: []byte(`{"n":"queued"}`), Opts: []pipeline.Option{pipeline.WithID("queued")}}
		scheduled := pipeline.Task{Type: "enc", Payload: []byte(`{"n":"scheduled"}`),
			Opts: []pipeline.Option{pipeline.WithID("scheduled"), pipeline.WithDelay(time.Hour)}}
		batched := pipeline.Task{Type: "enc", Payload: []byte(`{"n":"batched"}`), Opts: []pipeline.Option{pipeline.WithID("batched")}}
		for _, task := range []pipeline.Task{queued, scheduled} {
			_, err := b.client.Enqueue(ctx, b.queue, task)
			require.NoError(t, err)
		}
		_, err = b.client.EnqueueBatch(ctx, b.queue, []pipeline.Task{batched})
		require.NoError(t, err)
		stored := func(id string) []byte { // the payload as Redis holds it, whichever place
			t.Helper()
			raw, err := b.client.Get(ctx, b.queue, id)
			require.NoError(t, err)
			sealed, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
			require.NoError(t, err)
			j, err := sealed.Get(ctx, b.queue, id)
			require.NoError(t, err)
			require.Equal(t, string(raw.Payload), string(mustOpen(t, k1, id, j.Payload)))
			return j.Payload
		}
		kid, _ := keyring.KeyID(stored("queued"))
		require.Equal(t, "k1", kid)

		for _, tc := range []struct {
			task pipeline.Task
			st   status.Status
		}{{queued, status.Queued}, {scheduled, status.Scheduled}} {
			j, err := after.Enqueue(ctx, b.queue, tc.task)
			require.NoError(t, err, "the same plaintext under k2 is the same job")
			require.True(t, j.Duplicate)
			require.Equal(t, tc.st, j.Status)
			require.Equal(t, string(tc.task.Payload), string(j.Payload), "the job read back, opened")
		}
		jobs, err := after.EnqueueBatch(ctx, b.queue, []pipeline.Task{queued, scheduled, batched,
			{Type: "enc", Payload: []byte(`{"n":"new"}`), Opts: []pipeline.Option{pipeline.WithID("new")}}})
		require.NoError(t, err)
		for i, st := range []status.Status{status.Queued, status.Scheduled, status.Queued} {
			require.True(t, jobs[i].Duplicate, "task %d", i)
			require.Equal(t, st, jobs[i].Status, "task %d", i)
		}
		require.False(t, jobs[3].Duplicate)
		pub, err := pipeline.NewPublisher(after, pipeline.PublisherConfig{DefaultType: "enc"})
		require.NoError(t, err)
		require.NoError(t, pub.Publish(b.queue, message.NewMessage("batched", batched.Payload)))
		require.EqualValues(t, 4, b.stats(t).Enqueued, "one job each, and the new one")
		kid, _ = keyring.KeyID(stored("queued"))
		require.Equal(t, "k1", kid, "the stored job is left as it was")

		other := pipeline.Task{Type: "enc", Payload: []byte(`{"n":"other"}`), Opts: queued.Opts}
		_, err = after.Enqueue(ctx, b.queue, other)
		require.ErrorIs(t, err, pipeline.ErrConflict)
		require.ErrorContains(t, err, "different payload")
		_, err = after.EnqueueBatch(ctx, b.queue, []pipeline.Task{other, scheduled})
		require.ErrorIs(t, err, pipeline.ErrConflict)

		_, err = without.Enqueue(ctx, b.queue, queued)
		require.ErrorIs(t, err, pipeline.ErrConflict, "what cannot be opened cannot be compared")
		require.ErrorIs(t, err, keyring.ErrUnknownKey)
		require.ErrorContains(t, err, `stored payload does not open to compare: keyring: value sealed under key "k1"`)
		_, err = without.EnqueueBatch(ctx, b.queue, []pipeline.Task{scheduled})
		require.ErrorIs(t, err, pipeline.ErrConflict)
		require.ErrorContains(t, err, `"k1"`)
		require.EqualValues(t, 4, b.stats(t).Enqueued)
	})
}

func mustOpen(t *testing.T, k *keyring.Keyring, id string, b []byte) []byte {
	t.Helper()
	p, err := k.Open(keyring.Payload, id, b)
	require.NoError(t, err)
	return p
}
