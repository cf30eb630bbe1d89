package pipeline

import (
	"errors"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/internal/engine"
	"github.com/conveyorq/conveyor/internal/rediserr"
)

var (
	// ErrNotFound is returned for a job id that the queue does not know (never enqueued, or
	// its record expired after the retention time).
	ErrNotFound = errors.New("pipeline: job not found")
	// ErrPayloadTooLarge is returned by Enqueue for a payload over the client's limit.
	ErrPayloadTooLarge = errors.New("pipeline: payload too large")
	// ErrInvalid is wrapped by every error about bad input: an empty type, a bad queue name or
	// job id, a negative delay, an unknown option value.
	ErrInvalid = errors.New("pipeline: invalid argument")
	// ErrNotCancelable is returned by Cancel for a job that already ended.
	ErrNotCancelable = errors.New("pipeline: job already finished")
	// ErrNotDead is returned by Replay for a job that is not in the dead set.
	ErrNotDead = errors.New("pipeline: job is not in the dead set")
	// ErrNotScheduled is returned by Inspector.RunNow for a job that is not scheduled, or that
	// waits for a concurrency slot of a limit (only a freed slot moves it).
	ErrNotScheduled = errors.New("pipeline: job is not scheduled")
	// ErrNotDeletable is returned by Inspector.Delete for a job that is not scheduled or
	// queued. A running job is canceled (Cancel), a dead one purged (Purge), a finished one
	// expires.
	ErrNotDeletable = errors.New("pipeline: job is not scheduled or queued")
	// ErrNoHandler is wrapped by the error of an attempt of a job whose type the worker that
	// took it has no handler for. The attempt is retried like any failed one.
	ErrNoHandler = errors.New("pipeline: no handler")
	// ErrConflict is returned by Enqueue for an id (WithID) that names a job published with
	// another type or payload: a re-publish must be the same job. Nothing is written.
	ErrConflict = errors.New("pipeline: job id taken by a different job")
	// ErrUniqueHeld is returned by Replay for a job published with a unique key that another
	// live job holds now: replaying it would make two jobs with one key.
	ErrUniqueHeld = errors.New("pipeline: unique key held by another job")
	// ErrOutOfMemory is wrapped by the error of a publish that Redis refused because its used
	// memory is over its maxmemory. With maxmemory-policy noeviction, the setting Conveyor
	// needs, Redis refuses writes instead of evicting jobs. Nothing of the refused call was
	// written (for EnqueueBatch, see its note on chunks). Publish again once memory is freed
	// (dead purge, a shorter retention) or maxmemory raised. Workers keep finishing the jobs
	// they hold meanwhile (docs/OPERATIONS.md "When Redis refuses writes").
	ErrOutOfMemory = errors.New("pipeline: Redis refused the write: out of memory (used memory > maxmemory)")
)

// outOfMemory wraps a Redis OOM refusal in err with ErrOutOfMemory, and returns any other
// error as it is.
func outOfMemory(err error) error {
	if err == nil || errors.Is(err, ErrOutOfMemory) || !rediserr.IsOOM(err) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrOutOfMemory, err)
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// skipRetryError marks a handler error that must not be retried.
type skipRetryError struct{ err error }

func (e *skipRetryError) Error() string { return e.err.Error() }
func (e *skipRetryError) Unwrap() error { return e.err }

// SkipRetry wraps err so the job fails at once and goes to the dead set instead of being
// retried. It is for errors that another attempt cannot fix (a malformed payload, a 4xx
// answer).
func SkipRetry(err error) error {
	if err == nil {
		err = errors.New("skip retry")
	}
	return &skipRetryError{err: err}
}

// IsSkipRetry reports whether err, or an error it wraps, came from SkipRetry.
func IsSkipRetry(err error) bool {
	var s *skipRetryError
	return errors.As(err, &s)
}

// snoozeError is a handler's request to run its job again later (Snooze, RetryAt).
type snoozeError struct {
	after time.Duration // from the attempt's end, when at is zero
	at    time.Time
}

func (e *snoozeError) Error() string {
	if e.at.IsZero() {
		return "snoozed for " + e.after.String()
	}
	return "snoozed until " + e.at.UTC().Format(time.RFC3339Nano)
}

// due is when the job runs again, for an attempt that ended at end: never before end.
func (e *snoozeError) due(end time.Time) time.Time {
	if e.at.IsZero() {
		return end.Add(max(e.after, 0))
	}
	return maxTime(e.at, end)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Snooze, returned by a handler (as its error, alone or wrapped), runs the job again d after
// the attempt ends. It does not count the attempt or record an error. The job is
// `scheduled`, with ScheduledFor "snooze", and keeps its retries. It suits work that is not
// ready yet (a resource still being made, a rate the job obeys itself). A job may snooze
// WorkerConfig.MaxSnoozes times (100 by default). The next snooze fails it, so one that
// would snooze forever ends in the dead set with the reason.
func Snooze(d time.Duration) error { return &snoozeError{after: d} }

// RetryAt is Snooze until t (at once when t has passed).
func RetryAt(t time.Time) error { return &snoozeError{at: t} }

// Outcome is what became of a job attempt that did not complete; see JobError.
type Outcome uint8

// The outcomes of an attempt that did not complete.
const (
	// OutcomeRetry: the attempt failed and the job runs again at JobError.RetryAt.
	OutcomeRetry Outcome = iota + 1
	// OutcomeDead: the attempt failed for good (retries exhausted, a SkipRetry error, an
	// unreadable stream entry, a result over the limit); the job is in the dead set.
	OutcomeDead
	// OutcomeCanceled: the job was canceled while it ran; its result was not kept.
	OutcomeCanceled
	// OutcomeLost: the worker lost the job's lease, and nothing was written. It stopped
	// renewing the lease for longer than the visibility timeout. So the job was recovered and
	// handed to another worker.
	OutcomeLost
	// OutcomeAbandoned: the worker shut down before the attempt ended; the job was put back
	// in the stream to start again.
	OutcomeAbandoned
	// OutcomeSnoozed: the handler asked to run the job again later (Snooze, RetryAt); it runs
	// at JobError.RetryAt, and the attempt was not counted.
	OutcomeSnoozed
)

func (o Outcome) String() string { return engine.Outcome(o).String() }

// The engine numbers outcomes as Outcome does: this fails to compile when they drift apart.
var _ = [1]struct{}{}[uint8(OutcomeSnoozed)-uint8(engine.OutcomeSnoozed)+uint8(OutcomeRetry)-uint8(engine.OutcomeRetry)]

// JobError is what a Worker's handling of a job returns to Watermill middleware (Worker.Use)
// when the attempt did not complete, once its outcome is written. It says what became of the
// job and wraps the handler's error. That is nil for OutcomeCanceled, OutcomeLost and
// OutcomeAbandoned, which have none of their own. A completed job returns nil.
type JobError struct {
	Outcome Outcome
	// Timeout reports that the attempt ran past the job's timeout.
	Timeout bool
	// RetryAt is when the job runs again, for OutcomeRetry and OutcomeSnoozed.
	RetryAt time.Time
	// Err is the handler's error, or the reason the worker gave up on the job.
	Err error
}

func (e *JobError) Error() string {
	s := "job " + e.Outcome.String()
	if e.Timeout {
		s += " (timed out)"
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *JobError) Unwrap() error { return e.Err }
