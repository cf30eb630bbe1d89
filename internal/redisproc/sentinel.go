package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelQuorum is how many of a SentinelSet's three sentinels must agree that its master is
// down before one of them fails it over.
const SentinelQuorum = 2

// SentinelSet is a Redis Sentinel topology of redis-server processes. It has data nodes, the
// first started as the master and the others as its replicas. Three sentinels monitor them as
// MasterName. Which data node is the master changes with failovers: ask MasterAddr.
type SentinelSet struct {
	MasterName string
	Data       []*Server // the data nodes; Data[0] was the master at the start
	Sentinels  []*Server // the three redis-server --sentinel processes
}

// SentinelConf is a sentinel's config file monitoring the master at 127.0.0.1:port as name, with
// quorum SentinelQuorum. It declares the master down after downAfter without a valid reply. It
// sets failoverTimeout, which also spaces two failovers of the same master by twice itself.
func SentinelConf(name string, port int, downAfter, failoverTimeout time.Duration) string {
	return fmt.Sprintf(
		"sentinel monitor %[1]s 127.0.0.1 %[2]d %[5]d\n"+
			"sentinel down-after-milliseconds %[1]s %[3]d\n"+
			"sentinel failover-timeout %[1]s %[4]d\n"+
			"sentinel parallel-syncs %[1]s 1\n",
		name, port, downAfter.Milliseconds(), failoverTimeout.Milliseconds(), SentinelQuorum)
}

// StartSentinel starts a master and replicas replicas of it in subdirectories of dir. Each gets
// the extra args (e.g. "--appendonly", "yes"). It waits until the replicas are in sync. Then it
// starts three sentinels (SentinelConf) and waits until the set is healthy (WaitHealthy). The
// caller must call Stop.
//
// The replicas are made replicas with REPLICAOF, not --replicaof. So every data node restarts
// (Server.Restart) as a master on its own data. The sentinels, not its command line, decide what
// it becomes. A killed master comes back a master with stale data. The sentinels must turn it
// into a replica of the one they promoted meanwhile.
func StartSentinel(dir, name string, replicas int, downAfter, failoverTimeout time.Duration, args ...string) (*SentinelSet, error) {
	s := &SentinelSet{MasterName: name}
	// No delay before a full sync: a replica, or a killed master turned into one, is in sync
	// at once.
	args = append([]string{"--repl-diskless-sync-delay", "0"}, args...)
	for i := range 1 + replicas {
		d, err := Start(filepath.Join(dir, fmt.Sprintf("data%d", i)), args...)
		if err != nil {
			_ = s.Stop()
			return nil, err
		}
		s.Data = append(s.Data, d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	master := s.Data[0]
	for _, d := range s.Data[1:] {
		c := redis.NewClient(&redis.Options{Addr: d.Addr, MaxRetries: -1})
		err := c.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(master.Port)).Err()
		c.Close()
		if err != nil {
			_ = s.Stop()
			return nil, fmt.Errorf("redisproc: %s: REPLICAOF: %w", d.Addr, err)
		}
	}
	// Sentinels learn the replicas from the master's INFO, which they read at once on
	// connecting and then every 10 s: start them once the replicas are in sync.
	if err := poll(ctx, "replicas in sync", func() error { return s.dataHealthy(ctx, master.Addr) }); err != nil {
		_ = s.Stop()
		return nil, err
	}
	conf := SentinelConf(name, master.Port, downAfter, failoverTimeout)
	for i := range 3 {
		sn, err := start(filepath.Join(dir, fmt.Sprintf("sentinel%d", i)), conf, nil)
		if err != nil {
			_ = s.Stop()
			return nil, err
		}
		s.Sentinels = append(s.Sentinels, sn)
	}
	if err := s.WaitHealthy(ctx); err != nil {
		_ = s.Stop()
		return nil, err
	}
	return s, nil
}

// SentinelAddrs are the sentinels' addresses.
func (s *SentinelSet) SentinelAddrs() []string {
	out := make([]string, len(s.Sentinels))
	for i, sn := range s.Sentinels {
		out[i] = sn.Addr
	}
	return out
}

// URL is a go-redis failover URL for the set (redis.ParseFailoverURL, and conveyor's
// --redis): "redis://S1?master_name=NAME&addr=S2&addr=S3".
func (s *SentinelSet) URL() string {
	addrs := s.SentinelAddrs()
	q := url.Values{"master_name": {s.MasterName}}
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	return "redis://" + addrs[0] + "?" + q.Encode()
}

// FailoverOptions are go-redis failover options for the set: a client made from them asks
// the sentinels for the master and follows it across failovers.
func (s *SentinelSet) FailoverOptions() *redis.FailoverOptions {
	return &redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.SentinelAddrs()}
}

// Node finds the data node listening on addr.
func (s *SentinelSet) Node(addr string) *Server {
	for _, d := range s.Data {
		if d.Addr == addr {
			return d
		}
	}
	return nil
}

