package metrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/status"
)

// requireGaugedStates checks that conveyor_queue_jobs's state labels are the words of the
// statuses package status says a gauge counts, and that its help names each: a new gauged
// status needs no edit in metrics.
func requireGaugedStates(t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	fams, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]bool{}
	help := ""
	for _, f := range fams {
		if f.GetName() != "conveyor_queue_jobs" {
			continue
		}
		help = f.GetHelp()
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "state" {
					got[l.GetValue()] = true
				}
			}
		}
	}
	want := map[string]bool{}
	for _, in := range status.Infos() {
		if in.Gauge {
			want[in.Status.Word()] = true
			require.Contains(t, help, in.Status.Word()+" (")
		}
	}
	require.Equal(t, want, got)
}
