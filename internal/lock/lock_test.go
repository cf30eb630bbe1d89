package lock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/lock"
	"github.com/conveyorq/conveyor/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// setup marks t parallel and returns a client of the shared server and a key of t's own.
func setup(t *testing.T) (*redis.Client, string, context.Context) {
	t.Parallel()
	return redistest.Client(t), redistest.UniqueName(t), t.Context()
}

// The holder obtains once, refreshes and releases; while it holds the lock no one else
// obtains it; the key holds the token alone.
func TestObtainRefreshRelease(t *testing.T) {
	rdb, key, ctx := setup(t)

	a, err := lock.Obtain(ctx, rdb, key, time.Minute)
	require.NoError(t, err)
	require.Equal(t, key, a.Key())
	require.Len(t, a.Token(), 22, "16 random bytes in base64")
	require.Equal(t, a.Token(), rdb.Get(ctx, key).Val(), "the key holds the token")
	pttl := rdb.PTTL(ctx, key).Val()
	require.Greater(t, pttl, 59*time.Second)
	require.LessOrEqual(t, pttl, time.Minute)

	_, err = lock.Obtain(ctx, rdb, key, time.Minute)
	require.ErrorIs(t, err, lock.ErrNotObtained, "a held lock is not obtained again")

	require.NoError(t, a.Refresh(ctx, 2*time.Minute))
	require.Greater(t, rdb.PTTL(ctx, key).Val(), time.Minute, "Refresh sets the new TTL")
	left, err := a.TTL(ctx)
	require.NoError(t, err)
	require.Greater(t, left, time.Minute)

	require.NoError(t, a.Release(ctx))
	require.Zero(t, rdb.Exists(ctx, key).Val(), "Release deletes the key")
	require.ErrorIs(t, a.Release(ctx), lock.ErrNotHeld, "a second Release")
	left, err = a.TTL(ctx)
	require.NoError(t, err)
	require.Zero(t, left)

	b, err := lock.Obtain(ctx, rdb, key, time.Minute)
	require.NoError(t, err, "a released lock is free")
	require.NotEqual(t, a.Token(), b.Token())
}

// A lock that expired cannot be refreshed. Once another holds it, the first holder's
// Refresh and Release leave the new holder's lock alone.
func TestExpiredLock(t *testing.T) {
	rdb, key, ctx := setup(t)

	// A deadline of the test's own: without one, Obtain's call would get the 1ms TTL.
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	a, err := lock.Obtain(octx, rdb, key, time.Millisecond)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return rdb.Exists(ctx, key).Val() == 0 }, 10*time.Second, time.Millisecond,
		"the lock expires")
	require.ErrorIs(t, a.Refresh(ctx, time.Minute), lock.ErrNotObtained, "refresh after expiry")
	require.Zero(t, rdb.Exists(ctx, key).Val(), "a failed refresh does not bring the key back")

	b, err := lock.Obtain(ctx, rdb, key, time.Minute)
	require.NoError(t, err)
	require.NoError(t, rdb.PExpire(ctx, key, 30*time.Second).Err())
	require.ErrorIs(t, a.Refresh(ctx, time.Hour), lock.ErrNotObtained, "refresh of another's lock")
	require.LessOrEqual(t, rdb.PTTL(ctx, key).Val(), 30*time.Second, "another's TTL untouched")
	require.ErrorIs(t, a.Release(ctx), lock.ErrNotHeld, "release of another's lock")
	require.Equal(t, b.Token(), rdb.Get(ctx, key).Val(), "another's lock stays")
	left, err := a.TTL(ctx)
	require.NoError(t, err)
	require.Zero(t, left, "not ours: no TTL")
	require.NoError(t, b.Release(ctx))
}

// Of contenders racing for a free lock, exactly one obtains it.
func TestOneWinner(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	key := redistest.UniqueName(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	won, lost := 0, 0
	for range 16 {
		wg.Go(func() {
			_, err := lock.Obtain(t.Context(), rdb, key, time.Minute)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.Is(err, lock.ErrNotObtained):
				lost++
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	require.Equal(t, 1, won)
	require.Equal(t, 15, lost)
}

// A Redis error is an error, not a refusal; a TTL under a millisecond is refused before any
// call (PX 0 fails and PEXPIRE 0 deletes).
func TestErrors(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	key := redistest.UniqueName(t)
	ctx := t.Context()
	l, err := lock.Obtain(ctx, rdb, key, time.Minute)
	require.NoError(t, err)
	_, err = lock.Obtain(ctx, rdb, key, 0)
	require.Error(t, err)
	require.NotErrorIs(t, err, lock.ErrNotObtained)
	require.Error(t, l.Refresh(ctx, 0))
	require.Equal(t, l.Token(), rdb.Get(ctx, key).Val(), "a refused refresh did not delete the key")

	require.NoError(t, rdb.Close())
	_, err = lock.Obtain(ctx, rdb, key, time.Minute)
	require.Error(t, err)
	require.NotErrorIs(t, err, lock.ErrNotObtained)
	err = l.Refresh(ctx, time.Minute)
	require.Error(t, err)
	require.NotErrorIs(t, err, lock.ErrNotObtained)
	err = l.Release(ctx)
	require.Error(t, err)
	require.NotErrorIs(t, err, lock.ErrNotHeld)
}
