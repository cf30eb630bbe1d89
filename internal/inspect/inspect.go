package inspect

import (
	"context"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
)

// Errors are the caller's sentinel errors, which the Engine wraps. Each must be set.
type Errors struct {
	Invalid       error // bad input: a cursor, an age
	NotFound      error // no such job
	NotDead       error // a replay or purge of a job that is not dead
	UniqueHeld    error // a replay whose unique key another job holds
	QueueBusy     error // DeleteQueue of a queue with unfinished jobs
	QueueNotFound error // DeleteQueue of a queue that is neither known nor has keys
}

// Config configures an Engine.
type Config struct {
	// Now is the time of a replay.
	Now func() time.Time
	// Partitions returns every partition of a queue, in partition order. It is the caller's,
	// so that a queue's partitions are read one way everywhere.
	Partitions func(ctx context.Context, queue string) ([]keys.Queue, error)
	// ClosedTTL is how long DeleteQueue leaves a partitioned queue's partitions closed.
	ClosedTTL time.Duration
	Errs      Errors
}

// Engine runs the Inspector's multi-step reads and writes over a store.
type Engine struct {
	store  jobstate.Backend
	prefix string
	cfg    Config
}

// New returns an Engine over store.
func New(store jobstate.Backend, cfg Config) *Engine {
	return &Engine{store: store, prefix: store.Prefix(), cfg: cfg}
}

func (e *Engine) partitions(ctx context.Context, queue string) ([]keys.Queue, error) {
	return e.cfg.Partitions(ctx, queue)
}

func (e *Engine) invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", e.cfg.Errs.Invalid, fmt.Sprintf(format, args...))
}

// wrapErr wraps a non-nil err with a formatted context.
func wrapErr(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}
