package pipeline

import (
	"context"
	"errors"
	"slices"

	"github.com/conveyorq/conveyor/internal/inspect"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/status"
)

// The Inspector's reasons (Job.WaitingFor, QueueStats.WaitingFor): derived as a job or a
// queue is read (internal/inspect's why.go), never written on a job's path.

// readersOf says what the live workers' heartbeats (Workers) say of each of queues.
func readersOf(workers []WorkerInfo, queues ...string) []inspect.Readers {
	out := make([]inspect.Readers, len(queues))
	for k, q := range queues {
		for _, w := range workers {
			if slices.Contains(w.Queues, q) {
				out[k].AddReader(w.Types)
			}
		}
	}
	return out
}

// explain sets WaitingFor on each of jobs that waits (waiting, scheduled or queued), all of
// queue, whose records are recs and partitions qs. It reads the live workers, then the
// queue's facts the jobs need, in one pipeline.
func (i *Inspector) explain(ctx context.Context, queue string, jobs []*Job, recs []*jobstate.Record, qs []keys.Queue) error {
	waiters := make([]inspect.Waiter, 0, len(jobs))
	idx := make([]int, 0, len(jobs))
	for k, j := range jobs {
		if j.Status.Waits() {
			waiters = append(waiters, inspect.Waiter{Q: qs[k], Rec: recs[k], ID: j.ID})
			idx = append(idx, k)
		}
	}
	if len(waiters) == 0 {
		return nil
	}
	workers, err := i.Workers(ctx)
	if err != nil {
		return err
	}
	ws, err := i.eng.Reasons(ctx, queue, waiters, readersOf(workers, queue)[0])
	if err != nil {
		return err
	}
	for n, w := range ws {
		jobs[idx[n]].WaitingFor = (*WaitingFor)(w)
	}
	return nil
}

// explainRows is explain of a listing's page: the rows of a waiting, scheduled or queued
// listing (a row listed in progress has no reason, whatever its record says by now).
func (i *Inspector) explainRows(ctx context.Context, queue string, st status.Status, jp *JobPage, rows []inspect.Row) error {
	if len(rows) == 0 || !st.Waits() {
		return nil
	}
	recs := make([]*jobstate.Record, len(rows))
	qs := make([]keys.Queue, len(rows))
	for k := range rows {
		recs[k], qs[k] = &rows[k].Rec, rows[k].Part
	}
	return i.explain(ctx, queue, jp.Jobs, recs, qs)
}

// countReasons fills the counts by reason of stats (QueueStats.WaitingFor) from their gauges.
func (i *Inspector) countReasons(ctx context.Context, stats ...*QueueStats) error {
	if len(stats) == 0 {
		return nil
	}
	workers, err := i.Workers(ctx)
	if err != nil {
		return err
	}
	names := make([]string, len(stats))
	st := make([]*jobstate.Stats, len(stats))
	for k, s := range stats {
		names[k], st[k] = s.Queue, (*jobstate.Stats)(s)
	}
	return i.eng.CountReasons(ctx, st, readersOf(workers, names...), i.cfg.Now())
}

// Explain sets j.WaitingFor on a job read elsewhere (a Client's Get, Wait or Follow, which
// leave it nil): why it is not running, as Get says it. It reads the job again, with the
// facts its reason needs, only while j is waiting, scheduled or queued. The reason is set
// only when that read finds j as it is (the same status and version); a job that moved on
// meanwhile keeps none, rather than another state's. A job gone meanwhile is no error.
func (i *Inspector) Explain(ctx context.Context, j *Job) error {
	if j == nil || j.WaitingFor != nil {
		return nil
	}
	if !j.Status.Waits() {
		return nil
	}
	now, err := i.Get(ctx, j.Queue, j.ID)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if now.Status == j.Status && now.Version == j.Version {
		j.WaitingFor = now.WaitingFor
	}
	return nil
}
