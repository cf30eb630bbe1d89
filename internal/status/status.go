// Package status names where a job is in its life. It is a leaf: it imports nothing of
// Conveyor's. So every layer can use the statuses. The storage layer (internal/jobstate) has
// scripts that write them. The services (delayed, recovery) and their tests use them. Package
// pipeline gives them to users as pipeline.Status. A new status goes here, in All, in the
// scripts that write it and in docs/STATE_MACHINE.md. The drift tests of internal/jobstate check
// that those agree.
package status

// Status is where a job is in its life.
type Status string

// The statuses of a job. A job moves Scheduled -> Queued -> InProgress and ends Completed,
// Failed or Canceled; a failed attempt with retries left goes back to Scheduled.
const (
	// Waiting: a task of a workflow whose dependencies have not all completed (or, for a
	// Finally task, are not all final). The script that ends its last dependency puts it into
	// the stream.
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
	// Failed: retries exhausted, a SkipRetry error, a result over the limit, or an unreadable
	// stream entry. The job is in the dead set.
	Failed Status = "failed"
	// Canceled: canceled by a caller before it finished.
	Canceled Status = "canceled"
)

// All returns every status, in the order of a job's life.
func All() []Status {
	return []Status{Waiting, Scheduled, Queued, InProgress, Completed, Failed, Canceled}
}

// Final reports whether s is an end state.
func (s Status) Final() bool {
	return s == Completed || s == Failed || s == Canceled
}
