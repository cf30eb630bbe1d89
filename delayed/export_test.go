package delayed

import (
	"context"
	"time"
)

// PromoteLimit is Promote with a batch of limit jobs, unchecked: it lets a test hand
// promote.lua a batch larger than MaxBatchSize allows.
func (s *Scheduler) PromoteLimit(ctx context.Context, queue string, limit int) (int, time.Time, time.Time, error) {
	moved, next, now, _, err := s.promote(ctx, queue, limit)
	return moved, next, now, err
}
