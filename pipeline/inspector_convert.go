package pipeline

import (
	"github.com/conveyorq/conveyor/internal/inspect"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/status"
)

// The Inspector's one place that turns the store records internal/inspect answers with into
// the public types.

// pageOf is the JobPage of a listing's page.
func pageOf(p *inspect.Page, k *keyring.Keyring) (*JobPage, error) {
	out := &JobPage{Next: p.Next}
	var err error
	if out.Jobs, err = jobsOf(p.Rows, k); err != nil {
		return nil, err
	}
	for k, r := range p.Rows {
		if r.Held == nil {
			continue
		}
		if out.Leases == nil {
			out.Leases = make(map[string]Lease, len(p.Rows))
		}
		out.Leases[out.Jobs[k].ID] = Lease(*r.Held)
	}
	return out, nil
}

// jobsOf converts rows to Jobs, in order. A row held by a worker (in_progress) is the job as
// that worker runs it: its status, worker, entry and attempt are the lease's.
func jobsOf(rows []inspect.Row, k *keyring.Keyring) ([]*Job, error) {
	var jobs []*Job
	for _, r := range rows {
		j, err := jobFromRecord(r.Queue, r.ID, r.Rec, k)
		if err != nil {
			return nil, err
		}
		if r.Held != nil {
			j.Status, j.Worker, j.Entry = status.InProgress, r.Held.Worker, r.Held.Entry
			if r.Attempt > 0 {
				j.Attempt = r.Attempt
			}
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// statsOf converts the store's stats of queues to QueueStats.
func statsOf(st []*jobstate.Stats) []*QueueStats {
	if st == nil {
		return nil
	}
	out := make([]*QueueStats, len(st))
	for k, s := range st {
		out[k] = (*QueueStats)(s)
	}
	return out
}
