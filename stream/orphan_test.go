package stream

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// sweepsWithout waits for n more orphan sweeps (XPENDING commands) to begin, failing with
// what if msgs hands anything out meanwhile.
func sweepsWithout(t *testing.T, l *redistest.LoseReplies, n int64, msgs <-chan *message.Message, what string) {
	t.Helper()
	target := l.Sweeps() + n
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	timeout := time.After(10 * time.Second)
	for l.Sweeps() < target {
		select {
		case m := <-msgs:
			t.Fatalf("%s: entry %s", what, m.Metadata.Get(EntryIDKey))
		case <-tick.C:
		case <-timeout:
			t.Fatal("the sweeps did not run")
		}
	}
}

func TestOrphans(t *testing.T) {
	checkLeaks(t)

	for _, manual := range []bool{false, true} {
		for _, resend := range []bool{false, true} {
			name := fmt.Sprintf("%s/%s", map[bool]string{false: "Ack", true: "ManualSettle"}[manual],
				map[bool]string{false: "LostReplyError", true: "LostReplyResent"}[resend])
			t.Run(name, func(t *testing.T) {
				// The entries of a lost reply are adopted and handed out, each once.
				t.Parallel()
				const lease = 100 * time.Millisecond
				loser := &redistest.LoseReplies{Resend: resend, Min: 2}
				loser.Lose.Store(1)
				rdb := redistest.Client(t)
				rdb.AddHook(loser)
				topic := redistest.UniqueName(t)
				ids := publish(t, rdb, topic, "m", 20)
				sub := newTestSubscriber(t, rdb, Config{Concurrency: 50, ManualSettle: manual, LeaseInterval: lease})
				msgs, err := sub.Subscribe(t.Context(), topic)
				require.NoError(t, err)

				got := map[string]*message.Message{}
				for len(got) < len(ids) {
					// Within a couple of lease intervals, with room for a slow machine: the
					// application's recovery waits far longer (30s by default).
					m := receive(t, msgs, 20*lease)
					id := m.Metadata.Get(EntryIDKey)
					require.NotContains(t, got, id, "entry %s handed out twice", id)
					got[id] = m
				}
				lost := loser.Lost()
				require.NotEmpty(t, lost, "no reply was lost")
				require.Subset(t, ids, lost)
				for _, id := range lost {
					v, ok := EntryValues(got[id].Context())
					require.True(t, ok)
					assert.Equal(t, got[id].UUID, v[FieldUUID])
				}
				// Held and renewed for this consumer, the delivery count of the lost read kept.
				for _, p := range pending(t, rdb, topic) {
					assert.Equal(t, sub.Consumer(), p.Consumer)
					assert.Equal(t, int64(1), p.RetryCount, "entry %s", p.ID)
				}
				// Nothing comes twice: let a few more sweeps run.
				sweepsWithout(t, loser, 3, msgs, "entry handed out again")
				for _, m := range got {
					if manual {
						sub.Settle(m)
					} else {
						m.Ack()
					}
				}
			})
		}
	}

	t.Run("EarlierProcessLeftAlone", func(t *testing.T) {
		// Entries pending for the same consumer name from before the subscription are an
		// earlier process's: the application's recovery takes them and counts the attempt.
		t.Parallel()
		var rec redistest.LoseReplies // counts sweeps only
		rdb := redistest.Client(t)
		rdb.AddHook(&rec)
		topic := redistest.UniqueName(t)
		old := publish(t, rdb, topic, "old", 3)
		const consumer = "worker-1"
		require.NoError(t, rdb.XGroupCreate(t.Context(), topic, testGroup, "0").Err())
		require.NoError(t, rdb.XReadGroup(t.Context(), &redis.XReadGroupArgs{
			Group: testGroup, Consumer: consumer, Streams: []string{topic, ">"}, Count: 3,
		}).Err())
		// Idle since well before the subscription (Redis counts idle time in milliseconds).
		require.Eventually(t, func() bool {
			p := pending(t, rdb, topic)
			return len(p) == 3 && p[2].Idle >= 5*time.Millisecond
		}, 5*time.Second, time.Millisecond)

		sub := newTestSubscriber(t, rdb, Config{Consumer: consumer, LeaseInterval: 30 * time.Millisecond})
		msgs, err := sub.Subscribe(t.Context(), topic)
		require.NoError(t, err)
		fresh := publish(t, rdb, topic, "new", 2)
		got := receiveN(t, msgs, 2, 5*time.Second)
		assert.ElementsMatch(t, fresh, entryIDs(got))
		sweepsWithout(t, &rec, 3, msgs, "an earlier process's entry was adopted")
		for _, p := range pending(t, rdb, topic) {
			if slices.Contains(old, p.ID) {
				assert.Equal(t, int64(1), p.RetryCount)
				assert.GreaterOrEqual(t, p.Idle, 30*time.Millisecond, "entry %s claimed", p.ID)
			}
		}
		for _, m := range got {
			m.Ack()
		}
	})

	t.Run("SettledNotAckedLeftAlone", func(t *testing.T) {
		// With ManualSettle (or DeferAck) the application acks; an entry it settled and did
		// not ack (a middleware refused the job, say) stays pending for this consumer, and is
		// no orphan: the application's recovery takes it, counting the attempt.
		t.Parallel()
		var rec redistest.LoseReplies // counts sweeps only
		rdb := redistest.Client(t)
		rdb.AddHook(&rec)
		topic := redistest.UniqueName(t)
		ids := publish(t, rdb, topic, "m", 5)
		sub := newTestSubscriber(t, rdb, Config{ManualSettle: true, LeaseInterval: 30 * time.Millisecond})
		msgs, err := sub.Subscribe(t.Context(), topic)
		require.NoError(t, err)
		for _, m := range receiveN(t, msgs, 5, 5*time.Second) {
			sub.Settle(m)
		}
		sweepsWithout(t, &rec, 3, msgs, "a settled entry was handed out again")
		require.Len(t, pending(t, rdb, topic), len(ids))
	})

	t.Run("LostRepliesUnderLoad", func(t *testing.T) {
		// Two subscriptions of one stream in one Subscriber (their reads and sweeps race), a
		// third of the replies lost: every entry is handed out once, and never more than
		// Concurrency at a time.
		t.Parallel()
		for _, resend := range []bool{false, true} {
			t.Run(map[bool]string{false: "Error", true: "Resent"}[resend], func(t *testing.T) {
				t.Parallel()
				const total, concurrency = 300, 8
				subs := 2
				loser := &redistest.LoseReplies{Resend: resend, Min: 1, Every: 3}
				loser.Lose.Store(-1)
				rdb := redistest.Client(t)
				rdb.AddHook(loser)
				topic := redistest.UniqueName(t)
				publish(t, rdb, topic, "m", total)
				sub := newTestSubscriber(t, rdb, Config{Concurrency: concurrency, BatchSize: 5,
					LeaseInterval: 20 * time.Millisecond, BlockTime: 10 * time.Millisecond})
				var running, maxRunning atomic.Int64
				var mu sync.Mutex
				seen := map[string]int{}
				var wg sync.WaitGroup
				all := make(chan struct{})
				for range subs {
					msgs, err := sub.Subscribe(t.Context(), topic)
					require.NoError(t, err)
					wg.Go(func() {
						for m := range msgs {
							n := running.Add(1)
							for c := maxRunning.Load(); n > c && !maxRunning.CompareAndSwap(c, n); c = maxRunning.Load() {
							}
							mu.Lock()
							seen[m.Metadata.Get(EntryIDKey)]++
							if len(seen) == total {
								close(all)
							}
							mu.Unlock()
							running.Add(-1)
							m.Ack()
						}
					})
				}
				select {
				case <-all:
				case <-time.After(30 * time.Second):
					mu.Lock()
					t.Fatalf("%d of %d entries handed out", len(seen), total)
				}
				require.NoError(t, sub.Close())
				wg.Wait()
				for id, n := range seen {
					assert.Equal(t, 1, n, "entry %s handed out %d times", id, n)
				}
				assert.NotEmpty(t, loser.Lost())
				assert.LessOrEqual(t, maxRunning.Load(), int64(concurrency))
			})
		}
	})
}

// TestOrphansOnMiniredis adopts a lost reply's entries on miniredis, the embedded server of
// Conveyor's demo (adopt.lua runs XPENDING and XCLAIM with RETRYCOUNT there).
func TestOrphansOnMiniredis(t *testing.T) {
	checkLeaks(t)
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	loser := &redistest.LoseReplies{Min: 2}
	loser.Lose.Store(1)
	rdb.AddHook(loser)
	ids := publish(t, rdb, "q", "m", 5)
	sub := newTestSubscriber(t, rdb, Config{LeaseInterval: 50 * time.Millisecond})
	msgs, err := sub.Subscribe(t.Context(), "q")
	require.NoError(t, err)
	got := receiveN(t, msgs, len(ids), 5*time.Second)
	assert.ElementsMatch(t, ids, entryIDs(got))
	require.NotEmpty(t, loser.Lost())
	for _, m := range got {
		m.Ack()
	}
}
