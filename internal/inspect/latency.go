package inspect

import (
	"context"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
)

// latencies returns the latency of each of qs (jobstate.Latency), whose stats parts holds in
// the same order. Only those with queued jobs are asked: a queue or partition with none has
// no job ready to wait, and an idle system costs no round trip. A job queued since its stats
// were read shows at the next reading.
func (e *Engine) latencies(ctx context.Context, qs []keys.Queue, parts []*jobstate.Stats) ([]int64, error) {
	out := make([]int64, len(qs))
	var ask []keys.Queue
	var at []int
	for k, p := range parts {
		if p.Queued > 0 {
			ask, at = append(ask, qs[k]), append(at, k)
		}
	}
	lat, err := jobstate.Latency(ctx, e.store.Client(), ask)
	if err != nil {
		return nil, err
	}
	for j, k := range at {
		out[k] = lat[j]
	}
	return out, nil
}
