package status

// Reason is why a job that is not running waits: the Kind of a pipeline.WaitingFor, and the
// reason label of the conveyor_queue_jobs_waiting metric. Like a Status it is the wire's value:
// JSON, the API and the metric carry it as it is. A reason is derived when a job is read, from
// the job's record and the queue's state (its settings, its limits, the live workers): no
// script on a job's path writes one (docs/STATE_MACHINE.md, "Why a job is not running").
type Reason string

// The reasons a job waits, in the order they are checked: the first that holds is the job's.
const (
	// NoReader: the job is due or queued, and no live worker reads its queue (no heartbeat
	// names it): a typo in a queue's name, or every worker down.
	NoReader Reason = "no_worker_queue"
	// Paused: the job is queued, and its queue is paused.
	Paused Reason = "paused"
	// NoHandler: the job is queued, workers read its queue, and none of them handles its type.
	NoHandler Reason = "no_worker_type"
	// Dependencies: a workflow's task waiting for the tasks it runs after (Tasks names those not
	// done yet).
	Dependencies Reason = "dependencies"
	// ConcurrencyLimit: deferred by a concurrency limit of a scope (Scope) whose slots are all
	// held (Held of Slots); a slot given back wakes it.
	ConcurrencyLimit Reason = "concurrency_limit"
	// RateLimit: deferred by a rate limit of a scope (Scope) until a time (Until).
	RateLimit Reason = "rate_limit"
	// GroupWindow: its fair group's window is full; it waits in the group's list (Position, 1
	// first).
	GroupWindow Reason = "group_window"
	// Debounce: a debounced job whose window is open until a time (Until).
	Debounce Reason = "debounce"
	// Due: waits in the queue's scheduled set for a time (Until): a delay it was published
	// with, a failed attempt's backoff or a snooze (pipeline.WaitingFor.Cause says which).
	Due Reason = "due"
	// Priority: queued behind jobs of a higher priority (Jobs of them, in lower levels).
	Priority Reason = "priority"
	// Ready: queued in the stream with nothing in its way: the next free slot of a worker that
	// reads the queue takes it.
	Ready Reason = "ready"
)

// reasons is the one list of the reasons, with what each says after "Waiting for" or "Waiting
// because" on the dashboard and in the metric's help.
var reasons = []struct {
	Reason Reason
	Help   string
}{
	{NoReader, "no live worker reads the queue"},
	{Paused, "the queue is paused"},
	{NoHandler, "no live worker handles the job's type"},
	{Dependencies, "the workflow tasks it runs after"},
	{ConcurrencyLimit, "a slot of a concurrency limit"},
	{RateLimit, "a rate limit's next token"},
	{GroupWindow, "a place in its fair group's window"},
	{Debounce, "its debounce window to close"},
	{Due, "its due time: a delay, a retry's backoff or a snooze"},
	{Priority, "jobs of a higher priority ahead of it"},
	{Ready, "a free worker slot"},
}

// Reasons returns every reason, in the order they are checked.
func Reasons() []Reason {
	out := make([]Reason, len(reasons))
	for i, r := range reasons {
		out[i] = r.Reason
	}
	return out
}

// Help says what a job waiting for reason r waits for; "" for a reason not in the list.
func (r Reason) Help() string {
	for _, in := range reasons {
		if in.Reason == r {
			return in.Help
		}
	}
	return ""
}

// Waits reports whether a job of status s is one a reason is given for: a live job that is not
// running (waiting, scheduled or queued). A job that runs or ended has none.
func (s Status) Waits() bool { return s.Known() && !s.Final() && s != InProgress }
