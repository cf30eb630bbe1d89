package workflow

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/status"
)

// Bounds of a workflow. A workflow is published by one script call, and Redis serves no other
// client while a script runs: 5,000 tasks take it about 45 ms on a 2-core machine
// (docs/BENCHMARKS.md).
const (
	// MaxTasks bounds the tasks of one workflow (or the jobs of one batch, with its callback).
	MaxTasks = 5000
	// MaxDependencies bounds the sum over a workflow's tasks of the tasks each waits for. A
	// publish, a fan-in and a cascade each cost Redis work per dependency: about 2.5 us each in
	// the publish, beside about 9 us a task. A fan-out and fan-in of 5,000 tasks has 9,996
	// (docs/RELIABILITY.md, "Issue 30").
	MaxDependencies = 10000
	// MaxTaskName bounds a task's name, in bytes.
	MaxTaskName = 64
)

// Task is what the checks read of a workflow's task.
type Task struct {
	Name    string
	After   []string
	Finally bool
}

// Check validates a workflow of id, name and tasks. It returns the indexes of the tasks in a
// topological order: Kahn's, stable, so tasks keep their given order where they can. Its
// errors say what is wrong, for the caller to wrap as invalid input.
func Check(id, name string, tasks []Task) ([]int, error) {
	n := len(tasks)
	switch {
	case n == 0:
		return nil, errors.New("a workflow needs a task")
	case n > MaxTasks:
		return nil, fmt.Errorf("%d tasks, more than the %d of a workflow", n, MaxTasks)
	case len(name) > keys.MaxNameLen:
		return nil, fmt.Errorf("workflow name longer than %d bytes", keys.MaxNameLen)
	}
	edges := 0
	for _, t := range tasks {
		edges += len(t.After)
	}
	if edges > MaxDependencies {
		return nil, fmt.Errorf("%d dependencies, more than the %d of a workflow", edges, MaxDependencies)
	}
	at := make(map[string]int, n)
	longest := 0
	for i, t := range tasks {
		if err := checkName(t.Name); err != nil {
			return nil, err
		}
		if _, dup := at[t.Name]; dup {
			return nil, fmt.Errorf("two tasks are named %q", t.Name)
		}
		at[t.Name] = i
		longest = max(longest, len(t.Name))
	}
	if err := keys.ValidateID(id); err != nil {
		return nil, fmt.Errorf("workflow id: %w", err)
	}
	if l := len(id) + 1 + longest; l > keys.MaxNameLen {
		return nil, fmt.Errorf("workflow id %q and task names make job ids of %d bytes, more than %d", id, l, keys.MaxNameLen)
	}
	return order(tasks, at)
}

// order checks each task's dependencies and sorts the tasks (Check).
func order(tasks []Task, at map[string]int) ([]int, error) {
	n := len(tasks)
	indeg := make([]int, n)
	next := make([][]int, n)
	for i, t := range tasks {
		seen := map[string]bool{}
		if t.Finally && len(t.After) == 0 {
			return nil, fmt.Errorf("task %s is Finally but waits for no task", t.Name)
		}
		for _, a := range t.After {
			d, ok := at[a]
			switch {
			case !ok:
				return nil, fmt.Errorf("task %s waits for %q, which is no task of the workflow", t.Name, a)
			case d == i:
				return nil, fmt.Errorf("task %s waits for itself", t.Name)
			case seen[a]:
				return nil, fmt.Errorf("task %s names %q twice", t.Name, a)
			}
			seen[a] = true
			indeg[i]++
			next[d] = append(next[d], i)
		}
	}
	out := make([]int, 0, n)
	for i := range n {
		if indeg[i] == 0 {
			out = append(out, i)
		}
	}
	for k := 0; k < len(out); k++ {
		for _, j := range next[out[k]] {
			if indeg[j]--; indeg[j] == 0 {
				out = append(out, j)
			}
		}
	}
	if len(out) < n {
		var cyc []string
		for i := range n {
			if indeg[i] > 0 {
				cyc = append(cyc, tasks[i].Name)
			}
		}
		return nil, fmt.Errorf("the workflow has a cycle through tasks %s", strings.Join(cyc, ", "))
	}
	return out, nil
}

// checkName accepts 1 to MaxTaskName characters from [A-Za-z0-9_-].
func checkName(name string) error {
	if name == "" || len(name) > MaxTaskName {
		return fmt.Errorf("task name %q: want 1 to %d characters", name, MaxTaskName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("task name %q: character %q not allowed (want [A-Za-z0-9_-])", name, c)
		}
	}
	return nil
}

