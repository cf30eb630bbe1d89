package torture

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/redisproc"
	"github.com/conveyorq/conveyor/keyspace"
	"github.com/conveyorq/conveyor/pipeline"
)

// The topologies a scenario's Redis takes.
const (
	// TopologyStandalone is one redis-server (the default, ""): appendonly, appendfsync as
	// Options.AppendFsync says.
	TopologyStandalone = "standalone"
	// TopologyCluster is a Redis Cluster of 3 masters, each with a replica, every node with
	// appendonly yes and appendfsync always; the producer publishes durably (WAIT for the
	// replica, pipeline.WithReplicas) and the workers run with --cluster.
	TopologyCluster = "cluster"
)

// The cluster nemeses: they need TopologyCluster.
const (
	// NemesisSlotMove moves the queue's slot (its hash tag's) to another master under load.
	// It uses the documented CLUSTER SETSLOT IMPORTING/MIGRATING + MIGRATE procedure. One
	// move in two goes in one batch, the other in four small batches 100 ms apart. Clients
	// see ASK, TRYAGAIN and then MOVED. Moves alternate between masters, so the slot also goes
	// back.
	NemesisSlotMove = "slot-move"
	// NemesisReplicaPromote sends CLUSTER FAILOVER to the replica of the queue's master: a
	// coordinated failover (the replica catches up before it takes over; nothing is lost).
	NemesisReplicaPromote = "replica-promote"
	// NemesisMasterKill SIGKILLs the queue's master; its replica takes over after
	// cluster-node-timeout, and the killed node is restarted (AOF always) and rejoins as a
	// replica. Replication is asynchronous: a write the master acknowledged and had not sent
	// to the replica is lost in the failover. The producer's publishes wait for the replica
	// (durable publish), so no acknowledged publish may be lost; a worker's outcome lost so
	// runs the job again, which the duplicate-execution bound counts.
	NemesisMasterKill = "master-kill"
)

// clusterNodeTimeout is the cluster's cluster-node-timeout: a killed master's replica takes
// over about this long (plus an election) after the kill.
const clusterNodeTimeout = 2 * time.Second

func init() {
	// Appended here rather than in nemesis.go's list so that topologies and the nemeses of
	// other kinds grow apart.
	Nemeses = append(Nemeses, NemesisSlotMove, NemesisReplicaPromote, NemesisMasterKill)
}

// CheckTopology says whether every nemesis can strike on topology: the proxy and the
// single server's own faults need the standalone server, the cluster ones a cluster.
func CheckTopology(topology string, nemeses []string) error {
	switch topology {
	case "", TopologyStandalone, TopologyCluster, TopologySentinel:
	default:
		return fmt.Errorf("torture: no topology %q (there are %s, %s, %s)", topology, TopologyStandalone, TopologyCluster, TopologySentinel)
	}
	if err := checkSentinelTopology(topology, nemeses); err != nil {
		return err
	}
	cluster := topology == TopologyCluster
	for _, n := range nemeses {
		switch {
		case cluster && (n == NemesisProxyReset || n == NemesisRedisRestart || n == NemesisRedisStop || n == NemesisLoseJob):
			return fmt.Errorf("torture: nemesis %s needs the standalone topology, and this scenario runs on a cluster (its clients follow MOVED and ASK to every node: one proxy cannot stand between them and the cluster; master-kill is a cluster's redis-restart)", n)
		case !cluster && (n == NemesisSlotMove || n == NemesisReplicaPromote || n == NemesisMasterKill):
			return fmt.Errorf("torture: nemesis %s needs a cluster, and this scenario runs on one redis-server", n)
		}
	}
	return nil
}

// runCluster starts the cluster, the producer's and the checks' cluster clients, and runs.
func (r *run) runCluster(ctx context.Context) (*Result, error) {
	var err error
	r.cluster, err = redisproc.StartCluster(filepath.Join(r.dir, "cluster"), 3, 1, clusterNodeTimeout,
		"--appendonly", "yes", "--appendfsync", "always")
	if err != nil {
		return nil, err
	}
	defer func() { _ = r.cluster.Stop() }()
	addrs := r.cluster.Addrs()
	r.url = "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
	admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	r.admin = admin
	defer admin.Close()
	producerRDB := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer producerRDB.Close()
	var pids []string
	for _, s := range r.cluster.Nodes {
		pids = append(pids, fmt.Sprint(s.PID()))
	}
	return r.start(ctx, producerRDB, fmt.Sprintf("cluster of 3 masters and 3 replicas, pids %s (appendfsync always)", strings.Join(pids, ",")))
}

