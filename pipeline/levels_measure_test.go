package pipeline_test

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/pipeline"
)

var measureIdleLevels = flag.Int("measure-idle-levels", 0,
	"TestMeasureIdleLevels: rounds of publish-to-start times of levels 2-4 on an idle queue (0: skip)")

// TestMeasureIdleLevels measures, for docs/RELIABILITY.md ("Priority levels of an idle queue"),
// how long a job of level 2, 3 or 4 waits to start on an idle queue whose jobs use levels 1 to
// 4, at concurrency 1 and 3, and on a fresh queue whose only level is 2 at concurrency 1: from
// its publish returning to its handler starting, one job at a time. A measurement, not a test:
//
//	go test -count=1 -run TestMeasureIdleLevels -v ./pipeline/ -args -measure-idle-levels 20
func TestMeasureIdleLevels(t *testing.T) {
	rounds := *measureIdleLevels
	if rounds == 0 {
		t.Skip("a measurement: run with -measure-idle-levels N")
	}
	report := func(name string, waits []time.Duration) {
		slices.Sort(waits)
		t.Logf("%-32s n=%d min %v median %v max %v", name, len(waits),
			waits[0].Round(time.Millisecond), waits[len(waits)/2].Round(time.Millisecond), waits[len(waits)-1].Round(time.Millisecond))
	}
	// run starts a worker on a new queue after one job of each of levels, and returns a
	// function that publishes a job of a level and waits for its start.
	run := func(t *testing.T, concurrency int, levels []int) func(level int) time.Duration {
		b := setup(t)
		ctx := t.Context()
		starts := make(chan time.Time, 16)
		for _, level := range levels {
			_, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "warm"}, pipeline.WithPriority(level))
			require.NoError(t, err)
		}
		warm := make(chan struct{}, 16)
		b.startWorker(t, pipeline.WorkerConfig{Concurrency: concurrency}, map[string]pipeline.HandlerFunc{
			"warm": func(context.Context, *pipeline.Job) ([]byte, error) { warm <- struct{}{}; return nil, nil },
			"t":    func(context.Context, *pipeline.Job) ([]byte, error) { starts <- time.Now(); return nil, nil },
		})
		for range levels {
			select {
			case <-warm:
			case <-time.After(10 * time.Minute):
				t.Fatal("the warm-up jobs did not run")
			}
		}
		return func(level int) time.Duration {
			at := time.Now()
			_, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithPriority(level))
			require.NoError(t, err)
			select {
			case started := <-starts:
				return started.Sub(at)
			case <-time.After(10 * time.Minute):
				t.Fatalf("the level-%d job did not start in 10 minutes", level)
				return 0
			}
		}
	}
	for _, concurrency := range []int{1, 3} {
		t.Run(fmt.Sprintf("Concurrency%d", concurrency), func(t *testing.T) {
			publish := run(t, concurrency, []int{1, 2, 3, 4})
			waits := map[int][]time.Duration{}
			for range rounds {
				for _, level := range []int{4, 3, 2} {
					waits[level] = append(waits[level], publish(level))
				}
			}
			for _, level := range []int{2, 3, 4} {
				report(fmt.Sprintf("concurrency %d, level %d", concurrency, level), waits[level])
			}
		})
	}
	t.Run("FreshLevel2", func(t *testing.T) {
		var waits []time.Duration
		for range rounds {
			t.Run("Round", func(t *testing.T) {
				waits = append(waits, run(t, 1, []int{2})(2))
			})
		}
		report("fresh queue, level 2 only, concurrency 1", waits)
	})
}
