package delayed_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/delayed"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// Promote what is due in a queue once, by hand; Run does this in a loop, sleeping until the
// next due time. A job is due by Redis's clock, not by the clock of the process that promotes
// it. (An in-process Redis stands in for yours; unlike yours, its clock can be moved.)
func ExampleScheduler_Promote() {
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
	soon, _ := c.Enqueue(ctx, "emails", pipeline.Task{Type: "welcome"}, pipeline.WithDelay(time.Minute))
	later, _ := c.Enqueue(ctx, "emails", pipeline.Task{Type: "digest"}, pipeline.WithDelay(time.Hour))

	s, err := delayed.New(rdb, delayed.Config{Queues: []string{"emails"}})
	if err != nil {
		panic(err)
	}
	moved, _, _, err := s.Promote(ctx, "emails")
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println("now: promoted", moved)

	// Two minutes later by Redis's clock: the first job is due, the second is not.
	m.SetTime(time.Now().Add(2 * time.Minute))
	moved, next, redisNow, err := s.Promote(ctx, "emails")
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	j1, _ := c.Get(ctx, "emails", soon.ID)
	j2, _ := c.Get(ctx, "emails", later.ID)
	fmt.Println("2 minutes later: promoted", moved, j1.Status, j2.Status)
	fmt.Println("next due", next.Equal(later.RunAt), "in about", next.Sub(redisNow).Round(time.Minute))
	// Output:
	// now: promoted 0
	// 2 minutes later: promoted 1 queued scheduled
	// next due true in about 58m0s
}

// Run the scheduler until ctx ends; every worker process may run one (pipeline.Worker runs one
// unless WorkerConfig.DisableScheduler is set).
func ExampleScheduler_Run() {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()

	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	if err != nil {
		panic(err)
	}
	s, err := delayed.New(rdb, delayed.Config{Queues: []string{"emails", "reports"}})
	if err != nil {
		panic(err)
	}
	go s.Run(ctx)
	j, _ := c.Enqueue(ctx, "reports", pipeline.Task{Type: "render"}, pipeline.WithDelay(100*time.Millisecond))
	for ctx.Err() == nil {
		if got, _ := c.Get(ctx, "reports", j.ID); got.Status == status.Queued {
			fmt.Println("promoted when due")
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Output: promoted when due
}
