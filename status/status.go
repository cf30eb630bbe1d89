// Package status names where a job is in its life (Status) and how each of its attempts ended
// (the Attempt* outcomes). Job.Status, Inspector.List and the API's status values are this
// package's. It is a leaf: it imports nothing of Conveyor's, so every layer, the store's
// included, uses the same values.
//
// The list below is the one place a status is declared. The OpenAPI enums are generated from it
// (go generate ./api). The dashboard's tabs and colours, the CLI's lists and completion, the
// events and the metrics' labels read it at run time. The few other files a new status touches
// are named in docs/ARCHITECTURE.md, "Adding a status"; drift tests fail when one is missed.
//
// Info, Infos, Describe and Tone are that list as Conveyor's own tools show it: the dashboard's
// colours, the metrics' help. They stay public, not internal, because they are the same list:
// splitting it in two would let the two drift, and the statuses cannot live in an internal
// package now that users name them. Read them to draw a status as Conveyor does. A Tone or a
// Help text may change with the dashboard; the statuses and their words do not.
package status

// Status is where a job is in its life. Its values are the wire's: JSON, the API's status
// values and the store's scripts read and write them as they are.
type Status string

// The statuses of a job. A job moves Scheduled -> Queued -> InProgress and ends Completed,
// Failed or Canceled; a failed attempt with retries left goes back to Scheduled.
const (
	// Waiting: a task of a workflow (Client.Workflow) whose dependencies have not all completed
	// (or, for a Finally task, are not all final). The script that ends its last dependency
	// puts it into the stream. The queue's index of waiting tasks holds it.
	Waiting Status = "waiting"
	// Scheduled: waiting in the queue's scheduled set for its due time (a delayed job or a
	// retry).
	Scheduled Status = "scheduled"
	// Queued: in the stream, not yet started by a worker.
	Queued Status = "queued"
	// InProgress: a worker holds it and is running it.
	InProgress Status = "in_progress"
	// Completed: a handler returned without error; the result is kept for the retention time.
	Completed Status = "completed"
	// Failed: retries exhausted (a job no worker has a handler for uses its retries too), a
	// SkipRetry error, a result over the limit, or an unreadable stream entry. The job is in
	// the dead set. A person reads it as Dead (Status.Word).
	Failed Status = "failed"
	// Canceled: canceled by a caller before it finished.
	Canceled Status = "canceled"
)

// Tone is the colour a status is drawn in: one of the dashboard's palette names.
type Tone string

// The dashboard's palette (its CSS variables of the same names).
const (
	ToneOK    Tone = "ok"
	ToneBad   Tone = "bad"
	ToneWarn  Tone = "warn"
	ToneInfo  Tone = "info"
	ToneMuted Tone = "muted"
)

// Info is what the layers above the store know of a status. The zero values say no: a status
// that is not listable has no tab, no list --status and no OpenAPI list value.
type Info struct {
	Status Status
	// Word is how a person reads it, where it differs from the status ("dead" for failed).
	Word string
	// Final: a job never leaves it (but by a replay).
	Final bool
	// Listable: an index of the queue holds it, so Inspector.List pages it.
	Listable bool
	// Gauge: QueueStats counts the queue's jobs in it now, in the field whose JSON name is
	// its Word. That word is also its state label in conveyor_queue_jobs.
	Gauge bool
	// Tone is its colour on the dashboard.
	Tone Tone
	// Help says what the jobs in it are, after the word "Jobs": the dashboard's titles and the
	// metric's help read it.
	Help string
}

// list is every status, in the order of a job's life.
var list = []Info{
	{Status: Waiting, Listable: true, Gauge: true, Tone: ToneMuted,
		Help: "tasks of a workflow waiting for the tasks they run after"},
	{Status: Scheduled, Listable: true, Gauge: true, Tone: ToneWarn,
		Help: "waiting for their time: a delay, a retry's backoff or a snooze"},
	{Status: Queued, Listable: true, Gauge: true, Tone: ToneWarn,
		Help: "waiting for a worker"},
	{Status: InProgress, Listable: true, Gauge: true, Tone: ToneInfo,
		Help: "a worker holds"},
	{Status: Completed, Final: true, Listable: true, Tone: ToneOK,
		Help: "that succeeded, kept while retained"},
	{Status: Failed, Word: Dead, Final: true, Listable: true, Gauge: true, Tone: ToneBad,
		Help: "failed for good, kept for a replay or a purge"},
	{Status: Canceled, Final: true, Listable: true, Tone: ToneMuted,
		Help: "canceled before they finished, kept while retained"},
}

// All returns every status, in the order of a job's life.
func All() []Status {
	out := make([]Status, len(list))
	for i, in := range list {
		out[i] = in.Status
	}
	return out
}

// Infos returns what is known of every status, in the order of All.
func Infos() []Info {
	return append([]Info(nil), list...)
}

// Listable returns the statuses Inspector.List pages, in the order the CLI and the dashboard
// offer them. Those a gauge counts come first (what the queue holds now), then the others.
func Listable() []Status {
	var out []Status
	for _, gauge := range []bool{true, false} {
		for _, in := range list {
			if in.Listable && in.Gauge == gauge {
				out = append(out, in.Status)
			}
		}
	}
	return out
}

// Describe returns what is known of s; ok is false for a status not in the list.
func Describe(s Status) (in Info, ok bool) {
	for _, in := range list {
		if in.Status == s {
			return in, true
		}
	}
	return Info{Status: s}, false
}

// Final reports whether s is an end state.
func (s Status) Final() bool {
	in, _ := Describe(s)
	return in.Final
}

// Known reports whether s is one of All.
func (s Status) Known() bool {
	_, ok := Describe(s)
	return ok
}

// Listable reports whether an index holds the jobs in s, so that Inspector.List pages them.
func (s Status) Listable() bool {
	in, _ := Describe(s)
	return in.Listable
}

// Word is how a person reads s: Dead ("dead") for Failed, the status itself otherwise.
func (s Status) Word() string {
	in, _ := Describe(s)
	if in.Word != "" {
		return in.Word
	}
	return string(s)
}

// Dead is what a person reads for Failed. A job that failed for good is "dead" in the CLI's and
// the dashboard's tables, headings and help texts, and so is the set it sits in. "failed" stays
// its status on the wire (JSON, the API's status values), which scripts depend on. Wherever a
// status is given, "dead" is accepted as an alias of it (Parse).
const Dead = "dead"

// Parse reads a status as a person gives it: Dead ("dead") is Failed; any other text is taken
// as it is (Inspector.List refuses an unknown one).
func Parse(s string) Status {
	if s == Dead {
		return Failed
	}
	return Status(s)
}
