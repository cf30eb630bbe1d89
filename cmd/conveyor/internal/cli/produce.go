package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/handlers"
	"github.com/conveyorq/conveyor/pipeline"
)

// produceFlags are demo --produce-only's flags.
type produceFlags struct {
	only  bool
	queue string
	every time.Duration
	count int
}

func (pf *produceFlags) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&pf.only, "produce-only", false, "run no workers: publish a steady mix of demo jobs for workers elsewhere")
	f.StringVarP(&pf.queue, "queue", "q", "demo", "with --produce-only: the queue to publish to")
	f.DurationVar(&pf.every, "every", 200*time.Millisecond, "with --produce-only: time between two jobs")
	f.IntVarP(&pf.count, "count", "n", 0, "with --produce-only: stop after this many jobs (0: until SIGINT or SIGTERM)")
}

// changed reports whether a flag that only --produce-only uses was given without it.
func (pf *produceFlags) changed(cmd *cobra.Command) bool {
	f := cmd.Flags()
	return f.Changed("queue") || f.Changed("every") || f.Changed("count")
}

// produceMix is what demo --produce-only publishes, in turn: the demo's kinds of job, a
// delayed one, and every producePoisonEvery jobs a poison one that always fails and has no
// retries, so the dead set fills a little.
var produceMix = []func(n int) (pipeline.Task, []pipeline.Option){
	func(n int) (pipeline.Task, []pipeline.Option) {
		return pipeline.Task{Type: handlers.TypeEcho, Payload: fmt.Appendf(nil, `{"hello":"world","n":%d}`, n)}, nil
	},
	func(n int) (pipeline.Task, []pipeline.Option) {
		return pipeline.Task{Type: handlers.TypeSleep, Payload: fmt.Appendf(nil, `{"ms":%d}`, 200+n%5*150)}, nil
	},
	func(n int) (pipeline.Task, []pipeline.Option) {
		return pipeline.Task{Type: handlers.TypeEcho, Payload: fmt.Appendf(nil, `{"delayed":true,"n":%d}`, n)},
			[]pipeline.Option{pipeline.WithDelay(time.Duration(1+n%4) * time.Second)}
	},
	func(int) (pipeline.Task, []pipeline.Option) {
		return pipeline.Task{Type: handlers.TypeFlaky, Payload: []byte(`{"fail_times":1}`)}, nil
	},
}

// producePoisonEvery is how often demo --produce-only publishes a poison job.
const producePoisonEvery = 20

// produce publishes the demo mix until ctx ends or pf.count jobs are published. Publishing
// refused by Redis (down, out of memory) is logged and tried again at the next tick, so the
// producer rides out an outage.
func (a *app) produce(cmd *cobra.Command, pf *produceFlags) error {
	switch {
	case pf.every <= 0:
		return usageErrorf("--every must be positive, not %s", pf.every)
	case pf.count < 0:
		return usageErrorf("--count must not be negative, not %d", pf.count)
	case !a.redisChosen():
		return usageErrorf("--produce-only publishes for workers elsewhere: give --redis or set %s", envRedisURL)
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	a.log.Info().Str("queue", pf.queue).Str("every", pf.every.String()).Str("redis", redactURL(a.redisURL)).
		Msg("publishing demo jobs; SIGINT or SIGTERM stops")
	tick := time.NewTicker(pf.every)
	defer tick.Stop()
	published, failing := 0, false
	for pf.count == 0 || published < pf.count {
		n := published + 1
		task, opts := produceMix[published%len(produceMix)](n)
		if n%producePoisonEvery == 0 {
			task, opts = pipeline.Task{Type: handlers.TypeFail, Payload: []byte(`{"message":"demo: a poison job"}`)},
				[]pipeline.Option{pipeline.WithMaxRetries(0)}
		}
		j, err := c.Enqueue(ctx, pf.queue, task, opts...)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case errors.Is(err, pipeline.ErrInvalid):
			return usageError{err}
		case err != nil:
			if !failing {
				a.log.Error().Err(err).Msg("cannot publish; trying again at each tick")
			}
			failing = true
		default:
			if failing {
				a.log.Info().Msg("publishing again")
			}
			failing = false
			published++
			fmt.Fprintln(a.stdout, j.ID)
			if published%100 == 0 {
				a.log.Info().Int("published", published).Msg("demo jobs published")
			}
		}
		if pf.count > 0 && published >= pf.count {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
	return nil
}
