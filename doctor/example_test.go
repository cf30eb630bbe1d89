package doctor_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/doctor"
	"github.com/conveyorq/conveyor/pipeline"
)

// Check a Redis before running workers on it, and read what its queues take. An embedded Redis
// lacks much of what the checks read: each such check is a warning that says so, not a failure.
func Example() {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	d, err := doctor.New(rdb, doctor.Config{})
	if err != nil {
		panic(err)
	}
	report, err := d.Check(ctx)
	if err != nil {
		panic(err) // Redis did not answer
	}
	for _, f := range report.Findings {
		fmt.Println(f.Check, f.Status)
	}
	fmt.Println("failed:", report.Failed)

	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	if err != nil {
		panic(err)
	}
	if _, err := client.Enqueue(ctx, "emails", pipeline.Task{Type: "welcome"}); err != nil {
		panic(err)
	}
	info, err := d.Info(ctx)
	if err != nil {
		panic(err)
	}
	for _, q := range info.Queues {
		// Without MEMORY USAGE the jobs are counted and the bytes left unmeasured.
		fmt.Println(q.Queue, "jobs:", q.Jobs, "unmeasured:", q.Unmeasured)
	}
	// Output:
	// version warn
	// eviction warn
	// memory warn
	// persistence warn
	// cluster warn
	// clock ok
	// acl ok
	// failed: 0
	// emails jobs: 1 unmeasured: true
}
