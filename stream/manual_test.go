package stream

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
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

	t.Run("RevokeCancelsContextWithCause", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.Client(t)
		topic := redistest.UniqueName(t)
		ids := publish(t, rdb, topic, "m", 2)
		var rel releases
		sub := newTestSubscriber(t, rdb, Config{Concurrency: 2, ManualSettle: true, OnRelease: rel.onRelease,
			CloseTimeout: 100 * time.Millisecond})
		msgs, err := sub.Subscribe(t.Context(), topic)
		require.NoError(t, err)
		got := receiveN(t, msgs, 2, 5*time.Second)
		revoked := got[0]
		cause := errors.New("job canceled")
		require.False(t, sub.Revoke("other-stream", revoked.Metadata[EntryIDKey], cause))
		require.True(t, sub.Revoke(topic, revoked.Metadata[EntryIDKey], cause))
		require.False(t, sub.Revoke(topic, revoked.Metadata[EntryIDKey], cause), "once")
		<-revoked.Context().Done()
		require.ErrorIs(t, context.Cause(revoked.Context()), cause)
		require.NoError(t, got[1].Context().Err(), "the other message runs on")
		// The revoked message keeps its slot until it settles, and is not released at close.
		requireNothing(t, msgs, 100*time.Millisecond)
		sub.Settle(revoked)
		require.NoError(t, sub.Close())
		require.Equal(t, []string{got[1].Metadata[EntryIDKey]}, rel.get(topic))
		require.ElementsMatch(t, ids, entryIDs(got))
	})

	t.Run("RenewNowFindsLostLeaseBeforeInterval", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.Client(t)
		topic := redistest.UniqueName(t)
		ids := publish(t, rdb, topic, "m", 1)
		sub := newTestSubscriber(t, rdb, Config{Concurrency: 2, ManualSettle: true, LeaseInterval: time.Hour})
		msgs, err := sub.Subscribe(t.Context(), topic)
		require.NoError(t, err)
		msg := receive(t, msgs, 5*time.Second)
		require.NoError(t, rdb.XAck(t.Context(), topic, testGroup, ids[0]).Err())
		sub.RenewNow()
		select {
		case <-msg.Context().Done():
			require.ErrorIs(t, context.Cause(msg.Context()), ErrLeaseLost)
		case <-time.After(10 * time.Second):
			t.Fatal("RenewNow did not renew: the lease interval is an hour")
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

	t.Run("ReadAgainWhileHeld", func(t *testing.T) {
		// The group's read position moves back (XGROUP SETID 0) while entries are held, so a
		// read returns them again: an entry held is not handed out a second time, and its
		// settle frees its own slot only.
		t.Parallel()
		rdb := redistest.Client(t)
		topic := redistest.UniqueName(t)
		ids := publish(t, rdb, topic, "m", 4)
		sub := newTestSubscriber(t, rdb, Config{Concurrency: 4, ManualSettle: true, CloseTimeout: 100 * time.Millisecond})
		msgs, err := sub.Subscribe(t.Context(), topic)
		require.NoError(t, err)
		held := receiveN(t, msgs, 4, 5*time.Second)
		require.Equal(t, ids, entryIDs(held))

		require.NoError(t, rdb.XGroupSetID(t.Context(), topic, testGroup, "0").Err())
		// One slot frees; the reads that follow return ids[0..2] again, which are still held,
		// and then ids[3], which is not any more.
		sub.Settle(held[3])
		again := receive(t, msgs, 5*time.Second)
		require.Equal(t, ids[3], again.Metadata.Get(EntryIDKey), "an entry still held was handed out again")
		for _, m := range held[:3] {
			require.NoError(t, m.Context().Err(), "a held message's context was cancelled")
			sub.Settle(m)
		}
		sub.Settle(again)

		// Every slot is usable: four new messages run at once.
		fresh := publish(t, rdb, topic, "new", 4)
		require.ElementsMatch(t, fresh, entryIDs(receiveN(t, msgs, 4, 5*time.Second)))
	})

	t.Run("ReadAgainMidRun", func(t *testing.T) {
		t.Parallel()
		for _, manual := range []bool{true, false} {
			t.Run(map[bool]string{true: "ManualSettle", false: "Ack"}[manual], func(t *testing.T) {
				t.Parallel()
				rdb := redistest.Client(t)
				topic := redistest.UniqueName(t)
				const total, concurrency = 40, 4
				ids := publish(t, rdb, topic, "m", total)
				sub := newTestSubscriber(t, rdb, Config{Concurrency: concurrency, ManualSettle: manual,
					CloseTimeout: 100 * time.Millisecond, AckInterval: time.Millisecond})
				msgs, err := sub.Subscribe(t.Context(), topic)
				require.NoError(t, err)

				var mu sync.Mutex
				running := map[string]int{} // entry id -> handlers running it
				seen := map[string]bool{}   // by the loop below only
				var twice []string
				var handlers sync.WaitGroup
				done := func(m *message.Message) {
					if manual {
						sub.Settle(m)
					} else {
						m.Ack()
					}
				}
				handle := func(m *message.Message) {
					defer handlers.Done()
					id := m.Metadata.Get(EntryIDKey)
					mu.Lock()
					running[id]++
					if running[id] > 1 {
						twice = append(twice, id)
					}
					mu.Unlock()
					time.Sleep(time.Duration(2+rand.IntN(8)) * time.Millisecond) // a slow handler
					mu.Lock()
					running[id]--
					mu.Unlock()
					done(m)
				}
				for i := 0; ; i++ {
					if i == total/4 {
						// Back to before the entries running now, so that reads return them
						// while they are held.
						require.NoError(t, rdb.XGroupSetID(t.Context(), topic, testGroup, ids[i-concurrency-1]).Err())
					}
					m := receive(t, msgs, 5*time.Second)
					seen[m.Metadata.Get(EntryIDKey)] = true
					handlers.Add(1)
					go handle(m)
					if len(seen) == total {
						break
					}
				}
				handlers.Wait()
				require.Empty(t, twice, "entries handled twice at once")

				// Every slot is usable: the four new messages run at once (with the old ones
				// that the reset handed out again around them).
				fresh := publish(t, rdb, topic, "new", concurrency)
				var waiting []*message.Message
				for len(waiting) < concurrency {
					m := receive(t, msgs, 5*time.Second)
					if slices.Contains(fresh, m.Metadata.Get(EntryIDKey)) {
						waiting = append(waiting, m)
					} else {
						done(m)
					}
				}
				for _, m := range waiting {
					done(m)
				}
			})
		}
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
