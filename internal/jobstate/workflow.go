package jobstate

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/internal/script"
)

var (
	//go:embed workflow.lua
	workflowSrc    string
	workflowScript = newScript(workflowSrc)
	//go:embed wf_cascade.lua
	cascadeSrc    string
	cascadeScript = newScript(cascadeSrc)
)

// CascadeStep is the most edges of a workflow one FollowCascade call follows. An edge is a
// task and one of its dependents. The scripts that end tasks also follow at most that many
// (lua/workflows.lua's cv_wf_budget). Then they leave the rest of a cascade on the queue's
// work list (keys.Queue.WorkflowCascade). So a call costs Redis a few ms at most, whatever
// the workflow's width.
const CascadeStep = 128

// CascadeParams says how FollowCascade follows a queue's cascades.
type CascadeParams struct {
	Now time.Time
	// Edges is the most edges to follow; CascadeStep when 0.
	Edges  int
	Events events.Mode
}

// CascadeResult is what one FollowCascade call did.
type CascadeResult struct {
	// Left is the items (tasks whose dependents are still to follow) the work list holds after
	// the call: 0 once every cascade of the queue is over.
	Left int
	// Canceled and Released count the tasks the call canceled and put into the stream.
	Canceled, Released int
}

// FollowCascade follows up to p.Edges edges of q's workflow cascades (wf_cascade.lua): the
// dependents of ended tasks that the scripts which ended them left past their budget. Each
// edge is followed once, whichever callers run it at once; call it until Left is 0.
func (s *Store) FollowCascade(ctx context.Context, q keys.Queue, p CascadeParams) (CascadeResult, error) {
	edges := p.Edges
	if edges <= 0 {
		edges = CascadeStep
	}
	r, err := decode("cascade", cascadeScript.Run(ctx, s.rdb, []string{q.WorkflowCascade(), q.Stream(), q.Stats()},
		p.Now.UnixMilli(), edges, q.JobPrefix(), p.Events.Command(), q.Events()))
	if err != nil {
		return CascadeResult{}, err
	}
	if err := r.want(3); err != nil {
		return CascadeResult{}, err
	}
	return CascadeResult{Left: int(r.int(0)), Canceled: int(r.int(1)), Released: int(r.int(2))}, nil
}

// NewWorkflow is a workflow (or a batch) to publish with PublishWorkflow: its tasks in a
// topological order (every task after the tasks it waits for).
type NewWorkflow struct {
	ID   string
	Name string
	Kind string // keys.WorkflowKindWorkflow or keys.WorkflowKindBatch
	// Retention is how long the workflow's hash is kept once it finished without a dead task.
	Retention time.Duration
	Tasks     []NewTask
}

// NewTask is one task of a NewWorkflow: a job (its Type, Payload, Metadata, MaxRetries, Timeout
// and, with KeepOwn, Retention are used) with its name and its dependencies.
type NewTask struct {
	Job  NewJob
	Name string
	// Deps are the ids of the tasks it waits for; Next those of the tasks that wait for it.
	Deps, Next []string
	// Finally: it runs once its dependencies are final, whatever their outcome, instead of
	// once they completed.
	Finally bool
}

// DocTask is a task as the workflow's hash keeps it for readers (keys.FieldWorkflowDoc, a JSON
// array of them): short names, since a batch keeps thousands.
type DocTask struct {
	Name    string   `json:"n"`
	ID      string   `json:"id"`
	Type    string   `json:"t"`
	After   []string `json:"a,omitempty"` // names
	Finally bool     `json:"f,omitempty"`
}

// Doc is the JSON of wf's tasks for its hash.
func (wf *NewWorkflow) Doc() string {
	byID := make(map[string]string, len(wf.Tasks))
	for i := range wf.Tasks {
		byID[wf.Tasks[i].Job.ID] = wf.Tasks[i].Name
	}
	doc := make([]DocTask, len(wf.Tasks))
	for i := range wf.Tasks {
		t := &wf.Tasks[i]
		d := DocTask{Name: t.Name, ID: t.Job.ID, Type: t.Job.Type, Finally: t.Finally}
		for _, dep := range t.Deps {
			d.After = append(d.After, byID[dep])
		}
		doc[i] = d
	}
	b, _ := json.Marshal(doc) // strings and bools only: cannot fail
	return string(b)
}

