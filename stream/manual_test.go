package stream

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

func TestManualSettle(t *testing.T) {
	checkLeaks(t)

	t.Run("SettleFreesSlotsAckDoesNot", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.Client(t)
		topic := redistest.UniqueName(t)
		publish(t, rdb, topic, "m", 10)
		sub := newTestSubscriber(t, rdb, Config{Concurrency: 3, ManualSettle: true, CloseTimeout: 100 * time.Millisecond})
		msgs, err := sub.Subscribe(t.Context(), topic)
		require.NoError(t, err)

		first := receiveN(t, msgs, 3, 5*time.Second)
		// Ack is not a settle here: the slots stay taken.
		for _, m := range first {
			m.Ack()
		}
		requireNothing(t, msgs, 200*time.Millisecond)
		sub.Settle(first[0])
		sub.Settle(first[0]) // twice is harmless
		next := receive(t, msgs, 5*time.Second)
		require.NotContains(t, entryIDs(first), next.Metadata[EntryIDKey])
		requireNothing(t, msgs, 200*time.Millisecond)
		// Entries stay pending: acknowledging them is the application's job.
		require.EqualValues(t, 4, pendingCount(t, rdb, topic))
	})

	t.Run("NackHandsNothingOutAgain", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.Client(t)
		topic := redistest.UniqueName(t)
		publish(t, rdb, topic, "m", 1)
		sub := newTestSubscriber(t, rdb, Config{Concurrency: 2, ManualSettle: true, NackResendSleep: time.Millisecond, CloseTimeout: 100 * time.Millisecond})
		msgs, err := sub.Subscribe(t.Context(), topic)
		require.NoError(t, err)
		receive(t, msgs, 5*time.Second).Nack()
		requireNothing(t, msgs, 200*time.Millisecond)
	})

	t.Run("LostLeaseCancelsContext", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.Client(t)
		topic := redistest.UniqueName(t)
		ids := publish(t, rdb, topic, "m", 1)
		sub := newTestSubscriber(t, rdb, Config{Concurrency: 2, ManualSettle: true, LeaseInterval: 50 * time.Millisecond})
		msgs, err := sub.Subscribe(t.Context(), topic)
		require.NoError(t, err)
		msg := receive(t, msgs, 5*time.Second)
		require.NoError(t, rdb.XAck(t.Context(), topic, testGroup, ids[0]).Err())
		select {
		case <-msg.Context().Done():
			require.ErrorIs(t, context.Cause(msg.Context()), ErrLeaseLost)
		case <-time.After(5 * time.Second):
			t.Fatal("context not cancelled after the entry stopped being pending")
		}
		sub.Settle(msg)
	})

	t.Run("SettleFindsTheSubscriptionHoldingTheEntry", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.Client(t)
		topic := redistest.UniqueName(t)
		publish(t, rdb, topic, "old", 1)
		sub := newTestSubscriber(t, rdb, Config{Concurrency: 2, ManualSettle: true, CloseTimeout: time.Minute})
		ctx, cancel := context.WithCancel(t.Context())
		first, err := sub.Subscribe(ctx, topic)
		require.NoError(t, err)
		old := receive(t, first, 5*time.Second)
		// The first subscription closes but waits (CloseTimeout) for its unsettled message, so
		// for a while two subscriptions of the stream exist; its reader has stopped.
		cancel()
		sub.mu.Lock()
		closing := sub.topics[0]
		sub.mu.Unlock()
		<-closing.readDone

		second, err := sub.Subscribe(t.Context(), topic)
		require.NoError(t, err)
		publish(t, rdb, topic, "new", 2)
		m := receive(t, second, 5*time.Second) // the second of two slots
		sub.Settle(m)
		next := receive(t, second, 5*time.Second) // only with the slot Settle freed
		sub.Settle(next)
		sub.Settle(old) // lets the first subscription finish
		requireClosed(t, first, 5*time.Second)
	})

	t.Run("CloseReleasesUnsettled", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.Client(t)
		topic := redistest.UniqueName(t)
		publish(t, rdb, topic, "m", 5)
		var rel releases
		sub := newTestSubscriber(t, rdb, Config{Concurrency: 5, ManualSettle: true,
			CloseTimeout: 300 * time.Millisecond, OnRelease: rel.onRelease})
		ctx, cancel := context.WithCancel(t.Context())
		msgs, err := sub.Subscribe(ctx, topic)
		require.NoError(t, err)
		got := receiveN(t, msgs, 5, 5*time.Second)
		sub.Settle(got[0])
		// got[1] settles during the close timeout; the rest never do.
		var cancelled atomic.Int32
		for _, m := range got[2:] {
			go func(m *message.Message) {
				<-m.Context().Done()
				if errors.Is(context.Cause(m.Context()), ErrClosed) {
					cancelled.Add(1)
				}
			}(m)
		}
		cancel()
		require.Eventually(t, func() bool { return shuttingDown(sub) }, 5*time.Second, time.Millisecond)
		sub.Settle(got[1]) // within the close timeout: settled, not released
		requireClosed(t, msgs, 5*time.Second)
		require.ElementsMatch(t, entryIDs(got[2:]), rel.get(topic))
		require.Eventually(t, func() bool { return cancelled.Load() == 3 }, 5*time.Second, 10*time.Millisecond)
		sub.Settle(got[2]) // after release: nothing happens
	})
}
