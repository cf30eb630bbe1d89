package pipeline

import (
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/durable"
)

// Durable writes: the public settings and errors of a replica wait. Why a wait needs WAIT
// and an anchor write is internal/durable's package doc.

// maxReplicas bounds the replicas a write may wait for.
const maxReplicas = 100

// ErrNotReplicated is wrapped (by a *ReplicationError) by the error of a write that fewer
// replicas than asked confirmed in time. The write was applied on the master: the job exists
// and will run unless the master fails before a replica has it. Publishing it again with its
// id (WithID) is idempotent and waits again.
var ErrNotReplicated = errors.New(durable.NotReplicated)

// ReplicationError says how many replicas confirmed a write that waited for more.
type ReplicationError struct {
	Wanted    int           // replicas asked for
	Confirmed int           // replicas that confirmed in time
	Timeout   time.Duration // how long the write waited
	Err       error         // WAIT's own error when it failed (Confirmed is then 0)
}

func (e *ReplicationError) Error() string { return (*durable.Shortfall)(e).Error() }

// Is makes errors.Is(err, ErrNotReplicated) true.
func (e *ReplicationError) Is(target error) bool { return target == ErrNotReplicated }

// Unwrap returns WAIT's own error, if any.
func (e *ReplicationError) Unwrap() error { return e.Err }

// replicas is a replica wait: n replicas within timeout; n == 0 waits for none.
type replicas struct {
	n       int
	timeout time.Duration
}

// check validates a replica setting, wrapping ErrInvalid; what names it in the message.
func (r replicas) check(what string) error {
	switch {
	case r.n < 0 || r.n > maxReplicas:
		return invalid("%s: replicas %d outside 0..%d", what, r.n, maxReplicas)
	case r.timeout < 0:
		return invalid("%s: replica timeout %s is negative", what, r.timeout)
	}
	return nil
}

func (r replicas) withDefaults() replicas {
	w := durable.Want{N: r.n, Timeout: r.timeout}.WithDefaults()
	return replicas{n: w.N, timeout: w.Timeout}
}

// WithReplicas makes Enqueue or EnqueueBatch return only once n (0 to 100) replicas have the
// jobs. When fewer confirmed within timeout (zero: 1s), the call fails with
// an error wrapping ErrNotReplicated (a *ReplicationError). Such an error does not mean the
// jobs do not exist. They were written on the master and come back with the error. Publish them again
// with their ids (WithID) to wait again. With n = 0 it waits for none, overriding
// ClientConfig.Replicas. In EnqueueBatch the wait covers the whole call; a task's own
// WithReplicas raises it.
//
// The wait is Redis's WAIT, sent in the same round trip as the enqueue script. On a cluster it
// goes to the master of each node the jobs go to. A replica that confirmed has the jobs in
// memory; whether it also has them on disk is its appendfsync's matter. Throughput and the
// loss it prevents are measured in docs/OPERATIONS.md ("Durable publish").
func WithReplicas(n int, timeout time.Duration) Option {
	return func(o *enqueueOptions) {
		r := replicas{n: n, timeout: timeout}
		if err := r.check("WithReplicas"); err != nil {
			o.errs = append(o.errs, err)
		}
		o.replicas, o.hasReplicas = r, true
	}
}

// replicasFor returns the replica wait of an enqueue call: the client's, or the strongest
// WithReplicas among the call's and the tasks' options.
func (c *Client) replicasFor(common []Option, tasks []Task) replicas {
	r := replicas{n: c.cfg.Replicas, timeout: c.cfg.ReplicaTimeout}
	given := false
	take := func(opts []Option) {
		if len(opts) == 0 {
			return
		}
		var o enqueueOptions
		for _, opt := range opts {
			opt(&o)
		}
		if !o.hasReplicas {
			return
		}
		if !given {
			r, given = o.replicas, true
			return
		}
		r.n, r.timeout = max(r.n, o.replicas.n), max(r.timeout, o.replicas.timeout)
	}
	take(common)
	for i := range tasks {
		take(tasks[i].Opts)
	}
	return r.withDefaults()
}

// writer returns what an enqueue writes through: nil (rdb itself) unless r asks for replicas.
func (r replicas) writer(rdb redis.UniversalClient) *durable.Writer {
	return durable.NewWriter(rdb, durable.Want{N: r.n, Timeout: r.timeout})
}

// replicated returns err, joined with a *ReplicationError when fewer replicas than wanted
// confirmed w's writes. A Redis error (other than ErrConflict, which refuses single jobs of a
// batch that was written) comes back alone: the writes may not have happened.
func replicated(w *durable.Writer, err error) error {
	if err != nil && !errors.Is(err, ErrConflict) {
		return err
	}
	short := w.Shortfall()
	if short == nil {
		return err
	}
	return errors.Join(err, (*ReplicationError)(short))
}

// UnreplicatedWrites returns how many of the worker's outcome writes fewer replicas confirmed
// than WorkerConfig.Replicas asks (0 without it).
func (w *Worker) UnreplicatedWrites() int64 { return w.replicas.Unreplicated() }
