package api

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/pipeline"
)

// jobRef names a job.
type jobRef struct{ queue, id string }

// poller serves the long polls of a Server. Each waits with a pipeline.Waiter of the Server's
// own, which learns of the job's end from job events. All the waits of a Server share one
// subscription per queue. A waiting request holds no Redis connection, and costs no reads but
// the Waiter's bounded fallback. Close ends every wait at once, and the subscriptions.
type poller struct {
	waiter *pipeline.Waiter
	log    zerolog.Logger

	n      atomic.Int64    // requests waiting
	ctx    context.Context // ends with close
	cancel context.CancelFunc
}

func newPoller(waiter *pipeline.Waiter, log zerolog.Logger) *poller {
	ctx, cancel := context.WithCancel(context.Background())
	return &poller{waiter: waiter, log: log, ctx: ctx, cancel: cancel}
}

// waitFor waits up to d for the job to end, or until ctx ends or the poller closes. It returns
// the job when it ended. Otherwise it returns the job as last read. It returns nil when the job
// changed since or the wait ended early; the caller reads it then. After close it returns nil at
// once.
func (p *poller) waitFor(ctx context.Context, ref jobRef, d time.Duration) (*pipeline.Job, error) {
	if p.ctx.Err() != nil {
		return nil, nil
	}
	p.n.Add(1)
	defer p.n.Add(-1)
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	stop := context.AfterFunc(p.ctx, cancel)
	defer stop()
	j, err := p.waiter.Wait(wctx, ref.queue, ref.id)
	switch {
	case err == nil:
		return j, nil
	case ctx.Err() != nil:
		return nil, ctx.Err() // the request went away
	case wctx.Err() != nil:
		// The wait ended (its time, or Close): answer with the job as it is.
		return j, nil
	case errors.Is(err, pipeline.ErrNotFound), errors.Is(err, pipeline.ErrInvalid):
		return nil, err
	default:
		p.log.Warn().Err(err).Str("queue", ref.queue).Str("job_id", ref.id).Msg("long poll failed")
		return nil, err
	}
}

// close ends every wait at once and the subscriptions; later waits answer at once.
func (p *poller) close() {
	p.cancel()
	p.waiter.Close()
}

// waiting returns how many requests wait, for tests.
func (p *poller) waiting() int { return int(p.n.Load()) }
