package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/conveyorq/conveyor/internal/jobstate"
)

// defaultMaxQueues is the default of ClientConfig.MaxQueues and InspectorConfig.MaxQueues.
// Every known queue costs on every listing. Those are `conveyor stats`, GET /v1/queues, each
// /metrics refresh and each throughput sample, which read all of them. A /metrics refresh has
// about ten series per queue, so 20,000 series at this bound, already a large scrape. Real
// deployments run tens of queues, a few hundred at most; 2,000 leaves them room. A client
// that makes names up stops long before the listings and Prometheus suffer. (Every POST to
// /v1/queues/<new name>/jobs used to add one for good.)
const defaultMaxQueues = 2000

// ErrTooManyQueues is returned by Enqueue and EnqueueBatch (and Inspector.CreateQueue) for a
// queue that is not known yet when the known queues number the configured maximum already
// (ClientConfig.MaxQueues). Nothing is written. Delete the queues no longer used
// (Inspector.DeleteQueue, `conveyor queues delete`), or raise the maximum in every client.
var ErrTooManyQueues = errors.New("pipeline: too many queues")

// addQueue makes queue a known queue, refusing a new one past max (ErrTooManyQueues) or, with
// existing, any new one (ErrQueueNotFound).
func addQueue(ctx context.Context, js jobstate.Backend, queue string, max int, existing bool) error {
	added, err := js.AddQueue(ctx, jobstate.AddQueueParams{Queue: queue, MaxQueues: max, KnownOnly: existing})
	switch {
	case err != nil:
		return fmt.Errorf("register queue %s: %w", queue, outOfMemory(err))
	case added == jobstate.QueuesFull:
		return fmt.Errorf("%w: queue %s is new and there are %d queues already, the maximum: delete unused queues "+
			"(conveyor queues delete) or raise the maximum (MaxQueues, conveyor serve --max-queues)", ErrTooManyQueues, queue, max)
	case added == jobstate.QueueUnknown:
		return fmt.Errorf("%w: %s: publishing does not create queues here; create it first (conveyor queues create %s)",
			ErrQueueNotFound, queue, queue)
	}
	return nil
}
