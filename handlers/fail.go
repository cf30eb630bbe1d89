package handlers

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/conveyorq/conveyor/pipeline"
)

// defaultFailMessage is the error of Fail when the payload carries no message.
const defaultFailMessage = "fail: this handler always fails"

// Fail is the "fail" handler: it always returns a retryable error. The error's text is the
// payload's "message" ({"message":"..."}). With no non-empty message, it is "fail: this handler
// always fails". Any payload, even one that is not JSON, is accepted.
func Fail(_ context.Context, job *pipeline.Job) ([]byte, error) {
	var p struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(job.Payload, &p) == nil && p.Message != "" {
		return nil, errors.New(p.Message)
	}
	return nil, errors.New(defaultFailMessage)
}
