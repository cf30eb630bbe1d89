package recovery_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/recovery"
)

func TestLock(t *testing.T) {
	t.Parallel()

	// setup returns a client and a fresh lock key on the shared server.
	setup := func(t *testing.T) (*redis.Client, string) {
		t.Helper()
		return redistest.Client(t), redistest.UniqueName(t) + ":lock"
	}
	value := func(t *testing.T, rdb *redis.Client, key string) string {
		t.Helper()
		v, err := rdb.Get(t.Context(), key).Result()
		if errors.Is(err, redis.Nil) {
			return ""
		}
		require.NoError(t, err)
		return v
	}
	pttl := func(t *testing.T, rdb *redis.Client, key string) time.Duration {
		t.Helper()
		d, err := rdb.PTTL(t.Context(), key).Result()
		require.NoError(t, err)
		return d
	}

	t.Run("OnlyOneAcquires", func(t *testing.T) {
		t.Parallel()
		rdb, key := setup(t)
		ctx := t.Context()
		a, b := recovery.NewLock(rdb, key, 10*time.Second), recovery.NewLock(rdb, key, 10*time.Second)
		ok, err := a.Acquire(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = b.Acquire(ctx)
		require.NoError(t, err)
		require.False(t, ok)
		require.NotEmpty(t, a.Token())
		require.Empty(t, b.Token())
		require.Equal(t, a.Token(), value(t, rdb, key))
	})

	t.Run("OnlyOneOfManyRacingAcquires", func(t *testing.T) {
		t.Parallel()
		rdb, key := setup(t)
		var won atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 20 {
			l := recovery.NewLock(rdb, key, 10*time.Second)
			wg.Go(func() {
				<-start
				ok, err := l.Acquire(t.Context())
				if err != nil {
					t.Error(err)
				}
				if ok {
					won.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		require.Equal(t, int32(1), won.Load())
	})

	t.Run("ExpiresAfterTTL", func(t *testing.T) {
		t.Parallel()
		rdb, key := setup(t)
		ctx := t.Context()
		const ttl = 150 * time.Millisecond
		a, b := recovery.NewLock(rdb, key, ttl), recovery.NewLock(rdb, key, ttl)
		before := time.Now() // the key expires no earlier than ttl after this
		ok, err := a.Acquire(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		require.Eventually(t, func() bool {
			ok, err := b.Acquire(ctx)
			require.NoError(t, err)
			return ok
		}, 5*time.Second, 10*time.Millisecond)
		require.GreaterOrEqual(t, time.Since(before), ttl-2*time.Millisecond, "taken over before the TTL")
		require.Equal(t, b.Token(), value(t, rdb, key))
	})

	t.Run("ExtensionKeepsItPastTTL", func(t *testing.T) {
		t.Parallel()
		rdb, key := setup(t)
		ctx := t.Context()
		// Extended every 200 ms for two TTLs. 10x: only a stall of 1.8 s between two
		// extensions loses it (before: a TTL of 500 ms, extended every 100 ms, which a stall
		// of 400 ms on a loaded machine would lose).
		const ttl = 2 * time.Second
		a, b := recovery.NewLock(rdb, key, ttl), recovery.NewLock(rdb, key, ttl)
		ok, err := a.Acquire(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		token := a.Token()
		for deadline := time.Now().Add(2 * ttl); time.Now().Before(deadline); {
			time.Sleep(ttl / 10)
			ok, err := a.Extend(ctx)
			require.NoError(t, err)
			require.True(t, ok)
			ok, err = b.Acquire(ctx)
			require.NoError(t, err)
			require.False(t, ok)
		}
		require.Equal(t, token, a.Token())
		require.Equal(t, token, value(t, rdb, key))
		require.Greater(t, pttl(t, rdb, key), ttl/2)
	})

	t.Run("NonHolderRefused", func(t *testing.T) {
		t.Parallel()
		rdb, key := setup(t)
		ctx := t.Context()
		a, b := recovery.NewLock(rdb, key, 10*time.Second), recovery.NewLock(rdb, key, 10*time.Second)
		// Before anyone holds it.
		ok, err := b.Extend(ctx)
		require.NoError(t, err)
		require.False(t, ok)
		ok, err = b.Release(ctx)
		require.NoError(t, err)
		require.False(t, ok)

		ok, err = a.Acquire(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, rdb.PExpire(ctx, key, 5*time.Second).Err())
		ok, err = b.Extend(ctx)
		require.NoError(t, err)
		require.False(t, ok)
		ok, err = b.Release(ctx)
		require.NoError(t, err)
		require.False(t, ok)
		require.Equal(t, a.Token(), value(t, rdb, key))
		require.LessOrEqual(t, pttl(t, rdb, key), 5*time.Second, "a non-holder's Extend reset the TTL")

		ok, err = a.Release(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		require.Empty(t, value(t, rdb, key))
		require.Empty(t, a.Token())
		ok, err = a.Release(ctx) // twice
		require.NoError(t, err)
		require.False(t, ok)
	})

	t.Run("LostHolderCannotExtendOrRelease", func(t *testing.T) {
		t.Parallel()
		rdb, key := setup(t)
		ctx := t.Context()
		a := recovery.NewLock(rdb, key, 50*time.Millisecond)
		b := recovery.NewLock(rdb, key, time.Minute)
		ok, err := a.Acquire(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		require.Eventually(t, func() bool {
			ok, err := b.Acquire(ctx)
			require.NoError(t, err)
			return ok
		}, 5*time.Second, 10*time.Millisecond)

		ok, err = a.Extend(ctx)
		require.NoError(t, err)
		require.False(t, ok)
		require.Empty(t, a.Token(), "a contender that lost the lock holds nothing")
		ok, err = a.Release(ctx)
		require.NoError(t, err)
		require.False(t, ok)

		require.Equal(t, b.Token(), value(t, rdb, key))
		require.Greater(t, pttl(t, rdb, key), 30*time.Second, "the new holder's TTL was changed")
		ok, err = b.Extend(ctx)
		require.NoError(t, err)
		require.True(t, ok)
	})

	t.Run("LostHolderReleaseLeavesNewHolder", func(t *testing.T) {
		t.Parallel()
		rdb, key := setup(t)
		ctx := t.Context()
		a := recovery.NewLock(rdb, key, 50*time.Millisecond)
		b := recovery.NewLock(rdb, key, time.Minute)
		ok, err := a.Acquire(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		require.Eventually(t, func() bool {
			ok, err := b.Acquire(ctx)
			require.NoError(t, err)
			return ok
		}, 5*time.Second, 10*time.Millisecond)
		ok, err = a.Release(ctx) // without an Extend first
		require.NoError(t, err)
		require.False(t, ok)
		require.Equal(t, b.Token(), value(t, rdb, key))
	})

	t.Run("AcquireByHolderExtends", func(t *testing.T) {
		t.Parallel()
		rdb, key := setup(t)
		ctx := t.Context()
		a := recovery.NewLock(rdb, key, 10*time.Second)
		ok, err := a.Acquire(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		token := a.Token()
		require.NoError(t, rdb.PExpire(ctx, key, time.Second).Err())
		ok, err = a.Acquire(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, token, a.Token())
		require.Equal(t, token, value(t, rdb, key))
		require.Greater(t, pttl(t, rdb, key), 5*time.Second)
	})

	t.Run("AcquireAfterOwnExpiry", func(t *testing.T) {
		t.Parallel()
		rdb, key := setup(t)
		ctx := t.Context()
		a := recovery.NewLock(rdb, key, 30*time.Millisecond)
		ok, err := a.Acquire(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		require.Eventually(t, func() bool {
			return rdb.Exists(ctx, key).Val() == 0
		}, 5*time.Second, 5*time.Millisecond)
		// The lock is free: a former holder takes it like anyone else.
		ok, err = a.Acquire(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, a.Token(), value(t, rdb, key))
	})

	t.Run("RedisErrorsAreErrors", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: time.Second})
		t.Cleanup(func() { _ = rdb.Close() })
		ctx := t.Context()
		key := redistest.UniqueName(t)
		a, b := recovery.NewLock(rdb, key, time.Minute), recovery.NewLock(rdb, key, time.Minute)
		ok, err := a.Acquire(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		token := a.Token()

		require.NoError(t, srv.Kill())
		ok, err = b.Acquire(ctx)
		require.Error(t, err)
		require.False(t, ok)
		ok, err = a.Extend(ctx)
		require.Error(t, err)
		require.False(t, ok)
		ok, err = a.Acquire(ctx)
		require.Error(t, err)
		require.False(t, ok)
		ok, err = a.Release(ctx)
		require.Error(t, err)
		require.False(t, ok)
		require.Equal(t, token, a.Token(), "an error is no proof the lock is gone")
		ran, err := b.Do(ctx, func(context.Context) error {
			t.Error("fn ran without the lock")
			return nil
		})
		require.Error(t, err)
		require.False(t, ran)

		require.NoError(t, srv.Restart())
		// The restarted server lost the key (no persistence): the old holder is refused.
		ok, err = a.Extend(ctx)
		require.NoError(t, err)
		require.False(t, ok)
		ok, err = b.Acquire(ctx)
		require.NoError(t, err)
		require.True(t, ok)
	})

	t.Run("DoRunsUnderLock", func(t *testing.T) {
		t.Parallel()
		rdb, key := setup(t)
		ctx := t.Context()
		// Do extends it every TTL/3 (667 ms). 10x: only a stall of 1.3 s between two
		// extensions loses it (before: a TTL of 600 ms, which a stall of 400 ms would lose).
		const ttl = 2 * time.Second
		a, b := recovery.NewLock(rdb, key, ttl), recovery.NewLock(rdb, key, ttl)
		ran, err := a.Do(ctx, func(ctx context.Context) error {
			require.Equal(t, a.Token(), value(t, rdb, key))
			// Outlive the TTL: the extensions keep it.
			for range 5 {
				time.Sleep(ttl / 3)
				ok, err := b.Acquire(ctx)
				require.NoError(t, err)
				require.False(t, ok)
			}
			require.NoError(t, ctx.Err())
			require.Equal(t, a.Token(), value(t, rdb, key))
			return nil
		})
		require.NoError(t, err)
		require.True(t, ran)
		require.Empty(t, value(t, rdb, key), "Do did not release the lock")
		require.Empty(t, a.Token())
	})

	t.Run("DoReturnsFnError", func(t *testing.T) {
		t.Parallel()
		rdb, key := setup(t)
		errBoom := errors.New("boom")
		a := recovery.NewLock(rdb, key, time.Minute)
		ran, err := a.Do(t.Context(), func(context.Context) error { return errBoom })
		require.ErrorIs(t, err, errBoom)
		require.True(t, ran)
		require.Empty(t, value(t, rdb, key))
	})

	t.Run("DoReleasesWhenFnPanics", func(t *testing.T) {
		t.Parallel()
		rdb, key := setup(t)
		a := recovery.NewLock(rdb, key, time.Minute)
		require.PanicsWithValue(t, "boom", func() {
			_, _ = a.Do(t.Context(), func(context.Context) error { panic("boom") })
		})
		require.Empty(t, value(t, rdb, key), "a panicking fn kept the lock")
		b := recovery.NewLock(rdb, key, time.Minute)
		ok, err := b.Acquire(t.Context())
		require.NoError(t, err)
		require.True(t, ok)
	})

	t.Run("DoCancelsWhenLockStolen", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name  string
			steal func(ctx context.Context, rdb *redis.Client, key string) error
			left  string // the key's value afterwards
		}{
			{"Deleted", func(ctx context.Context, rdb *redis.Client, key string) error {
				return rdb.Del(ctx, key).Err()
			}, ""},
			{"Overwritten", func(ctx context.Context, rdb *redis.Client, key string) error {
				return rdb.Set(ctx, key, "someone-else", time.Minute).Err()
			}, "someone-else"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				rdb, key := setup(t)
				ctx := t.Context()
				a := recovery.NewLock(rdb, key, 90*time.Millisecond) // extended every 30ms
				started := make(chan struct{})
				stolen := make(chan error, 1)
				go func() {
					<-started
					stolen <- tc.steal(ctx, rdb, key)
				}()
				begin := time.Now()
				ran, err := a.Do(ctx, func(ctx context.Context) error {
					close(started)
					select {
					case <-ctx.Done():
						return context.Cause(ctx)
					case <-time.After(10 * time.Second):
						return errors.New("fn's context was not canceled")
					}
				})
				require.NoError(t, <-stolen)
				require.True(t, ran)
				require.ErrorIs(t, err, recovery.ErrLockLost)
				require.Less(t, time.Since(begin), 5*time.Second)
				require.Equal(t, tc.left, value(t, rdb, key), "Do disturbed the new value")
				require.Empty(t, a.Token())
			})
		}
	})

	t.Run("DoWhenHeldElsewhere", func(t *testing.T) {
		t.Parallel()
		rdb, key := setup(t)
		ctx := t.Context()
		a, b := recovery.NewLock(rdb, key, time.Minute), recovery.NewLock(rdb, key, time.Minute)
		ok, err := b.Acquire(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		ran, err := a.Do(ctx, func(context.Context) error {
			t.Error("fn ran while another held the lock")
			return nil
		})
		require.NoError(t, err)
		require.False(t, ran)
		require.Equal(t, b.Token(), value(t, rdb, key))
	})

	t.Run("NewLockRejectsTinyTTL", func(t *testing.T) {
		t.Parallel()
		rdb, key := setup(t)
		require.Panics(t, func() { recovery.NewLock(rdb, key, 0) })
		require.Panics(t, func() { recovery.NewLock(rdb, key, time.Microsecond) })
		l := recovery.NewLock(rdb, key, time.Second)
		require.Equal(t, key, l.Key())
		require.Equal(t, time.Second, l.TTL())
	})
}
