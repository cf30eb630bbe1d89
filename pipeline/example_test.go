package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/pipeline"
)

// The examples run on an in-process Redis (miniredis) so they need no server; in production
// rdb is a go-redis client for your Redis (standalone, cluster or failover).
func exampleRedis() (*redis.Client, func()) {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	return rdb, func() { rdb.Close(); m.Close() }
}

// Publish a job, run a worker, and poll the job's state: the async-endpoint pattern.
func Example() {
	rdb, done := exampleRedis()
	defer done()
	ctx := context.Background()

	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	if err != nil {
		panic(err)
	}
	job, err := client.Enqueue(ctx, "emails", pipeline.Task{Type: "welcome", Payload: []byte(`{"to":"ada@example.com"}`)})
	if err != nil {
		panic(err)
	}
	fmt.Println("submitted:", job.Status)

	worker, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{"emails"}})
	if err != nil {
		panic(err)
	}
	worker.Handle("welcome", func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
		return []byte(`{"sent":true}`), nil
	})
	wctx, stop := context.WithCancel(ctx)
	go worker.Run(wctx)
	defer stop()

	for {
		j, err := client.Get(ctx, "emails", job.ID)
		if err != nil {
			panic(err)
		}
		if j.Status.Final() {
			fmt.Println("final:", j.Status, string(j.Result), "attempt", j.Attempt)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Output:
	// submitted: queued
	// final: completed {"sent":true} attempt 1
}

func ExampleClient_Enqueue_options() {
	rdb, done := exampleRedis()
	defer done()
	ctx := context.Background()
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	if err != nil {
		panic(err)
	}

	// Later, with a caller-chosen id (publishing the same job again returns it, marked
	// Duplicate), three retries at most, a per-attempt timeout and metadata handed to the
	// handler.
	job, err := client.Enqueue(ctx, "reports", pipeline.Task{
		Type:     "render",
		Payload:  []byte(`{"report":42}`),
		Metadata: map[string]string{"tenant": "acme"},
	},
		pipeline.WithID("report-42"),
		pipeline.WithDelay(time.Hour),
		pipeline.WithMaxRetries(3),
		pipeline.WithTimeout(5*time.Minute),
	)
	if err != nil {
		panic(err)
	}
	again, _ := client.Enqueue(ctx, "reports", pipeline.Task{Type: "render", Payload: []byte(`{"report":42}`)},
		pipeline.WithID("report-42"), pipeline.WithDelay(time.Hour))
	fmt.Println(job.ID, job.Status, job.MaxRetries, again.ID == job.ID, again.Duplicate)

	// The same id with another payload is refused: it would be a different job.
	_, err = client.Enqueue(ctx, "reports", pipeline.Task{Type: "render", Payload: []byte(`{"report":43}`)},
		pipeline.WithID("report-42"))
	fmt.Println(errors.Is(err, pipeline.ErrConflict))

	// Bad input is refused before anything is written.
	_, err = client.Enqueue(ctx, "reports", pipeline.Task{Type: "render"}, pipeline.WithDelay(-time.Second))
	fmt.Println(errors.Is(err, pipeline.ErrInvalid))
	// Output:
	// report-42 scheduled 3 true true
	// true
	// true
}

func ExampleClient_EnqueueBatch() {
	rdb, done := exampleRedis()
	defer done()
	ctx := context.Background()
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	if err != nil {
		panic(err)
	}

	tasks := make([]pipeline.Task, 250)
	for i := range tasks {
		tasks[i] = pipeline.Task{Type: "resize", Payload: []byte(fmt.Sprintf(`{"image":%d}`, i))}
	}
	jobs, err := client.EnqueueBatch(ctx, "images", tasks)
	if err != nil {
		panic(err)
	}
	stats, _ := client.Stats(ctx, "images")
	fmt.Println(len(jobs), stats.Queued)
	// Output: 250 250
}

func ExampleSkipRetry() {
	handler := func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
		if len(j.Payload) == 0 {
			// Another attempt cannot fix an empty payload: fail now, into the dead set.
			return nil, pipeline.SkipRetry(errors.New("empty payload"))
		}
		return nil, nil
	}
	_, err := handler(context.Background(), &pipeline.Job{})
	fmt.Println(err, pipeline.IsSkipRetry(err))
	// Output: empty payload true
}

func ExampleBackoff() {
	b := pipeline.Backoff{Base: time.Second, Max: time.Minute}
	for attempt := 1; attempt <= 8; attempt++ {
		nominal := min(b.Base<<(attempt-1), b.Max)
		d := b.Delay(attempt)
		// Each delay is within ±25% of Base*2^(attempt-1), and never above Max.
		fmt.Println(attempt, nominal, d >= nominal*3/4 && d <= min(nominal*5/4, b.Max))
	}
	// Output:
	// 1 1s true
	// 2 2s true
	// 3 4s true
	// 4 8s true
	// 5 16s true
	// 6 32s true
	// 7 1m0s true
	// 8 1m0s true
}

// WithDebounce makes one job of a burst of publishes: each publish while the key's job waits
// replaces its payload, and the job runs once, with the last payload, a quiet period after the
// last publish or the max wait after the first, whichever comes first.
func ExampleWithDebounce() {
	rdb, done := exampleRedis()
	defer done()
	ctx := context.Background()
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	if err != nil {
		panic(err)
	}

	// Three edits of one document: one reindex job, with the last edit's payload.
	var jobs []*pipeline.Job
	for _, rev := range []string{"1", "2", "3"} {
		j, err := client.Enqueue(ctx, "search", pipeline.Task{Type: "reindex", Payload: []byte(`{"doc":7,"rev":` + rev + `}`)},
			pipeline.WithDebounce("doc-7", 2*time.Second, 30*time.Second))
		if err != nil {
			panic(err)
		}
		jobs = append(jobs, j)
	}
	for _, j := range jobs {
		fmt.Println(j.ID == jobs[0].ID, j.Debounced, j.Debounce.Publishes)
	}
	stored, err := client.Get(ctx, "search", jobs[0].ID)
	if err != nil {
		panic(err)
	}
	fmt.Println(stored.Status, string(stored.Payload))
	fmt.Println(!stored.RunAt.After(stored.Debounce.Until))
	// Output:
	// true false 1
	// true true 2
	// true true 3
	// scheduled {"doc":7,"rev":3}
	// true
}
