package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/workflow"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/status"
)

// Workflow is a DAG of tasks published as one unit (Client.Workflow). Each task is a job of
// the workflow's queue that runs once every task it names in After has completed. A task
// with no After runs at once. A task's job id is the workflow's id, a dot and the task's name.
//
// A dead task (its retries exhausted) cancels the tasks that wait for it, and theirs in turn,
// with the reason in their LastError. Replaying it (Inspector.Replay) resumes the workflow:
// the tasks it canceled wait again. A task canceled by a caller cancels its dependents alike,
// for good.
//
// A workflow holds at most 5,000 tasks (a batch: its jobs and callback) and 10,000
// dependencies, the sum of its tasks' After; more is ErrInvalid. One script call publishes
// it, and Redis serves no other client meanwhile: 5,000 tasks take about 45 ms on a 2-core
// machine (docs/BENCHMARKS.md). A fan-out and fan-in of 5,000 has 9,996 dependencies
// (docs/RELIABILITY.md, "Issue 30: a workflow's dependencies and cascades").
type Workflow struct {
	// ID names the workflow; NewID() when empty. Publishing the same workflow again with the
	// same ID (after a lost reply) finds it and writes nothing.
	ID string
	// Name is a label for people (the dashboard, conveyor workflows); optional.
	Name  string
	Tasks []WorkflowTask
}

// WorkflowTask is one task of a Workflow.
type WorkflowTask struct {
	// Name is the task's name in its workflow: 1 to 64 characters from [A-Za-z0-9_-], unique
	// in the workflow.
	Name string
	// Task is the job to run. Its options may set retries (WithMaxRetries), a timeout
	// (WithTimeout), a retention (WithRetention) and metadata (WithMetadata). Options that
	// choose when or where a job runs are refused with ErrInvalid: the workflow decides. Those
	// are WithID, WithDelay, WithRunAt, WithUnique, WithDebounce, WithGroup, WithPriority and
	// WithLimitKey.
	Task
	// After names the tasks this one waits for.
	After []string
	// Finally makes the task run once every task in After is final (completed, dead or
	// canceled), whatever the outcome, instead of once all completed. It suits a batch's
	// callback, or a workflow's clean-up step. It is never canceled by its dependencies'
	// failures; its handler reads their outcomes with Job.Dependencies.
	Finally bool
}

// Chain is the workflow of tasks run one after the other: task i+1 waits for task i. The tasks
// are named "1", "2", ... in order.
func Chain(tasks ...Task) Workflow {
	wf := Workflow{Tasks: make([]WorkflowTask, len(tasks))}
	for i, t := range tasks {
		wf.Tasks[i] = WorkflowTask{Name: strconv.Itoa(i + 1), Task: t}
		if i > 0 {
			wf.Tasks[i].After = []string{strconv.Itoa(i)}
		}
	}
	return wf
}

// Batch is a group of jobs published as one unit (Client.Batch), with an optional callback
// job. The callback runs once, when every job of the batch is final (completed, dead or
// canceled). Its handler reads the counts of completed, dead and canceled jobs, and the
// results of those that completed, with Job.Dependencies. A batch is a workflow of kind
// "batch". Its jobs are tasks named "1", "2", ... and its callback is the Finally task
// "callback". Its progress is read with Client.GetWorkflow like any workflow's.
type Batch struct {
	ID   string // as Workflow.ID
	Name string
	Jobs []Task
	// Callback, when not nil, runs once all Jobs are final. Its options are a task's
	// (WorkflowTask.Task).
	Callback *Task
}

// batchCallback is the name of a batch's callback task.
const batchCallback = "callback"

// WorkflowStatus is where a workflow is. It is running until every task is final, then
// completed (every task completed), failed or canceled. Failed means a task is dead (a replay
// of it resumes the workflow), or a task died and was purged. Canceled means a task was
// canceled and none died.
type WorkflowStatus string

// The statuses of a workflow.
const (
	WorkflowRunning   WorkflowStatus = workflow.Running
	WorkflowCompleted WorkflowStatus = workflow.Completed
	WorkflowFailed    WorkflowStatus = workflow.Failed
	WorkflowCanceled  WorkflowStatus = workflow.Canceled
)

