package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/pipeline"
)

// maxSleep is the longest sleep the "sleep" handler accepts.
const maxSleep = 24 * time.Hour

// Sleep is the "sleep" handler: for a payload {"ms":N} it sleeps N milliseconds and returns
// {"slept_ms":N}, reporting its progress (Job.Progress) as it goes and 100% at the end, and logging
// a line with the job (Job.Logf) as it begins and ends. N must
// be an integer from 0 to 86400000 (24 hours); a payload that is not such an object is a
// pipeline.SkipRetry error. When ctx ends first it returns at once with an
// error that wraps ctx.Err() (context.Canceled or context.DeadlineExceeded) and, when it
// differs, context.Cause(ctx).
func Sleep(ctx context.Context, job *pipeline.Job) ([]byte, error) {
	var p struct {
		MS *int64 `json:"ms"`
	}
	if err := json.Unmarshal(job.Payload, &p); err != nil {
		return nil, pipeline.SkipRetry(fmt.Errorf(`sleep: payload must be JSON like {"ms":100}: %w`, err))
	}
	switch {
	case p.MS == nil:
		return nil, pipeline.SkipRetry(errors.New(`sleep: payload has no "ms" (want {"ms":N} with N milliseconds)`))
	case *p.MS < 0:
		return nil, pipeline.SkipRetry(fmt.Errorf("sleep: ms is %d, must not be negative", *p.MS))
	case *p.MS > maxSleep.Milliseconds():
		return nil, pipeline.SkipRetry(fmt.Errorf("sleep: ms is %d, must be at most %d (24h)", *p.MS, maxSleep.Milliseconds()))
	}
	ms := *p.MS
	d := time.Duration(ms) * time.Millisecond
	start := time.Now()
	job.Logf("sleeping %s", d) // kept with the job's attempt (Job.Logf)
	if ctx.Err() == nil && d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		// Progress every twentieth of the sleep (Job.Progress writes at most 4 a second of
		// them), so that a demo's job page shows its bar move.
		tick := time.NewTicker(max(d/20, 10*time.Millisecond))
		defer tick.Stop()
	sleep:
		for {
			select {
			case <-t.C:
				break sleep
			case <-ctx.Done():
				break sleep
			case <-tick.C:
				slept := time.Since(start)
				pct := int(min(99, 100*slept/d))
				if err := job.Progress(ctx, pct, fmt.Sprintf("slept %s of %s", slept.Round(time.Millisecond), d)); errors.Is(err, pipeline.ErrProgressRefused) {
					// The job moved on: stop early, the context ends soon anyway.
					t.Reset(0)
				}
			}
		}
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("sleep: interrupted after %s of %s: %w",
			time.Since(start).Round(time.Millisecond), d, ctxError(ctx))
	}
	if d > 0 {
		_ = job.Progress(ctx, 100, fmt.Sprintf("slept %s", d))
	}
	job.Logf("slept %s", d)
	return json.Marshal(struct {
		SleptMS int64 `json:"slept_ms"`
	}{ms})
}

// ctxError is the error of an ended ctx: context.Cause(ctx), wrapped together with ctx.Err()
// when the cause is another error, so that errors.Is(err, context.Canceled) (or
// DeadlineExceeded) holds either way.
func ctxError(ctx context.Context) error {
	err := ctx.Err()
	cause := context.Cause(ctx)
	if cause == nil || errors.Is(cause, err) {
		return err
	}
	return fmt.Errorf("%w: %w", err, cause)
}
