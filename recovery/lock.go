package recovery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/lock"
	"github.com/conveyorq/conveyor/internal/rediserr"
)

// Lock is a Redis lock for "only one at a time" duties: SET NX PX with a random token to
// acquire, a compare-and-set of the TTL to extend, a compare-and-delete to release (through
// internal/lock). Refusals are values (false), Redis errors are errors. A Lock value is one
// contender: it holds at most one token at a time and is safe for concurrent use.
//
// A lock by itself fences nothing: a holder that stalls past the TTL may still act after
// another took over. Scripts that must be fenced check Token against the lock key in the same
// atomic step, as the recover script does.
type Lock struct {
	rdb redis.UniversalClient
	key string
	ttl time.Duration

	mu   sync.Mutex
	held *lock.Lock
}

// NewLock returns a contender for the lock at key with the given TTL, at least a millisecond.
func NewLock(rdb redis.UniversalClient, key string, ttl time.Duration) *Lock {
	// The TTL goes to Redis in whole milliseconds: 0 would make SET fail and PEXPIRE delete
	// the key while reporting success.
	if ttl < time.Millisecond {
		panic("recovery: NewLock with a TTL under a millisecond")
	}
	return &Lock{rdb: rdb, key: key, ttl: ttl}
}

// Key is the lock's Redis key.
func (l *Lock) Key() string { return l.key }

// TTL is how long the lock lives without an extension.
func (l *Lock) TTL() time.Duration { return l.ttl }

// Acquire tries once to take the lock. It reports false when another contender holds it. If
// this contender already holds it, Acquire extends it instead.
func (l *Lock) Acquire(ctx context.Context) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held != nil {
		ok, err := l.extendLocked(ctx)
		if ok || err != nil {
			return ok, err
		}
		// Our token expired; the lock may be free, so this is a fresh attempt, not a refusal.
	}
	lk, err := lock.Obtain(ctx, l.rdb, l.key, l.ttl)
	if errors.Is(err, lock.ErrNotObtained) {
		return false, nil
	}
	if err != nil {
		return false, rediserr.Wrap("lock", fmt.Errorf("acquire lock %s: %w", l.key, err))
	}
	l.held = lk
	return true, nil
}

// Extend resets the TTL if this contender still holds the lock. It reports false when the lock
// expired or went to another contender; the contender then holds nothing.
func (l *Lock) Extend(ctx context.Context) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == nil {
		return false, nil
	}
	return l.extendLocked(ctx)
}

func (l *Lock) extendLocked(ctx context.Context) (bool, error) {
	err := l.held.Refresh(ctx, l.ttl)
	if errors.Is(err, lock.ErrNotObtained) {
		l.held = nil
		return false, nil
	}
	if err != nil {
		return false, rediserr.Wrap("lock", fmt.Errorf("extend lock %s: %w", l.key, err))
	}
	return true, nil
}

// Release gives the lock up if this contender still holds it. It reports false when it did
// not: it expired, or another contender holds it now, which Release leaves alone.
func (l *Lock) Release(ctx context.Context) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == nil {
		return false, nil
	}
	err := l.held.Release(ctx)
	if err != nil && !errors.Is(err, lock.ErrNotHeld) {
		// Keep the token: the lock may still be ours, and a later Release can free it.
		return false, rediserr.Wrap("lock", fmt.Errorf("release lock %s: %w", l.key, err))
	}
	l.held = nil
	return err == nil, nil
}

// Token is the random token this contender holds, or "" when it holds none.
func (l *Lock) Token() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == nil {
		return ""
	}
	return l.held.Token()
}

// ErrLockLost is the cause of the context Do cancels when the lock is lost while fn runs.
var ErrLockLost = errors.New("recovery: lock lost")

// Do runs fn while holding the lock. It acquires the lock, or reports false without running
// fn when another holds it. It extends the lock every TTL/3 while fn runs. If an extension
// finds the lock gone, it cancels fn's context with cause ErrLockLost. It releases the lock
// when fn returns.
func (l *Lock) Do(ctx context.Context, fn func(ctx context.Context) error) (ran bool, err error) {
	if ok, err := l.Acquire(ctx); !ok || err != nil {
		return false, err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	done := make(chan struct{})
	// Deferred so that a panicking fn neither leaves the extender running nor keeps the lock
	// until its TTL.
	defer func() {
		close(stop)
		<-done
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer rcancel()
		if _, rerr := l.Release(rctx); rerr != nil && err == nil {
			err = rerr
		}
	}()
	go func() {
		defer close(done)
		t := time.NewTicker(l.ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				held, err := l.Extend(fctx)
				if err != nil {
					continue // a passing Redis error; the TTL leaves room for the next try
				}
				if !held {
					cancel(ErrLockLost)
					return
				}
			}
		}
	}()
	return true, fn(fctx)
}
