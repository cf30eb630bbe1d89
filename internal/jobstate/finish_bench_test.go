package jobstate_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
)

// BenchmarkFinishCall builds the finish.lua call of a worker's chunk of 50 outcomes, the
// worker's hot path before the round trip, without Redis: its allocations per op are the
// figure to watch (each job's transition must cost no allocation beyond its arguments).
func BenchmarkFinishCall(b *testing.B) {
	q := keys.New(keys.DefaultPrefix, "bench")
	now := time.Now()
	ts := make([]jobstate.Transition, 50)
	for i := range ts {
		id := "job-" + strconv.Itoa(i)
		ts[i] = jobstate.Done(&q, jobstate.DoneParams{Ran: ran(id, "1789999999990-"+strconv.Itoa(i), now), Result: ""}).WithPayload("p")
	}
	cfg := jobstate.FinishConfig{Worker: "w1", Retention: time.Hour, MinRetention: time.Minute}
	b.ReportAllocs()
	for b.Loop() {
		_ = jobstate.FinishCall(cfg, ts)
	}
}