// TaskOptions refuses the options a workflow's task may not take: those that choose when or
// where a job runs, which the workflow decides.
func TaskOptions(nj *jobstate.NewJob, now time.Time) error {
	var bad []string
	if nj.ChosenID {
		bad = append(bad, "WithID (a task's id is the workflow's id and its name)")
	}
	if nj.RunAt.UnixMilli() > now.UnixMilli() {
		bad = append(bad, "WithDelay or WithRunAt")
	}
	if nj.UniqueKey != "" {
		bad = append(bad, "WithUnique")
	}
	if nj.Debounce != "" {
		bad = append(bad, "WithDebounce")
	}
	if nj.Group != "" {
		bad = append(bad, "WithGroup")
	}
	if nj.Priority > keys.MinPriority {
		bad = append(bad, "WithPriority")
	}
	if nj.LimitKey != "" {
		bad = append(bad, "WithLimitKey")
	}
	if len(bad) > 0 {
		return fmt.Errorf("a workflow's task cannot take %s", strings.Join(bad, ", "))
	}
	return nil
}

// Prepare makes the tasks of workflow id in the order Check returned. prep makes each one's
// job (k its place in order, i its index in tasks), TaskOptions holds it to what a task may
// take, then Wire links them. On an error it names the task. A TaskOptions error wraps invalid
// (the caller's ErrInvalid); prep's comes as it is.
func Prepare(id string, tasks []Task, order []int, now time.Time, invalid error, prep func(k, i int, nj *jobstate.NewJob) error) (_ []jobstate.NewTask, task string, _ error) {
	nts := make([]jobstate.NewTask, len(order))
	for k, i := range order {
		if err := prep(k, i, &nts[k].Job); err != nil {
			return nil, tasks[i].Name, err
		}
		if err := TaskOptions(&nts[k].Job, now); err != nil {
			return nil, tasks[i].Name, fmt.Errorf("%w: %w", invalid, err)
		}
	}
	Wire(id, tasks, order, nts)
	return nts, "", nil
}

// Wire names the tasks of workflow id written in order (Check): each task's job is
// "<id>.<name>", its Deps the jobs of the tasks it waits for. Then it links them (Link).
func Wire(id string, tasks []Task, order []int, nts []jobstate.NewTask) {
	ids := make(map[string]string, len(tasks))
	for _, t := range tasks {
		ids[t.Name] = id + "." + t.Name
	}
	for k, i := range order {
		t, nt := &tasks[i], &nts[k]
		nt.Job.ID, nt.Name, nt.Finally = ids[t.Name], t.Name, t.Finally
		for _, a := range t.After {
			nt.Deps = append(nt.Deps, ids[a])
		}
	}
	Link(nts)
}

// Link sets each task's Next, the ids of the tasks that wait for it, from their Deps. It goes
// through an index of the tasks by id: a scan of every task for each dependency was quadratic
// (a 5,000-job batch's callback: 25 million comparisons).
func Link(tasks []jobstate.NewTask) {
	at := make(map[string]int, len(tasks))
	for k := range tasks {
		at[tasks[k].Job.ID] = k
	}
	for k := range tasks {
		for _, dep := range tasks[k].Deps {
			m := at[dep]
			tasks[m].Next = append(tasks[m].Next, tasks[k].Job.ID)
		}
	}
}

// The statuses of a workflow.
const (
	Running   = "running"
	Completed = "completed"
	Failed    = "failed"
	Canceled  = "canceled"
)

// Counts are a workflow's tasks: in all, and completed, dead, canceled and purged.
type Counts struct {
	Total, Completed, Failed, Canceled, Purged int
}

// Status is the workflow's status from its counts. It is running until every task is final,
// then completed, failed (a task died, purged or not) or canceled.
func (c Counts) Status() string {
	switch final := c.Completed + c.Failed + c.Canceled + c.Purged; {
	case c.Completed == c.Total:
		return Completed
	case final < c.Total:
		return Running
	case c.Failed > 0 || c.Purged > 0:
		// A purged task died: purging it ends the workflow, it does not make it canceled.
		return Failed
	default:
		return Canceled
	}
}

// Purged is the status shown for a task whose dead job was purged.
const Purged status.Status = "purged"

// Outcome is the status of a task whose job's record is gone, from the outcome its workflow
// recorded (jobstate.WorkflowRecord.TaskStatus); ok is false when none was.
func Outcome(recorded string) (s status.Status, ok bool) {
	switch recorded {
	case "C":
		return status.Completed, true
	case "F":
		return status.Failed, true
	case "X":
		return status.Canceled, true
	case "P":
		return Purged, true
	}
	return "", false
}
