package redistest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterTimeout bounds StartClusterProcess after the servers are up.
const clusterTimeout = 30 * time.Second

// Cluster is a 3-master Redis Cluster (no replicas) of private servers, made
// with redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes.
type Cluster struct {
	Addrs   []string  // the masters' "127.0.0.1:PORT" addresses
	Servers []*Server // the masters
}

// StartCluster starts a private 3-master cluster for the test, waits until
// every node reports cluster_state:ok with all 16384 slots covered, and stops
// it in tb.Cleanup. It fails the test (tb.Fatal) if the cluster cannot start.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	c, err := StartClusterProcess()
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(func() {
		if err := c.Stop(); err != nil {
			tb.Errorf("redistest: %v", err)
		}
	})
	return c
}

// StartClusterProcess is StartCluster without a testing.TB. The caller must
// call Stop.
func StartClusterProcess() (*Cluster, error) {
	c := &Cluster{}
	for range 3 {
		s, err := StartProcess(withClusterBus(), WithArgs(
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
		))
		if err != nil {
			_ = c.Stop()
			return nil, err
		}
		c.Servers = append(c.Servers, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if err := c.create(ctx); err != nil {
		_ = c.Stop()
		return nil, err
	}
	return c, nil
}

// create joins the servers into a cluster and waits until it works.
func (c *Cluster) create(ctx context.Context) error {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return fmt.Errorf("redistest: redis-cli not found on PATH: %w", err)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}

	nodes := make([]*redis.Client, len(c.Addrs))
	for i, addr := range c.Addrs {
		nodes[i] = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		defer nodes[i].Close()
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, MaxRetries: -1})
	defer cc.Close()

	var lastErr error
	for {
		if lastErr = clusterReady(ctx, nodes, cc); lastErr == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: cluster %v not ready: %v", c.Addrs, lastErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// clusterReady reports whether every node sees a healthy, complete cluster
// and the cluster client can write and read keys in different hash slots.
func clusterReady(ctx context.Context, nodes []*redis.Client, cc *redis.ClusterClient) error {
	want := []string{
		"cluster_state:ok",
		"cluster_slots_assigned:16384",
		"cluster_slots_ok:16384",
		fmt.Sprintf("cluster_known_nodes:%d", len(nodes)),
	}
	for _, n := range nodes {
		info, err := n.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %w", n.Options().Addr, err)
		}
		for _, w := range want {
			if !strings.Contains(info, w+"\r\n") && !strings.HasSuffix(strings.TrimSpace(info), w) {
				return fmt.Errorf("%s: CLUSTER INFO lacks %s", n.Options().Addr, w)
			}
		}
	}
	cc.ReloadState(ctx)
	for _, tag := range []string{"a", "b", "c"} { // slots 15495, 3300, 7365: one per master
		key := "{" + tag + "}redistest:probe"
		if err := cc.Set(ctx, key, tag, time.Minute).Err(); err != nil {
			return fmt.Errorf("SET %s: %w", key, err)
		}
		if got, err := cc.Get(ctx, key).Result(); err != nil || got != tag {
			return fmt.Errorf("GET %s = %q, %v", key, got, err)
		}
		_ = cc.Del(ctx, key).Err()
	}
	return nil
}

// Client returns a new go-redis cluster client for this cluster, closed in
// tb.Cleanup.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Stop stops every server of the cluster (see Server.Stop). It is idempotent.
func (c *Cluster) Stop() error {
	var errs []error
	for _, s := range c.Servers {
		errs = append(errs, s.Stop())
	}
	return errors.Join(errs...)
}
