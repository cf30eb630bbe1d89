package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/publish"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/workflow"
	"github.com/conveyorq/conveyor/status"
)

// The Inspector's answers for administration tools (the CLI, the HTTP API) that would
// otherwise compute them from raw reads. They say what a purge would delete, and whether a
// queue exists.

// PurgeDryRun returns dead job id of queue, which Purge would delete, and deletes nothing. It
// refuses as Purge does: ErrNotDead for a job that is not in the dead set, ErrNotFound for an
// unknown id.
func (i *Inspector) PurgeDryRun(ctx context.Context, queue, id string) (*Job, error) {
	j, err := i.Get(ctx, queue, id)
	if err != nil {
		return nil, err
	}
	if j.Status != status.Failed {
		return nil, fmt.Errorf("purge %s/%s: %w (it is %s)", queue, id, ErrNotDead, j.Status)
	}
	return j, nil
}

// PurgeAllDryRun returns the dead jobs that PurgeAll(ctx, queue, olderThan) would delete now,
// and deletes nothing. Those died at least olderThan ago by Redis's clock, picked by the
// script PurgeAll runs. They come newest first within each partition, as List shows them. It
// reads every such job's record; PurgeAllDryRunIDs reads their ids only.
func (i *Inspector) PurgeAllDryRun(ctx context.Context, queue string, olderThan time.Duration) ([]*Job, error) {
	if err := i.check(queue, ""); err != nil {
		return nil, err
	}
	var out []*Job
	err := i.eng.PurgeAllDryRun(ctx, queue, olderThan, func(q keys.Queue, ids []string) error {
		rows, err := i.eng.DeadRows(ctx, q, ids)
		if err != nil {
			return err
		}
		jobs, err := jobsOf(rows, i.cfg.Keys)
		out = append(out, jobs...)
		return err
	})
	return out, err
}

// PurgeAllDryRunIDs returns the ids of the dead jobs that PurgeAll(ctx, queue, olderThan)
// would delete now, in PurgeAllDryRun's order, and deletes nothing. It reads the ids alone
// (the purge script's pages of the dead set), no job record. So a dry run over many big dead
// jobs costs their ids, not their payloads.
func (i *Inspector) PurgeAllDryRunIDs(ctx context.Context, queue string, olderThan time.Duration) ([]string, error) {
	if err := i.check(queue, ""); err != nil {
		return nil, err
	}
	var out []string
	err := i.eng.PurgeAllDryRun(ctx, queue, olderThan, func(_ keys.Queue, ids []string) error {
		out = append(out, ids...)
		return nil
	})
	return out, err
}

// QueueExists reports whether queue exists. It does when it is a known queue, or has jobs or
// counts to show. A queue is known once something was published to it or a worker read it,
// until DeleteQueue removes it. A name that is neither is most likely a typo; QueueNames lists
// the known ones.
func (i *Inspector) QueueExists(ctx context.Context, queue string) (bool, error) {
	if err := i.check(queue, ""); err != nil {
		return false, err
	}
	// The gauges alone: the counts by reason would only split them.
	st, err := i.eng.Stats(ctx, queue)
	if err != nil {
		return false, err
	}
	if !(*QueueStats)(st).Empty() {
		return true, nil
	}
	return i.store.IsKnownQueue(ctx, queue)
}

// QueueNames returns the names of the known queues, sorted: those Queues reports on, without
// reading their stats.
func (i *Inspector) QueueNames(ctx context.Context) ([]string, error) {
	names, _, err := i.store.KnownQueues(ctx)
	return names, err
}

// RunNow moves a scheduled job (delayed, a retry waiting for its backoff, or snoozed) into its
// queue's stream now, as the scheduler would at its due time. The move is one script
// (run_now.lua), so a scheduler promoting the job at the same moment moves it once. A retry
// keeps its attempt count. It returns ErrNotFound for an unknown job. It returns
// ErrNotScheduled for a job in any other status, or one that waits for a concurrency slot of
// a limit.
func (i *Inspector) RunNow(ctx context.Context, queue, id string) error {
	return i.onJob(ctx, queue, id, func(q keys.Queue) error {
		row, err := i.store.RunNow(ctx, q, jobstate.RunNowParams{ID: id, Events: i.store.Events(ctx)})
		if err == nil && row.Code == script.WrongState && row.Data == "limited" {
			return fmt.Errorf("%w (it waits for a concurrency slot of a limit, and runs when one frees)", ErrNotScheduled)
		}
		return rowError("run now", queue, id, row, err, ErrNotScheduled)
	})
}

// Delete removes a scheduled or queued job entirely, in one step (cancel.lua's, with no
// record kept). That is its record, its place in the scheduled set or its stream entry, its
// unique and debounce keys and its place in a fair group. Unlike Cancel it leaves no canceled
// record behind. The job still counts as canceled in the queue's counters, since every
// published job ends in one of them, and its waiters hear "canceled". It returns
// ErrNotDeletable for a job in any other status (cancel a running job, purge a dead one) and
// ErrNotFound for an unknown one.
func (i *Inspector) Delete(ctx context.Context, queue, id string) error {
	now := i.cfg.Now()
	return i.onJob(ctx, queue, id, func(q keys.Queue) error {
		row, err := i.store.Cancel(ctx, q, jobstate.CancelParams{ID: id, Now: now,
			MinRetention: i.cfg.MinRetention, Events: i.store.Events(ctx), Delete: true})
		if err == nil && row.Code == script.OK && row.Data != "" && row.Data != "0" {
			_ = workflow.FollowCascade(ctx, i.store, q, now) // as cancelJob: the delete is done
		}
		return rowError("delete", queue, id, row, err, ErrNotDeletable)
	})
}

// onJob runs op on the partition of queue that holds job id (a plain queue's only one), after
// checking the names.
func (i *Inspector) onJob(ctx context.Context, queue, id string, op func(keys.Queue) error) error {
	if err := i.checkJob(queue, id); err != nil {
		return err
	}
	qs, err := i.lookup(ctx, queue, id)
	if err != nil {
		return err
	}
	return publish.OnPartition(ctx, i.store, qs, id, ErrNotFound, op)
}

// rowError is the error of a job's script reply: nil for script.OK, or ErrNotFound. For
// script.WrongState it is wrong, wrapped with the job's status as a person reads it (dead for
// failed).
func rowError(op, queue, id string, row jobstate.Row, err error, wrong error) error {
	if err != nil {
		return fmt.Errorf("%s %s/%s: %w", op, queue, id, err)
	}
	switch row.Code {
	case script.OK:
		return nil
	case script.NotFound:
		return ErrNotFound
	case script.WrongState:
		return fmt.Errorf("%w (it is %s)", wrong, status.Status(row.Data).Word())
	}
	return fmt.Errorf("%s %s/%s: unexpected reply %v", op, queue, id, row.Code)
}
