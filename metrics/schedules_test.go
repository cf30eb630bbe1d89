package metrics_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/metrics"
)

// The schedules' series: ticks by result, per schedule up to MaxScheduleLabels names and
// ScheduleOther past them, and how late each tick was enqueued.
func TestWorkerScheduleSeries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.NewWorker(reg)
	require.NoError(t, err)
	h := m.Hooks()
	h.ScheduleTick("nightly", 5*time.Millisecond)
	h.ScheduleTick("nightly", 500*time.Millisecond+time.Second)
	h.ScheduleMissed("nightly", 7, false)
	h.ScheduleMissed("report", 3, true)
	require.Equal(t, 1.0, value(t, reg, "conveyor_schedule_ticks_total", "schedule", "nightly", "result", metrics.TickOnTime))
	require.Equal(t, 1.0, value(t, reg, "conveyor_schedule_ticks_total", "schedule", "nightly", "result", metrics.TickLate))
	require.Equal(t, 7.0, value(t, reg, "conveyor_schedule_ticks_total", "schedule", "nightly", "result", metrics.TickSkipped))
	require.Equal(t, 3.0, value(t, reg, "conveyor_schedule_ticks_total", "schedule", "report", "result", metrics.TickMerged))
	require.Equal(t, 2.0, value(t, reg, "conveyor_schedule_tick_delay_seconds"))

	for k := range metrics.MaxScheduleLabels + 50 {
		h.ScheduleTick(fmt.Sprintf("s%d", k), 0)
	}
	names := map[string]bool{}
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "conveyor_schedule_ticks_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "schedule" {
					names[l.GetValue()] = true
				}
			}
		}
	}
	require.Len(t, names, metrics.MaxScheduleLabels+1, "the bound's names and the aggregate")
	require.True(t, names[metrics.ScheduleOther])
	// nightly and report took two of the names: 52 of the s* schedules are counted together.
	require.Equal(t, 52.0, value(t, reg, "conveyor_schedule_ticks_total", "schedule", metrics.ScheduleOther, "result", metrics.TickOnTime))
}
