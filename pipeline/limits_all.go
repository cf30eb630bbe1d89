package pipeline

import (
	"context"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
)

// LimitsOf returns the limits of each of queues, in one pipeline: one round trip on a
// standalone server, one per node involved on a cluster. A queue without limits maps to an
// empty slice; each queue's limits are sorted as Limits sorts them.
func (i *Inspector) LimitsOf(ctx context.Context, queues []string) (map[string][]Limit, error) {
	qs := make([]keys.Queue, len(queues))
	for k, q := range queues {
		if err := i.check(q, ""); err != nil {
			return nil, err
		}
		qs[k] = i.keys(q)
	}
	ls, err := jobstate.ReadLimitsOf(ctx, i.rdb, qs)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]Limit, len(queues))
	for k, q := range queues {
		out[q] = limitsOf(ls[k])
	}
	return out, nil
}

// AllLimits returns the limits of every known queue (QueueNames), queues without limits
// included with an empty slice: two round trips, the names and then one pipeline.
func (i *Inspector) AllLimits(ctx context.Context) (map[string][]Limit, error) {
	names, err := i.QueueNames(ctx)
	if err != nil {
		return nil, err
	}
	return i.LimitsOf(ctx, names)
}
