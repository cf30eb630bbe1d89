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
	// Promoted: the worker's scheduler moved jobs due in queue into its stream. The lag is how
	// long the most overdue of them waited past its due time, by Redis's clock.
	Promoted func(queue string, jobs int, lag time.Duration)
	// RecoveryLock: the worker took (true) or let go (false) of the recovery lock of queue (of
	// one of its partitions). It holds the lock during each recovery scan it runs.
	RecoveryLock func(queue string, held bool)
	// Recovered: a recovery scan of queue that the worker ran did res (Requeued jobs put back
	// in the stream, Dead ones sent to the dead set, ...).
	Recovered func(queue string, res RecoveryScan)
	// Attempts: attempts of the worker's jobs ended. They are told in batches, as the worker
	// writes outcomes (see Attempt), so that counting them costs little per job; the slice is
	// only lent for the call.
	Attempts func([]Attempt)
	// ScheduleTick: the worker's periodic scheduler enqueued a tick of schedule (Periodic),
	// late after the tick's time (by the worker's clock). A leader's ticks are milliseconds
	// late. Those of another worker, standing in for it, are at least 500 ms late.
	ScheduleTick func(schedule string, late time.Duration)
	// ScheduleMissed: the worker's scheduler found ticks of schedule older than a minute:
	// ticks of them (counted up to 100,000), run as one job (once, MissedRunOnce) or dropped.
	ScheduleMissed func(schedule string, ticks int, once bool)
}

// RecoveryScan counts what one recovery scan did (WorkerHooks.Recovered). Its fields are
// recovery.Result's, so that the hooks expose pipeline's types only; the conversion in
// recoverer does not compile when the two drift apart.
type RecoveryScan struct {
	Requeued int // jobs put back into the stream
	Dead     int // jobs moved to the dead set, out of retries
	Dropped  int // stale entries of finished or moved-on jobs, acknowledged and deleted
	Skipped  int // entries renewed or settled between listing and recovery
	Poison   int // unreadable entries recorded as dead jobs
	Pruned   int // idle consumers with nothing pending, deleted from the group
	// Deferred counts entries idle past the visibility timeout left for a later scan. The
	// recoverer has not yet watched Redis long enough to trust their idle times (see package
	// recovery, "Trust").
	Deferred int
	// Cascaded counts the tasks of workflows canceled or released by following the cascades
	// a script left to later calls (a wide workflow's) and no later call followed.
	Cascaded int
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
		c.OnScan = func(res recovery.Result) { h.Recovered(name, RecoveryScan(res)) }
	}
	return c
}
