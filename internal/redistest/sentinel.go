package redistest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/redisproc"
)

const (
	// SentinelMasterName is the name under which a SentinelSet's sentinels
	// monitor its master.
	SentinelMasterName = "mymaster"

	// sentinelTimeout bounds StartSentinelProcess's wait until the topology
	// is complete, and WaitFailover.
	sentinelTimeout = 30 * time.Second

	// sentinelDownAfter and sentinelFailoverTimeout are the sentinels'
	// down-after-milliseconds and failover-timeout: short, so that a
	// failover completes within a few seconds.
	sentinelDownAfter       = time.Second
	sentinelFailoverTimeout = 3 * time.Second
)

// SentinelSet is a Redis Sentinel topology of private servers: one master,
// one replica of it and three sentinels monitoring the master as
// SentinelMasterName with quorum 2. Its fields do not change over its life,
// not even after a failover: Master and Replica are the servers started as
// master and replica.
type SentinelSet struct {
	MasterName    string    // SentinelMasterName
	Master        *Server   // started as the master
	Replica       *Server   // started as a replica of Master (--replicaof)
	Sentinels     []*Server // the three redis-server --sentinel processes
	SentinelAddrs []string  // their "127.0.0.1:PORT" addresses
}

// StartSentinel starts a private Sentinel topology for the test (see
// SentinelSet). It waits until every sentinel sees the master, the replica (in
// sync) and the two other sentinels. It stops it in tb.Cleanup. opts apply to
// the master and the replica, not to the sentinels. It fails the test
// (tb.Fatal) if the topology cannot start.
//
// The sentinels use down-after-milliseconds 1000 and failover-timeout 3000. So
// after Master is killed, a failover to Replica completes in a few seconds (see
// WaitFailover).
func StartSentinel(tb testing.TB, opts ...Option) *SentinelSet {
	tb.Helper()
	s, err := StartSentinelProcess(opts...)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Stop(); err != nil {
			tb.Errorf("redistest: %v", err)
		}
	})
	return s
}

// StartSentinelProcess is StartSentinel without a testing.TB. The caller
// must call Stop.
func StartSentinelProcess(opts ...Option) (*SentinelSet, error) {
	s := &SentinelSet{MasterName: SentinelMasterName}
	var err error
	// No delay before a full sync: the replica is in sync at once.
	s.Master, err = StartProcess(append([]Option{WithArgs("--repl-diskless-sync-delay", "0")}, opts...)...)
	if err != nil {
		return nil, err
	}
	s.Replica, err = StartProcess(append([]Option{WithArgs(
		"--replicaof", "127.0.0.1", strconv.Itoa(s.Master.Port),
		"--repl-diskless-sync-delay", "0",
	)}, opts...)...)
	if err != nil {
		_ = s.Stop()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), sentinelTimeout)
	defer cancel()
	// Sentinels learn the replicas from the master's INFO, which they send at
	// once on connecting and then only every 10s: start them after the
	// replica is in sync.
	if err := s.waitReplica(ctx); err != nil {
		_ = s.Stop()
		return nil, err
	}

	conf := redisproc.SentinelConf(s.MasterName, s.Master.Port, sentinelDownAfter, sentinelFailoverTimeout)
	for range 3 {
		sn, err := StartProcess(withSentinel(conf))
		if err != nil {
			_ = s.Stop()
			return nil, err
		}
		s.Sentinels = append(s.Sentinels, sn)
		s.SentinelAddrs = append(s.SentinelAddrs, sn.Addr)
	}
	if err := s.waitSentinels(ctx); err != nil {
		_ = s.Stop()
		return nil, err
	}
	return s, nil
}

// withSentinel runs the server as a Sentinel (redis-server sentinel.conf
// --sentinel) with a config file of the given content.
func withSentinel(conf string) Option {
	return func(c *config) { c.sentinelConf = conf }
}

// waitReplica waits until the master reports the replica online and the
// replica reports its link to the master up.
func (s *SentinelSet) waitReplica(ctx context.Context) error {
	m, r := s.Master.adminClient(), s.Replica.adminClient()
	defer m.Close()
	defer r.Close()
	return poll(ctx, "replica in sync", func() error {
		info, err := m.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "connected_slaves:1\r\n") || !strings.Contains(info, ",state=online,") {
			return fmt.Errorf("master %s: %s", s.Master.Addr, info)
		}
		info, err = r.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "master_link_status:up\r\n") {
			return fmt.Errorf("replica %s: %s", s.Replica.Addr, info)
		}
		return nil
	})
}

