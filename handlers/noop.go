package handlers

import (
	"context"

	"github.com/conveyorq/conveyor/pipeline"
)

// Noop is the "noop" handler: it ignores the job and returns no result and no error. It is
// meant for benchmarks of the queue itself.
func Noop(context.Context, *pipeline.Job) ([]byte, error) {
	return nil, nil
}
