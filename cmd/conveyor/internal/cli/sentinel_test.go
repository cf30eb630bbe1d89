package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// A --redis URL with master_name is a Sentinel URL (go-redis's ParseFailoverURL form): it makes
// a failover client; with --cluster it is a usage error, and its passwords never show.
func TestDialSentinel(t *testing.T) {
	t.Parallel()
	c, err := dial("redis://s1:26379?master_name=mymaster&addr=s2:26379&addr=s3:26380&password=hunter2", false)
	require.NoError(t, err)
	defer c.Close()
	opt := c.(*redis.Client).Options()
	require.Equal(t, "FailoverClient", opt.Addr, "a failover client asks the sentinels for the master")
	require.Equal(t, "hunter2", opt.Password, "the password parameter is the master's")

	for _, tc := range []struct {
		name, url string
		cluster   bool
		want      string
	}{
		{"WithCluster", "redis://s1:26379?master_name=mymaster", true, "--cluster does not take"},
		{"EmptyName", "redis://s1:26379?master_name=", false, "master_name is empty"},
		{"BadAddr", "redis://s1:26379?master_name=m&addr=nope", false, "unable to parse addr param: nope"},
		{"Unknown", "redis://s1:26379?master_name=m&colour=red", false, "unexpected option: colour"},
		{"PasswordRedacted", "redis://u:hunter2@s1:26379?master_name=m&password=hunter2&nope=1", false, "redis://u:xxxxx@s1:26379?"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := checkRedisURL(tc.url, "--redis", tc.cluster)
			require.Error(t, err)
			require.Equal(t, 2, exitCode(err))
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "hunter2")
			_, err = dial(tc.url, tc.cluster)
			require.Error(t, err)
			require.NotContains(t, err.Error(), "hunter2")
		})
	}
}

// The usage message of a bad --redis names the Sentinel form.
func TestRunSentinelURLRefused(t *testing.T) {
	t.Parallel()
	_, stderr, code := runInProcess(t, "", "stats", "--all", "--cluster", "--redis", "redis://127.0.0.1:1?master_name=m")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "master_name names a Sentinel master")
	require.True(t, strings.Contains(stderr, "master_name=NAME"), stderr)
}

// Through a Sentinel URL: publish --wait-replicas succeeds once the replica has the job, and
// exits 1 (ids printed) when fewer replicas than asked confirm; status reads the job back.
func TestSentinelPublish(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Sentinel topology")
	}
	set := redistest.StartSentinel(t)
	q := redistest.UniqueName(t)
	stdout, stderr, code := runInProcess(t, "", "publish", "--redis", set.URL(), "-q", q, "-t", "echo", "--wait-replicas", "1")
	require.Equal(t, 0, code, stderr)
	id := strings.TrimSpace(stdout)
	n, err := set.Replica.Client(t).Exists(t.Context(), keys.New(keys.DefaultPrefix, q).Job(id)).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "on the replica once publish returned")

	stdout, stderr, code = runInProcess(t, "", "status", "--redis", set.URL(), "-q", q, id)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "queued")

	stdout, stderr, code = runInProcess(t, "", "publish", "--redis", set.URL(), "-q", q, "-t", "echo", "-n", "3",
		"--wait-replicas", "2", "--wait-timeout", "50ms")
	require.Equal(t, 1, code, stderr)
	require.Len(t, strings.Fields(stdout), 3, "the ids are printed: the jobs are on the master")
	require.Contains(t, stderr, "1 of 2 replicas confirmed within 50ms")
}

func TestPublishWaitFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--wait-replicas", "-1"}, "--wait-replicas must be in 0..100"},
		{[]string{"--wait-replicas", "1", "--wait-timeout", "0s"}, "--wait-timeout must be positive"},
		{[]string{"--wait-timeout", "1s"}, "--wait-timeout needs --wait-replicas"},
	} {
		_, stderr, code := runInProcess(t, "", append([]string{"publish", "--redis", noRedis, "-t", "echo"}, tc.args...)...)
		require.Equal(t, 2, code, stderr)
		require.Contains(t, stderr, tc.want)
	}
	wf := workerFlags{concurrency: 1, backoffBase: time.Second, backoffMax: time.Second, visibility: time.Second,
		recoveryInterval: time.Second, shutdownTimeout: time.Second, waitReplicas: 2, waitTimeout: time.Second}
	cfg, err := wf.config()
	require.NoError(t, err)
	require.Equal(t, 2, cfg.Replicas)
	wf.waitReplicas = -1
	_, err = wf.config()
	require.ErrorContains(t, err, "--wait-replicas must be in 0..100")
}
