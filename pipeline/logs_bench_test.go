package pipeline_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// BenchmarkEndToEndLogs is BenchmarkEndToEnd with handlers that log: lines=0 logs nothing (the
// cost of the feature to a job that does not use it, to compare with BenchmarkEndToEnd),
// lines=1 and lines=10 log that many lines through Job.Logf, each kept with the job
// (docs/BENCHMARKS.md, "Issue 35: per-job logs"):
//
//	go test -run XXX -bench BenchmarkEndToEndLogs -benchmem -benchtime 20000x -count 3 ./pipeline/
func BenchmarkEndToEndLogs(b *testing.B) {
	for _, n := range []int{0, 1, 10} {
		b.Run("lines="+strconv.Itoa(n), func(b *testing.B) {
			drainHandler(b, redistest.Client(b), nil, func(_ context.Context, j *pipeline.Job) ([]byte, error) {
				for i := range n {
					j.Logf("rendering part %d of the invoice", i)
				}
				return nil, nil
			})
		})
	}
}
