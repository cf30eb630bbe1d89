package torture

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/redisproc"
)

// TopologySentinel is a Redis Sentinel set: a master and one replica. Every data node has
// appendonly yes and appendfsync always. Three sentinels watch them (quorum 2). The producer
// and the checks use failover clients, and the workers a Sentinel URL. The producer publishes
// durably (WAIT for the replica, pipeline.WithReplicas).
//
// It has one replica, not two. A sentinel promotes the replica whose offset it last heard of
// as the highest. With two replicas that may be the one without the last acknowledged
// writes. With one, WAIT 1 names the replica that will be promoted.
const TopologySentinel = "sentinel"

// The Sentinel nemeses: they need TopologySentinel.
const (
	// NemesisSentinelFailover is a coordinated failover (redisproc.SentinelSet.Switchover).
	// The master's writes are paused (CLIENT PAUSE WRITE) until the replica has them all.
	// Then comes SENTINEL FAILOVER. The pause is lifted once the old master has lost its
	// replica. (It then refuses writes: min-replicas-to-write 1.) The sentinels turn the old
	// master into a replica of the new one about 10 s later. SENTINEL FAILOVER alone is not
	// coordinated. The old master takes writes from clients that have not heard of the
	// switch yet, and the failover discards them (docs/RELIABILITY.md, "Torture suite"). The
	// nemesis waits until the set is whole.
	NemesisSentinelFailover = "sentinel-failover"
	// NemesisSentinelMasterKill SIGKILLs the master. After down-after-milliseconds the
	// sentinels agree it is down and promote the replica. The killed node is restarted on its
	// AOF, as a master with stale data. The sentinels turn it into a replica of the new
	// master. The nemesis waits until the set is whole.
	NemesisSentinelMasterKill = "sentinel-master-kill"
)

// The sentinels' down-after-milliseconds and failover-timeout: a killed master is failed over
// a second or two after the kill.
const (
	sentinelDownAfter       = time.Second
	sentinelFailoverTimeout = 3 * time.Second
	sentinelMasterName      = "torture"
)

func init() {
	Nemeses = append(Nemeses, NemesisSentinelFailover, NemesisSentinelMasterKill)
}

// sentinelNemesis tells the nemeses that need TopologySentinel.
func sentinelNemesis(n string) bool {
	return n == NemesisSentinelFailover || n == NemesisSentinelMasterKill
}

// standaloneNemesis tells the nemeses that need the one redis-server: its process, or the
// proxy in front of its one address.
func standaloneNemesis(n string) bool {
	return n == NemesisProxyReset || n == NemesisRedisRestart || n == NemesisRedisStop || n == NemesisLoseJob
}

// checkSentinelTopology is CheckTopology's part for the Sentinel nemeses and topology.
func checkSentinelTopology(topology string, nemeses []string) error {
	for _, n := range nemeses {
		switch {
		case topology == TopologySentinel && standaloneNemesis(n):
			return fmt.Errorf("torture: nemesis %s needs the standalone topology, and this scenario runs on a Sentinel set (its clients ask the sentinels for the master's address: one proxy cannot stand between them and every node; sentinel-master-kill is a Sentinel set's redis-restart)", n)
		case topology == TopologySentinel && (n == NemesisSlotMove || n == NemesisReplicaPromote || n == NemesisMasterKill):
			return fmt.Errorf("torture: nemesis %s needs a cluster, and this scenario runs on a Sentinel set", n)
		case topology != TopologySentinel && sentinelNemesis(n):
			return fmt.Errorf("torture: nemesis %s needs a Sentinel set, and this scenario runs on %s", n, topologyName(topology))
		}
	}
	return nil
}

func topologyName(topology string) string {
	if topology == TopologyCluster {
		return "a cluster"
	}
	return "one redis-server"
}

// runSentinel starts the Sentinel set, the producer's and the checks' failover clients, and
// runs.
func (r *run) runSentinel(ctx context.Context) (*Result, error) {
	var err error
	r.sentinel, err = redisproc.StartSentinel(filepath.Join(r.dir, "sentinel"), sentinelMasterName, 1,
		sentinelDownAfter, sentinelFailoverTimeout, "--appendonly", "yes", "--appendfsync", "always",
		// A master without its replica refuses writes (NOREPLICAS, which clients retry): the
		// old master after a failover, and a killed one restarted on its stale AOF, take no
		// write the sentinels' reconfiguration would discard; Switchover relies on it.
		"--min-replicas-to-write", "1", "--min-replicas-max-lag", "10")
	if err != nil {
		return nil, err
	}
	defer func() { _ = r.sentinel.Stop() }()
	r.url = r.sentinel.URL()
	admin := redis.NewFailoverClient(r.sentinel.FailoverOptions())
	r.admin = admin
	defer admin.Close()
	producerRDB := redis.NewFailoverClient(r.sentinel.FailoverOptions())
	defer producerRDB.Close()
	var pids []string
	for _, s := range append(r.sentinel.Data, r.sentinel.Sentinels...) {
		pids = append(pids, fmt.Sprint(s.PID()))
	}
	return r.start(ctx, producerRDB, fmt.Sprintf("sentinel set of a master, a replica and 3 sentinels, pids %s (appendfsync always)", strings.Join(pids, ",")))
}

// strikeSentinel strikes one Sentinel nemesis and waits until the set is whole again. Every
// worker may have had a command cut short or an outcome lost.
func (r *run) strikeSentinel(ctx context.Context, n string) (touched int, err error) {
	begin := time.Now()
	switch n {
	case NemesisSentinelFailover:
		old, promoted, ferr := r.sentinel.Switchover(ctx)
		if ferr != nil {
			return 0, ferr
		}
		r.log("sentinel-failover: %s promoted in place of %s after %s", promoted, old, time.Since(begin).Round(time.Millisecond))
	case NemesisSentinelMasterKill:
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		old, err := r.sentinel.MasterAddr(wctx)
		if err != nil {
			return 0, err
		}
		s := r.sentinel.Node(old)
		if s == nil {
			return 0, fmt.Errorf("no data node at %s", old)
		}
		s.Kill()
		promoted, err := r.sentinel.WaitNewMaster(wctx, old)
		if err != nil {
			return 0, err
		}
		if err := s.Restart(); err != nil {
			return 0, err
		}
		r.log("sentinel-master-kill: %s killed, %s promoted after %s, the killed node restarted", old, promoted, time.Since(begin).Round(time.Millisecond))
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := r.sentinel.WaitHealthy(wctx); err != nil {
		return 0, err
	}
	r.log("%s: the set is whole again %s after the strike", n, time.Since(begin).Round(time.Millisecond))
	return len(r.workers), nil
}
