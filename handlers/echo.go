package handlers

import (
	"bytes"
	"context"

	"github.com/conveyorq/conveyor/pipeline"
)

// Echo is the "echo" handler: it returns the job's payload unchanged (a copy of it) as the
// result.
func Echo(_ context.Context, job *pipeline.Job) ([]byte, error) {
	return bytes.Clone(job.Payload), nil
}
