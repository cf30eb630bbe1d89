package pipelinetest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/pipeline/pipelinetest"
)

// welcome is a handler under test: it refuses a payload without an address for good.
func welcome(_ context.Context, j *pipeline.Job) ([]byte, error) {
	var p struct{ To string }
	if err := json.Unmarshal(j.Payload, &p); err != nil || p.To == "" {
		return nil, pipeline.SkipRetry(errors.New("no address"))
	}
	return []byte(`"sent"`), nil
}

// Run a handler on a job built in the test, without Redis, and see what a worker would write.
func ExampleRun() {
	ctx := context.Background()
	r := pipelinetest.Run(ctx, welcome, pipelinetest.NewJob("welcome", []byte(`{"to":"ada@example.com"}`)))
	fmt.Println(r.Status, string(r.Output))

	r = pipelinetest.Run(ctx, welcome, pipelinetest.NewJob("welcome", []byte(`{}`)))
	fmt.Println(r.Status, r.Err)
	// Output:
	// completed "sent"
	// failed no address
}

// A handler that ignores its job's timeout's end is retried with the timeout's error.
func ExampleRun_timeout() {
	job := pipelinetest.NewJob("slow", nil)
	job.Timeout = 10 * time.Millisecond
	r := pipelinetest.Run(context.Background(), func(ctx context.Context, _ *pipeline.Job) ([]byte, error) {
		<-ctx.Done()
		return nil, errors.New("gave up")
	}, job)
	fmt.Println(r.Status, r.TimedOut, errors.Is(r.Err, pipelinetest.ErrTimedOut))
	// Output: scheduled true true
}

// Assert on what a handler logs through its job: Result.Logs holds the lines a worker would
// keep for the attempt, each the JSON object zerolog wrote.
func ExampleRun_logs() {
	charge := func(_ context.Context, j *pipeline.Job) ([]byte, error) {
		j.Logf("charging %s", j.Payload)
		j.Logger().Warn().Str("card", "expired").Msg("declined")
		return nil, errors.New("declined")
	}
	r := pipelinetest.Run(context.Background(), charge, pipelinetest.NewJob("charge", []byte("order-7")))
	for _, line := range r.Logs {
		var l struct{ Level, Message string }
		_ = json.Unmarshal([]byte(line), &l)
		fmt.Println(l.Level, l.Message)
	}
	fmt.Println(r.Status, r.LogsCut)
	// Output:
	// info charging order-7
	// warn declined
	// scheduled 0
}
