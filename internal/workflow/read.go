package workflow

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
)

// Find reads workflow id from the first of qs that has it (the lookup order of the id's
// partitions: a count changed since the workflow was published leaves it where it was). It
// returns the partition that holds it; found is false when none does.
func Find(ctx context.Context, js jobstate.Backend, qs []keys.Queue, id string) (q keys.Queue, rec *jobstate.WorkflowRecord, rows []jobstate.TaskRow, found bool, err error) {
	for _, q := range qs {
		rec, rows, found, err := js.ReadWorkflow(ctx, q, id)
		if err != nil {
			return q, nil, nil, false, fmt.Errorf("workflow %s/%s: %w", q.Name(), id, err)
		}
		if found {
			return q, rec, rows, true, nil
		}
	}
	return keys.Queue{}, nil, nil, false, nil
}

// List reads the newest workflows of qs, a queue's partitions, newest first, at most limit.
func List(ctx context.Context, js jobstate.Backend, queue string, qs []keys.Queue, limit int) ([]jobstate.WorkflowSummary, error) {
	var out []jobstate.WorkflowSummary
	for _, q := range qs {
		sums, err := js.ListWorkflows(ctx, q, limit)
		if err != nil {
			return nil, fmt.Errorf("workflows of %s: %w", queue, err)
		}
		out = append(out, sums...)
	}
	slices.SortStableFunc(out, func(a, b jobstate.WorkflowSummary) int { return b.CreatedAt.Compare(a.CreatedAt) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Deps is what a task's handler knows of the tasks it waits for: the workflow's id, the
// dependencies' outcomes counted, and the results of those that completed, by task name.
type Deps struct {
	Workflow                    string
	Completed, Failed, Canceled int
	Results                     map[string][]byte
}

// ReadDeps reads what task id of q may know of the tasks it waits for. ok is false when the
// job is no task of a workflow.
func ReadDeps(ctx context.Context, js jobstate.Backend, q keys.Queue, id string) (_ Deps, ok bool, _ error) {
	d, err := js.ReadTaskDeps(ctx, q, id)
	if err != nil || d.Workflow == "" {
		return Deps{}, false, err
	}
	wfID := strings.TrimPrefix(d.Workflow, q.Workflow(""))
	names := make([]string, len(d.Deps))
	for i, dep := range d.Deps {
		names[i] = strings.TrimPrefix(dep, wfID+".")
	}
	res, err := js.TaskResults(ctx, d.Workflow, names)
	if err != nil {
		return Deps{}, false, err
	}
	return Deps{Workflow: wfID, Completed: d.Completed, Failed: d.Failed, Canceled: d.Canceled, Results: res}, true, nil
}
