package torture

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/conveyorq/conveyor/pipeline"
)

// JobType is the job type of the torture workload; a worker has its handler only when it is
// given a ledger directory (the worker command's hidden --torture-ledger flag).
const JobType = "torture"

// LimitedType is the job type of the flow-control workload: the same handler as JobType's,
// under the queue's limit for the type (LimitConcurrency at once, LimitRate a second).
const LimitedType = "torture-limited"

// The flow-control workload's limit on LimitedType.
const (
	LimitConcurrency = 2
	LimitRate        = 100 // starts a second
)

// Work is a torture job's payload: sleep MS milliseconds, then fail attempts 1 to Fail, or
// every attempt when Dead (the job is meant for the dead set). Echo makes a successful
// attempt return the payload as its result (the encryption workload: a result to seal).
type Work struct {
	MS   int  `json:"ms,omitempty"`
	Fail int  `json:"fail,omitempty"`
	Dead bool `json:"dead,omitempty"`
	Echo bool `json:"echo,omitempty"`
}

// Handler returns the torture handler: it records the attempt's start in w before it does
// anything, with the Digest of the payload it was handed, and its end after.
func Handler(w *Writer) pipeline.HandlerFunc {
	pid := os.Getpid()
	return func(ctx context.Context, job *pipeline.Job) ([]byte, error) {
		if err := w.Write(Record{Kind: Start, ID: job.ID, Attempt: job.Attempt, PID: pid, At: time.Now().UnixMicro(), Sum: Digest(job.Payload)}); err != nil {
			return nil, err // not run: the ledger could not say it was
		}
		var work Work
		if err := json.Unmarshal(job.Payload, &work); err != nil {
			return nil, pipeline.SkipRetry(fmt.Errorf("torture: bad payload: %w", err))
		}
		if work.MS > 0 {
			t := time.NewTimer(time.Duration(work.MS) * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
		var err error
		if work.Dead || job.Attempt <= work.Fail {
			err = fmt.Errorf("torture: attempt %d fails by design", job.Attempt)
		}
		outcome := "ok"
		if err != nil {
			outcome = "error"
		}
		if werr := w.Write(Record{Kind: Finish, ID: job.ID, Attempt: job.Attempt, PID: pid, At: time.Now().UnixMicro(), Outcome: outcome}); werr != nil {
			return nil, werr
		}
		if err == nil && work.Echo {
			return job.Payload, nil
		}
		return nil, err
	}
}

// CommitHook returns a WorkerHooks.Attempts hook that records every outcome Redis stored,
// and then calls next (another hook, e.g. the metrics'), if any.
func CommitHook(w *Writer, next func([]pipeline.Attempt)) func([]pipeline.Attempt) {
	pid := os.Getpid()
	return func(as []pipeline.Attempt) {
		now := time.Now().UnixMicro()
		for _, a := range as {
			if !a.Stored || (a.Type != JobType && a.Type != LimitedType) {
				continue
			}
			o := "completed"
			switch a.Outcome {
			case pipeline.OutcomeRetry:
				o = "retry"
			case pipeline.OutcomeDead:
				o = "dead"
			}
			_ = w.Write(Record{Kind: Commit, ID: a.ID, Attempt: a.Number, PID: pid, At: now, Outcome: o})
		}
		if next != nil {
			next(as)
		}
	}
}
