package torture

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Size is how long a scenario's nemeses strike and how many jobs its producer publishes
// meanwhile.
type Size struct {
	Duration time.Duration
	Jobs     int
}

// Scenario is a named run: its nemeses and its two sizes.
type Scenario struct {
	Name    string
	Summary string
	Nemeses []string
	Short   Size // a few seconds: `conveyor torture --short`, and CI
	Long    Size // the documented run (docs/RELIABILITY.md, "Torture suite")
	// Topology is the Redis the scenario runs on: TopologyStandalone ("" too) or
	// TopologyCluster (topology.go).
	Topology string
}

var (
	short = Size{Duration: 4 * time.Second, Jobs: 300}
	long  = Size{Duration: 2 * time.Minute, Jobs: 20000}
)

// scenarios is the table of named scenarios, in the order `--list` prints them.
var scenarios = []Scenario{
	{Name: "kill-worker", Summary: "workers SIGKILLed and restarted", Nemeses: []string{NemesisKillWorker}, Short: short, Long: long},
	{Name: "stop-worker", Summary: "workers frozen (SIGSTOP) past the visibility timeout, then resumed", Nemeses: []string{NemesisStopWorker}, Short: short, Long: long},
	{Name: "term-worker", Summary: "workers stopped by SIGTERM mid-job and restarted", Nemeses: []string{NemesisTermWorker}, Short: short, Long: long},
	{Name: "redis-restart", Summary: "redis-server SIGKILLed and restarted on its AOF (appendfsync always)", Nemeses: []string{NemesisRedisRestart}, Short: short, Long: long},
	{Name: "redis-stop", Summary: "redis-server frozen (SIGSTOP) for 1-2.5 s", Nemeses: []string{NemesisRedisStop}, Short: short, Long: long},
	{Name: "proxy-reset", Summary: "every connection cut, and the next replies lost, by the proxy", Nemeses: []string{NemesisProxyReset}, Short: short, Long: long},
	{Name: "mixed", Summary: "worker SIGKILLs, Redis SIGKILLs, connection resets and script flushes, drawn at random",
		Nemeses: []string{NemesisKillWorker, NemesisRedisRestart, NemesisProxyReset, NemesisScriptFlush}, Short: short, Long: long},
	{Name: "cluster-slot-move", Summary: "the queue's slot migrated between cluster masters under load, in one batch or four",
		Nemeses: []string{NemesisSlotMove}, Short: clusterShort, Long: long, Topology: TopologyCluster},
	{Name: "cluster-failover", Summary: "the queue's cluster master failed over: CLUSTER FAILOVER on its replica, or SIGKILLed",
		Nemeses: []string{NemesisReplicaPromote, NemesisMasterKill}, Short: clusterShort, Long: long, Topology: TopologyCluster},
	{Name: "cluster-mixed", Summary: "slot migrations, replica promotions and worker SIGKILLs on a cluster, drawn at random",
		Nemeses: []string{NemesisSlotMove, NemesisKillWorker, NemesisReplicaPromote}, Short: clusterShort, Long: long, Topology: TopologyCluster},
}

// clusterShort is a cluster scenario's short size: a cluster takes seconds to start and a
// failover seconds to heal, so fewer faults fit; the run stays under half a minute.
var clusterShort = Size{Duration: 6 * time.Second, Jobs: 300}

// Scenarios returns the named scenarios, in their order.
func Scenarios() []Scenario { return slices.Clone(scenarios) }

// Lookup finds a scenario by name.
func Lookup(name string) (Scenario, error) {
	for _, s := range scenarios {
		if s.Name == name {
			return s, nil
		}
	}
	names := make([]string, len(scenarios))
	for i, s := range scenarios {
		names[i] = s.Name
	}
	return Scenario{}, fmt.Errorf("no scenario %q (there are %s)", name, strings.Join(names, ", "))
}

// ParseNemeses checks a comma-separated list of nemesis names (--nemesis).
func ParseNemeses(list []string) ([]string, error) {
	var out []string
	for _, item := range list {
		for n := range strings.SplitSeq(item, ",") {
			n = strings.TrimSpace(n)
			if n == "" {
				continue
			}
			if !slices.Contains(Nemeses, n) && n != NemesisLoseJob {
				return nil, fmt.Errorf("no nemesis %q (there are %s)", n, strings.Join(Nemeses, ", "))
			}
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out, nil
}
