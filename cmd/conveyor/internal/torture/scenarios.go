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

	// Defect names a known Conveyor defect the scenario finds, so that it fails until the
	// defect is fixed: `conveyor torture --short` with no names leaves it out (saying so),
	// and CI with it; named, it runs as any other. Empty for a scenario that passes.
	Defect string

	// Workload opts into the workloads beyond the plain one (plain, delayed, retries and
	// dead, unique keys), which every scenario runs.
	Workload Workload
}

// Workload is the optional part of a scenario's workload.
type Workload struct {
	// Partitions creates the queue with this many partitions (0 or 1: a plain queue); the
	// end-state checks read every partition.
	Partitions int
	// Limits publishes a quarter of the jobs as LimitedType. They are limited to
	// LimitConcurrency running at once across every worker, and LimitRate starts a second.
	// The checker counts their overlapping attempts in the ledger. It does not go with
	// Partitions: a partitioned queue takes no limits.
	Limits bool
	// Workflows publishes, every 30th job, a workflow of the next kind in turn. The kinds are
	// a diamond, and a diamond whose second task dies by design (its join canceled). They are
	// also a fan-out of 50 tasks and their join, and a batch of 10 (one dying by design) with
	// a callback.
	Workflows bool
	// Encryption seals payloads and results: the producer and the workers get a key file
	// (through $CONVEYOR_KEYS) listing OldKey. At an eighth of the run every process is
	// switched to NewKey first and OldKey after it (the workers restarted one at a time, then
	// the producer), and `conveyor keys rotate` re-seals what is stored while the nemeses
	// strike. Every job echoes its payload as its result. At the end, after a last rotation,
	// every payload and result stored must be under NewKey and open to what was published,
	// and no value of Redis may be under OldKey or hold a payload in plain text. The handler's
	// start records say which payload it was handed: the published one, whatever the key.
	Encryption bool
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
	{Name: "maxmemory", Summary: "Redis refusing writes (OOM) for 1-3 s: maxmemory set just above used_memory, then restored",
		Nemeses: []string{NemesisMaxmemory}, Short: short, Long: long},
	{Name: "partitions-mixed", Summary: "a queue of 4 partitions under worker SIGKILLs, Redis SIGKILLs and connection resets",
		Nemeses: []string{NemesisKillWorker, NemesisRedisRestart, NemesisProxyReset}, Short: short, Long: long,
		Workload: Workload{Partitions: 4}},
	{Name: "limits-kill-worker", Summary: "a job type limited to 2 running at once and a rate, its workers SIGKILLed, SIGSTOPped and restarted",
		Nemeses: []string{NemesisKillWorker, NemesisStopWorker}, Short: short, Long: long,
		Workload: Workload{Limits: true}},
	{Name: "workflows-mixed", Summary: "workflows, fan-outs and batches under worker SIGKILLs, Redis SIGKILLs, connection resets and script flushes",
		Nemeses: []string{NemesisKillWorker, NemesisRedisRestart, NemesisProxyReset, NemesisScriptFlush}, Short: short, Long: long,
		Workload: Workload{Workflows: true}},
	{Name: "encryption-mixed", Summary: "payloads and results sealed, the key rotated mid-run (workers restarted on a new key file, keys rotate run) under worker SIGKILLs, Redis SIGKILLs and connection resets",
		Nemeses: []string{NemesisKillWorker, NemesisRedisRestart, NemesisProxyReset}, Short: short, Long: long,
		Workload: Workload{Encryption: true}},
	{Name: "cluster-slot-move", Summary: "the queue's slot migrated between cluster masters under load, in one batch or four",
		Nemeses: []string{NemesisSlotMove}, Short: clusterShort, Long: long, Topology: TopologyCluster},
	{Name: "cluster-failover", Summary: "the queue's cluster master failed over: CLUSTER FAILOVER on its replica, or SIGKILLed",
		Nemeses: []string{NemesisReplicaPromote, NemesisMasterKill}, Short: clusterShort, Long: long, Topology: TopologyCluster},
	{Name: "cluster-mixed", Summary: "slot migrations, replica promotions and worker SIGKILLs on a cluster, drawn at random",
		Nemeses: []string{NemesisSlotMove, NemesisKillWorker, NemesisReplicaPromote}, Short: clusterShort, Long: long, Topology: TopologyCluster},
	{Name: "cluster-encryption", Summary: "encryption-mixed on a cluster: payloads and results sealed, the key rotated mid-run under slot migrations, replica promotions, master SIGKILLs and worker SIGKILLs",
		Nemeses: []string{NemesisSlotMove, NemesisReplicaPromote, NemesisMasterKill, NemesisKillWorker}, Short: clusterShort, Long: long, Topology: TopologyCluster,
		Workload: Workload{Encryption: true}},
	{Name: "sentinel-failover", Summary: "the Sentinel-managed master failed over: SENTINEL FAILOVER, or SIGKILLed and restarted; workers SIGKILLed",
		Nemeses: []string{NemesisSentinelFailover, NemesisSentinelMasterKill, NemesisKillWorker}, Short: clusterShort, Long: long, Topology: TopologySentinel},
	{Name: "clock-step", Summary: "a worker's wall clock stepped 2-30 s forward or back and healed, and workers SIGKILLed, at once one tick in three",
		Nemeses: []string{NemesisClockStep, NemesisKillWorker}, Short: short, Long: long},
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
