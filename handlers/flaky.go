package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/conveyorq/conveyor/pipeline"
)

// Flaky is the "flaky" handler. For a payload {"fail_times":K} it returns a retryable error on
// attempts 1 to K (job.Attempt; an attempt below 1 counts as 1). From attempt K+1 on it succeeds
// with the result {"attempt":N}. A payload that is not such an object, or a missing or negative
// fail_times, is a pipeline.SkipRetry error.
func Flaky(_ context.Context, job *pipeline.Job) ([]byte, error) {
	var p struct {
		FailTimes *int64 `json:"fail_times"`
	}
	if err := json.Unmarshal(job.Payload, &p); err != nil {
		return nil, pipeline.SkipRetry(fmt.Errorf(`flaky: payload must be JSON like {"fail_times":2}: %w`, err))
	}
	switch {
	case p.FailTimes == nil:
		return nil, pipeline.SkipRetry(errors.New(`flaky: payload has no "fail_times" (want {"fail_times":K})`))
	case *p.FailTimes < 0:
		return nil, pipeline.SkipRetry(fmt.Errorf("flaky: fail_times is %d, must not be negative", *p.FailTimes))
	}
	k := *p.FailTimes
	attempt := int64(max(job.Attempt, 1))
	if attempt <= k {
		return nil, fmt.Errorf("flaky: attempt %d of the first %d fails", attempt, k)
	}
	return json.Marshal(struct {
		Attempt int64 `json:"attempt"`
	}{attempt})
}
