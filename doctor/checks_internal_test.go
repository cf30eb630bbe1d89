package doctor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
)

func TestCheckVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		version, status string
	}{
		{"7.0.0", OK}, {"7.2.4", OK}, {"8.0", OK}, {"10.0.1", OK},
		{"6.2.14", Fail}, {"6", Fail}, {"", Fail},
	} {
		f := checkVersion(tc.version)
		require.Equal(t, tc.status, f.Status, tc.version)
		require.Equal(t, "version", f.Check)
		require.Equal(t, tc.status == Fail, f.Fix != "", "a failure has its fix: %+v", f)
	}
}

func TestEvictionFinding(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy, status string
	}{
		{"noeviction", OK}, {"allkeys-lru", Fail}, {"volatile-ttl", Fail},
	} {
		f := evictionFinding(tc.policy)
		require.Equal(t, tc.status, f.Status, tc.policy)
		require.Contains(t, f.Detail, tc.policy)
		require.Equal(t, NodeMemory{Policy: tc.policy}.Evicts(), tc.status == Fail, tc.policy)
	}
	require.False(t, NodeMemory{}.Evicts(), "an unknown policy is not said to evict")
}

func TestCheckMemory(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		used, max  string
		status     string
		detailPart string
	}{
		{"no limit", "1000", "0", Warn, "no maxmemory"},
		{"room", "100", "1000", OK, "(10%)"},
		{"near full", "900", "1000", Warn, "(90%)"},
		{"full", "1000", "1000", Fail, "refuses writes"},
	} {
		f := checkMemory(map[string]string{"used_memory": tc.used, "maxmemory": tc.max})
		require.Equal(t, tc.status, f.Status, tc.name)
		require.Contains(t, f.Detail, tc.detailPart, tc.name)
		require.Equal(t, tc.status != OK, f.Fix != "", tc.name)
	}
}

func TestCheckCluster(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		enabled string
		client  bool
		status  string
	}{
		{"0", false, OK}, {"1", true, OK}, {"1", false, Fail}, {"0", true, Fail},
	} {
		f := checkCluster(map[string]string{"cluster_enabled": tc.enabled}, tc.client)
		require.Equal(t, tc.status, f.Status, "%+v", tc)
		require.Equal(t, tc.status == Fail, f.Fix != "", "%+v", tc)
	}
}

func TestClockFinding(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		skew       time.Duration
		status, at string
	}{
		{0, OK, "ahead of"},
		{-100 * time.Millisecond, OK, "behind"},
		{2 * time.Second, Warn, "ahead of"},
		{-time.Minute, Fail, "behind"},
	} {
		f := clockFinding(tc.skew, time.Millisecond)
		require.Equal(t, tc.status, f.Status, tc.skew)
		require.Contains(t, f.Detail, tc.at, tc.skew)
		require.Equal(t, tc.status != OK, f.Fix != "", tc.skew)
	}
}

func TestACLFinding(t *testing.T) {
	t.Parallel()
	f := aclFinding("", nil, "trying the commands")
	require.Equal(t, OK, f.Status)
	require.Equal(t, "the user may run what a worker runs (trying the commands)", f.Detail)
	f = aclFinding("app", []jobstate.Denial{{Command: "XADD", Reason: "no key permission"}, {Command: "EVAL", Reason: "NOPERM"}}, "ACL DRYRUN")
	require.Equal(t, Fail, f.Status)
	require.Equal(t, "user app may not run what a worker needs (ACL DRYRUN): XADD: no key permission; EVAL: NOPERM", f.Detail)
	require.NotEmpty(t, f.Fix)
}

func TestFillNode(t *testing.T) {
	t.Parallel()
	var n Node
	fillNode(&n, map[string]string{"redis_version": "7.2.4", "redis_mode": "standalone", "used_memory": "2048",
		"maxmemory": "0", "maxmemory_policy": "noeviction", "connected_clients": "3", "maxclients": "10000",
		"aof_enabled": "1", "rdb_last_bgsave_status": "ok", "rdb_last_save_time": "1700000000", "rdb_changes_since_last_save": "7",
		"uptime_in_seconds": "60"})
	require.Equal(t, Node{Version: "7.2.4", Mode: "standalone", UptimeSeconds: 60, UsedMemory: 2048, EvictionPolicy: "noeviction",
		ConnectedClients: 3, MaxClients: 10000, AOF: true, RDBLastSaveStatus: "ok", RDBLastSave: 1700000000, RDBChangesSinceSave: 7}, n)

	n = Node{}
	fillNode(&n, map[string]string{"connected_clients": "1"})
	require.Equal(t, []string{"INFO server", "INFO memory", "INFO persistence"}, n.Unsupported, "an embedded Redis reports few sections")
}
