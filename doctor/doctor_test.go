package doctor_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/doctor"
	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/status"
)

// newDoctor returns a Doctor over rdb with the default prefix.
func newDoctor(t *testing.T, rdb redis.UniversalClient) *doctor.Doctor {
	t.Helper()
	d, err := doctor.New(rdb, doctor.Config{})
	require.NoError(t, err)
	return d
}

// Check's verdicts on particular setups are cmd/conveyor's TestDoctorE2E; here, the report's
// shape and an unreachable Redis.
func TestCheck(t *testing.T) {
	t.Parallel()
	d := newDoctor(t, redistest.Client(t))
	r, err := d.Check(t.Context())
	require.NoError(t, err)
	var checks []string
	failed := 0
	for _, f := range r.Findings {
		checks = append(checks, f.Check)
		require.Contains(t, []string{doctor.OK, doctor.Warn, doctor.Fail}, f.Status)
		require.Empty(t, f.Node, "standalone")
		if f.Status == doctor.Fail {
			failed++
		}
	}
	require.Equal(t, []string{"version", "eviction", "memory", "persistence", "cluster", "clock", "acl"}, checks)
	require.Equal(t, failed, r.Failed)

	nodes, err := d.Memory(t.Context())
	require.NoError(t, err)
	require.Len(t, nodes, 1)
	require.NotEmpty(t, nodes[0].Policy)
}

// An unreachable Redis is Check's and Info's error, not a finding.
func TestCheckUnreachable(t *testing.T) {
	t.Parallel()
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	d := newDoctor(t, down)
	_, err := d.Check(t.Context())
	require.Error(t, err)
	_, err = d.Info(t.Context())
	require.Error(t, err)
}

func TestNewNilClient(t *testing.T) {
	t.Parallel()
	_, err := doctor.New(nil, doctor.Config{})
	require.Error(t, err)
}

// Info reports the server and a queue's memory, more for a queue with jobs.
func TestInfo(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	queue := redistest.UniqueName(t)
	jobtest.Seed(t, rdb, queue, status.Scheduled, jobtest.Opts{})
	jobtest.Seed(t, rdb, queue, status.Failed, jobtest.Opts{})
	info, err := newDoctor(t, rdb).Info(t.Context())
	require.NoError(t, err)
	require.Len(t, info.Nodes, 1)
	n := info.Nodes[0]
	require.NotEmpty(t, n.Version)
	require.Equal(t, "standalone", n.Mode)
	require.Positive(t, n.UsedMemory)
	require.Positive(t, n.MaxClients)
	require.Positive(t, n.ConnectedClients)
	require.NotEmpty(t, n.EvictionPolicy)
	require.NotEmpty(t, n.AppendFsync)
	require.Empty(t, n.Error)
	require.Empty(t, info.MemoryError)
	var qm *doctor.QueueMemory
	for k := range info.Queues {
		if info.Queues[k].Queue == queue {
			qm = &info.Queues[k]
		}
	}
	require.NotNil(t, qm, "the queue is listed")
	require.Equal(t, int64(2), qm.Jobs)
	require.Equal(t, 2, qm.Sampled)
	require.Positive(t, qm.Keys)
	require.Positive(t, qm.Records)
	require.Equal(t, qm.Keys+qm.Records, qm.Bytes)
	require.False(t, qm.Unmeasured)
}

// On a cluster, the checks of one server come once per master, each with its address, and
// Info has a node per master.
func TestOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	t.Parallel()
	c := redistest.StartCluster(t)
	d := newDoctor(t, c.Client(t))
	r, err := d.Check(t.Context())
	require.NoError(t, err)
	nodes := map[string]bool{}
	for _, f := range r.Findings {
		if f.Check == "cluster" {
			require.Equal(t, doctor.OK, f.Status, "%+v", f)
			nodes[f.Node] = true
		}
	}
	require.Len(t, nodes, len(c.Addrs), "%+v", r.Findings)
	info, err := d.Info(t.Context())
	require.NoError(t, err)
	require.Len(t, info.Nodes, len(c.Addrs))
	for _, n := range info.Nodes {
		require.Equal(t, "cluster", n.Mode)
		require.True(t, nodes[n.Node], "%s is a master the checks saw", n.Node)
	}
}