// Digest identifies what wf publishes: a SHA-256 of its tasks' names, types, dependencies and
// payloads, in order. A publish of an existing workflow id is the same workflow when the
// digests match; it is a publish sent again. Options and metadata are not part of it. In the
// same way, a job's id sent again is the same job when its type and payload match. (Metadata
// carries a trace context, which differs from one call to the next.)
func (wf *NewWorkflow) Digest() string {
	h := sha256.New()
	var n [8]byte
	field := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	for i := range wf.Tasks {
		t := &wf.Tasks[i]
		field([]byte(t.Name))
		field([]byte(t.Job.Type))
		field(t.Job.Payload)
		field([]byte(strings.Join(t.Deps, " ")))
		if t.Finally {
			field([]byte{1})
		} else {
			field(nil)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ErrWorkflowConflict is returned by PublishWorkflow when the workflow's id names a workflow
// with other tasks, or a task's id names a job that exists.
var ErrWorkflowConflict = errors.New("workflow conflicts with what exists")

// PublishWorkflow writes wf into q (workflow.lua) in one call: its hash, and every task,
// those without dependencies queued, the others waiting. It returns whether the workflow
// existed already with the same tasks (nothing written: a publish sent again), the entries of
// the tasks it queued (by index; "" for a waiting one), ErrClosed when the queue's partition
// layout is closed, and an error wrapping ErrWorkflowConflict on a conflict.
func (s *Store) PublishWorkflow(ctx context.Context, q keys.Queue, now time.Time, wf *NewWorkflow) (existed bool, entries []string, err error) {
	ks := make([]string, 0, 7+len(wf.Tasks))
	ks = append(ks, q.Stream(), q.Stats(), q.Workflow(wf.ID), q.Closed(), q.Workflows(), q.WorkflowIndex(),
		q.WorkflowWaiting())
	args := make([]any, 0, 7+11*len(wf.Tasks))
	args = append(args, now.UnixMilli(), wf.Name, wf.Kind, wf.Doc(), retentionMS(wf.Retention),
		keys.WorkflowIndexCap, wf.ID, wf.Digest())
	for i := range wf.Tasks {
		t := &wf.Tasks[i]
		j := &t.Job
		ks = append(ks, q.Job(j.ID))
		ret := ""
		if j.KeepOwn {
			ret = strconv.FormatInt(retentionMS(j.Retention), 10)
		}
		tmo := "0"
		if j.Timeout > 0 {
			tmo = strconv.FormatInt(max(1, j.Timeout.Milliseconds()), 10)
		}
		mode := ""
		if t.Finally {
			mode = "1"
		}
		args = append(args, j.ID, t.Name, j.Type, j.Payload, j.Metadata, j.MaxRetries, tmo, ret,
			strings.Join(t.Deps, " "), strings.Join(t.Next, " "), mode)
	}
	r, err := decode("workflow", workflowScript.Run(ctx, s.rdb, ks, args...))
	if err != nil {
		return false, nil, err
	}
	switch r.code {
	case script.OK:
		if len(r.rest) != len(wf.Tasks) {
			return false, nil, r.unexpected()
		}
		entries = make([]string, len(r.rest))
		for i, v := range r.rest {
			entries[i], _ = v.(string)
		}
		return false, entries, nil
	case script.Exists:
		return true, nil, nil
	case script.WrongState:
		return false, nil, ErrClosed
	case script.Conflict:
		what := ""
		if len(r.rest) > 0 {
			what, _ = r.rest[0].(string)
		}
		return false, nil, fmt.Errorf("%w: %s", ErrWorkflowConflict, what)
	}
	return false, nil, r.unexpected()
}

// WorkflowRecord is a workflow's hash as ReadWorkflow reads it.
type WorkflowRecord struct {
	Name, Kind string
	Tasks      []DocTask
	CreatedAt  time.Time
	FinishedAt time.Time // zero while it runs, or finished with a dead task
	// Counts of tasks: in all, and completed, dead, canceled and purged now.
	Total, Completed, Failed, Canceled, Purged int
	// TaskStatus is each finished task's outcome by name: keys.WorkflowTaskStatus's values
	// 'C' completed, 'F' dead, 'X' canceled, 'P' purged.
	TaskStatus map[string]string
}

// TaskRow is what ReadWorkflow reads of each task's own hash.
type TaskRow struct {
	Found               bool
	Status, LastError   string
	Attempt             int
	StartedAt, Finished time.Time
}

// ReadWorkflow reads workflow id of q and each of its tasks' status. The first round trip
// reads the workflow's fixed fields. One more reads its tasks' rows and outcome fields,
// pipelined.
// found is false when there is no such workflow (never published, or expired).
func (s *Store) ReadWorkflow(ctx context.Context, q keys.Queue, id string) (rec *WorkflowRecord, rows []TaskRow, found bool, err error) {
	wfkey := q.Workflow(id)
	v, err := s.rdb.HMGet(ctx, wfkey, keys.FieldWorkflowName, keys.FieldWorkflowKind, keys.FieldWorkflowDoc,
		keys.FieldWorkflowCreated, keys.FieldWorkflowFinished, keys.FieldWorkflowTasks,
		keys.FieldWorkflowCompleted, keys.FieldWorkflowFailed, keys.FieldWorkflowCanceled,
		keys.FieldWorkflowPurged).Result()
	if err != nil {
		return nil, nil, false, rediserr.Wrap("workflow", err)
	}
	str := func(i int) string { s, _ := v[i].(string); return s }
	num := func(i int) int { n, _ := strconv.Atoi(str(i)); return n }
	if v[2] == nil {
		return nil, nil, false, nil
	}
	rec = &WorkflowRecord{Name: str(0), Kind: str(1), CreatedAt: fromMS(int64(num(3))),
		FinishedAt: fromMS(int64(num(4))), Total: num(5), Completed: num(6), Failed: num(7),
		Canceled: num(8), Purged: num(9), TaskStatus: map[string]string{}}
	if err := json.Unmarshal([]byte(str(2)), &rec.Tasks); err != nil {
		return nil, nil, false, fmt.Errorf("workflow %s: its tasks: %w", id, err)
	}
	pipe := s.rdb.Pipeline()
	fields := make([]string, len(rec.Tasks))
	cmds := make([]*redis.SliceCmd, len(rec.Tasks))
	for i, t := range rec.Tasks {
		fields[i] = keys.WorkflowTaskStatus + t.Name
		cmds[i] = pipe.HMGet(ctx, q.Job(t.ID), keys.FieldStatus, keys.FieldLastError, keys.FieldAttempt,
			keys.FieldStartedAt, keys.FieldCompletedAt)
	}
	var outcomes *redis.SliceCmd
	if len(fields) > 0 {
		outcomes = pipe.HMGet(ctx, wfkey, fields...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, nil, false, rediserr.Wrap("workflow", err)
	}
	rows = make([]TaskRow, len(rec.Tasks))
	for i, c := range cmds {
		h := c.Val()
		s := func(k int) string { x, _ := h[k].(string); return x }
		n := func(k int) int64 { x, _ := strconv.ParseInt(s(k), 10, 64); return x }
		rows[i] = TaskRow{Found: h[0] != nil, Status: s(0), LastError: s(1), Attempt: int(n(2)),
			StartedAt: fromMS(n(3)), Finished: fromMS(n(4))}
	}
	if outcomes != nil {
		for i, o := range outcomes.Val() {
			if s, ok := o.(string); ok {
				rec.TaskStatus[rec.Tasks[i].Name] = s
			}
		}
	}
	return rec, rows, true, nil
}

// TaskDeps is what a task knows of its dependencies: the workflow's hash and their ids. For a
// Finally task it also holds the outcomes they had. A task that is not Finally runs only once
// all completed.
type TaskDeps struct {
	Workflow                    string // the workflow hash's key; empty: the job is no task
	Deps                        []string
	Finally                     bool
	Completed, Failed, Canceled int
}

// ReadTaskDeps reads job id's dependencies (TaskDeps).
func (s *Store) ReadTaskDeps(ctx context.Context, q keys.Queue, id string) (TaskDeps, error) {
	v, err := s.rdb.HMGet(ctx, q.Job(id), keys.FieldWorkflow, keys.FieldWfDeps, keys.FieldWfMode,
		keys.FieldWfDone, keys.FieldWfFailed, keys.FieldWfCanceled).Result()
	if err != nil {
		return TaskDeps{}, rediserr.Wrap("dependencies", err)
	}
	str := func(i int) string { x, _ := v[i].(string); return x }
	n := func(i int) int { x, _ := strconv.Atoi(str(i)); return x }
	d := TaskDeps{Workflow: str(0), Deps: strings.Fields(str(1)), Finally: str(2) == "1"}
	if d.Finally {
		d.Completed, d.Failed, d.Canceled = n(3), n(4), n(5)
	} else {
		d.Completed = len(d.Deps)
	}
	return d, nil
}

// TaskResults reads the results the workflow of hash wfKey keeps of the named tasks (those
// that completed and have dependents); a task without one is absent from the map.
func (s *Store) TaskResults(ctx context.Context, wfKey string, names []string) (map[string][]byte, error) {
	out := map[string][]byte{}
	if len(names) == 0 {
		return out, nil
	}
	fields := make([]string, len(names))
	for i, n := range names {
		fields[i] = keys.WorkflowTaskResult + n
	}
	v, err := s.rdb.HMGet(ctx, wfKey, fields...).Result()
	if err != nil {
		return nil, rediserr.Wrap("dependencies", err)
	}
	for i, x := range v {
		if s, ok := x.(string); ok {
			out[names[i]] = []byte(s)
		}
	}
	return out, nil
}

// WorkflowSummary is a workflow's hash without its tasks (ListWorkflows).
type WorkflowSummary struct {
	ID                                         string
	Name, Kind                                 string
	CreatedAt                                  time.Time
	FinishedAt                                 time.Time
	Total, Completed, Failed, Canceled, Purged int
}

// ListWorkflows reads the newest workflows of q, newest first, at most n (those expired are
// skipped), from the queue's index of workflows.
func (s *Store) ListWorkflows(ctx context.Context, q keys.Queue, n int) ([]WorkflowSummary, error) {
	// Read twice what is asked: ids whose workflow expired are skipped, not deleted.
	ids, err := s.rdb.ZRevRangeWithScores(ctx, q.WorkflowIndex(), 0, int64(2*n-1)).Result()
	if err != nil {
		return nil, rediserr.Wrap("workflows", err)
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(ids))
	for i, z := range ids {
		id, _ := z.Member.(string)
		cmds[i] = pipe.HMGet(ctx, q.Workflow(id), keys.FieldWorkflowName, keys.FieldWorkflowKind,
			keys.FieldWorkflowCreated, keys.FieldWorkflowFinished, keys.FieldWorkflowTasks,
			keys.FieldWorkflowCompleted, keys.FieldWorkflowFailed, keys.FieldWorkflowCanceled,
			keys.FieldWorkflowPurged)
	}
	if len(cmds) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, rediserr.Wrap("workflows", err)
		}
	}
	out := make([]WorkflowSummary, 0, min(n, len(ids)))
	for i, c := range cmds {
		v := c.Val()
		if v[4] == nil || len(out) == n {
			continue
		}
		s := func(k int) string { x, _ := v[k].(string); return x }
		num := func(k int) int { x, _ := strconv.Atoi(s(k)); return x }
		id, _ := ids[i].Member.(string)
		out = append(out, WorkflowSummary{ID: id, Name: s(0), Kind: s(1), CreatedAt: fromMS(int64(num(2))),
			FinishedAt: fromMS(int64(num(3))), Total: num(4), Completed: num(5), Failed: num(6),
			Canceled: num(7), Purged: num(8)})
	}
	return out, nil
}
