package recovery_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/recovery"
)

// Run a duty on at most one process at a time. The lock is extended while fn runs; if it is
// lost anyway (a stall past the TTL), fn's context is canceled with cause ErrLockLost.
// (An in-process Redis stands in for yours.)
func ExampleLock_Do() {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	mine := recovery.NewLock(rdb, "myapp:{reports}:lock", 10*time.Second)
	theirs := recovery.NewLock(rdb, "myapp:{reports}:lock", 10*time.Second)
	ran, err := mine.Do(ctx, func(ctx context.Context) error {
		// While this runs, another process's attempt is refused: a value, not an error.
		got, err := theirs.Acquire(ctx)
		fmt.Println("the other process got it:", got, err)
		return nil
	})
	switch {
	case errors.Is(err, recovery.ErrLockLost):
		fmt.Println("lost the lock midway; another process carries on")
	case err != nil:
		fmt.Println("error:", err)
	default:
		fmt.Println("ran:", ran)
	}
	got, _ := theirs.Acquire(ctx)
	fmt.Println("after release, the other process got it:", got)
	// Output:
	// the other process got it: false <nil>
	// ran: true
	// after release, the other process got it: true
}

// Scans by hand, as a worker's Recoverer runs them every Interval: a job delivered to a worker
// that died is put back with its lost attempt counted. A new Recoverer first watches Redis for
// a lease period (a third of the visibility timeout) and lists the entry once before it trusts
// the entry's idle time, so its first scan defers the job.
func ExampleRecoverer_RunOnce() {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	if err != nil {
		panic(err)
	}
	j, _ := c.Enqueue(ctx, "emails", pipeline.Task{Type: "welcome"})
	// A worker reads the job, then dies before it finishes.
	q := keys.New(keys.DefaultPrefix, "emails")
	rdb.XGroupCreateMkStream(ctx, q.Stream(), keys.Group, "0")
	rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: "dead-worker",
		Streams: []string{q.Stream(), ">"}, Count: 1})
	time.Sleep(350 * time.Millisecond)

	r, err := recovery.NewRecoverer(rdb, recovery.Config{Queue: "emails",
		VisibilityTimeout: 300 * time.Millisecond, Interval: 100 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	res, scanned, err := r.RunOnce(ctx)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println("first scan:", scanned, res.Requeued, res.Deferred)
	for res.Requeued == 0 {
		time.Sleep(20 * time.Millisecond)
		if res, _, err = r.RunOnce(ctx); err != nil {
			fmt.Println("error:", err)
			return
		}
	}
	got, _ := c.Get(ctx, "emails", j.ID)
	fmt.Println("later:", res.Requeued, got.Status, got.Attempt)
	// Output:
	// first scan: true 0 1
	// later: 1 queued 1
}
