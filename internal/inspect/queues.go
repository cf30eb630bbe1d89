package inspect

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/publish"
)

// statsChunk bounds the queues whose stats one pipeline reads.
const statsChunk = 100

// Queues returns the stats of every known queue, sorted by name, each summed over its
// partitions, in one pipeline per statsChunk partitions.
func (e *Engine) Queues(ctx context.Context) ([]*jobstate.Stats, error) {
	names, counts, paused, err := jobstate.KnownQueuesPaused(ctx, e.store.Client(), e.prefix)
	if err != nil {
		return nil, err
	}
	// Every partition of every queue, chunked: a partitioned queue's partitions are summed.
	var qs []keys.Queue
	for _, n := range names {
		qs = append(qs, allPartitions(e.prefix, n, counts[n])...)
	}
	parts := make([]*jobstate.Stats, 0, len(qs))
	lats := make([]int64, 0, len(qs))
	for chunk := range slices.Chunk(qs, statsChunk) {
		st, err := e.store.ReadStats(ctx, chunk)
		if err != nil {
			return nil, err
		}
		parts = append(parts, st...)
		lat, err := e.latencies(ctx, chunk, st)
		if err != nil {
			return nil, err
		}
		lats = append(lats, lat...)
	}
	out := make([]*jobstate.Stats, 0, len(names))
	for _, n := range names {
		p := max(1, counts[n])
		st := SumStats(n, parts[:p])
		st.Paused = paused[n]
		st.LatencyMS = slices.Max(lats[:p])
		lats = lats[p:]
		out = append(out, st)
		parts = parts[p:]
	}
	return out, nil
}

// allPartitions returns the keys of every partition of queue, of p, in partition order.
func allPartitions(prefix, queue string, p int) []keys.Queue {
	qs := make([]keys.Queue, max(1, p))
	for i := range qs {
		qs[i] = keys.New(prefix, keys.PartitionName(queue, i, p))
	}
	return qs
}

// Stats returns queue's stats, summed over its partitions, and whether it is paused.
func (e *Engine) Stats(ctx context.Context, queue string) (*jobstate.Stats, error) {
	qs, err := e.partitions(ctx, queue)
	if err != nil {
		return nil, err
	}
	parts, err := e.store.ReadStats(ctx, qs)
	if err != nil {
		return nil, err
	}
	st := SumStats(queue, parts)
	lat, err := e.latencies(ctx, qs, parts)
	if err != nil {
		return nil, err
	}
	// A queue's latency is its oldest ready job's, whichever partition holds it.
	st.LatencyMS = slices.Max(lat)
	if st.Paused, err = jobstate.IsPausedQueue(ctx, e.store.Client(), e.prefix, queue); err != nil {
		return nil, fmt.Errorf("read whether queue %s is paused: %w", queue, err)
	}
	return st, nil
}

// SumStats adds the gauges and counters of a queue's partitions into the queue's. One
// partition's stats are returned as they are.
func SumStats(queue string, parts []*jobstate.Stats) *jobstate.Stats {
	if len(parts) == 1 {
		return parts[0]
	}
	s := &jobstate.Stats{Queue: queue}
	for _, p := range parts {
		s.Scheduled += p.Scheduled
		s.Queued += p.Queued
		s.InProgress += p.InProgress
		s.Dead += p.Dead
		s.Enqueued += p.Enqueued
		s.Completed += p.Completed
		s.Failed += p.Failed
		s.Retried += p.Retried
		s.Recovered += p.Recovered
		s.DeadByRecovery += p.DeadByRecovery
		s.Refused += p.Refused
		s.Canceled += p.Canceled
		s.Released += p.Released
		s.Poison += p.Poison
		s.Debounced += p.Debounced
		s.Limited += p.Limited
		s.GroupWaiting += p.GroupWaiting
		s.Waiting += p.Waiting
		s.LimitWaiting += p.LimitWaiting
		s.RejectedFull += p.RejectedFull
		s.DroppedFull += p.DroppedFull
	}
	return s
}

