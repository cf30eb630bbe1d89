package stream

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
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

func TestSubscriber(t *testing.T) {
	checkLeaks(t)

	t.Run("BatchRead", func(t *testing.T) {
		t.Parallel()
		var rec commandRecorder
		rdb := redistest.Client(t)
		rdb.AddHook(&rec)
		topic := redistest.UniqueName(t)
		const total, concurrency = 500, 50
		publish(t, rdb, topic, "m", total)
		sub := newTestSubscriber(t, rdb, Config{Concurrency: concurrency})
		msgs, err := sub.Subscribe(t.Context(), topic)
		require.NoError(t, err)

		var inFlight, maxInFlight atomic.Int64
		var wg sync.WaitGroup
		seen := map[string]int{}
		for range total {
			msg := receive(t, msgs, 10*time.Second)
			seen[msg.UUID]++
			n := inFlight.Add(1)
			for {
				m := maxInFlight.Load()
				if n <= m || maxInFlight.CompareAndSwap(m, n) {
					break
				}
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
				inFlight.Add(-1)
				msg.Ack()
			}()
		}
		wg.Wait()
		require.Len(t, seen, total)
		for uuid, n := range seen {
			require.Equal(t, 1, n, "message %s delivered %d times", uuid, n)
		}
		assert.LessOrEqual(t, maxInFlight.Load(), int64(concurrency))
		assert.Greater(t, maxInFlight.Load(), int64(1), "messages were handled one at a time")
		require.Eventually(t, func() bool { return pendingCount(t, rdb, topic) == 0 },
			5*time.Second, 10*time.Millisecond, "acked entries still pending")

		// One round trip reads many entries, never more than the free slots.
		reads, entries := 0, 0
		for _, c := range rec.named("xreadgroup") {
			count := c[slices.Index(c, any("count"))+1].(int64)
			assert.LessOrEqual(t, count, int64(concurrency))
			reads++
			entries += int(count)
		}
		t.Logf("%d reads, COUNT sum %d", reads, entries)
		assert.Less(t, reads, total/5, "entries read with too small a COUNT")
		// Acks are batched: far fewer XACKs than entries.
		assert.Less(t, len(rec.named("xack")), total/2)
	})

	t.Run("Ack", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name        string
			deferAck    bool
			wantPending int64
		}{
			{name: "Batched", wantPending: 0},
			// With DeferAck the application XACKs; Ack only frees the slot.
			{name: "Deferred", deferAck: true, wantPending: 4},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				var rec commandRecorder
				rdb := redistest.Client(t)
				rdb.AddHook(&rec)
				topic := redistest.UniqueName(t)
				publish(t, rdb, topic, "m", 4)
				sub := newTestSubscriber(t, rdb, Config{
					Concurrency: 2, DeferAck: tc.deferAck, AckInterval: 100 * time.Millisecond,
				})
				msgs, err := sub.Subscribe(t.Context(), topic)
				require.NoError(t, err)

				// Two slots: the third message comes only after the first two are acked.
				first := receiveN(t, msgs, 2, 5*time.Second)
				requireNothing(t, msgs, 100*time.Millisecond)
				for _, m := range first {
					require.True(t, m.Ack())
				}
				for _, m := range receiveN(t, msgs, 2, 5*time.Second) {
					require.True(t, m.Ack())
				}
				if tc.wantPending == 0 {
					require.Eventually(t, func() bool { return pendingCount(t, rdb, topic) == 0 },
						5*time.Second, 10*time.Millisecond)
					assert.LessOrEqual(t, len(rec.named("xack")), 3, "acks not batched")
				} else {
					// Close flushes whatever acks are queued: none may be sent.
					require.NoError(t, sub.Close())
					require.Equal(t, tc.wantPending, pendingCount(t, rdb, topic))
					assert.Empty(t, rec.named("xack"))
				}
			})
		}
	})

	t.Run("NackRedeliversSameEntry", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.Client(t)
		topic := redistest.UniqueName(t)
		ids := publish(t, rdb, topic, "m", 1)
		const sleep = 300 * time.Millisecond
		sub := newTestSubscriber(t, rdb, Config{NackResendSleep: sleep})
		msgs, err := sub.Subscribe(t.Context(), topic)
		require.NoError(t, err)

		msg := receive(t, msgs, 5*time.Second)
		require.True(t, msg.Nack())
		nacked := time.Now()
		again := receive(t, msgs, 5*time.Second)
		assert.GreaterOrEqual(t, time.Since(nacked), sleep)
		assert.Equal(t, ids[0], again.Metadata.Get(EntryIDKey))
		assert.Equal(t, msg.UUID, again.UUID)
		assert.Equal(t, "payload-0", string(again.Payload))
		require.NoError(t, again.Context().Err(), "redelivered message's context is done")
		p := pending(t, rdb, topic)
		require.Len(t, p, 1)
		assert.Equal(t, int64(1), p[0].RetryCount, "a nack must not re-read the entry from Redis")
		require.True(t, again.Ack())
		require.Eventually(t, func() bool { return pendingCount(t, rdb, topic) == 0 },
			5*time.Second, 10*time.Millisecond)
	})

	t.Run("LeaseRenewal", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name    string
			disable bool
		}{
			{name: "Renewed"},
			{name: "Disabled", disable: true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				rdb := redistest.Client(t)
				topic := redistest.UniqueName(t)
				publish(t, rdb, topic, "m", 1)
				sub := newTestSubscriber(t, rdb, Config{LeaseInterval: 100 * time.Millisecond, DisableLeaseRenewal: tc.disable})
				msgs, err := sub.Subscribe(t.Context(), topic)
				require.NoError(t, err)
				msg := receive(t, msgs, 5*time.Second)
				defer msg.Ack()

				// A renewal is seen as the entry's idle time going down between two reads;
				// nothing else touches it. Renewed waits for three of them (before, it wanted
				// every idle time under 500 ms, a margin a loaded machine misses); Disabled
				// watches for 1.2 s (at least: idle time only grows faster with load) that
				// none comes.
				var maxIdle, last time.Duration
				renewals := 0
				began := time.Now()
				// 10x: renewals are due every 100 ms; 30 s is three hundred of them.
				for end := began.Add(1200 * time.Millisecond); time.Now().Before(end) || !tc.disable && renewals < 3; {
					require.Less(t, time.Since(began), 30*time.Second, "%d renewals seen", renewals)
					time.Sleep(50 * time.Millisecond)
					p := pending(t, rdb, topic)
					require.Len(t, p, 1)
					if p[0].Idle < last {
						renewals++
					}
					last = p[0].Idle
					maxIdle = max(maxIdle, p[0].Idle)
					assert.Equal(t, sub.Consumer(), p[0].Consumer)
					assert.Equal(t, int64(1), p[0].RetryCount, "renewal must keep the delivery count")
				}
				if tc.disable {
					assert.Zero(t, renewals)
					assert.GreaterOrEqual(t, maxIdle, time.Second)
				}
				require.NoError(t, msg.Context().Err())
			})
		}
	})

	t.Run("LeaseLost", func(t *testing.T) {
		t.Parallel()
		const interval = 100 * time.Millisecond
		for _, tc := range []struct {
			name string
			take func(ctx context.Context, rdb *redis.Client, topic, id string) error
			// stillPendingElsewhere: the entry must stay pending (for its new owner) after our
			// Ack: a lost lease never acks.
			stillPendingElsewhere bool
		}{
			{name: "Acked", take: func(ctx context.Context, rdb *redis.Client, topic, id string) error {
				return rdb.XAck(ctx, topic, testGroup, id).Err()
			}},
			{name: "DeletedAndAcked", take: func(ctx context.Context, rdb *redis.Client, topic, id string) error {
				if err := rdb.XDel(ctx, topic, id).Err(); err != nil {
					return err
				}
				return rdb.XAck(ctx, topic, testGroup, id).Err()
			}},
			{name: "Deleted", take: func(ctx context.Context, rdb *redis.Client, topic, id string) error {
				return rdb.XDel(ctx, topic, id).Err()
			}},
			{name: "ClaimedByAnotherConsumer", stillPendingElsewhere: true,
				take: func(ctx context.Context, rdb *redis.Client, topic, id string) error {
					return rdb.XClaimJustID(ctx, &redis.XClaimArgs{
						Stream: topic, Group: testGroup, Consumer: "recoverer", Messages: []string{id},
					}).Err()
				}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				rdb := redistest.Client(t)
				topic := redistest.UniqueName(t)
				ids := publish(t, rdb, topic, "m", 2)
				sub := newTestSubscriber(t, rdb, Config{Concurrency: 1, LeaseInterval: interval})
				msgs, err := sub.Subscribe(t.Context(), topic)
				require.NoError(t, err)
				msg := receive(t, msgs, 5*time.Second)
				require.Equal(t, ids[0], msg.Metadata.Get(EntryIDKey))

				require.NoError(t, tc.take(t.Context(), rdb, topic, ids[0]))
				taken := time.Now()
				select {
				case <-msg.Context().Done():
				case <-time.After(20 * interval):
					t.Fatal("message context not cancelled after its entry was taken")
				}
				assert.Less(t, time.Since(taken), 10*interval)
				require.ErrorIs(t, context.Cause(msg.Context()), ErrLeaseLost)

				// Settling a lost message frees its slot without acknowledging the entry.
				require.True(t, msg.Ack())
				next := receive(t, msgs, 5*time.Second)
				assert.Equal(t, ids[1], next.Metadata.Get(EntryIDKey))
				next.Ack()
				require.NoError(t, sub.Close())
				p := pending(t, rdb, topic)
				if tc.stillPendingElsewhere {
					require.Len(t, p, 1)
					assert.Equal(t, ids[0], p[0].ID)
					assert.Equal(t, "recoverer", p[0].Consumer, "the lease renewal took the entry back")
				} else {
					require.Empty(t, p)
				}
			})
		}
	})

	t.Run("LeaseLostWithGroup", func(t *testing.T) {
		// Renewal that finds the group or the stream gone (NOGROUP) has lost every lease it
		// tried. With Concurrency 1 and the one slot held, the reader issues no XREADGROUP, so
		// nothing makes the group again before the renewal runs.
		t.Parallel()
		for _, tc := range []struct {
			name string
			take func(ctx context.Context, rdb *redis.Client, topic string) error
		}{
			{name: "FlushAll", take: func(ctx context.Context, rdb *redis.Client, _ string) error {
				return rdb.FlushAll(ctx).Err()
			}},
			{name: "GroupDestroyed", take: func(ctx context.Context, rdb *redis.Client, topic string) error {
				return rdb.XGroupDestroy(ctx, topic, testGroup).Err()
			}},
			{name: "StreamDeleted", take: func(ctx context.Context, rdb *redis.Client, topic string) error {
				return rdb.Del(ctx, topic).Err()
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				rdb := redistest.Start(t).Client(t) // private: FLUSHALL
				topic := redistest.UniqueName(t)
				publish(t, rdb, topic, "old", 1)
				sub := newTestSubscriber(t, rdb, Config{Concurrency: 1, LeaseInterval: 50 * time.Millisecond,
					CloseTimeout: 100 * time.Millisecond})
				msgs, err := sub.Subscribe(t.Context(), topic)
				require.NoError(t, err)
				msg := receive(t, msgs, 5*time.Second)

				require.NoError(t, tc.take(t.Context(), rdb, topic))
				select {
				case <-msg.Context().Done():
				case <-time.After(10 * time.Second):
					t.Fatal("message context not cancelled after its group was lost")
				}
				require.ErrorIs(t, context.Cause(msg.Context()), ErrLeaseLost)

				// The slot comes back; the reader makes the group again and goes on.
				require.True(t, msg.Ack())
				ids := publish(t, rdb, topic, "new", 1)
				for {
					m := receive(t, msgs, 10*time.Second)
					m.Ack()
					if m.Metadata.Get(EntryIDKey) == ids[0] {
						break
					}
					// Only a kept stream is read again from its start by the new group.
					require.Equal(t, "GroupDestroyed", tc.name, "unexpected message %s", m.UUID)
				}
			})
		}
	})

	t.Run("NackAfterLeaseLost", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.Client(t)
		topic := redistest.UniqueName(t)
		ids := publish(t, rdb, topic, "m", 2)
		var rel releases
		sub := newTestSubscriber(t, rdb, Config{
			Concurrency: 1, LeaseInterval: 50 * time.Millisecond,
			NackResendSleep: 50 * time.Millisecond, OnRelease: rel.onRelease,
		})
		msgs, err := sub.Subscribe(t.Context(), topic)
		require.NoError(t, err)
		msg := receive(t, msgs, 5*time.Second)
		require.NoError(t, rdb.XAck(t.Context(), topic, testGroup, ids[0]).Err())
		select {
		case <-msg.Context().Done():
		case <-time.After(5 * time.Second):
			t.Fatal("lost lease not noticed")
		}
		require.ErrorIs(t, context.Cause(msg.Context()), ErrLeaseLost)

		// The entry is no longer ours: a nack must not hand it out again, and frees the slot.
		require.True(t, msg.Nack())
		next := receive(t, msgs, 5*time.Second)
		require.Equal(t, ids[1], next.Metadata.Get(EntryIDKey), "lost entry handed out again")
		next.Ack()
		require.NoError(t, sub.Close())
		assert.Empty(t, rel.get(topic), "a lost entry was released")
	})

	t.Run("Shutdown", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name  string
			close bool // Close the Subscriber; else cancel the Subscribe context
			ack   bool // the handlers ack within CloseTimeout
		}{
			{name: "CloseAckedInTime", close: true, ack: true},
			{name: "CloseTimedOut", close: true},
			{name: "ContextAckedInTime", ack: true},
			{name: "ContextTimedOut"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				rdb := redistest.Client(t)
				topic := redistest.UniqueName(t)
				ids := publish(t, rdb, topic, "m", 6)
				// The acked cases end once the acks arrive, about 100 ms after shutdown began;
				// the CloseTimeout they must not wait for is 30 s (10x: a machine ten times
				// slower acks within 1 s; before, it was 1 s, a margin). The timed-out cases
				// wait for theirs, kept short.
				closeTimeout := time.Second
				if tc.ack {
					closeTimeout = 30 * time.Second
				}
				var rel releases
				sub := newTestSubscriber(t, rdb, Config{
					Concurrency: 4, CloseTimeout: closeTimeout, OnRelease: rel.onRelease,
					AckInterval: time.Hour, // only the final flush acks
				})
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				msgs, err := sub.Subscribe(ctx, topic)
				require.NoError(t, err)

				// Four entries read (the free slots), two of them handed out and running.
				running := receiveN(t, msgs, 2, 5*time.Second)
				require.Eventually(t, func() bool { return pendingCount(t, rdb, topic) == 4 },
					5*time.Second, 10*time.Millisecond)
				// And the two waiting ones at the hand-out (marked, at the send) before shutdown
				// begins: one still on its way there could be caught by a read below in the
				// instant between its check of shutdown and its send, which is no fault.
				require.Eventually(t, func() bool { return handingOut(sub) == 4 }, 5*time.Second, time.Millisecond)

				start := time.Now()
				closed := make(chan struct{})
				go func() {
					defer close(closed)
					if tc.close {
						assert.NoError(t, sub.Close())
					} else {
						cancel()
					}
				}()
				// Read only once shutdown has begun: before, the two waiting messages are
				// rightly handed to a reader.
				require.Eventually(t, func() bool { return shuttingDown(sub) }, 5*time.Second, time.Millisecond)
				if tc.ack {
					time.Sleep(100 * time.Millisecond)
					for _, m := range running {
						require.NoError(t, m.Context().Err(), "context cancelled before CloseTimeout")
						require.True(t, m.Ack())
					}
				}
				requireClosed(t, msgs, closeTimeout+30*time.Second)
				<-closed
				elapsed := time.Since(start)

				wantReleased, wantAcked := ids[:4], []string{}
				if tc.ack {
					assert.Less(t, elapsed, closeTimeout, "waited for acks that had arrived")
					for _, m := range running {
						assert.ErrorIs(t, context.Cause(m.Context()), context.Canceled)
						assert.NotErrorIs(t, context.Cause(m.Context()), ErrClosed)
					}
					wantAcked = entryIDs(running)
					wantReleased = slices.DeleteFunc(slices.Clone(ids[:4]), func(id string) bool {
						return slices.Contains(wantAcked, id)
					})
				} else {
					assert.GreaterOrEqual(t, elapsed, closeTimeout)
					for _, m := range running {
						assert.ErrorIs(t, context.Cause(m.Context()), ErrClosed)
					}
				}
				assert.ElementsMatch(t, wantReleased, rel.get(topic), "released")
				assert.ElementsMatch(t, wantAcked, notPending(t, rdb, topic, ids[:4]), "acked")
				assert.Equal(t, int64(4-len(wantAcked)), pendingCount(t, rdb, topic))

				if tc.close {
					_, err := sub.Subscribe(t.Context(), topic)
					require.ErrorIs(t, err, ErrClosed)
				}
			})
		}
	})

	t.Run("AckAfterCloseTimeoutIsIgnored", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.Client(t)
		topic := redistest.UniqueName(t)
		ids := publish(t, rdb, topic, "m", 1)
		var rel releases
		sub := newTestSubscriber(t, rdb, Config{CloseTimeout: 50 * time.Millisecond, OnRelease: rel.onRelease})
		msgs, err := sub.Subscribe(t.Context(), topic)
		require.NoError(t, err)
		msg := receive(t, msgs, 5*time.Second)
		require.NoError(t, sub.Close())
		require.ErrorIs(t, context.Cause(msg.Context()), ErrClosed)
		msg.Ack() // too late: the entry was released
		assert.Equal(t, ids, rel.get(topic))
		assert.Equal(t, int64(1), pendingCount(t, rdb, topic))
	})

	t.Run("ResubscribeAfterRelease", func(t *testing.T) {
		// With an OnRelease that puts entries back, a new subscription of the same Subscriber
		// gets what the cancelled one held.
		t.Parallel()
		rdb := redistest.Client(t)
		topic := redistest.UniqueName(t)
		publish(t, rdb, topic, "m", 20)
		sub := newTestSubscriber(t, rdb, Config{OnRelease: requeue(rdb, testGroup)})
		ctx, cancel := context.WithCancel(t.Context())
		msgs, err := sub.Subscribe(ctx, topic)
		require.NoError(t, err)
		first := receiveN(t, msgs, 5, 5*time.Second)
		for _, m := range first[:2] {
			m.Ack()
		}
		for _, m := range first[2:] {
			m.Nack()
		}
		cancel()
		require.Eventually(t, func() bool { return shuttingDown(sub) }, 5*time.Second, time.Millisecond)
		requireClosed(t, msgs, 10*time.Second)
		msgs, err = sub.Subscribe(t.Context(), topic)
		require.NoError(t, err)
		got := map[string]bool{first[0].UUID: true, first[1].UUID: true}
		for len(got) < 20 {
			m := receive(t, msgs, 5*time.Second)
			require.False(t, got[m.UUID], "acked message %s delivered again", m.UUID)
			got[m.UUID] = true
			m.Ack()
		}
	})

	t.Run("Poison", func(t *testing.T) {
		t.Parallel()
		goodMD, err := EncodeMetadata(map[string]string{"k": "v"})
		require.NoError(t, err)
		for _, tc := range []struct {
			name       string
			values     []any
			wantPoison string // substring of the PoisonKey value; "" for none
			wantUUID   string
		}{
			{name: "Valid", values: []any{FieldUUID, "u1", FieldPayload, "p", FieldMetadata, goodMD}, wantUUID: "u1"},
			{name: "NoMetadataField", values: []any{FieldUUID, "u1", FieldPayload, "p"}, wantUUID: "u1"},
			{name: "MissingUUID", values: []any{FieldPayload, "p", FieldMetadata, ""}, wantPoison: FieldUUID},
			{name: "EmptyUUID", values: []any{FieldUUID, "", FieldPayload, "p"}, wantPoison: FieldUUID},
			{name: "UndecodableMetadata", values: []any{FieldUUID, "u1", FieldPayload, "p", FieldMetadata, "\xc1"},
				wantPoison: "metadata", wantUUID: "u1"},
			{name: "MetadataNotAMap", values: []any{FieldUUID, "u1", FieldPayload, "p", FieldMetadata, "\x2a"},
				wantPoison: "metadata", wantUUID: "u1"},
			{name: "TruncatedMetadata", values: []any{FieldUUID, "u1", FieldPayload, "p", FieldMetadata, goodMD[:len(goodMD)-1]},
				wantPoison: "metadata", wantUUID: "u1"},
			{name: "ForeignFieldsOnly", values: []any{"job", "x"}, wantPoison: FieldUUID},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				rdb := redistest.Client(t)
				topic := redistest.UniqueName(t)
				before := publish(t, rdb, topic, "before", 1)
				id := xadd(t, rdb, topic, tc.values...)
				after := publish(t, rdb, topic, "after", 1)
				sub := newTestSubscriber(t, rdb, Config{})
				msgs, err := sub.Subscribe(t.Context(), topic)
				require.NoError(t, err)

				byEntry := map[string]*message.Message{}
				for _, m := range receiveN(t, msgs, 3, 5*time.Second) {
					byEntry[m.Metadata.Get(EntryIDKey)] = m
					assert.Equal(t, topic, m.Metadata.Get(StreamKey))
					m.Ack()
				}
				require.Contains(t, byEntry, before[0])
				require.Contains(t, byEntry, after[0], "consumption stopped at a poison entry")
				msg := byEntry[id]
				require.NotNil(t, msg)
				reason, poisoned := msg.Metadata[PoisonKey]
				if tc.wantPoison == "" {
					assert.False(t, poisoned, "poisoned: %s", reason)
					assert.Equal(t, "p", string(msg.Payload))
				} else {
					assert.Contains(t, reason, tc.wantPoison)
				}
				if tc.wantUUID != "" {
					assert.Equal(t, tc.wantUUID, msg.UUID)
				} else {
					assert.NotEmpty(t, msg.UUID)
				}
			})
		}
	})

	t.Run("StreamDeleted", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.Client(t)
		topic := redistest.UniqueName(t)
		publish(t, rdb, topic, "old", 1)
		sub := newTestSubscriber(t, rdb, Config{})
		msgs, err := sub.Subscribe(t.Context(), topic)
		require.NoError(t, err)
		receive(t, msgs, 5*time.Second).Ack()

		require.NoError(t, rdb.Del(t.Context(), topic).Err())
		ids := publish(t, rdb, topic, "new", 3)
		for _, m := range receiveN(t, msgs, 3, 10*time.Second) {
			assert.True(t, strings.HasPrefix(m.UUID, "new-"))
			assert.Contains(t, ids, m.Metadata.Get(EntryIDKey))
			m.Ack()
		}
		require.Eventually(t, func() bool { return pendingCount(t, rdb, topic) == 0 },
			5*time.Second, 10*time.Millisecond)
	})

	t.Run("RedisRestart", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		rdb := srv.Client(t)
		topic := redistest.UniqueName(t)
		publish(t, rdb, topic, "before", 1)
		logs := newLogRecorder()
		sub := newTestSubscriber(t, rdb, Config{Logger: logs, LeaseInterval: 100 * time.Millisecond})
		msgs, err := sub.Subscribe(t.Context(), topic)
		require.NoError(t, err)
		receive(t, msgs, 5*time.Second).Ack()

		require.NoError(t, srv.Kill())
		require.Eventually(t, func() bool {
			return slices.ContainsFunc(logs.Lines(), func(l string) bool {
				return strings.HasPrefix(l, "ERROR read stream")
			})
		}, 10*time.Second, 10*time.Millisecond, "read error not logged")
		time.Sleep(time.Second) // a few failed reads and some backoff
		require.NoError(t, srv.Restart())

		// The restarted server has no data: the subscriber must make the group again.
		ids := publish(t, rdb, topic, "after", 5)
		got := receiveN(t, msgs, 5, 20*time.Second)
		assert.ElementsMatch(t, ids, entryIDs(got))
		for _, m := range got {
			m.Ack()
		}
		require.Eventually(t, func() bool { return pendingCount(t, rdb, topic) == 0 },
			5*time.Second, 10*time.Millisecond)
		// Backing off (100ms doubling), not spinning, while the server was away.
		readErrors := 0
		for _, l := range logs.Lines() {
			if strings.HasPrefix(l, "ERROR read stream") {
				readErrors++
			}
		}
		assert.LessOrEqual(t, readErrors, 10)
	})

	t.Run("TopicsShareConcurrency", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.Client(t)
		topicA, topicB := redistest.UniqueName(t), redistest.UniqueName(t)
		publish(t, rdb, topicA, "a", 3)
		publish(t, rdb, topicB, "b", 5)
		sub := newTestSubscriber(t, rdb, Config{Concurrency: 3})
		msgsA, err := sub.Subscribe(t.Context(), topicA)
		require.NoError(t, err)
		heldA := receiveN(t, msgsA, 3, 5*time.Second)

		// Topic A holds every slot: B reads nothing until A acks.
		msgsB, err := sub.Subscribe(t.Context(), topicB)
		require.NoError(t, err)
		requireNothing(t, msgsB, 300*time.Millisecond)
		require.Equal(t, int64(0), pendingCount(t, rdb, topicB))

		heldA[0].Ack()
		gotB := receive(t, msgsB, 5*time.Second)
		requireNothing(t, msgsB, 200*time.Millisecond)
		require.Equal(t, int64(1), pendingCount(t, rdb, topicB))

		gotB.Ack()
		for _, m := range heldA[1:] {
			m.Ack()
		}
		for range 4 {
			receive(t, msgsB, 5*time.Second).Ack()
		}
	})

	t.Run("ConcurrencyBoundsAllTopics", func(t *testing.T) {
		// Config.Concurrency is a hard bound on messages out across topics, and the slots are
		// shared so that every topic gets its turn.
		t.Parallel()
		for _, tc := range []struct {
			name        string
			concurrency int
			perTopic    int
			trickle     bool // messages arrive one by one while the topics are read
		}{
			{name: "BusyTopics", concurrency: 4, perTopic: 60},
			{name: "OneSlotTrickle", concurrency: 1, perTopic: 10, trickle: true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				rdb := redistest.Client(t)
				topics := []string{redistest.UniqueName(t), redistest.UniqueName(t), redistest.UniqueName(t)}
				if !tc.trickle {
					for _, topic := range topics {
						publish(t, rdb, topic, "m", tc.perTopic)
					}
				}
				sub := newTestSubscriber(t, rdb, Config{Concurrency: tc.concurrency, BatchSize: 10})
				var running, maxRunning atomic.Int64
				var handlers sync.WaitGroup
				type got struct{ topic, uuid string }
				gotc := make(chan got)
				for _, topic := range topics {
					msgs, err := sub.Subscribe(t.Context(), topic)
					require.NoError(t, err)
					handlers.Go(func() {
						for msg := range msgs {
							n := running.Add(1)
							for m := maxRunning.Load(); n > m && !maxRunning.CompareAndSwap(m, n); m = maxRunning.Load() {
							}
							handlers.Go(func() {
								time.Sleep(time.Duration(rand.IntN(2)) * time.Millisecond)
								running.Add(-1)
								gotc <- got{topic, msg.UUID}
								msg.Ack()
							})
						}
					})
				}
				if tc.trickle {
					handlers.Go(func() {
						for i := range tc.perTopic {
							for _, topic := range topics {
								assert.NoError(t, rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: topic,
									Values: []any{FieldUUID, fmt.Sprintf("m-%d", i), FieldPayload, "p"}}).Err())
							}
						}
					})
				}
				perTopic := map[string]map[string]bool{}
				for range len(topics) * tc.perTopic {
					select {
					case g := <-gotc:
						if perTopic[g.topic] == nil {
							perTopic[g.topic] = map[string]bool{}
						}
						perTopic[g.topic][g.uuid] = true
					case <-time.After(10 * time.Second):
						t.Fatalf("stalled; messages per topic so far: %d, %d, %d",
							len(perTopic[topics[0]]), len(perTopic[topics[1]]), len(perTopic[topics[2]]))
					}
				}
				for _, topic := range topics {
					assert.Len(t, perTopic[topic], tc.perTopic, "messages of %s", topic)
				}
				assert.LessOrEqual(t, maxRunning.Load(), int64(tc.concurrency), "more messages out than Concurrency")
				require.NoError(t, sub.Close())
				handlers.Wait()
			})
		}
	})

	t.Run("ConcurrencyBoundsEachRead", func(t *testing.T) {
		// Readers reserve slots before they read: the COUNTs of the XREADGROUPs waiting on
		// the server never add up to more than Concurrency, and a topic whose last read
		// found nothing waits with one slot.
		t.Parallel()
		var rec commandRecorder
		rdb := redistest.Client(t)
		rdb.AddHook(&rec)
		topics := []string{redistest.UniqueName(t), redistest.UniqueName(t), redistest.UniqueName(t)}
		sub := newTestSubscriber(t, rdb, Config{Concurrency: 4, BlockTime: 20 * time.Millisecond})
		for _, topic := range topics {
			_, err := sub.Subscribe(t.Context(), topic)
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool { return len(rec.named("xreadgroup")) >= 30 },
			10*time.Second, 10*time.Millisecond)
		for _, c := range rec.named("xreadgroup") {
			count := c[slices.Index(c, any("count"))+1].(int64)
			require.Equal(t, int64(1), count, "an idle topic's read reserved more than one slot")
		}
	})

	t.Run("EndedSubscriptionsAreForgotten", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.Client(t)
		sub := newTestSubscriber(t, rdb, Config{LeaseInterval: 10 * time.Millisecond})
		for range 20 {
			ctx, cancel := context.WithCancel(t.Context())
			msgs, err := sub.Subscribe(ctx, redistest.UniqueName(t))
			require.NoError(t, err)
			cancel()
			requireClosed(t, msgs, 5*time.Second)
		}
		sub.mu.Lock()
		defer sub.mu.Unlock()
		require.Empty(t, sub.topics)
	})
}

