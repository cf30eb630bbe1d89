package torture

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A nemesis that cannot strike on a scenario's topology is refused with the reason, before
// anything starts; every scenario of the table passes its own check.
func TestCheckTopology(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		topology string
		nemeses  []string
		err      string
	}{
		{"", []string{NemesisKillWorker, NemesisProxyReset}, ""},
		{TopologyStandalone, []string{NemesisRedisRestart}, ""},
		{TopologyCluster, []string{NemesisKillWorker, NemesisSlotMove, NemesisReplicaPromote, NemesisMasterKill}, ""},
		{TopologyCluster, []string{NemesisProxyReset}, "nemesis proxy-reset needs the standalone topology"},
		{TopologyCluster, []string{NemesisRedisStop}, "nemesis redis-stop needs the standalone topology"},
		{"", []string{NemesisSlotMove}, "nemesis slot-move needs a cluster"},
		{TopologyStandalone, []string{NemesisMasterKill}, "nemesis master-kill needs a cluster"},
		{"ring", nil, `no topology "ring"`},
		{TopologySentinel, []string{NemesisKillWorker, NemesisSentinelFailover, NemesisSentinelMasterKill, NemesisScriptFlush}, ""},
		{TopologySentinel, []string{NemesisProxyReset}, "nemesis proxy-reset needs the standalone topology, and this scenario runs on a Sentinel set"},
		{TopologySentinel, []string{NemesisRedisRestart}, "nemesis redis-restart needs the standalone topology"},
		{TopologySentinel, []string{NemesisRedisStop}, "nemesis redis-stop needs the standalone topology"},
		{TopologySentinel, []string{NemesisLoseJob}, "nemesis lose-job needs the standalone topology"},
		{TopologySentinel, []string{NemesisMasterKill}, "nemesis master-kill needs a cluster, and this scenario runs on a Sentinel set"},
		{TopologySentinel, []string{NemesisSlotMove}, "nemesis slot-move needs a cluster"},
		{"", []string{NemesisSentinelFailover}, "nemesis sentinel-failover needs a Sentinel set, and this scenario runs on one redis-server"},
		{TopologyStandalone, []string{NemesisSentinelMasterKill}, "nemesis sentinel-master-kill needs a Sentinel set"},
		{TopologyCluster, []string{NemesisSentinelFailover}, "nemesis sentinel-failover needs a Sentinel set, and this scenario runs on a cluster"},
	} {
		err := CheckTopology(c.topology, c.nemeses)
		if c.err == "" {
			require.NoError(t, err, c)
		} else {
			require.ErrorContains(t, err, c.err, c)
		}
	}
	for _, s := range Scenarios() {
		require.NoError(t, CheckTopology(s.Topology, s.Nemeses), s.Name)
	}
	got, err := ParseNemeses([]string{"slot-move,master-kill", "replica-promote"})
	require.NoError(t, err)
	require.Equal(t, []string{NemesisSlotMove, NemesisMasterKill, NemesisReplicaPromote}, got)
	got, err = ParseNemeses([]string{"sentinel-failover,sentinel-master-kill"})
	require.NoError(t, err)
	require.Equal(t, []string{NemesisSentinelFailover, NemesisSentinelMasterKill}, got)
	s, err := Lookup("sentinel-failover")
	require.NoError(t, err)
	require.Equal(t, TopologySentinel, s.Topology)
	require.Empty(t, s.Defect)
}
