// Package lock is a Redis lock on one key, in place of bsm/redislock, whose semantics it keeps:
// SET NX PX with a random token to obtain, a compare-and-PEXPIRE to refresh, a compare-and-DEL
// to release. Only the holder of the token refreshes or releases, so a holder whose lock
// expired and went to another cannot take it back or free it.
//
// recovery.Lock (the recoverer's scans) and the periodic scheduler use it. The key holds the
// token alone, so a script can check that its caller still holds the lock.
package lock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	// ErrNotObtained is Obtain's error when another holds the lock, and Refresh's when the
	// lock is no longer the caller's.
	ErrNotObtained = errors.New("lock: not obtained")
	// ErrNotHeld is Release's error when the lock is no longer the caller's.
	ErrNotHeld = errors.New("lock: not held")
)

var (
	refreshScript = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`)
	releaseScript = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)
	ttlScript     = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pttl", KEYS[1]) else return -3 end`)
)

// Lock is an obtained lock: its key and the token that proves it is held.
type Lock struct {
	rdb   redis.UniversalClient
	key   string
	token string
}

// Obtain tries once to take the lock at key for ttl (whole milliseconds, at least one). It
// returns ErrNotObtained when another holds it. Without a deadline in ctx, the call gets ttl.
func Obtain(ctx context.Context, rdb redis.UniversalClient, key string, ttl time.Duration) (*Lock, error) {
	if ttl < time.Millisecond {
		// PX 0 is an error and a PEXPIRE of 0 deletes the key: refuse rather than misbehave.
		return nil, errors.New("lock: TTL under a millisecond")
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, ttl)
		defer cancel()
	}
	token := newToken()
	ok, err := rdb.SetNX(ctx, key, token, ttl.Truncate(time.Millisecond)).Result()
	if errors.Is(err, redis.Nil) {
		ok, err = false, nil
	}
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, ErrNotObtained
	}
	return &Lock{rdb: rdb, key: key, token: token}, nil
}

// newToken is 16 random bytes in URL-safe base64 without padding, as bsm/redislock's tokens.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand panics rather than return an error
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Key is the lock's Redis key.
func (l *Lock) Key() string { return l.key }

// Token is the random value the key holds while the lock is l's.
func (l *Lock) Token() string { return l.token }

// Refresh sets the lock's TTL to ttl if it is still l's, and returns ErrNotObtained if not (it
// expired, or another holds it now).
func (l *Lock) Refresh(ctx context.Context, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return errors.New("lock: TTL under a millisecond")
	}
	n, err := refreshScript.Run(ctx, l.rdb, []string{l.key}, l.token, ttl.Milliseconds()).Int64()
	if err != nil {
		return err
	}
	if n != 1 {
		return ErrNotObtained
	}
	return nil
}

// Release deletes the lock if it is still l's, and returns ErrNotHeld if not: a lock another
// holds now is left alone.
func (l *Lock) Release(ctx context.Context) error {
	n, err := releaseScript.Run(ctx, l.rdb, []string{l.key}, l.token).Int64()
	if err != nil {
		return err
	}
	if n != 1 {
		return ErrNotHeld
	}
	return nil
}

// TTL is how long the lock has left while it is l's, 0 when it is not.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	ms, err := ttlScript.Run(ctx, l.rdb, []string{l.key}, l.token).Int64()
	if err != nil {
		return 0, err
	}
	return time.Duration(max(ms, 0)) * time.Millisecond, nil
}