// notPending returns which of ids are not pending in the group.
func notPending(t *testing.T, rdb *redis.Client, topic string, ids []string) []string {
	t.Helper()
	stillPending := map[string]bool{}
	for _, p := range pending(t, rdb, topic) {
		stillPending[p.ID] = true
	}
	acked := []string{}
	for _, id := range ids {
		if !stillPending[id] {
			acked = append(acked, id)
		}
	}
	return acked
}

// shuttingDown reports whether every subscription of sub has begun to shut down.
// handingOut counts sub's messages handed out or waiting at the hand-out, over its topics.
func handingOut(sub *Subscriber) int {
	sub.mu.Lock()
	topics := slices.Clone(sub.topics)
	sub.mu.Unlock()
	n := 0
	for _, t := range topics {
		n += t.running()
	}
	return n
}

func shuttingDown(sub *Subscriber) bool {
	sub.mu.Lock()
	topics := slices.Clone(sub.topics)
	sub.mu.Unlock()
	for _, t := range topics {
		select {
		case <-t.stopping:
		default:
			return false
		}
	}
	return true
}

func TestConfig(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"}) // never dialled
	defer rdb.Close()
	base := func(f func(*Config)) Config {
		c := Config{Client: rdb, Group: "g"}
		if f != nil {
			f(&c)
		}
		return c
	}
	for _, tc := range []struct {
		name    string
		cfg     Config
		wantErr string // substring of the error; "" for none
	}{
		{name: "NoClient", cfg: Config{Group: "g"}, wantErr: "Client"},
		{name: "NoGroup", cfg: Config{Client: rdb}, wantErr: "Group"},
		{name: "NegativeConcurrency", cfg: base(func(c *Config) { c.Concurrency = -1 }), wantErr: "Concurrency"},
		{name: "NegativeBatchSize", cfg: base(func(c *Config) { c.BatchSize = -1 }), wantErr: "BatchSize"},
		{name: "NegativeBlockTime", cfg: base(func(c *Config) { c.BlockTime = -time.Second }), wantErr: "BlockTime"},
		// go-redis sends BLOCK in whole milliseconds: 500us would become BLOCK 0, forever.
		{name: "SubMillisecondBlockTime", cfg: base(func(c *Config) { c.BlockTime = 500 * time.Microsecond }), wantErr: "BlockTime"},
		{name: "NegativeLeaseInterval", cfg: base(func(c *Config) { c.LeaseInterval = -1 }), wantErr: "LeaseInterval"},
		{name: "NegativeAckInterval", cfg: base(func(c *Config) { c.AckInterval = -time.Millisecond }), wantErr: "AckInterval"},
		{name: "NegativeNackResendSleep", cfg: base(func(c *Config) { c.NackResendSleep = -1 }), wantErr: "NackResendSleep"},
		{name: "NegativeCloseTimeout", cfg: base(func(c *Config) { c.CloseTimeout = -time.Second }), wantErr: "CloseTimeout"},
		{name: "Defaults", cfg: base(nil)},
		{name: "OneMillisecondBlockTime", cfg: base(func(c *Config) { c.BlockTime = time.Millisecond })},
		{name: "LeaseRenewalDisabled", cfg: base(func(c *Config) { c.DisableLeaseRenewal = true })},
		{name: "AllSet", cfg: base(func(c *Config) {
			c.Concurrency, c.BatchSize, c.BlockTime = 1, 1, time.Second
			c.LeaseInterval, c.AckInterval, c.NackResendSleep, c.CloseTimeout = time.Second, time.Second, time.Second, time.Second
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub, err := NewSubscriber(tc.cfg)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				require.Nil(t, sub)
				return
			}
			require.NoError(t, err)
			assert.NotEmpty(t, sub.Consumer())
			for _, d := range []struct {
				name     string
				got, set time.Duration
				wantDflt time.Duration
			}{
				{"BlockTime", sub.cfg.BlockTime, tc.cfg.BlockTime, DefaultBlockTime},
				{"LeaseInterval", sub.cfg.LeaseInterval, tc.cfg.LeaseInterval, DefaultLeaseInterval},
				{"AckInterval", sub.cfg.AckInterval, tc.cfg.AckInterval, DefaultAckInterval},
				{"NackResendSleep", sub.cfg.NackResendSleep, tc.cfg.NackResendSleep, DefaultNackResendSleep},
				{"CloseTimeout", sub.cfg.CloseTimeout, tc.cfg.CloseTimeout, DefaultCloseTimeout},
			} {
				assert.Equal(t, cmp.Or(d.set, d.wantDflt), d.got, d.name)
			}
			assert.Equal(t, cmp.Or(tc.cfg.Concurrency, defaultConcurrency), sub.cfg.Concurrency)
			assert.Equal(t, cmp.Or(tc.cfg.BatchSize, DefaultBatchSize), sub.cfg.BatchSize)
			require.NoError(t, sub.Close())
			require.NoError(t, sub.Close())
		})
	}
}

