package inspect

import (
	"context"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/workflow"
)

// CancelParams are a cancel's: the time, the canceled record's retention (at least
// MinRetention), and the caller's errors for a job that is final (NotCancelable, wrapped) or
// unknown (NotFound, as it is).
type CancelParams struct {
	Now                     time.Time
	Retention, MinRetention time.Duration
	NotCancelable, NotFound error
}

// Cancel cancels job id of q (pipeline's Client.Cancel and Inspector.Cancel). A task of a
// workflow cancels the tasks that wait for it. The same call cancels up to
// jobstate.CascadeStep of them. The rest go in calls of that size after it, before Cancel
// returns.
func Cancel(ctx context.Context, js jobstate.Backend, q keys.Queue, id string, p CancelParams) error {
	row, err := js.Cancel(ctx, q, jobstate.CancelParams{ID: id, Now: p.Now, Retention: p.Retention,
		MinRetention: p.MinRetention, Events: js.Events(ctx)})
	if err != nil {
		return fmt.Errorf("cancel %s/%s: %w", q.Name(), id, err)
	}
	switch row.Code {
	case script.OK:
		if row.Data != "" && row.Data != "0" {
			// The cancel is done: what is left is the cascade's rest (a wide workflow), which
			// the queue's recoverer finishes should these calls fail or the process die.
			_ = workflow.FollowCascade(ctx, js, q, p.Now)
		}
		return nil
	case script.WrongState:
		return fmt.Errorf("%w (%s)", p.NotCancelable, row.Data)
	case script.NotFound:
		return p.NotFound
	}
	return fmt.Errorf("cancel %s/%s: unexpected reply %v", q.Name(), id, row.Code)
}