// MasterAddr is the master's address as every running sentinel reports it (SENTINEL
// GET-MASTER-ADDR-BY-NAME); an error if one cannot be asked or they disagree.
func (s *SentinelSet) MasterAddr(ctx context.Context) (string, error) {
	return SentinelMasterAddr(ctx, s.MasterName, s.running())
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

// SentinelMasterAddr asks each sentinel at addrs for the address of the master it monitors as
// name, and returns it when they all agree.
func SentinelMasterAddr(ctx context.Context, name string, addrs []string) (string, error) {
	addr := ""
	for _, a := range addrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a, MaxRetries: -1})
		hp, err := sc.GetMasterAddrByName(ctx, name).Result()
		_ = sc.Close()
		if err != nil {
			return "", fmt.Errorf("sentinel %s: %w", a, err)
		}
		if len(hp) != 2 {
			return "", fmt.Errorf("sentinel %s: GET-MASTER-ADDR-BY-NAME = %v", a, hp)
		}
		m := hp[0] + ":" + hp[1]
		if addr != "" && m != addr {
			return "", fmt.Errorf("sentinels disagree: %s and %s", addr, m)
		}
		addr = m
	}
	if addr == "" {
		return "", errors.New("no sentinel is running")
	}
	return addr, nil
}

// WaitHealthy waits until the set is whole. Every sentinel runs and agrees on the master. Each
// sees it up, with no failover in progress, and sees every other data node as a replica in sync,
// and the two other sentinels. The master answers ROLE master, with every other data node
// connected online. Every replica replicates that master with its link up.
func (s *SentinelSet) WaitHealthy(ctx context.Context) error {
	return poll(ctx, "sentinel set not healthy", func() error {
		for _, sn := range s.Sentinels {
			if sn.PID() == 0 {
				return fmt.Errorf("sentinel %s is not running", sn.Addr)
			}
		}
		master, err := s.MasterAddr(ctx)
		if err != nil {
			return err
		}
		for _, sn := range s.Sentinels {
			if err := s.sentinelSees(ctx, sn.Addr, master); err != nil {
				return fmt.Errorf("sentinel %s: %w", sn.Addr, err)
			}
		}
		return s.dataHealthy(ctx, master)
	})
}

// sentinelSees checks one sentinel's view: master up and its replicas the other data nodes.
func (s *SentinelSet) sentinelSees(ctx context.Context, addr, master string) error {
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer sc.Close()
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	m, err := sc.Master(cctx, s.MasterName).Result()
	if err != nil {
		return err
	}
	if m["flags"] != "master" || m["ip"]+":"+m["port"] != master ||
		m["num-other-sentinels"] != strconv.Itoa(len(s.Sentinels)-1) {
		return fmt.Errorf("SENTINEL MASTER: flags %s, %s:%s, %s other sentinels", m["flags"], m["ip"], m["port"], m["num-other-sentinels"])
	}
	rs, err := sc.Replicas(cctx, s.MasterName).Result()
	if err != nil {
		return err
	}
	var seen []string
	for _, r := range rs {
		a := r["ip"] + ":" + r["port"]
		if r["flags"] != "slave" || r["master-link-status"] != "ok" || r["master-host"]+":"+r["master-port"] != master {
			return fmt.Errorf("replica %s: flags %s, link %s, master %s:%s", a, r["flags"], r["master-link-status"], r["master-host"], r["master-port"])
		}
		seen = append(seen, a)
	}
	if want := s.others(master); !sameSet(seen, want) {
		return fmt.Errorf("replicas %v, not %v", seen, want)
	}
	return nil
}

// dataHealthy checks the data nodes: master is one, with every other node connected and
// online, and each other one its replica with the link up.
func (s *SentinelSet) dataHealthy(ctx context.Context, master string) error {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	want := s.others(master)
	if len(want) == len(s.Data) {
		return fmt.Errorf("%s is none of the data nodes", master)
	}
	m := redis.NewClient(&redis.Options{Addr: master, MaxRetries: -1})
	defer m.Close()
	info, err := m.Info(cctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("master %s: %w", master, err)
	}
	if !strings.Contains(info, "role:master\r\n") {
		return fmt.Errorf("master %s is not a master", master)
	}
	if strings.Count(info, ",state=online,") != len(want) {
		return fmt.Errorf("master %s: not every replica online", master)
	}
	host, port, _ := strings.Cut(master, ":")
	for _, a := range want {
		r := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
		info, err := r.Info(cctx, "replication").Result()
		r.Close()
		if err != nil {
			return fmt.Errorf("replica %s: %w", a, err)
		}
		for _, w := range []string{"role:slave", "master_host:" + host, "master_port:" + port, "master_link_status:up"} {
			if !strings.Contains(info, w+"\r\n") {
				return fmt.Errorf("replica %s: no %s", a, w)
			}
		}
	}
	return nil
}

