package handlers_test

import (
	"context"
	"fmt"
	"slices"

	"github.com/conveyorq/conveyor/handlers"
	"github.com/conveyorq/conveyor/pipeline"
)

// printRegistrar stands in for a worker: it collects the job types registered on it.
type printRegistrar struct {
	handlers map[string]pipeline.HandlerFunc
}

func (r *printRegistrar) Handle(jobType string, h pipeline.HandlerFunc) {
	r.handlers[jobType] = h
}

func (r *printRegistrar) print() {
	names := make([]string, 0, len(r.handlers))
	for name := range r.handlers {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Println(name)
	}
}

func ExampleRegister() {
	// A *pipeline.Worker is a handlers.Registrar; any other works the same way.
	r := &printRegistrar{handlers: map[string]pipeline.HandlerFunc{}}
	handlers.Register(r)
	r.print()
	// Output:
	// echo
	// fail
	// flaky
	// http
	// noop
	// sleep
}

func ExampleAll() {
	// Register only some of the handlers, under names of your own.
	r := &printRegistrar{handlers: map[string]pipeline.HandlerFunc{}}
	all := handlers.All()
	r.Handle("demo.echo", all[handlers.TypeEcho])
	r.Handle("demo.flaky", all[handlers.TypeFlaky])
	r.print()
	// Output:
	// demo.echo
	// demo.flaky
}

func ExampleFlaky() {
	job := &pipeline.Job{Type: handlers.TypeFlaky, Payload: []byte(`{"fail_times":2}`)}
	for job.Attempt = 1; job.Attempt <= 3; job.Attempt++ {
		out, err := handlers.Flaky(context.Background(), job)
		fmt.Printf("attempt %d: result=%s err=%v retry=%v\n", job.Attempt, out, err, err != nil && !pipeline.IsSkipRetry(err))
	}
	// Output:
	// attempt 1: result= err=flaky: attempt 1 of the first 2 fails retry=true
	// attempt 2: result= err=flaky: attempt 2 of the first 2 fails retry=true
	// attempt 3: result={"attempt":3} err=<nil> retry=false
}

func ExampleSleep() {
	out, err := handlers.Sleep(context.Background(), &pipeline.Job{Payload: []byte(`{"ms":5}`)})
	fmt.Println(string(out), err)

	_, err = handlers.Sleep(context.Background(), &pipeline.Job{Payload: []byte(`{"ms":-5}`)})
	fmt.Println(err, pipeline.IsSkipRetry(err))
	// Output:
	// {"slept_ms":5} <nil>
	// sleep: ms is -5, must not be negative true
}
