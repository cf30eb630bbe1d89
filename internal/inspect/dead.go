package inspect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/status"
)

// Replay moves dead job id of q, the partition that holds it, back into its stream.
func (e *Engine) Replay(ctx context.Context, q keys.Queue, id string) error {
	row, err := e.store.Replay(ctx, q, id, e.cfg.Now())
	if err != nil {
		return fmt.Errorf("replay %s/%s: %w", q.Name(), id, err)
	}
	return e.replayError(q.Name(), id, row.Code, row.Data)
}

func (e *Engine) replayError(queue, id string, code script.Code, data string) error {
	switch code {
	case script.OK:
		return nil
	case script.NotFound:
		return e.cfg.Errs.NotFound
	case script.WrongState:
		return fmt.Errorf("%w (it is %s)", e.cfg.Errs.NotDead, data)
	case script.NoType:
		return fmt.Errorf("replay %s/%s: %w: an unreadable entry's record has no type to run", queue, id, e.cfg.Errs.Invalid)
	case script.UniqueHeld:
		return fmt.Errorf("replay %s/%s: %w (job %s)", queue, id, e.cfg.Errs.UniqueHeld, data)
	}
	return fmt.Errorf("replay %s/%s: unexpected reply %v", queue, id, code)
}

// replayChunk is how many dead jobs ReplayAll replays per round trip.
const replayChunk = 100

// ReplayAll replays every job in queue's dead set when it starts, oldest death first, and
// returns how many it replayed (pipeline.Inspector.ReplayAll says more).
func (e *Engine) ReplayAll(ctx context.Context, queue string) (int, error) {
	qs, err := e.partitions(ctx, queue)
	if err != nil {
		return 0, err
	}
	replayed := 0
	var stay []error
	for _, q := range qs {
		n, s, err := e.replayAll(ctx, q)
		replayed += n
		stay = append(stay, s...)
		if err != nil {
			return replayed, err
		}
	}
	if len(stay) > 0 {
		const named = 3
		more := ""
		if len(stay) > named {
			more = fmt.Sprintf(" (the first %d below)", named)
		}
		return replayed, fmt.Errorf("replay all %s: %d dead jobs cannot run again and stay%s:\n%w",
			queue, len(stay), more, errors.Join(stay[:min(named, len(stay))]...))
	}
	return replayed, nil
}

// replayAll is ReplayAll of one partition; it returns the errors of the jobs that stay apart.
func (e *Engine) replayAll(ctx context.Context, q keys.Queue) (int, []error, error) {
	queue := q.Name()
	// The last member in the set's order now: ReplayAll stops there.
	last, ok, err := e.store.LastDead(ctx, q)
	if err != nil || !ok {
		return 0, nil, wrapErr(err, "replay all %s", queue)
	}
	var after *jobstate.SetItem
	replayed := 0
	var stay []error
	for {
		items, err := e.store.DeadPage(ctx, q, true, after, replayChunk)
		if err != nil {
			return replayed, stay, fmt.Errorf("replay all %s: %w", queue, err)
		}
		done := len(items) < replayChunk
		for k, it := range items {
			if it.Score > last.Score || it.Score == last.Score && it.Member > last.Member {
				items, done = items[:k], true
				break
			}
		}
		if len(items) == 0 {
			break
		}
		now := e.cfg.Now()
		b := e.store.Batch()
		replays := make([]*jobstate.Pending[jobstate.Row], len(items))
		for k, it := range items {
			replays[k] = b.Replay(q, it.Member, now)
		}
		err = rediserr.Wrap("replay", b.Exec(ctx))
		for k, r := range replays {
			row, cerr := r.Result()
			code, data := row.Code, row.Data
			switch {
			case cerr != nil:
				if err == nil {
					err = cerr
				}
			case code == script.OK:
				replayed++
			case code == script.NotFound || code == script.WrongState:
				// Replayed or purged by someone else since the page was read.
			default:
				stay = append(stay, e.replayError(queue, items[k].Member, code, data))
			}
		}
		if err != nil {
			return replayed, stay, fmt.Errorf("replay all %s: %w", queue, err)
		}
		if done {
			break
		}
		after = &items[len(items)-1]
	}
	return replayed, stay, nil
}

// purgeChunk bounds the ids one purge_ids.lua call deletes.
const purgeChunk = 500

