package pipeline

import (
	"time"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/status"
)

// maxAttempts is how many attempts Job.Attempts holds at most: the latest.
const maxAttempts = keys.MaxAttemptHistory

// JobAttempt is one execution of a job, as Job.Attempts lists them.
type JobAttempt struct {
	// Number is the attempt's number (Job.Attempt then). A snoozed attempt is not counted, so
	// the next run has its number too. A replay counts from 1 again, after a mark of its own
	// (status.AttemptReplayed, Number 0).
	Number int
	// Worker is the worker (its consumer name) that ran it.
	Worker string
	// StartedAt is when it started; zero when unknown (a worker lost before it recorded the
	// start).
	StartedAt time.Time
	// EndedAt is when it ended; zero while it runs.
	EndedAt time.Time
	// Outcome is how it ended: one of status.AttemptRetried, status.AttemptSnoozed, status.AttemptLost,
	// status.AttemptFailed, status.AttemptReplayed, status.AttemptCompleted, status.AttemptCanceled or status.AttemptRunning.
	Outcome string
	// Error is the error it ended with, if any (cut to 512 bytes, newlines made spaces: the
	// whole last error is Job.LastError).
	Error string
}

// attemptJSON is the wire form of a JobAttempt.
type attemptJSON struct {
	Attempt   int    `json:"attempt"`
	Worker    string `json:"worker"`
	StartedAt int64  `json:"started_at"`
	EndedAt   int64  `json:"ended_at"`
	Outcome   string `json:"outcome"`
	Error     string `json:"error"`
}

func attemptsJSON(as []JobAttempt) []attemptJSON {
	out := make([]attemptJSON, len(as))
	for k, a := range as {
		out[k] = attemptJSON{Attempt: a.Number, Worker: a.Worker, StartedAt: unixMS(a.StartedAt),
			EndedAt: unixMS(a.EndedAt), Outcome: a.Outcome, Error: a.Error}
	}
	return out
}

// attemptsOf is a job's attempts, oldest first, the last maxAttempts. First comes the history
// its hash records: the attempts that ended without completing it, as they ended. Then its
// last attempt, read from the hash itself (worker, started_at, completed_at), unless the
// history has it already (the same start). That last one is added for a job that runs,
// completed or was canceled. It is added for a failed job too when its history lacks the
// attempt, as for one that failed before histories were kept.
func attemptsOf(r jobstate.Record) []JobAttempt {
	out := make([]JobAttempt, 0, len(r.Attempts)+1)
	seen := false
	for _, a := range r.Attempts {
		out = append(out, JobAttempt{Number: a.Attempt, Worker: a.Worker, StartedAt: a.Started,
			EndedAt: a.Ended, Outcome: a.Outcome, Error: a.Error})
		if !a.Started.IsZero() && a.Started.Equal(r.StartedAt) {
			seen = true
		}
	}
	if !r.StartedAt.IsZero() && !seen {
		last := JobAttempt{Number: r.Attempt, Worker: r.Worker, StartedAt: r.StartedAt, EndedAt: r.CompletedAt}
		switch status.Status(r.Status) {
		case status.InProgress:
			last.Outcome, last.EndedAt = status.AttemptRunning, time.Time{}
		case status.Completed:
			last.Outcome = status.AttemptCompleted
		case status.Canceled:
			last.Outcome = status.AttemptCanceled
		case status.Failed:
			last.Outcome, last.Error = status.AttemptFailed, r.LastError
		default:
			last.Outcome = ""
		}
		if last.Outcome != "" {
			out = append(out, last)
		}
	}
	if len(out) > maxAttempts {
		out = out[len(out)-maxAttempts:]
	}
	return out
}