// WorkflowState is a workflow (or batch) as Client.GetWorkflow reads it, and as
// Client.Workflow and Client.Batch return it.
type WorkflowState struct {
	ID    string
	Queue string
	Name  string
	// Kind is "workflow" or "batch".
	Kind   string
	Status WorkflowStatus
	// CreatedAt is when it was published; FinishedAt when its last task ended (zero while it
	// runs, and while a dead task may still be replayed).
	CreatedAt, FinishedAt time.Time
	// Counts of its tasks: in all, and now completed, dead, canceled and purged (a dead task
	// purged from the dead set). Total minus those is the tasks still to finish.
	Total, Completed, Failed, Canceled, Purged int
	// Tasks are its tasks in a topological order (every task after those it waits for).
	Tasks []WorkflowTaskState
	// Duplicate is set when Client.Workflow or Client.Batch found the workflow published
	// already (the same ID and tasks) and wrote nothing. It is not stored.
	Duplicate bool
}

// WorkflowTaskState is one task of a WorkflowState.
type WorkflowTaskState struct {
	Name    string
	JobID   string
	Type    string
	After   []string
	Finally bool
	// Status is the task's job's status: waiting until its dependencies allow it to run, then
	// as any job's. A task whose job's record expired (a completed task past its retention)
	// shows the outcome its workflow recorded.
	Status    status.Status
	Attempt   int
	LastError string
	StartedAt time.Time
	// FinishedAt is when the task completed, died or was canceled.
	FinishedAt time.Time
}

// Dependencies is what a task's handler knows of the tasks it waits for (Job.Dependencies).
type Dependencies struct {
	// Workflow is the id of the job's workflow.
	Workflow string
	// Completed, Failed and Canceled count the dependencies by outcome. For a task that is not
	// Finally, every dependency completed.
	Completed, Failed, Canceled int
	// Results are the results of the dependencies that completed, by task name (a task with
	// an empty result is absent). The workflow keeps them while it lives.
	Results map[string][]byte
}

// Workflow publishes wf into queue as one unit, in one script call. Each task without
// dependencies is queued at once. The others wait (status.Waiting) until the script that
// completes their last dependency puts them into the stream. It validates every task first
// (names, dependencies, no cycle, the options a task may take). On bad input it writes
// nothing (ErrInvalid). Publishing again a workflow with the same ID and tasks writes nothing
// and returns it with Duplicate set. The same ID with other tasks is an error wrapping
// ErrConflict. In a partitioned queue a workflow lives in the partition its ID routes to, so
// that every task is in one hash tag.
//
// The tasks carry the trace context of ctx, as EnqueueBatch's do, so a workflow is one trace.
// Under a tracer provider it is that of the one publish span the call records.
func (c *Client) Workflow(ctx context.Context, queue string, wf Workflow) (*WorkflowState, error) {
	return c.publishWorkflow(ctx, queue, wf, keys.WorkflowKindWorkflow)
}

// Batch publishes b into queue as one unit (see Batch and Workflow).
func (c *Client) Batch(ctx context.Context, queue string, b Batch) (*WorkflowState, error) {
	wf := Workflow{ID: b.ID, Name: b.Name, Tasks: make([]WorkflowTask, 0, len(b.Jobs)+1)}
	names := make([]string, len(b.Jobs))
	for i, t := range b.Jobs {
		names[i] = strconv.Itoa(i + 1)
		wf.Tasks = append(wf.Tasks, WorkflowTask{Name: names[i], Task: t})
	}
	if b.Callback != nil {
		wf.Tasks = append(wf.Tasks, WorkflowTask{Name: batchCallback, Task: *b.Callback, After: names, Finally: true})
	}
	return c.publishWorkflow(ctx, queue, wf, keys.WorkflowKindBatch)
}