func TestEntryTime(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		id   string
		want time.Time
	}{
		{"1700000000123-0", time.UnixMilli(1700000000123)},
		{"0-1", time.UnixMilli(0)},
		{"1700000000123", time.Time{}},
		{"x-0", time.Time{}},
		{"", time.Time{}},
		{"-5", time.Time{}},
	} {
		t.Run(fmt.Sprintf("%q", tc.id), func(t *testing.T) {
			assert.True(t, tc.want.Equal(EntryTime(tc.id)), "EntryTime(%q) = %v", tc.id, EntryTime(tc.id))
		})
	}
}

// TestLeasesOnMiniredis runs lease renewal (a Lua script) on miniredis, the embedded server of
// Conveyor's demo.
func TestLeasesOnMiniredis(t *testing.T) {
	checkLeaks(t)
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	topic := "q"
	ids := publish(t, rdb, topic, "m", 2)
	sub := newTestSubscriber(t, rdb, Config{LeaseInterval: 50 * time.Millisecond})
	msgs, err := sub.Subscribe(t.Context(), topic)
	require.NoError(t, err)
	held := receiveN(t, msgs, 2, 5*time.Second)
	byID := map[string]*message.Message{}
	for _, m := range held {
		byID[m.Metadata.Get(EntryIDKey)] = m
	}

	// Both leases renewed after they were handed out (before: idle under 300 ms after a
	// 400 ms sleep, a margin). 10x: renewals are due every 50 ms; 30 s is six hundred.
	received := time.Now()
	require.Eventually(t, func() bool { return renewedSince(t, rdb, topic, received, 2) },
		30*time.Second, 10*time.Millisecond, "leases not renewed")
	require.NoError(t, rdb.XAck(t.Context(), topic, testGroup, ids[0]).Err())
	select {
	case <-byID[ids[0]].Context().Done():
		require.ErrorIs(t, context.Cause(byID[ids[0]].Context()), ErrLeaseLost)
	case <-time.After(5 * time.Second):
		t.Fatal("lost lease not noticed")
	}
	require.NoError(t, byID[ids[1]].Context().Err())
	for _, m := range held {
		m.Ack()
	}
	require.NoError(t, sub.Close())
	require.Equal(t, int64(0), pendingCount(t, rdb, topic))
}

