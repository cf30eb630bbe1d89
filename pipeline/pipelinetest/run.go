package pipelinetest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// The worker's and client's defaults that a job and a run take here. The pipeline package
// documents each value and keeps the constant to itself; these copies must agree.
const (
	defaultMaxRetries     = 5       // pipeline.ClientConfig.MaxRetries
	defaultMaxResultBytes = 1 << 20 // pipeline.WorkerConfig.MaxResultBytes
)

// NewJob returns a job as a handler receives it on its first attempt. It has a new id, queue
// pipeline.DefaultQueue, status in progress, attempt 1 and the default retries. It was
// created, enqueued and started now. Change its fields to test other cases (a last attempt:
// Attempt = MaxRetries+1; a timeout: Timeout).
func NewJob(jobType string, payload []byte) *pipeline.Job {
	now := time.Now().Truncate(time.Millisecond)
	return &pipeline.Job{
		ID: pipeline.NewID(), Queue: pipeline.DefaultQueue, Type: jobType, Payload: payload,
		Metadata: map[string]string{}, Status: status.InProgress, Attempt: 1,
		MaxRetries: defaultMaxRetries, CreatedAt: now, RunAt: now, EnqueuedAt: now,
		StartedAt: now, Worker: "pipelinetest",
	}
}

// Result is what became of one attempt that Run ran.
type Result struct {
	// Output is what the handler returned.
	Output []byte
	// Err is the attempt's error: the handler's, or "panic: ..." for a panic. Or it says that
	// the attempt timed out, or that Output is over the worker's default result limit (1 MiB).
	Err error
	// Status is the job's status once a worker has written the attempt. It is completed, or
	// scheduled when it will be retried. It is failed when it went to the dead set: a
	// SkipRetry error, the last attempt, or a result over the limit.
	Status status.Status
	// TimedOut reports that the job's Timeout passed while the handler ran.
	TimedOut bool
	// Logs are the lines the handler logged through the job (Job.Logger, Job.Logf), oldest
	// first, as a worker keeps them for the attempt (pipeline.AttemptLog.Lines): each the JSON
	// object zerolog wrote, its last pipeline.MaxLogLines lines at most, none logged after the
	// handler returned. LogsCut counts the earlier lines dropped. As Run waits for a handler
	// past its timeout, it keeps what such a handler logs late; a worker, which stops waiting,
	// drops it.
	Logs    []string
	LogsCut int
}

// ErrTimedOut is the error of an attempt whose handler returned an error after the job's
// Timeout had passed; it wraps the handler's error.
var ErrTimedOut = errors.New("attempt timed out")

// Run runs h on job once, as a worker runs an attempt, without Redis. The handler's context
// ends when job.Timeout passes (when it is set). A panic is the attempt's error. Result says
// which status the worker would write, and what the handler logged (Result.Logs). Unlike a
// worker, Run waits for a handler that ignores its context.
func Run(ctx context.Context, h pipeline.HandlerFunc, job *pipeline.Job) *Result {
	read := job.RecordLogs()
	if job.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, job.Timeout, ErrTimedOut)
		defer cancel()
	}
	out, err := call(ctx, h, job)
	logs := read()
	r := &Result{Output: out, Err: err, TimedOut: errors.Is(context.Cause(ctx), ErrTimedOut), Logs: logs.Lines, LogsCut: logs.Cut}
	switch {
	case r.TimedOut && err != nil && !errors.Is(err, ErrTimedOut):
		r.Err = fmt.Errorf("%w after %s: %w", ErrTimedOut, job.Timeout, err)
	case err == nil && len(out) > defaultMaxResultBytes:
		r.Err = fmt.Errorf("result of %d bytes exceeds the limit of %d", len(out), defaultMaxResultBytes)
		r.Status = status.Failed
		return r
	}
	switch {
	case r.Err == nil:
		r.Status = status.Completed
	case pipeline.IsSkipRetry(r.Err) || job.Attempt > job.MaxRetries:
		r.Status = status.Failed
	default:
		r.Status = status.Scheduled
	}
	return r
}

func call(ctx context.Context, h pipeline.HandlerFunc, job *pipeline.Job) (out []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, fmt.Errorf("panic: %v", p)
		}
	}()
	return h(ctx, job)
}
