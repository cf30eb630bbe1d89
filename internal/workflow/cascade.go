package workflow

import (
	"context"
	"time"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
)

// FollowCascade goes on with the workflow cascades of q (jobstate.Store.FollowCascade) until
// none is left. It follows what a cancel's or a delete's script left past the edges one call
// follows. Each call blocks Redis a few ms at most. Its error is the caller's to ignore. The
// cancel that left the rest is done, and the queue's recoverer follows what is left at its
// next scan.
func FollowCascade(ctx context.Context, js jobstate.Backend, q keys.Queue, now time.Time) error {
	for {
		r, err := js.FollowCascade(ctx, q, jobstate.CascadeParams{Now: now, Events: js.Events(ctx)})
		if err != nil || r.Left == 0 {
			return err
		}
	}
}
