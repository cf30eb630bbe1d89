package pipeline

import (
	"time"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
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

// attemptsOf is a job's attempts, oldest first, the last maxAttempts (Record.AllAttempts).
func attemptsOf(r jobstate.Record) []JobAttempt {
	as := r.AllAttempts(maxAttempts)
	out := make([]JobAttempt, len(as))
	for k, a := range as {
		out[k] = JobAttempt{Number: a.Attempt, Worker: a.Worker, StartedAt: a.Started, EndedAt: a.Ended,
			Outcome: a.Outcome, Error: a.Error}
	}
	return out
}
