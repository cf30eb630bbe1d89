package redisproc

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of redis-server processes: Masters masters, each with Replicas
// replicas, made by redis-cli --cluster create. Nodes are in the order given to redis-cli: the
// masters first, then the replicas (which master each replicates is redis-cli's choice, and
// changes with failovers: ask CLUSTER NODES).
type Cluster struct {
	Nodes []*Server

	replicas int // masters x replicas each: how many replica lines a settled view shows
}

// StartCluster starts masters*(1+replicas) servers in subdirectories of dir, each with
// cluster mode on, its own cluster bus port and nodeTimeout as cluster-node-timeout, plus the
// extra args (e.g. "--appendonly", "yes"), joins them and waits until every node sees all
// slots covered. The caller must call Stop. A node restarted (Server.Restart) rejoins from
// its nodes.conf.
func StartCluster(dir string, masters, replicas int, nodeTimeout time.Duration, args ...string) (*Cluster, error) {
	c := &Cluster{replicas: masters * replicas}
	for i := range masters * (1 + replicas) {
		bus, err := FreePort()
		if err != nil {
			_ = c.Stop()
			return nil, err
		}
		s, err := Start(filepath.Join(dir, fmt.Sprintf("node%d", i)), append([]string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
			"--cluster-port", strconv.Itoa(bus), "--repl-diskless-sync-delay", "0",
		}, args...)...)
		if err != nil {
			_ = c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		_ = c.Stop()
		return nil, fmt.Errorf("redisproc: redis-cli not found on PATH: %w", err)
	}
	cargs := append([]string{"--cluster", "create"}, c.Addrs()...)
	cargs = append(cargs, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, cargs...).CombinedOutput(); err != nil {
		_ = c.Stop()
		return nil, fmt.Errorf("redisproc: redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		_ = c.Stop()
		return nil, err
	}
	return c, nil
}

// Addrs are every node's address, masters and replicas.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		out[i] = s.Addr
	}
	return out
}

// Node finds the server listening on addr.
func (c *Cluster) Node(addr string) *Server {
	for _, s := range c.Nodes {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// WaitHealthy waits until the cluster is whole. Every node answers with cluster_state:ok, all
// slots ok, every node known and none flagged failing. Every replica is seen as one, and its
// link to its master is up.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	var last error
	for {
		if last = c.healthy(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redisproc: cluster not healthy: %v", last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) healthy(ctx context.Context) error {
	want := []string{"cluster_state:ok", "cluster_slots_ok:16384", fmt.Sprintf("cluster_known_nodes:%d", len(c.Nodes))}
	for _, s := range c.Nodes {
		err := func() error {
			n := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
			defer n.Close()
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			info, err := n.ClusterInfo(cctx).Result()
			if err != nil {
				return fmt.Errorf("%s: CLUSTER INFO: %w", s.Addr, err)
			}
			for _, w := range want {
				if !strings.Contains(info, w+"\r\n") && !strings.HasSuffix(strings.TrimSpace(info), w) {
					return fmt.Errorf("%s: CLUSTER INFO lacks %s", s.Addr, w)
				}
			}
			nodes, err := n.ClusterNodes(cctx).Result()
			if err != nil {
				return err
			}
			if strings.Contains(nodes, "fail") {
				return fmt.Errorf("%s: a node is flagged failing", s.Addr)
			}
			// Roles spread by gossip: a node may see a replica as a master for a while.
			if n := strings.Count(nodes, "slave"); n != c.replicas {
				return fmt.Errorf("%s: sees %d replicas, not %d", s.Addr, n, c.replicas)
			}
			repl, err := n.Info(cctx, "replication").Result()
			if err != nil {
				return err
			}
			if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
				return fmt.Errorf("%s: replica's link down", s.Addr)
			}
			return nil
		}()
		if err != nil {
			return err
		}
	}
	return nil
}

// Stop stops every node.
func (c *Cluster) Stop() error {
	for _, s := range c.Nodes {
		s.Stop()
	}
	return nil
}

// MasterOfSlot returns the address of the master that owns slot and the addresses of its
// replicas, as the first node that answers sees them.
func (c *Cluster) MasterOfSlot(ctx context.Context, slot int) (master string, replicas []string, err error) {
	var errs []error
	for _, s := range c.Nodes {
		if s.PID() == 0 {
			continue
		}
		n := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
		master, replicas, err = masterOfSlot(ctx, n, slot)
		n.Close()
		if err == nil {
			return master, replicas, nil
		}
		errs = append(errs, err)
	}
	return "", nil, errors.Join(errs...)
}

func masterOfSlot(ctx context.Context, n *redis.Client, slot int) (string, []string, error) {
	masters, owner, err := SlotOwner(ctx, n, slot)
	if err != nil {
		return "", nil, err
	}
	out, err := n.ClusterNodes(ctx).Result()
	if err != nil {
		return "", nil, err
	}
	var replicas []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && strings.Contains(f[2], "slave") && !strings.Contains(f[2], "fail") && f[3] == masters[owner] {
			addr, _, _ := strings.Cut(f[1], "@")
			replicas = append(replicas, addr)
		}
	}
	return owner, replicas, nil
}