func (c *Client) publishWorkflow(ctx context.Context, queue string, wf Workflow, kind string) (_ *WorkflowState, err error) {
	defer func() { err = outOfMemory(err) }()
	if err := validate(queue, ""); err != nil {
		return nil, err
	}
	order, graph, err := checkWorkflow(&wf)
	if err != nil {
		return nil, err
	}
	tasks := make([]Task, len(wf.Tasks))
	for i := range wf.Tasks {
		tasks[i] = wf.Tasks[i].Task
	}
	ctx, pt := c.startPublish(ctx, queue, nil, tasks)
	now := c.cfg.Now()
	jobs := make([]*Job, len(order))
	nts, task, err := workflow.Prepare(wf.ID, graph, order, now, ErrInvalid, func(k, i int, nj *jobstate.NewJob) (err error) {
		t := &wf.Tasks[i].Task
		jobs[k], err = c.prepare(queue, t, now, nil, pt.forTask(t), nj)
		return err
	})
	if err != nil {
		pt.end(nil, err)
		return nil, fmt.Errorf("task %s: %w", task, err)
	}
	for k, j := range jobs {
		j.ID = nts[k].Job.ID
	}
	_, d, err := c.pub.Route(ctx, queue, true)
	if err != nil {
		pt.end(nil, err)
		return nil, err
	}
	for k, i := range order {
		applyDefaults(d, nil, &wf.Tasks[i].Task, jobs[k], &nts[k].Job)
		c.seal(&nts[k].Job) // its id is the task's now (workflow.Wire)
	}
	nw := jobstate.NewWorkflow{ID: wf.ID, Name: wf.Name, Kind: kind, Tasks: nts,
		Retention: max(c.cfg.Retention, c.cfg.MinRetention)}
	q, existed, err := c.pub.Workflow(ctx, queue, &nw, now)
	if q.Name() == "" { // failed before a write was answered
		pt.end(nil, err)
		return nil, err
	}
	if errors.Is(err, jobstate.ErrWorkflowConflict) {
		err = &workflowConflict{id: wf.ID, what: strings.TrimPrefix(err.Error(), jobstate.ErrWorkflowConflict.Error()+": ")}
	}
	pt.end(jobs, err)
	if err != nil {
		return nil, err
	}
	st, err := readWorkflow(ctx, c.store, []keys.Queue{q}, wf.ID)
	if err != nil {
		return nil, err
	}
	st.Duplicate = existed
	return st, nil
}

// checkWorkflow validates wf, giving it an ID when it has none. It returns the indexes of its
// tasks in the order they are written (workflow.Check), and the graph it checked.
func checkWorkflow(wf *Workflow) ([]int, []workflow.Task, error) {
	if wf.ID == "" {
		wf.ID = NewID()
	}
	tasks := make([]workflow.Task, len(wf.Tasks))
	for i, t := range wf.Tasks {
		tasks[i] = workflow.Task{Name: t.Name, After: t.After, Finally: t.Finally}
	}
	order, err := workflow.Check(wf.ID, wf.Name, tasks)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return order, tasks, nil
}

// GetWorkflow reads workflow (or batch) id of queue with each task's status. It returns
// ErrNotFound for an unknown id, or a workflow whose retention ended.
func (c *Client) GetWorkflow(ctx context.Context, queue, id string) (*WorkflowState, error) {
	return getWorkflow(ctx, c.store, queue, id, c.lookup)
}

// Workflow reads workflow (or batch) id of queue, as Client.GetWorkflow.
func (i *Inspector) Workflow(ctx context.Context, queue, id string) (*WorkflowState, error) {
	return getWorkflow(ctx, i.store, queue, id, i.lookup)
}

// getWorkflow reads workflow id of queue from the partitions lookup returns: the one the id
// routes to under today's count first, then the others.
func getWorkflow(ctx context.Context, js jobstate.Backend, queue, id string, lookup func(context.Context, string, string) ([]keys.Queue, error)) (*WorkflowState, error) {
	if err := validate(queue, id); err != nil {
		return nil, err
	}
	qs, err := lookup(ctx, queue, id)
	if err != nil {
		return nil, err
	}
	return readWorkflow(ctx, js, qs, id)
}

// readWorkflow reads workflow id from the first of qs that has it (workflow.Find).
func readWorkflow(ctx context.Context, js jobstate.Backend, qs []keys.Queue, id string) (*WorkflowState, error) {
	q, rec, rows, found, err := workflow.Find(ctx, js, qs, id)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, ErrNotFound
	}
	st := stateOf(q.Name(), jobstate.WorkflowSummary{ID: id, Name: rec.Name, Kind: rec.Kind, CreatedAt: rec.CreatedAt,
		FinishedAt: rec.FinishedAt, Total: rec.Total, Completed: rec.Completed, Failed: rec.Failed,
		Canceled: rec.Canceled, Purged: rec.Purged})
	st.Tasks = make([]WorkflowTaskState, len(rec.Tasks))
	for i, t := range rec.Tasks {
		r := rows[i]
		ts := WorkflowTaskState{Name: t.Name, JobID: t.ID, Type: t.Type, After: t.After, Finally: t.Finally,
			Status: status.Status(r.Status), Attempt: r.Attempt, LastError: r.LastError, StartedAt: r.StartedAt,
			FinishedAt: r.Finished}
		if out, ok := workflow.Outcome(rec.TaskStatus[t.Name]); !r.Found && ok {
			ts.Status = out
		}
		st.Tasks[i] = ts
	}
	return st, nil
}

