package pipeline

import (
	"time"

	"github.com/conveyorq/conveyor/delayed"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/recovery"
)

// WorkerHooks tell their caller about a worker's background work, the part no job's
// middleware sees: package metrics turns them into Prometheus series. They are plain
// functions so that pipeline needs no metrics library, and a struct so that new hooks can be
// added without breaking anyone. Each may be nil. They run on the worker's own goroutines and
// must return quickly. queue is the user's queue name: the partitions of a partitioned queue
// report under their queue.
type WorkerHooks struct {
	// Promoted: the worker's scheduler moved jobs due in queue into its stream; lag is how long
	// the most overdue of them waited past its due time, by Redis's clock.
	Promoted func(queue string, jobs int, lag time.Duration)
	// RecoveryLock: the worker took (true) or let go (false) of the recovery lock of queue (of
	// one of its partitions), which it holds during each recovery scan it runs.
	RecoveryLock func(queue string, held bool)
	// Recovered: a recovery scan of queue that the worker ran did res (Requeued jobs put back
	// in the stream, Dead ones sent to the dead set, ...).
	Recovered func(queue string, res recovery.Result)
	// Attempts: attempts of the worker's jobs ended. They are told in batches, as the worker
	// writes outcomes (see Attempt), so that counting them costs little per job; the slice is
	// only lent for the call.
	Attempts func([]Attempt)
}

// scheduler adds the hooks to the delayed scheduler's config.
func (h WorkerHooks) scheduler(c delayed.Config) delayed.Config {
	if h.Promoted != nil {
		names := make(map[string]string, len(c.Queues)) // partition name -> queue name
		for _, q := range c.Queues {
			names[q] = keys.New("", q).Name()
		}
		c.OnPromote = func(q string, n int, lag time.Duration) { h.Promoted(names[q], n, lag) }
	}
	return c
}

// recoverer adds the hooks to the config of one queue's (one partition's) recoverer.
func (h WorkerHooks) recoverer(c recovery.Config) recovery.Config {
	name := keys.New("", c.Queue).Name()
	if h.RecoveryLock != nil {
		c.OnLock = func(held bool) { h.RecoveryLock(name, held) }
	}
	if h.Recovered != nil {
		c.OnScan = func(res recovery.Result) { h.Recovered(name, res) }
	}
	return c
}
