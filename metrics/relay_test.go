package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/metrics"
)

func TestRelayMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	pending, pendingErr := 7, error(nil)
	m, err := metrics.NewRelay(reg, func(context.Context) (int, error) { return pending, pendingErr })
	require.NoError(t, err)
	m.Batch(3, 1, 2, []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 3 * time.Second}, false)
	m.Batch(0, 0, 0, nil, true)
	m.Refused(map[string]int{"too_many_queues": 0, "redis": 0}, map[string]int{"conflict": 0})
	m.Refused(map[string]int{"too_many_queues": 500}, map[string]int{"conflict": 2})
	m.Refused(map[string]int{"too_many_queues": 100}, nil)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP conveyor_relay_held_back_total Outbox rows the relay put back for a later try, by reason: their queue was refused (too_many_queues, queue_not_found) or Redis failed for it (redis); the rows behind them go on.
# TYPE conveyor_relay_held_back_total counter
conveyor_relay_held_back_total{reason="redis"} 0
conveyor_relay_held_back_total{reason="too_many_queues"} 600
# HELP conveyor_relay_set_aside_total Outbox rows Redis refused for good, left in the table with their error, by reason (conflict, invalid, too_large).
# TYPE conveyor_relay_set_aside_total counter
conveyor_relay_set_aside_total{reason="conflict"} 2
# HELP conveyor_relay_batch_errors_total Relay batches that failed (PostgreSQL or Redis unreachable): their rows stay for a later batch.
# TYPE conveyor_relay_batch_errors_total counter
conveyor_relay_batch_errors_total 1
# HELP conveyor_relay_pending Outbox rows committed and waiting for the relay (not set aside).
# TYPE conveyor_relay_pending gauge
conveyor_relay_pending 7
# HELP conveyor_relay_rows_total Outbox rows the relay handled, by result: relayed (sent and deleted), duplicate (relayed, its job existed already), set_aside (refused for good, kept with its error).
# TYPE conveyor_relay_rows_total counter
conveyor_relay_rows_total{result="duplicate"} 1
conveyor_relay_rows_total{result="relayed"} 3
conveyor_relay_rows_total{result="set_aside"} 2
`), "conveyor_relay_batch_errors_total", "conveyor_relay_pending", "conveyor_relay_rows_total",
		"conveyor_relay_held_back_total", "conveyor_relay_set_aside_total"))
	fams, err := reg.Gather()
	require.NoError(t, err)
	var lags uint64
	for _, f := range fams {
		if f.GetName() == "conveyor_relay_lag_seconds" {
			lags = f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	require.EqualValues(t, 3, lags, "one observation per relayed row")
	// PostgreSQL away: the scrape still serves, without the gauge.
	pendingErr = errors.New("unreachable")
	n, err := testutil.GatherAndCount(reg, "conveyor_relay_pending")
	require.NoError(t, err)
	require.Zero(t, n)
	_, err = metrics.NewRelay(reg, nil)
	require.Error(t, err, "the same series twice on one registry")
}