// waitSentinels waits until every sentinel sees the master up, the replica
// connected and in sync, and the two other sentinels.
func (s *SentinelSet) waitSentinels(ctx context.Context) error {
	return poll(ctx, "sentinels ready", func() error {
		for _, addr := range s.SentinelAddrs {
			if err := s.sentinelReady(ctx, addr); err != nil {
				return fmt.Errorf("sentinel %s: %w", addr, err)
			}
		}
		return nil
	})
}

// sentinelReady checks one sentinel's view of the topology.
func (s *SentinelSet) sentinelReady(ctx context.Context, addr string) error {
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer sc.Close()
	m, err := sc.Master(ctx, s.MasterName).Result()
	if err != nil {
		return err
	}
	if m["flags"] != "master" || m["ip"]+":"+m["port"] != s.Master.Addr ||
		m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" {
		return fmt.Errorf("SENTINEL MASTER: %v", m)
	}
	rs, err := sc.Replicas(ctx, s.MasterName).Result()
	if err != nil {
		return err
	}
	if len(rs) != 1 || rs[0]["flags"] != "slave" || rs[0]["ip"]+":"+rs[0]["port"] != s.Replica.Addr ||
		rs[0]["master-link-status"] != "ok" {
		return fmt.Errorf("SENTINEL REPLICAS: %v", rs)
	}
	return nil
}

// URL returns a go-redis failover URL for the set, as parsed by
// redis.ParseFailoverURL: "redis://S1?master_name=mymaster&addr=S2&addr=S3"
// where S1, S2 and S3 are the sentinels' addresses.
func (s *SentinelSet) URL() string {
	q := url.Values{"master_name": {s.MasterName}}
	for _, a := range s.SentinelAddrs[1:] {
		q.Add("addr", a)
	}
	return "redis://" + s.SentinelAddrs[0] + "?" + q.Encode()
}

// FailoverOptions returns new go-redis failover options for the set (the
// master name and the sentinels' addresses).
func (s *SentinelSet) FailoverOptions() *redis.FailoverOptions {
	return &redis.FailoverOptions{
		MasterName:    s.MasterName,
		SentinelAddrs: append([]string(nil), s.SentinelAddrs...),
	}
}

// Client returns a new go-redis failover client (redis.NewFailoverClient)
// for the set, closed in tb.Cleanup. It follows the master across failovers.
func (s *SentinelSet) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewFailoverClient(s.FailoverOptions())
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// MasterAddr returns the master's address as every running sentinel reports
// it (SENTINEL GET-MASTER-ADDR-BY-NAME), or an error if one cannot be asked
// or they disagree.
func (s *SentinelSet) MasterAddr(ctx context.Context) (string, error) {
	return redisproc.SentinelMasterAddr(ctx, s.MasterName, s.running())
}

// running are the addresses of the sentinels running now.
func (s *SentinelSet) running() []string {
	var addrs []string
	for _, sn := range s.Sentinels {
		if sn.PID() != 0 {
			addrs = append(addrs, sn.Addr)
		}
	}
	return addrs
}

// WaitFailover waits until every running sentinel reports the same master,
// other than oldMasterAddr, and that master answers with role:master; it
// returns the new master's address. It fails the test (tb.Fatal) if that
// does not happen within 30s. Use it after killing the master, e.g.
//
//	old := set.Master.Addr
//	set.Master.Kill()
//	newAddr := set.WaitFailover(t, old) // set.Replica.Addr
func (s *SentinelSet) WaitFailover(tb testing.TB, oldMasterAddr string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sentinelTimeout)
	defer cancel()
	addr, err := redisproc.WaitSentinelFailover(ctx, s.MasterName, s.running, oldMasterAddr)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	return addr
}

// Stop stops the sentinels, then the replica and the master (see
// Server.Stop). It is idempotent.
func (s *SentinelSet) Stop() error {
	var errs []error
	for _, sn := range s.Sentinels {
		errs = append(errs, sn.Stop())
	}
	for _, srv := range []*Server{s.Replica, s.Master} {
		if srv != nil {
			errs = append(errs, srv.Stop())
		}
	}
	return errors.Join(errs...)
}

// poll calls check every 50ms until it returns nil or ctx ends; then it
// returns check's last error.
func poll(ctx context.Context, what string, check func() error) error {
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: %s: %v", what, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