// eachMaster runs fn on every master: the server itself, or each master of the cluster.
func (r *run) eachMaster(ctx context.Context, fn func(context.Context, *redis.Client) error) error {
	switch a := r.admin.(type) {
	case *redis.ClusterClient:
		return a.ForEachMaster(ctx, fn)
	case *redis.Client:
		return fn(ctx, a)
	}
	return fmt.Errorf("torture: a %T for the checks", r.admin)
}

// queueSlot is the cluster hash slot of the queue's keys, as the cluster computes it.
func (r *run) queueSlot(ctx context.Context) (int, error) {
	n, err := r.admin.ClusterKeySlot(ctx, keyspace.KeysOf(pipeline.DefaultPrefix, Queue, 1)[0].Stream).Result()
	return int(n), err
}

// strikeCluster strikes one cluster nemesis and waits until the cluster is healthy again.
func (r *run) strikeCluster(ctx context.Context, n string, rng *rand.Rand) (touched int, err error) {
	slot, err := r.queueSlot(ctx)
	if err != nil {
		return 0, err
	}
	master, replicas, err := r.cluster.MasterOfSlot(ctx, slot)
	if err != nil {
		return 0, err
	}
	switch n {
	case NemesisSlotMove:
		err = r.slotMove(ctx, slot, master, rng)
	case NemesisReplicaPromote:
		if len(replicas) == 0 {
			return 0, fmt.Errorf("master %s of slot %d has no replica", master, slot)
		}
		rep := redis.NewClient(&redis.Options{Addr: replicas[0], MaxRetries: -1})
		defer rep.Close()
		// A master votes for one failover of a given master in twice cluster-node-timeout.
		// A manual failover that gets no majority gives up after 5 s, silently. So a
		// promotion soon after the previous one of the same pair is asked again.
		for try := 0; ; try++ {
			if err := rep.ClusterFailover(ctx).Err(); err != nil {
				return 0, fmt.Errorf("%s: CLUSTER FAILOVER: %w", replicas[0], err)
			}
			wctx, cancel := context.WithTimeout(ctx, 3*clusterNodeTimeout)
			err = r.waitOwner(wctx, slot, master)
			cancel()
			if err == nil || try == 4 || ctx.Err() != nil {
				break
			}
		}
		if err == nil {
			r.log("replica-promote: %s took slot %d over from %s", replicas[0], slot, master)
		}
	case NemesisMasterKill:
		s := r.cluster.Node(master)
		if s == nil {
			return 0, fmt.Errorf("no node at %s", master)
		}
		s.Kill()
		if err = r.waitOwner(ctx, slot, master); err == nil {
			err = s.Restart()
		}
		if err == nil {
			r.log("master-kill: %s killed, its replica took slot %d over, restarted", master, slot)
		}
	}
	if err != nil {
		return 0, err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return len(r.workers), r.cluster.WaitHealthy(wctx)
}

// waitOwner waits until a master other than old owns slot, for 30 s.
func (r *run) waitOwner(ctx context.Context, slot int, old string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		m, _, err := r.cluster.MasterOfSlot(ctx, slot)
		if err == nil && m != old {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("slot %d still on %s (%v)", slot, old, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// slotMove moves slot from its master to another, alternately in one batch and in four.
func (r *run) slotMove(ctx context.Context, slot int, from string, rng *rand.Rand) error {
	var masters []string
	for _, s := range r.cluster.Nodes {
		if s.PID() == 0 || s.Addr == from {
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
		role, err := c.Do(ctx, "ROLE").Slice()
		c.Close()
		if err == nil && len(role) > 0 && role[0] == "master" {
			masters = append(masters, s.Addr)
		}
	}
	if len(masters) == 0 {
		return errors.New("no other master to move the slot to")
	}
	slices.Sort(masters)
	to := masters[rng.IntN(len(masters))]
	src := redis.NewClient(&redis.Options{Addr: from, MaxRetries: -1})
	count, err := src.ClusterCountKeysInSlot(ctx, slot).Result()
	src.Close()
	if err != nil {
		return err
	}
	r.moves++
	mv := redisproc.SlotMove{Batch: int(count) + 1000} // one batch (new keys may come meanwhile)
	if r.moves%2 == 0 {
		mv = redisproc.SlotMove{Batch: max(int(count)/4, 1), Between: func(ctx context.Context, _ int) error {
			sleep(ctx, 100*time.Millisecond)
			return ctx.Err()
		}}
	}
	begin := time.Now()
	if err := redisproc.MigrateSlot(ctx, r.cluster.Addrs(), slot, to, mv); err != nil {
		return err
	}
	r.log("slot-move: slot %d (%d keys) from %s to %s in batches of %d, %s", slot, count, from, to, mv.Batch,
		time.Since(begin).Round(time.Millisecond))
	return nil
}
