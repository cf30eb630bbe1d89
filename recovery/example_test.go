package recovery_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/recovery"
)

// Run a duty on at most one process at a time. The lock is extended while fn runs; if it is
// lost anyway (a stall past the TTL), fn's context is canceled with cause ErrLockLost.
func ExampleLock_Do() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()

	lock := recovery.NewLock(rdb, "myapp:{reports}:lock", 10*time.Second)
	ran, err := lock.Do(context.Background(), func(ctx context.Context) error {
		select {
		case <-time.After(time.Second): // the work, passing ctx to every call
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	switch {
	case errors.Is(err, recovery.ErrLockLost):
		fmt.Println("lost the lock midway; another process carries on")
	case err != nil:
		fmt.Println("error:", err)
	case !ran:
		fmt.Println("another process holds the lock")
	}
}

// One scan by hand, as a worker's Recoverer does every Interval.
func ExampleRecoverer_RunOnce() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()

	r := recovery.NewRecoverer(rdb, recovery.Config{Queue: "emails", VisibilityTimeout: time.Minute})
	res, scanned, err := r.RunOnce(context.Background())
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	if scanned {
		fmt.Printf("requeued %d, dead %d\n", res.Requeued, res.Dead)
	}
}
