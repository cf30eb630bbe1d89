package pipeline

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/internal/script"
)

// The Inspector's answers for administration tools (the CLI, the HTTP API) that would
// otherwise compute them from raw reads: what a purge would delete, and whether a queue exists.

// PurgeDryRun returns dead job id of queue, which Purge would delete, and deletes nothing. It
// refuses as Purge does: ErrNotDead for a job that is not in the dead set, ErrNotFound for an
// unknown id.
func (i *Inspector) PurgeDryRun(ctx context.Context, queue, id string) (*Job, error) {
	j, err := i.Get(ctx, queue, id)
	if err != nil {
		return nil, err
	}
	if j.Status != StatusFailed {
		return nil, fmt.Errorf("purge %s/%s: %w (it is %s)", queue, id, ErrNotDead, j.Status)
	}
	return j, nil
}

// PurgeAllDryRun returns the dead jobs that PurgeAll(ctx, queue, olderThan) would delete now
// (those that died at least olderThan ago by Redis's clock, picked by the script PurgeAll
// runs), newest first within each partition as List shows them, and deletes nothing.
func (i *Inspector) PurgeAllDryRun(ctx context.Context, queue string, olderThan time.Duration) ([]*Job, error) {
	if err := i.check(queue, ""); err != nil {
		return nil, err
	}
	if olderThan < 0 {
		return nil, invalid("negative age %s", olderThan)
	}
	qs, err := i.partitions(ctx, queue)
	if err != nil {
		return nil, err
	}
	var out []*Job
	for _, q := range qs {
		var ids []string
		for {
			page, err := jobstate.PurgeDryRun(ctx, i.rdb, q, jobstate.PurgeDryRunParams{
				PurgeParams: jobstate.PurgeParams{Limit: purgeAllChunk, OlderThan: olderThan}, Offset: len(ids)})
			if err != nil {
				return nil, fmt.Errorf("purge %s (dry run): %w", queue, err)
			}
			ids = append(ids, page...)
			if len(page) < purgeAllChunk {
				break
			}
		}
		slices.Reverse(ids)
		jobs, err := i.deadJobs(ctx, q, ids)
		if err != nil {
			return nil, fmt.Errorf("purge %s (dry run): %w", queue, err)
		}
		out = append(out, jobs...)
	}
	return out, nil
}

// deadJobs reads the dead jobs ids of q, in order, a pipeline per chunk; an id whose record is
// gone or no longer dead (replayed meanwhile) is left out.
func (i *Inspector) deadJobs(ctx context.Context, q keys.Queue, ids []string) ([]*Job, error) {
	var out []*Job
	for chunk := range slices.Chunk(ids, purgeAllChunk) {
		calls := make([]script.Call, len(chunk))
		for k, id := range chunk {
			calls[k] = jobstate.GetCall(q, id)
		}
		cmds, err := script.Pipelined(ctx, i.rdb, calls)
		if err != nil {
			return nil, rediserr.Wrap("purge", err)
		}
		for k, cmd := range cmds {
			flat, found, err := jobstate.GetReply(cmd)
			if err != nil {
				return nil, err
			}
			if !found {
				continue
			}
			j, err := jobFromHash(q.Name(), chunk[k], flat)
			if err != nil {
				return nil, err
			}
			if j.Status == StatusFailed {
				out = append(out, j)
			}
		}
	}
	return out, nil
}

// QueueExists reports whether queue exists: it is a known queue (something was published to
// it or a worker read it, and DeleteQueue did not remove it since), or it has jobs or counts
// to show. A name that is neither is most likely a typo; QueueNames lists the known ones.
func (i *Inspector) QueueExists(ctx context.Context, queue string) (bool, error) {
	st, err := i.Stats(ctx, queue)
	if err != nil {
		return false, err
	}
	if *st != (QueueStats{Queue: st.Queue}) {
		return true, nil
	}
	return jobstate.IsKnownQueue(ctx, i.rdb, i.cfg.Prefix, queue)
}

// QueueNames returns the names of the known queues, sorted: those Queues reports on, without
// reading their stats.
func (i *Inspector) QueueNames(ctx context.Context) ([]string, error) {
	names, _, err := knownQueues(ctx, i.rdb, i.cfg.Prefix)
	return names, err
}
