package stream

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// readWatch is a go-redis hook that counts XREADGROUPs begun and ended, and script calls
// (lease renewals).
type readWatch struct{ begun, ended, scripts atomic.Int64 }

func (*readWatch) DialHook(next redis.DialHook) redis.DialHook { return next }
func (*readWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (w *readWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "xreadgroup":
			w.begun.Add(1)
			defer w.ended.Add(1)
		case "evalsha", "eval":
			w.scripts.Add(1)
		}
		return next(ctx, cmd)
	}
}

// streamReads is a go-redis hook that counts the XREADGROUPs begun on each stream of reads.
type streamReads struct{ reads map[string]*atomic.Int64 }

func (*streamReads) DialHook(next redis.DialHook) redis.DialHook { return next }
func (*streamReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *streamReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "xreadgroup" {
			for _, a := range cmd.Args() {
				if s, ok := a.(string); ok {
					if n := h.reads[s]; n != nil {
						n.Add(1)
					}
				}
			}
		}
		return next(ctx, cmd)
	}
}

func TestPause(t *testing.T) {
	checkLeaks(t)

	t.Run("NoReadsWhilePaused", func(t *testing.T) {
		t.Parallel()
		var watch readWatch
		rdb := redistest.Client(t)
		rdb.AddHook(&watch)
		topicA, topicB := redistest.UniqueName(t), redistest.UniqueName(t)
		first := publish(t, rdb, topicA, "first", 1)
		sub := newTestSubscriber(t, rdb, Config{Concurrency: 4, ManualSettle: true, LeaseInterval: 30 * time.Millisecond})
		msgsA, err := sub.Subscribe(t.Context(), topicA)
		require.NoError(t, err)
		msgsB, err := sub.Subscribe(t.Context(), topicB)
		require.NoError(t, err)
		held := receive(t, msgsA, 5*time.Second)
		require.Equal(t, first[0], held.Metadata.Get(EntryIDKey))
		// Both readers wait in XREADGROUP most of the time (the streams are empty): Reads
		// counts them.
		require.Eventually(t, func() bool { return sub.Reads() == 2 }, 5*time.Second, time.Millisecond)

		sub.Pause()
		sub.Pause() // idempotent
		// A read under way when Pause was called may finish (or even be sent, if its reader
		// had its slots already); then both readers wait in line for slots, and no read
		// begins until Resume.
		require.Eventually(t, func() bool {
			sub.mu.Lock()
			defer sub.mu.Unlock()
			return len(sub.queue) == 2 && watch.begun.Load() == watch.ended.Load()
		}, 5*time.Second, time.Millisecond)
		require.Zero(t, sub.Reads(), "Reads still counts a read that ended")
		reads := watch.begun.Load()
		idsA := publish(t, rdb, topicA, "a", 2)
		idsB := publish(t, rdb, topicB, "b", 2)
		// Lease renewal goes on meanwhile: wait for a few renewals, then for the held
		// entry's idle time to show one after those (before, an idle time under 30 ms: a
		// margin a loaded machine misses).
		scripts := watch.scripts.Load()
		// 10x: a renewal is due every 30 ms; 30 s is a thousand of them.
		require.Eventually(t, func() bool { return watch.scripts.Load() >= scripts+5 }, 30*time.Second, time.Millisecond)
		renewed := time.Now()
		require.Eventually(t, func() bool { return renewedSince(t, rdb, topicA, renewed, 1) },
			30*time.Second, time.Millisecond, "lease not renewed while paused")
		require.NoError(t, held.Context().Err())
		assert.Equal(t, reads, watch.begun.Load(), "XREADGROUP issued while paused")
		assert.Equal(t, int64(0), pendingCount(t, rdb, topicB), "entries read while paused")
		select {
		case m := <-msgsA:
			t.Fatalf("message %s handed out while paused", m.UUID)
		case m := <-msgsB:
			t.Fatalf("message %s handed out while paused", m.UUID)
		default:
		}

		sub.Resume()
		sub.Resume() // idempotent
		sub.Settle(held)
		for _, c := range []struct {
			msgs <-chan *message.Message
			ids  []string
		}{{msgsA, idsA}, {msgsB, idsB}} {
			got := receiveN(t, c.msgs, 2, 5*time.Second)
			for _, m := range got {
				sub.Settle(m)
			}
			assert.ElementsMatch(t, c.ids, entryIDs(got))
		}
	})

	// A paused topic takes no slot and issues no read while the other topics go on, even
	// when there is one slot only: its reader waits aside, not in the way.
	t.Run("PauseTopic", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.Client(t)
		topicA, topicB := redistest.UniqueName(t), redistest.UniqueName(t)
		reads := map[string]*atomic.Int64{topicA: {}, topicB: {}}
		rdb.AddHook(&streamReads{reads: reads})
		sub := newTestSubscriber(t, rdb, Config{Concurrency: 1, ManualSettle: true})
		sub.PauseTopic(topicA)
		sub.PauseTopic(topicA) // idempotent
		require.True(t, sub.TopicPaused(topicA))
		require.False(t, sub.TopicPaused(topicB))
		msgsA, err := sub.Subscribe(t.Context(), topicA)
		require.NoError(t, err)
		msgsB, err := sub.Subscribe(t.Context(), topicB)
		require.NoError(t, err)
		idsA := publish(t, rdb, topicA, "a", 3)
		// B's reader reads on and on (its reads find nothing, then its entries); A's waits.
		for k := range 3 {
			idsB := publish(t, rdb, topicB, fmt.Sprintf("b%d", k), 2)
			var got []*message.Message
			for range idsB { // one slot: settle each before the next
				m := receive(t, msgsB, 5*time.Second)
				sub.Settle(m)
				got = append(got, m)
			}
			assert.ElementsMatch(t, idsB, entryIDs(got))
		}
		before := reads[topicB].Load()
		require.Eventually(t, func() bool { return reads[topicB].Load() >= before+3 }, 5*time.Second, time.Millisecond)
		assert.Zero(t, reads[topicA].Load(), "XREADGROUP on a paused topic")
		assert.Zero(t, pendingCount(t, rdb, topicA), "entries of a paused topic read")
		select {
		case m := <-msgsA:
			t.Fatalf("message %s of a paused topic handed out", m.UUID)
		default:
		}

		sub.ResumeTopic(topicA)
		sub.ResumeTopic(topicA) // idempotent
		require.False(t, sub.TopicPaused(topicA))
		var got []*message.Message
		for range idsA {
			m := receive(t, msgsA, 5*time.Second)
			sub.Settle(m)
			got = append(got, m)
		}
		assert.ElementsMatch(t, idsA, entryIDs(got))

		// Paused while subscribed: a read under way may finish, then none begins. B's reader
		// waiting in line is not reading.
		sub.PauseTopic(topicB)
		require.Eventually(t, func() bool {
			sub.mu.Lock()
			defer sub.mu.Unlock()
			return slices.ContainsFunc(sub.queue, func(w *waiter) bool { return w.topic == topicB })
		}, 5*time.Second, time.Millisecond)
		before = reads[topicB].Load()
		publish(t, rdb, topicB, "late", 2)
		beforeA := reads[topicA].Load()
		require.Eventually(t, func() bool { return reads[topicA].Load() >= beforeA+3 }, 5*time.Second, time.Millisecond)
		assert.Equal(t, before, reads[topicB].Load(), "XREADGROUP on a topic paused while subscribed")
		sub.ResumeTopic(topicB)
		for range 2 {
			sub.Settle(receive(t, msgsB, 5*time.Second))
		}
	})

	// WaitTopicReads returns once the read under way when the topic was paused has ended (its
	// XREADGROUP returned), woken by that end; a wait whose context ends leaves nothing behind.
	t.Run("WaitTopicReads", func(t *testing.T) {
		t.Parallel()
		var watch readWatch
		rdb := redistest.Client(t)
		rdb.AddHook(&watch)
		topic := redistest.UniqueName(t)
		// Reads block long, so that one is under way when the test acts (5 s: far longer
		// than the steps between, even on a machine ten times slower than this one).
		sub := newTestSubscriber(t, rdb, Config{Concurrency: 1, BlockTime: 5 * time.Second})
		_, err := sub.Subscribe(t.Context(), topic)
		require.NoError(t, err)
		underWay := func() bool { return sub.TopicReads(topic) == 1 && watch.begun.Load() > watch.ended.Load() }
		require.Eventually(t, underWay, 10*time.Second, time.Millisecond)

		canceled, cancel := context.WithCancel(t.Context())
		cancel()
		require.ErrorIs(t, sub.WaitTopicReads(canceled, topic), context.Canceled)

		sub.PauseTopic(topic)
		ctx, stop := context.WithTimeout(t.Context(), 30*time.Second)
		defer stop()
		require.NoError(t, sub.WaitTopicReads(ctx, topic, "not-subscribed"))
		assert.Equal(t, watch.begun.Load(), watch.ended.Load(), "returned while a read was under way")
		assert.Zero(t, sub.TopicReads(topic))
		sub.mu.Lock()
		assert.Empty(t, sub.readsDone, "waiters left behind")
		sub.mu.Unlock()
		require.NoError(t, sub.WaitTopicReads(ctx, topic), "no read under way: at once")
	})

	t.Run("ConcurrentPauseResume", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.Client(t)
		topic := redistest.UniqueName(t)
		sub := newTestSubscriber(t, rdb, Config{Concurrency: 2, BlockTime: 5 * time.Millisecond})
		msgs, err := sub.Subscribe(t.Context(), topic)
		require.NoError(t, err)
		ids := publish(t, rdb, topic, "m", 20)
		var toggling sync.WaitGroup
		for range 4 {
			toggling.Go(func() {
				for i := range 2000 {
					if i%2 == 0 {
						sub.Pause()
					} else {
						sub.Resume()
					}
				}
			})
		}
		toggling.Wait()
		sub.Resume()
		var got []*message.Message
		for range ids {
			m := receive(t, msgs, 10*time.Second)
			m.Ack()
			got = append(got, m)
		}
		assert.ElementsMatch(t, ids, entryIDs(got))
	})

	for _, viaClose := range []bool{true, false} {
		name := map[bool]string{true: "CloseWhilePaused", false: "CancelWhilePaused"}[viaClose]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rdb := redistest.Client(t)
			topics := []string{redistest.UniqueName(t), redistest.UniqueName(t)}
			publish(t, rdb, topics[0], "m", 3)
			// One slot: the second topic's reader waits in line for it, the first one's is
			// paused before its next read; both must stop.
			sub := newTestSubscriber(t, rdb, Config{Concurrency: 1, CloseTimeout: time.Hour})
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			msgs0, err := sub.Subscribe(ctx, topics[0])
			require.NoError(t, err)
			msgs1, err := sub.Subscribe(ctx, topics[1])
			require.NoError(t, err)
			msg := receive(t, msgs0, 5*time.Second)
			sub.Pause()
			msg.Ack()
			if viaClose {
				require.NoError(t, sub.Close())
			} else {
				cancel()
			}
			requireClosed(t, msgs0, 10*time.Second)
			requireClosed(t, msgs1, 10*time.Second)
		})
	}
}
