package pipeline

import (
	"errors"
	"fmt"
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
	// ErrUniqueHeld is returned by Replay for a job published with a unique key that another
	// live job holds now: replaying it would make two jobs with one key.
	ErrUniqueHeld = errors.New("pipeline: unique key held by another job")
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// skipRetryError marks a handler error that must not be retried.
type skipRetryError struct{ err error }

func (e *skipRetryError) Error() string { return e.err.Error() }
func (e *skipRetryError) Unwrap() error { return e.err }

// SkipRetry wraps err so the job fails at once and goes to the dead set instead of being
// retried: for errors that another attempt cannot fix (a malformed payload, a 4xx answer).
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