// Purge deletes the dead jobs ids of queue, valid and distinct, and returns how many it deleted
// (pipeline.Inspector.Purge says more).
func (e *Engine) Purge(ctx context.Context, queue string, ids []string) (int, error) {
	qs, err := e.partitions(ctx, queue)
	if err != nil {
		return 0, err
	}
	var errs []error
	// The ids of each partition; in a partitioned queue each id is looked for first (one
	// pipeline of EXISTS), and one found nowhere is not found.
	byPart := [][]string{ids}
	if len(qs) > 1 {
		at, err := e.store.Locate(ctx, qs, ids)
		if err != nil {
			return 0, fmt.Errorf("purge %s: %w", queue, err)
		}
		byPart = make([][]string, len(qs))
		for k, id := range ids {
			if at[k] < 0 {
				errs = append(errs, fmt.Errorf("purge %s/%s: %w", queue, id, e.cfg.Errs.NotFound))
				continue
			}
			byPart[at[k]] = append(byPart[at[k]], id)
		}
	}
	b := e.store.Batch()
	var purges []*jobstate.Pending[[]jobstate.Row]
	var chunks [][]string
	for p, ids := range byPart {
		for chunk := range slices.Chunk(ids, purgeChunk) {
			purges = append(purges, b.PurgeIDs(qs[p], chunk))
			chunks = append(chunks, chunk)
		}
	}
	if b.Len() == 0 {
		return 0, errors.Join(errs...)
	}
	err = rediserr.Wrap("purge", b.Exec(ctx))
	n := 0
	for c, pr := range purges {
		chunk := chunks[c]
		rows, rerr := pr.Result()
		if rerr != nil {
			err = cmp.Or(err, rerr)
			continue
		}
		for k, row := range rows {
			switch row.Code {
			case script.OK:
				n++
			case script.NotFound:
				errs = append(errs, fmt.Errorf("purge %s/%s: %w", queue, chunk[k], e.cfg.Errs.NotFound))
			case script.WrongState:
				errs = append(errs, fmt.Errorf("purge %s/%s: %w (it is %s)", queue, chunk[k], e.cfg.Errs.NotDead, row.Data))
			default:
				errs = append(errs, fmt.Errorf("purge %s/%s: unexpected reply %v", queue, chunk[k], row.Code))
			}
		}
	}
	if err != nil {
		errs = append([]error{fmt.Errorf("purge %s: %w", queue, err)}, errs...)
	}
	return n, errors.Join(errs...)
}

// purgeAllChunk bounds the dead jobs one purge.lua call deletes.
const purgeAllChunk = 500

// PurgeAll deletes the dead jobs of queue that died at least olderThan ago (0: all of them),
// purgeAllChunk per script call, partition after partition, and returns how many.
func (e *Engine) PurgeAll(ctx context.Context, queue string, olderThan time.Duration) (int, error) {
	if olderThan < 0 {
		return 0, e.invalid("negative age %s", olderThan)
	}
	qs, err := e.partitions(ctx, queue)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, q := range qs {
		for {
			n, err := e.store.Purge(ctx, q, jobstate.PurgeParams{Limit: purgeAllChunk, OlderThan: olderThan})
			total += n
			if err != nil {
				return total, fmt.Errorf("purge %s: %w", queue, err)
			}
			if n < purgeAllChunk {
				break
			}
		}
	}
	return total, nil
}

// PurgeAllDryRun hands each partition's ids that PurgeAll would delete now, newest first, to
// each, and deletes nothing.
func (e *Engine) PurgeAllDryRun(ctx context.Context, queue string, olderThan time.Duration,
	each func(q keys.Queue, ids []string) error) error {
	if olderThan < 0 {
		return e.invalid("negative age %s", olderThan)
	}
	qs, err := e.partitions(ctx, queue)
	if err != nil {
		return err
	}
	for _, q := range qs {
		var ids []string
		for {
			page, err := e.store.PurgeDryRun(ctx, q, jobstate.PurgeDryRunParams{
				PurgeParams: jobstate.PurgeParams{Limit: purgeAllChunk, OlderThan: olderThan}, Offset: len(ids)})
			if err != nil {
				return fmt.Errorf("purge %s (dry run): %w", queue, err)
			}
			ids = append(ids, page...)
			if len(page) < purgeAllChunk {
				break
			}
		}
		slices.Reverse(ids)
		if err := each(q, ids); err != nil {
			return fmt.Errorf("purge %s (dry run): %w", queue, err)
		}
	}
	return nil
}

// DeadRows reads the dead jobs ids of q, in order, a pipeline per chunk. An id whose record
// is gone or no longer dead (replayed meanwhile) is left out.
func (e *Engine) DeadRows(ctx context.Context, q keys.Queue, ids []string) ([]Row, error) {
	var out []Row
	for chunk := range slices.Chunk(ids, purgeAllChunk) {
		b := e.store.Batch()
		gets := make([]*jobstate.Pending[jobstate.Got], len(chunk))
		for k, id := range chunk {
			gets[k] = b.Get(q, id)
		}
		if err := b.ExecLoaded(ctx); err != nil {
			return nil, rediserr.Wrap("purge", err)
		}
		for k, g := range gets {
			got, err := g.Result()
			if err != nil {
				return nil, err
			}
			if !got.Found {
				continue
			}
			r := jobstate.DecodeRecord(got.Flat)
			if status.Status(r.Status) == status.Failed {
				out = append(out, Row{Queue: q.Name(), Part: q, ID: chunk[k], Rec: r})
			}
		}
	}
	return out, nil
}
