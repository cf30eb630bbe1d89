package delayed_test

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/delayed"
)

// Promote what is due in a queue once, by hand; Run does this in a loop, sleeping until the
// next due time.
func ExampleScheduler_Promote() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()

	s := delayed.New(rdb, delayed.Config{Queues: []string{"emails"}})
	moved, next, err := s.Promote(context.Background(), "emails")
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Printf("promoted %d jobs", moved)
	if !next.IsZero() {
		fmt.Printf("; the next is due at %s", next)
	}
	fmt.Println()
}

// Run the scheduler until ctx ends; every worker process may run one.
func ExampleScheduler_Run() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := delayed.New(rdb, delayed.Config{Queues: []string{"emails", "reports"}})
	if err := s.Run(ctx); err != nil {
		fmt.Println("error:", err)
	}
}