// DeleteQueue deletes every key of queue and forgets it (pipeline.Inspector.DeleteQueue says
// how). relayout reports that it dropped a partition count, which producers cache.
func (e *Engine) DeleteQueue(ctx context.Context, queue string, force bool) (relayout bool, err error) {
	// Every partition; a queue of one has its plain keys alone.
	qs, err := e.partitions(ctx, queue)
	if errors.Is(err, jobstate.ErrLegacyLayout) {
		// Partitioned by the version before: its {queue#i} keys go the same way.
		qs, err = jobstate.LegacyPartitions(ctx, e.store.Client(), e.prefix, queue)
	}
	if err != nil {
		return false, fmt.Errorf("delete queue %s: %w", queue, err)
	}
	if !force {
		parts, err := e.store.ReadStats(ctx, qs)
		if err != nil {
			return false, fmt.Errorf("delete queue %s: %w", queue, err)
		}
		st := SumStats(queue, parts)
		if st.Waiting+st.Scheduled+st.Queued+st.InProgress+st.Dead > 0 {
			// Waiting tasks are named only when there are some: the message was fixed before
			// they had a gauge.
			waiting := ""
			if st.Waiting > 0 {
				waiting = fmt.Sprintf(", %d waiting", st.Waiting)
			}
			return false, fmt.Errorf("delete queue %s: %w: %d scheduled, %d queued, %d in progress, %d dead%s",
				queue, e.cfg.Errs.QueueBusy, st.Scheduled, st.Queued, st.InProgress, st.Dead, waiting)
		}
	}
	known, err := e.store.IsKnownQueue(ctx, queue)
	if err != nil {
		return false, fmt.Errorf("delete queue %s: %w", queue, err)
	}
	// The plain keys first: all under the queue's base, prefix:{queue}:, so in one slot, and
	// one master is scanned on a cluster. Then those of every partition of every count the
	// queue ever had: the empty streams a change of the count leaves, and the tags of the
	// version before. On a cluster those are on every master.
	n, err := e.store.ScanKeys(ctx, keys.New(e.prefix, queue).Base(), true, false)
	if err == nil {
		var m int
		m, err = e.store.ScanKeys(ctx, e.prefix+":{"+queue+string(keys.PartitionSep), true, true)
		n += m
	}
	if err != nil {
		return false, fmt.Errorf("delete queue %s (%d keys deleted): %w", queue, n, err)
	}
	// The partition count and the name go last: a deletion that failed half-way still shows
	// the queue, to try again.
	if len(qs) > 1 {
		// Its partitions stay closed a while: a producer that still has the count refuses to
		// publish to them, reads it again and publishes to the plain queue.
		if err := jobstate.SetClosed(ctx, e.store.Client(), qs, true, e.cfg.ClosedTTL); err != nil {
			return false, fmt.Errorf("delete queue %s: %w", queue, err)
		}
		if err := jobstate.ForgetPartitions(ctx, e.store.Client(), e.prefix, queue); err != nil {
			return false, fmt.Errorf("delete queue %s: %w", queue, err)
		}
		relayout = true
		n++
	}
	if err := e.store.ForgetQueue(ctx, queue); err != nil {
		return relayout, fmt.Errorf("delete queue %s: %w", queue, err)
	}
	// A queue made again under the name starts with no settings, unpaused.
	if err := e.store.DeleteSettings(ctx, queue); err != nil {
		return relayout, fmt.Errorf("delete queue %s: %w", queue, err)
	}
	if !known && n == 0 {
		return relayout, fmt.Errorf("delete queue %s: %w", queue, e.cfg.Errs.QueueNotFound)
	}
	return relayout, nil
}

// Find looks job id up in every known queue (pipeline's Inspector.Find). It asks which queues
// hold a record of that id, then reads the first of them, by name. It returns that job's row
// and the queues it searched, sorted; Errs.NotFound when none has it.
func (e *Engine) Find(ctx context.Context, id string) (*Row, []string, error) {
	names, counts, err := e.store.KnownQueues(ctx)
	if err != nil {
		return nil, nil, err
	}
	var lookups []jobstate.Lookup
	for _, name := range names {
		for _, q := range publish.LookupOrder(e.prefix, name, id, counts[name]) {
			lookups = append(lookups, jobstate.Lookup{Queue: q, ID: id})
		}
	}
	if len(lookups) == 0 {
		return nil, names, e.cfg.Errs.NotFound
	}
	k, rec, err := e.store.FindFirst(ctx, lookups)
	if err != nil {
		return nil, names, fmt.Errorf("find %s: %w", id, err)
	}
	if k < 0 {
		return nil, names, e.cfg.Errs.NotFound
	}
	// A partition's Name is its queue's.
	return &Row{Queue: lookups[k].Queue.Name(), Part: lookups[k].Queue, ID: id, Rec: rec}, names, nil
}
