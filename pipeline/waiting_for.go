package pipeline

import (
	"time"

	"github.com/conveyorq/conveyor/status"
)

// WaitingFor says why a job that is not running waits (Job.WaitingFor): its reason (Kind, one
// of package status's reasons), a line for people (Detail), and the facts the reason rests on.
// A reason is derived when the job is read, from its record and its queue's state: it costs
// the job's own path nothing, and it is as fresh as the read.
type WaitingFor struct {
	Kind status.Reason
	// Detail says it for a person: "concurrency limit of queue prio: 1 of 1 slots held".
	Detail string
	// Cause says what set a Due reason's time: "delay", "retry" (a failed attempt's backoff)
	// or "snooze" (its handler's Snooze or RetryAt).
	Cause string
	// Until is when the wait ends by itself (a due time, a rate's next token, a debounce
	// window's close); zero when no time ends it.
	Until time.Time
	// Scope names the limit's scope of a ConcurrencyLimit or RateLimit reason, as
	// `conveyor limits list` shows it ("queue", "type sleep", "key k", "type sleep key k").
	Scope string
	// Held and Slots are a ConcurrencyLimit's slots taken and its limit.
	Held, Slots int
	// Group and Position are a GroupWindow's group and the job's place in its wait list (1 is
	// next).
	Group    string
	Position int
	// Tasks are the workflow tasks a Dependencies reason waits for (not yet done).
	Tasks []string
	// Jobs counts the jobs of higher priority levels ahead of a Priority reason's job.
	Jobs int64
}

// waitingForJSON is the wire form of a WaitingFor: the API's and `status --json`'s
// "waiting_for" object.
type waitingForJSON struct {
	Kind     status.Reason `json:"kind"`
	Detail   string        `json:"detail"`
	Cause    string        `json:"cause,omitempty"`
	Until    int64         `json:"until,omitempty"`
	Scope    string        `json:"scope,omitempty"`
	Held     int           `json:"held,omitempty"`
	Slots    int           `json:"slots,omitempty"`
	Group    string        `json:"group,omitempty"`
	Position int           `json:"position,omitempty"`
	Tasks    []string      `json:"tasks,omitempty"`
	Jobs     int64         `json:"jobs,omitempty"`
}

func (w *WaitingFor) wire() *waitingForJSON {
	if w == nil {
		return nil
	}
	return &waitingForJSON{Kind: w.Kind, Detail: w.Detail, Cause: w.Cause, Until: unixMS(w.Until), Scope: w.Scope, Held: w.Held,
		Slots: w.Slots, Group: w.Group, Position: w.Position, Tasks: w.Tasks, Jobs: w.Jobs}
}
