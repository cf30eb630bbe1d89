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
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP conveyor_relay_batch_errors_total Relay batches that failed (PostgreSQL or Redis unreachable, a queue refused): their rows stay for a later batch.
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
`), "conveyor_relay_batch_errors_total", "conveyor_relay_pending", "conveyor_relay_rows_total"))
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