// TestGroupLostOnMiniredis checks that a renewal on miniredis that finds the group gone loses
// the lease (miniredis words the NOGROUP error of a script differently from Redis 7).
func TestGroupLostOnMiniredis(t *testing.T) {
	checkLeaks(t)
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	topic := "q"
	publish(t, rdb, topic, "m", 1)
	sub := newTestSubscriber(t, rdb, Config{Concurrency: 1, LeaseInterval: 50 * time.Millisecond,
		CloseTimeout: 100 * time.Millisecond})
	msgs, err := sub.Subscribe(t.Context(), topic)
	require.NoError(t, err)
	msg := receive(t, msgs, 5*time.Second)
	require.NoError(t, rdb.XGroupDestroy(t.Context(), topic, testGroup).Err())
	select {
	case <-msg.Context().Done():
		require.ErrorIs(t, context.Cause(msg.Context()), ErrLeaseLost)
	case <-time.After(5 * time.Second):
		t.Fatal("lost group not noticed")
	}
	msg.Ack()
}

// A worker that starts while Redis refuses writes (maxmemory) subscribes to a stream whose
// group the others made already: XGROUP CREATE is refused (OOM comes before Redis looks for
// the group), but there is nothing to create, so the subscription goes on. A group that does
// not exist yet cannot be made then: that subscription waits for writes to come back, and
// then goes on. (The torture suite's maxmemory scenario saw a worker started during the
// refusal exit 1 on "create group ... OOM".)
func TestSubscribeWhileWritesRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	topic, fresh := redistest.UniqueName(t), redistest.UniqueName(t)+"-fresh"
	ids := publish(t, rdb, topic, "before", 1)
	require.NoError(t, rdb.XGroupCreate(t.Context(), topic, testGroup, "0").Err(), "the others made the group")

	restore := srv.RefuseWrites(t)
	late := newTestSubscriber(t, rdb, Config{})
	msgs, err := late.Subscribe(t.Context(), topic)
	require.NoError(t, err, "the group exists: a refused XGROUP CREATE is no failure")
	waited := make(chan error, 1)
	go func() {
		_, err := late.Subscribe(t.Context(), fresh)
		waited <- err
	}()
	// Each try at the group is refused while writes are; the event is Redis's own count.
	require.Eventually(t, func() bool { return oomRefusals(t, rdb) >= 3 }, 30*time.Second, 10*time.Millisecond,
		"the subscription tries again while writes are refused")
	select {
	case err := <-waited:
		t.Fatalf("Subscribe returned while Redis refused writes: %v", err)
	default:
	}
	restore()
	require.NoError(t, <-waited, "the group made once writes came back")
	// 30 s: a read retried after the refusal backs off for up to a few seconds; ten times that.
	m := receive(t, msgs, 30*time.Second)
	require.Equal(t, ids[0], m.Metadata.Get(EntryIDKey), "the late subscription reads")
	m.Ack()
}

// oomRefusals is how many commands Redis refused as out of memory (INFO errorstats).
func oomRefusals(t *testing.T, rdb redis.UniversalClient) int {
	info, err := rdb.Info(t.Context(), "errorstats").Result()
	require.NoError(t, err)
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_OOM:count="); ok {
			n, err := strconv.Atoi(v)
			require.NoError(t, err)
			return n
		}
	}
	return 0
}