// others are the data nodes' addresses but master's.
func (s *SentinelSet) others(master string) []string {
	var out []string
	for _, d := range s.Data {
		if d.Addr != master {
			out = append(out, d.Addr)
		}
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// Failover asks a sentinel for a failover with SENTINEL FAILOVER. That promotes a replica
// without asking the others' agreement. The old master, still up, is turned into a replica of
// it. Failover waits until every sentinel names a new master that answers as one. It returns the
// old master's address and the new one's. WaitHealthy then waits for the old master to rejoin.
func (s *SentinelSet) Failover(ctx context.Context) (old, promoted string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if old, err = s.MasterAddr(ctx); err != nil {
		return "", "", err
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinels[0].Addr, MaxRetries: -1})
	defer sc.Close()
	err = poll(ctx, "SENTINEL FAILOVER", func() error {
		// INPROG: a failover is already under way; NOGOODSLAVE: no replica the sentinel has
		// heard from lately enough. Both pass.
		return sc.Failover(ctx, s.MasterName).Err()
	})
	if err != nil {
		return old, "", err
	}
	promoted, err = s.WaitNewMaster(ctx, old)
	return old, promoted, err
}

// Switchover is a coordinated failover, as an operator makes one with Sentinel. It pauses the
// master's writes (CLIENT PAUSE WRITE). It asks for the failover (Failover) once the replica has
// every write. It lifts the pause once the old master has lost its replica.
//
// SENTINEL FAILOVER alone does not wait for the replica. The old master, still up, still takes
// writes until the sentinels turn it into a replica, seconds later. A write it acknowledges from
// a client that has not heard of the switch is lost. Lifting the pause is safe only when the old
// master then refuses writes by itself. So the data nodes must run with min-replicas-to-write 1:
// a master without its replica answers NOREPLICAS.
func (s *SentinelSet) Switchover(ctx context.Context) (old, promoted string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if old, err = s.MasterAddr(ctx); err != nil {
		return "", "", err
	}
	m := redis.NewClient(&redis.Options{Addr: old, MaxRetries: -1})
	defer m.Close()
	// The pause outlives this call only if it fails before lifting it.
	if err := m.Do(ctx, "CLIENT", "PAUSE", "30000", "WRITE").Err(); err != nil {
		return old, "", fmt.Errorf("%s: CLIENT PAUSE: %w", old, err)
	}
	defer func() {
		if err != nil {
			_ = m.Do(context.WithoutCancel(ctx), "CLIENT", "UNPAUSE").Err()
		}
	}()
	err = poll(ctx, "replicas caught up", func() error { return s.caughtUp(ctx, m, old) })
	if err != nil {
		return old, "", err
	}
	if _, promoted, err = s.Failover(ctx); err != nil {
		return old, "", err
	}
	err = poll(ctx, "old master without its replica", func() error {
		info, err := m.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "role:master\r\n") || strings.Contains(info, "connected_slaves:0\r\n") {
			return nil // turned into a replica already, or it knows its replica gone
		}
		return fmt.Errorf("%s still counts its replica", old)
	})
	if err != nil {
		return old, promoted, err
	}
	if err := m.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		return old, promoted, fmt.Errorf("%s: CLIENT UNPAUSE: %w", old, err)
	}
	return old, promoted, nil
}

// caughtUp says whether every replica has processed the master's whole replication stream.
func (s *SentinelSet) caughtUp(ctx context.Context, m *redis.Client, master string) error {
	info, err := m.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	var offset string
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "master_repl_offset:"); ok {
			offset = v
		}
	}
	for _, a := range s.others(master) {
		r := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
		info, err := r.Info(ctx, "replication").Result()
		r.Close()
		if err != nil {
			return fmt.Errorf("replica %s: %w", a, err)
		}
		if !strings.Contains(info, "slave_repl_offset:"+offset+"\r\n") {
			return fmt.Errorf("replica %s behind offset %s", a, offset)
		}
	}
	return nil
}

// WaitNewMaster waits until every running sentinel names the same master, other than old, and
// that master answers ROLE master; it returns its address.
func (s *SentinelSet) WaitNewMaster(ctx context.Context, old string) (string, error) {
	return WaitSentinelFailover(ctx, s.MasterName, s.running, old)
}

// WaitSentinelFailover waits until every sentinel that sentinels names agrees on a master of
// name, other than old. It asks again at each try, since one may stop meanwhile. That master
// must answer ROLE master. It returns its address, or ctx's error with the last reason.
func WaitSentinelFailover(ctx context.Context, name string, sentinels func() []string, old string) (string, error) {
	var addr string
	err := poll(ctx, "failover from "+old, func() error {
		a, err := SentinelMasterAddr(ctx, name, sentinels())
		if err != nil {
			return err
		}
		if a == old {
			return fmt.Errorf("sentinels still name %s", a)
		}
		c := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
		defer c.Close()
		role, err := c.Do(ctx, "ROLE").Slice()
		if err != nil {
			return fmt.Errorf("new master %s: %w", a, err)
		}
		if len(role) == 0 || role[0] != "master" {
			return fmt.Errorf("new master %s is not a master yet", a)
		}
		addr = a
		return nil
	})
	return addr, err
}

// Stop stops the sentinels, then the data nodes.
func (s *SentinelSet) Stop() error {
	for _, sn := range s.Sentinels {
		sn.Stop()
	}
	for _, d := range s.Data {
		d.Stop()
	}
	return nil
}

// poll calls check every 50 ms until it returns nil or ctx ends; then it returns check's last
// error.
func poll(ctx context.Context, what string, check func() error) error {
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redisproc: %s: %v", what, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
