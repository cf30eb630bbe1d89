package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/outbox"
	"github.com/conveyorq/conveyor/pipeline"
)

// watchRow polls the one row left of the table (once tried) until stop says so, and returns
// the largest retry_at - failed_at seen: its queue's backoff after a try, taken a little late
// (the try in between). A row selected a little before its retry_at is held back again for the
// rest, without a try, so smaller ones are seen too; each holds until the row's next batch.
func (b *testBundle) watchRow(t *testing.T, stop func(attempts int, wait time.Duration) bool) time.Duration {
	t.Helper()
	var most time.Duration
	require.Eventually(t, func() bool {
		var attempts int
		var ms float64
		// No row before its first try.
		err := b.db.QueryRow(`SELECT attempts, EXTRACT(EPOCH FROM retry_at - failed_at) * 1000 FROM `+
			outbox.Table+` WHERE error IS NULL AND attempts > 0`).Scan(&attempts, &ms)
		if err != nil {
			return false
		}
		wait := time.Duration(ms * float64(time.Millisecond))
		most = max(most, wait)
		return stop(attempts, wait)
	}, time.Minute, time.Millisecond)
	return most
}

// A queue held back by refusals backs off longer at each try; once its rows were sent, a new
// failure starts from the first backoff again. Mutants of relay.go (scripts/mutants.tsv): the
// queue kept held back after its send (OB2: the next backoff doubles the old one), a held-back
// queue forgotten once its backoff ended (OB5: every try's backoff is the first).
func TestHeldBackQueueBackoffDoublesAndStartsOverAfterASend(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	var err error
	b.client, err = pipeline.NewClient(b.rdb, pipeline.ClientConfig{RequireQueues: true})
	require.NoError(t, err)
	b.enqueue(t, 1, nil)
	b.relay(t, outbox.RelayConfig{PollInterval: 10 * time.Millisecond})
	// Tries 1 to 4 back off 100, 200, 400 and 800 ms.
	require.Greater(t, b.watchRow(t, func(attempts int, _ time.Duration) bool { return attempts >= 5 }), 200*time.Millisecond)
	insp, err := pipeline.NewInspector(b.rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	_, err = insp.CreateQueue(ctx, b.queue, pipeline.QueueOptions{})
	require.NoError(t, err)
	b.waitEmpty(t)
	// Now Redis fails for the queue (see TestQueueRedisFailsForIsHeldBack).
	stream := keys.New(b.client.Prefix(), b.queue).Stream()
	require.NoError(t, b.rdb.Del(ctx, stream).Err())
	require.NoError(t, b.rdb.Set(ctx, stream, "not a stream", 0).Err())
	b.enqueue(t, 1, nil)
	require.LessOrEqual(t, b.watchRow(t, func(attempts int, _ time.Duration) bool { return attempts >= 1 }), 100*time.Millisecond)
}

// A queue Redis fails for (its stream key holds a string, as in TestQueueRedisFailsForIsHeldBack)
// backs off up to 5 s, not the 30 s of a refusal, which an operator must end (mutant OB4 of
// relay.go swaps the two). Its sixth try backs off 3.2 s, the seventh would 6.4 s uncapped: the
// row is watched until two tries backed off more than 2.5 s.
func TestQueueRedisFailsForBacksOffUpTo5s(t *testing.T) {
	b := setup(t)
	b.queue = "broken"
	require.NoError(t, b.rdb.Set(context.Background(), keys.New(b.client.Prefix(), b.queue).Stream(), "not a stream", 0).Err())
	b.enqueue(t, 1, nil)
	b.relay(t, outbox.RelayConfig{PollInterval: 10 * time.Millisecond})
	long, last := 0, 0
	most := b.watchRow(t, func(attempts int, wait time.Duration) bool {
		if wait > 2500*time.Millisecond && attempts != last {
			long, last = long+1, attempts
		}
		return long == 2
	})
	require.LessOrEqual(t, most, 5*time.Second)
}
