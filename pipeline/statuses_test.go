package pipeline_test

import (
	"testing"

	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// Every status the list says a gauge counts has its QueueStats field, and Gauge reads it.
func TestQueueStatsGaugeOfEveryStatus(t *testing.T) {
	t.Parallel()
	st := pipeline.QueueStats{Waiting: 5, Scheduled: 1, Queued: 2, InProgress: 3, Dead: 4, Completed: 9, Canceled: 9}
	want := map[status.Status]int64{status.Waiting: 5, status.Scheduled: 1, status.Queued: 2,
		status.InProgress: 3, status.Failed: 4}
	for _, s := range status.All() {
		n, ok := st.Gauge(s)
		w, gauged := want[s]
		if ok != gauged || n != w {
			t.Errorf("Gauge(%s) = %d, %v; want %d, %v", s, n, ok, w, gauged)
		}
	}
	// A new gauged status without its field fails here, not as a silent zero.
	for _, in := range status.Infos() {
		if _, ok := st.Gauge(in.Status); ok != in.Gauge {
			t.Errorf("%s: Gauge ok = %v, the list says %v (QueueStats needs a field %q)", in.Status, ok, in.Gauge, in.Status.Word())
		}
	}
}
