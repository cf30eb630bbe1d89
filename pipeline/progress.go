package pipeline

import (
	"context"
	"fmt"

	"github.com/conveyorq/conveyor/internal/engine"
	"github.com/conveyorq/conveyor/internal/jobstate"
)

// ErrProgressRefused is returned by Job.Progress when the job moved on from the attempt that
// reports. It was canceled, recovered by another worker or put back on shutdown. Or the
// attempt ended: its handler returned, or ran past its timeout. Nothing was written; the
// handler's context ends soon, if it has not.
var ErrProgressRefused = engine.ErrProgressRefused

// Progress reports how far the handler got: percent from 0 to 100 and a short message (cut to
// 200 bytes, on one line). It is shown while the job runs by conveyor status,
// the dashboard and the HTTP API (the job's progress fields, and its events stream). A
// finished job keeps its last attempt's last report.
//
// Progress is cheap to call often: it writes at most once per 250 ms per
// job. A report made sooner is held, replacing any held before it. It is written when the
// interval ends, or when the handler returns, before the attempt's outcome. So the last
// report is never lost, and never lands after the outcome. Only a report written at once
// waits for Redis (and returns its error); a held one returns nil. A report also writes the
// lines logged since the last one (Job.Logger), in the same call.
//
// The write is fenced like the worker's transitions. A handler whose job moved on (see
// ErrProgressRefused) never changes the progress of the attempt that runs now. Percent
// outside 0-100 is an error wrapping ErrInvalid. On a Job not handed to a handler by a Worker
// (a handler called by a test), Progress does nothing and returns nil.
func (j *Job) Progress(ctx context.Context, percent int, message string) error {
	if percent < 0 || percent > 100 {
		return fmt.Errorf("%w: progress %d%% is not from 0 to 100", ErrInvalid, percent)
	}
	if j.run.Progress == nil {
		return nil
	}
	return j.run.Progress.Report(ctx, percent, jobstate.CutMessage(message))
}
