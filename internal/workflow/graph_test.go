package workflow

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/status"
)

func TestCheckOrdersAndRefuses(t *testing.T) {
	order, err := Check("wf", "", []Task{{Name: "c", After: []string{"b"}}, {Name: "a"}, {Name: "b", After: []string{"a"}}})
	if err != nil || len(order) != 3 || order[0] != 1 || order[1] != 2 || order[2] != 0 {
		t.Fatalf("order %v, err %v; want [1 2 0]", order, err)
	}
	for _, c := range []struct {
		tasks []Task
		want  string
	}{
		{nil, "needs a task"},
		{[]Task{{Name: "a", After: []string{"b"}}, {Name: "b", After: []string{"a"}}}, "cycle through tasks a, b"},
		{[]Task{{Name: "a", After: []string{"a"}}}, "waits for itself"},
		{[]Task{{Name: "a", After: []string{"x"}}}, "no task of the workflow"},
		{[]Task{{Name: "a"}, {Name: "a"}}, "two tasks are named"},
		{[]Task{{Name: "a b"}}, "not allowed"},
		{[]Task{{Name: "a", Finally: true}}, "waits for no task"},
	} {
		if _, err := Check("wf", "", c.tasks); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check(%v) = %v, want an error saying %q", c.tasks, err, c.want)
		}
	}
}

func TestLinkAndOptions(t *testing.T) {
	ts := []jobstate.NewTask{{Job: jobstate.NewJob{ID: "w.a"}}, {Job: jobstate.NewJob{ID: "w.b"}, Deps: []string{"w.a"}}}
	Link(ts)
	if len(ts[0].Next) != 1 || ts[0].Next[0] != "w.b" || len(ts[1].Next) != 0 {
		t.Fatalf("links %v %v", ts[0].Next, ts[1].Next)
	}
	now := time.Now()
	if err := TaskOptions(&jobstate.NewJob{Group: "g", ChosenID: true}, now); err == nil ||
		!strings.Contains(err.Error(), "WithID") || !strings.Contains(err.Error(), "WithGroup") {
		t.Fatalf("TaskOptions = %v, want WithID and WithGroup refused", err)
	}
	if err := TaskOptions(&jobstate.NewJob{RunAt: now}, now); err != nil {
		t.Fatalf("TaskOptions of a plain job = %v", err)
	}
}

func TestStatusAndOutcome(t *testing.T) {
	for c, want := range map[Counts]string{
		{Total: 2, Completed: 2}:              Completed,
		{Total: 2, Completed: 1}:              Running,
		{Total: 2, Completed: 1, Purged: 1}:   Failed,
		{Total: 2, Completed: 1, Canceled: 1}: Canceled,
	} {
		if got := c.Status(); got != want {
			t.Errorf("%+v: %s, want %s", c, got, want)
		}
	}
	if s, ok := Outcome("X"); !ok || s != status.Canceled {
		t.Errorf("Outcome(X) = %s %v", s, ok)
	}
	if _, ok := Outcome(""); ok {
		t.Error("Outcome of nothing recorded is a status")
	}
}

// Wire names each task's job after the workflow and its task, in the order written, and
// points each task at the jobs it waits for and those that wait for it.
func TestWire(t *testing.T) {
	tasks := []Task{{Name: "b", After: []string{"a"}, Finally: true}, {Name: "a"}}
	nts := make([]jobstate.NewTask, 2)
	Wire("wf", tasks, []int{1, 0}, nts)
	a, b := nts[0], nts[1]
	if a.Job.ID != "wf.a" || a.Name != "a" || a.Finally || len(a.Deps) != 0 || len(a.Next) != 1 || a.Next[0] != "wf.b" {
		t.Fatalf("task a: %+v", a)
	}
	if b.Job.ID != "wf.b" || b.Name != "b" || !b.Finally || len(b.Deps) != 1 || b.Deps[0] != "wf.a" || len(b.Next) != 0 {
		t.Fatalf("task b: %+v", b)
	}
}

// Prepare makes each task's job in the order written, refuses a task's option in the caller's
// invalid error naming the task, passes prep's error on as it is, and wires what it made.
func TestPrepare(t *testing.T) {
	tasks := []Task{{Name: "b", After: []string{"a"}}, {Name: "a"}}
	now := time.Now()
	invalid, failed := errors.New("invalid"), errors.New("prep failed")
	var made []int
	nts, _, err := Prepare("wf", tasks, []int{1, 0}, now, invalid, func(k, i int, nj *jobstate.NewJob) error {
		made = append(made, i)
		nj.RunAt = now
		return nil
	})
	if err != nil || len(made) != 2 || made[0] != 1 || nts[0].Job.ID != "wf.a" || nts[1].Deps[0] != "wf.a" {
		t.Fatalf("Prepare = %+v, %v (made %v)", nts, err, made)
	}
	_, task, err := Prepare("wf", tasks, []int{1, 0}, now, invalid, func(k, i int, nj *jobstate.NewJob) error {
		nj.Group = "g"
		return nil
	})
	if task != "a" || !errors.Is(err, invalid) || !strings.Contains(err.Error(), "WithGroup") {
		t.Fatalf("a task's option: task %q, %v", task, err)
	}
	_, task, err = Prepare("wf", tasks, []int{1, 0}, now, invalid, func(k, i int, nj *jobstate.NewJob) error {
		if i == 0 {
			return failed
		}
		return nil
	})
	if task != "b" || err != failed {
		t.Fatalf("prep's error: task %q, %v", task, err)
	}
}
