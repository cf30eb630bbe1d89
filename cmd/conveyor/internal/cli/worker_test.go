package cli

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/pipeline"
)

func TestWorkerConfig(t *testing.T) {
	t.Parallel()
	base := func() workerFlags {
		return workerFlags{
			queues: []string{"default"}, concurrency: 10,
			backoffBase: time.Second, backoffMax: 10 * time.Minute,
			visibility: 30 * time.Second, recoveryInterval: 5 * time.Second,
			shutdownTimeout: 30 * time.Second, retention: 24 * time.Hour,
		}
	}
	for _, tc := range []struct {
		name  string
		edit  func(*workerFlags)
		err   string
		check func(*testing.T, pipeline.WorkerConfig)
	}{
		{name: "Defaults", edit: func(*workerFlags) {}, check: func(t *testing.T, c pipeline.WorkerConfig) {
			require.Equal(t, []string{"default"}, c.Queues)
			require.Equal(t, 10, c.Concurrency)
			require.Equal(t, pipeline.Backoff{Base: time.Second, Max: 10 * time.Minute}, c.Backoff)
			require.Equal(t, 24*time.Hour, c.Retention)
			require.Equal(t, 30*time.Second, c.VisibilityTimeout)
			require.Equal(t, 5*time.Second, c.RecoveryInterval)
			require.Equal(t, 30*time.Second, c.ShutdownTimeout)
		}},
		{name: "RetentionZeroDeletes", edit: func(wf *workerFlags) { wf.retention = 0 }, check: func(t *testing.T, c pipeline.WorkerConfig) {
			require.Equal(t, pipeline.RetainNone, c.Retention)
		}},
		{name: "QueuesDeduplicated", edit: func(wf *workerFlags) { wf.queues = []string{"b", "a", "b"} }, check: func(t *testing.T, c pipeline.WorkerConfig) {
			require.Equal(t, []string{"a", "b"}, c.Queues)
		}},
		{name: "NoQueuesMeansDefault", edit: func(wf *workerFlags) { wf.queues = nil }, check: func(t *testing.T, c pipeline.WorkerConfig) {
			require.Equal(t, []string{"default"}, c.Queues)
		}},
		{name: "Name", edit: func(wf *workerFlags) { wf.name = "w1" }, check: func(t *testing.T, c pipeline.WorkerConfig) {
			require.Equal(t, "w1", c.Name)
		}},
		{name: "EqualBackoff", edit: func(wf *workerFlags) { wf.backoffMax = wf.backoffBase }, check: func(t *testing.T, c pipeline.WorkerConfig) {
			require.Equal(t, c.Backoff.Base, c.Backoff.Max)
		}},
		{name: "QueueWeights", edit: func(wf *workerFlags) {
			wf.queues = []string{"critical=6", "default=3", "low"}
			wf.strictPriority = true
		}, check: func(t *testing.T, c pipeline.WorkerConfig) {
			require.Equal(t, []string{"critical", "default", "low"}, c.Queues)
			require.Equal(t, map[string]int{"critical": 6, "default": 3, "low": 1}, c.QueueWeights)
			require.True(t, c.StrictPriority)
		}},
		{name: "NoWeightsNoWeighting", edit: func(wf *workerFlags) { wf.queues = []string{"a", "b"} }, check: func(t *testing.T, c pipeline.WorkerConfig) {
			require.Nil(t, c.QueueWeights)
			require.False(t, c.StrictPriority)
		}},
		{name: "QueueWeightZero", edit: func(wf *workerFlags) { wf.queues = []string{"a=0"} }, err: `--queue "a=0": the weight must be a whole number from 1 to 1000`},
		{name: "QueueWeightNotANumber", edit: func(wf *workerFlags) { wf.queues = []string{"a=x"} }, err: `--queue "a=x": the weight must be`},
		{name: "QueueWeightTwice", edit: func(wf *workerFlags) { wf.queues = []string{"a=2", "a=3"} }, err: "--queue a is given twice with different weights (2 and 3)"},
		{name: "ConcurrencyZero", edit: func(wf *workerFlags) { wf.concurrency = 0 }, err: "--concurrency must be at least 1, not 0"},
		{name: "BackoffBaseZero", edit: func(wf *workerFlags) { wf.backoffBase = 0 }, err: "--backoff-base must be positive, not 0s"},
		{name: "BackoffMaxBelowBase", edit: func(wf *workerFlags) { wf.backoffMax = time.Millisecond }, err: "--backoff-max (1ms) must be at least --backoff-base (1s)"},
		{name: "VisibilityZero", edit: func(wf *workerFlags) { wf.visibility = 0 }, err: "--visibility-timeout must be positive"},
		{name: "RecoveryNegative", edit: func(wf *workerFlags) { wf.recoveryInterval = -time.Second }, err: "--recovery-interval must be positive"},
		{name: "ShutdownZero", edit: func(wf *workerFlags) { wf.shutdownTimeout = 0 }, err: "--shutdown-timeout must be positive"},
		{name: "RetentionNegative", edit: func(wf *workerFlags) { wf.retention = -time.Hour }, err: "--retention must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			wf := base()
			tc.edit(&wf)
			cfg, err := wf.config()
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			tc.check(t, cfg)
		})
	}
}

// A malformed --metrics-addr or --http-allow is a usage error (exit 2), found before Redis is
// asked anything.
func TestWorkerMetricsAndHTTPAllowFlagsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--metrics-addr", "9090"}, "--metrics-addr \"9090\": want host:port"},
		{[]string{"--metrics-addr", "127.0.0.1:http"}, "port \"http\" is not a number"},
		{[]string{"--http-allow", "10.0.0.0/33"}, `--http-allow "10.0.0.0/33"`},
		{[]string{"--http-allow", "127.0.0.1", "--http-allow", "hooks.internal:8080"},
			`--http-allow "hooks.internal:8080": want a CIDR prefix, an address or a host name`},
		{[]string{"--http-allow", ""}, "--http-allow: empty entry"},
		{[]string{"--http-allow", "::ffff:0:0/95"}, `--http-allow "::ffff:0:0/95": an IPv4-mapped prefix shorter than /96`},
		{[]string{"--http-allow", "2002:a00::/24"}, `--http-allow "2002:a00::/24": a 6to4`},
	} {
		_, stderr, code := runInProcess(t, "", append([]string{"worker", "--redis", "redis://127.0.0.1:1"}, tc.args...)...)
		require.Equal(t, 2, code, "%v: %s", tc.args, stderr)
		require.Contains(t, stderr, tc.msg, "%v", tc.args)
	}
}