// stateOf is the state of workflow w of queue, without its tasks.
func stateOf(queue string, w jobstate.WorkflowSummary) *WorkflowState {
	n := workflow.Counts{Total: w.Total, Completed: w.Completed, Failed: w.Failed, Canceled: w.Canceled, Purged: w.Purged}
	return &WorkflowState{ID: w.ID, Queue: queue, Name: w.Name, Kind: w.Kind, Status: WorkflowStatus(n.Status()),
		CreatedAt: w.CreatedAt, FinishedAt: w.FinishedAt, Total: w.Total, Completed: w.Completed, Failed: w.Failed,
		Canceled: w.Canceled, Purged: w.Purged}
}

// maxWorkflowList bounds Inspector.Workflows' limit.
const maxWorkflowList = 1000

// Workflows lists the newest workflows (and batches) of queue, newest first, at most limit
// (1 to 1,000), without their tasks (Tasks is nil: Workflow reads one whole). Each
// queue (partition) indexes its last keys.WorkflowIndexCap (10,000) workflows; those whose
// retention ended are skipped.
func (i *Inspector) Workflows(ctx context.Context, queue string, limit int) ([]*WorkflowState, error) {
	if err := validate(queue, ""); err != nil {
		return nil, err
	}
	if limit < 1 || limit > maxWorkflowList {
		return nil, fmt.Errorf("%w: limit %d: want 1 to %d", ErrInvalid, limit, maxWorkflowList)
	}
	qs, err := i.partitions(ctx, queue)
	if err != nil {
		return nil, err
	}
	sums, err := workflow.List(ctx, i.store, queue, qs, limit)
	if err != nil {
		return nil, err
	}
	var out []*WorkflowState
	for _, w := range sums {
		out = append(out, stateOf(queue, w))
	}
	return out, nil
}

// Dependencies reads what the job's handler may know of the tasks it waits for: their
// outcomes' counts and the results of those that completed. The job must be a task of a
// workflow or a batch's callback handed to its handler by a Worker; otherwise it returns an
// error wrapping ErrInvalid.
func (j *Job) Dependencies(ctx context.Context) (*Dependencies, error) {
	if j.run.Progress == nil {
		return nil, fmt.Errorf("%w: job %s was not handed to a handler by a Worker", ErrInvalid, j.ID)
	}
	d, ok, err := workflow.ReadDeps(ctx, j.run.Progress.Store(), *j.run.Progress.Queue(), j.ID)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: job %s is no task of a workflow", ErrInvalid, j.ID)
	}
	// A task's job id is "<workflow>.<name>" (workflow.Wire): what its result was sealed for.
	for name, r := range d.Results {
		if !keyring.Sealed(r) {
			continue
		}
		plain, err := j.keys.Open(keyring.Result, d.Workflow+"."+name, r)
		if err != nil {
			return nil, fmt.Errorf("result of task %s: %w", name, err)
		}
		d.Results[name] = plain
	}
	return &Dependencies{Workflow: d.Workflow, Completed: d.Completed, Failed: d.Failed, Canceled: d.Canceled, Results: d.Results}, nil
}

// MarshalJSON writes the workflow in its wire form (workflow.JSON), with times as unix
// milliseconds (0 when not yet).
func (s *WorkflowState) MarshalJSON() ([]byte, error) {
	w := workflow.JSON{ID: s.ID, Queue: s.Queue, Name: s.Name, Kind: s.Kind, Status: string(s.Status),
		CreatedAt: unixMS(s.CreatedAt), FinishedAt: unixMS(s.FinishedAt), Total: s.Total,
		Completed: s.Completed, Failed: s.Failed, Canceled: s.Canceled, Purged: s.Purged,
		Duplicate: s.Duplicate, Tasks: make([]workflow.TaskJSON, len(s.Tasks))}
	if s.Tasks == nil {
		w.Tasks = nil // a listing's summary: no tasks read
	}
	for i, t := range s.Tasks {
		after := t.After
		if after == nil {
			after = []string{}
		}
		w.Tasks[i] = workflow.TaskJSON{Name: t.Name, JobID: t.JobID, Type: t.Type, After: after,
			Finally: t.Finally, Status: t.Status, Attempt: t.Attempt, LastError: t.LastError,
			StartedAt: unixMS(t.StartedAt), FinishedAt: unixMS(t.FinishedAt)}
	}
	return json.Marshal(w)
}

// workflowConflict is ErrConflict for a workflow: its id names a workflow with other tasks or
// payloads, or a task's id names a job of its own. Its message says which, in a workflow's
// words rather than a job's.
type workflowConflict struct{ id, what string }

func (e *workflowConflict) Error() string {
	return "pipeline: workflow " + e.id + " conflicts with what exists: " + e.what
}

func (e *workflowConflict) Unwrap() error { return ErrConflict }
