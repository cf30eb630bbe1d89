package redistest_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func ping(addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	if s.Port == 6379 || s.Addr != fmt.Sprintf("127.0.0.1:%d", s.Port) {
		t.Fatalf("bad address %q (port %d)", s.Addr, s.Port)
	}
	if want := "redis://" + s.Addr + "/0"; s.URL() != want {
		t.Fatalf("URL = %q, want %q", s.URL(), want)
	}
	if s.PID() <= 0 {
		t.Fatalf("PID = %d", s.PID())
	}
	ctx := context.Background()
	c := s.Client(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	cfg, err := c.ConfigGet(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if cfg["save"] != "" || cfg["appendonly"] != "no" || cfg["dir"] == "" {
		t.Fatalf("save=%q appendonly=%q dir=%q", cfg["save"], cfg["appendonly"], cfg["dir"])
	}
	if _, err := os.Stat(s.Dir); err != nil {
		t.Fatal(err)
	}

	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := ping(s.Addr); err == nil {
		t.Fatal("PING succeeded after Stop")
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Fatalf("dir %s still exists: %v", s.Dir, err)
	}
	if s.PID() != 0 {
		t.Fatalf("PID after Stop = %d", s.PID())
	}
	if err := s.Stop(); err != nil { // idempotent
		t.Fatal(err)
	}
}

func TestWithArgs(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.WithArgs("--maxmemory", "10mb", "--maxmemory-policy", "noeviction"))
	cfg, err := s.Client(t).ConfigGet(context.Background(), "maxmemory*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if cfg["maxmemory"] != "10485760" || cfg["maxmemory-policy"] != "noeviction" {
		t.Fatalf("config = %v", cfg)
	}
}

func TestKillRestart(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	ctx := context.Background()
	c := s.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	port, pid := s.Port, s.PID()

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil { // idempotent
		t.Fatal(err)
	}
	if err := ping(s.Addr); err == nil {
		t.Fatal("PING succeeded after Kill")
	}
	if err := c.Get(ctx, "k").Err(); err == nil {
		t.Fatal("GET succeeded after Kill")
	}

	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.Port != port || s.PID() == pid || s.PID() == 0 {
		t.Fatalf("after Restart port %d (was %d), pid %d (was %d)", s.Port, port, s.PID(), pid)
	}
	if err := c.Ping(ctx).Err(); err != nil { // the old client reconnects
		t.Fatal(err)
	}
	if err := c.Get(ctx, "k").Err(); err != redis.Nil {
		t.Fatalf("GET k after Restart: %v, want redis.Nil (no persistence)", err)
	}

	// Restart also works after Stop (which removed the dir) and while running.
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err != nil || s.Port != port {
		t.Fatalf("PING after Stop+Restart: %v (port %d, was %d)", err, s.Port, port)
	}
}

func TestParallelStarts(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	ports := map[int]bool{}
	for i := range 4 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			s := redistest.Start(t)
			if err := s.Client(t).Ping(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if ports[s.Port] {
				t.Errorf("port %d used twice", s.Port)
			}
			ports[s.Port] = true
		})
	}
}

func TestShared(t *testing.T) {
	t.Parallel()
	s := redistest.Shared(t)
	if s2 := redistest.Shared(t); s2 != s {
		t.Fatal("Shared returned two servers")
	}
	ctx := context.Background()
	c := redistest.Client(t)
	key := redistest.UniqueName(t) + ":k"
	if err := c.Set(ctx, key, "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Client(t).Get(ctx, key).Result(); err != nil || got != "v" {
		t.Fatalf("GET %s = %q, %v", key, got, err)
	}
	t.Run("sub", func(t *testing.T) {
		if redistest.Shared(t) != s {
			t.Fatal("subtest got another shared server")
		}
	})
}

func TestUniqueName(t *testing.T) {
	t.Parallel()
	valid := regexp.MustCompile(`^[a-z0-9_-]{1,40}$`)
	seen := map[string]bool{}
	check := func(t *testing.T) {
		for range 500 {
			n := redistest.UniqueName(t)
			if !valid.MatchString(n) {
				t.Fatalf("invalid name %q", n)
			}
			if seen[n] {
				t.Fatalf("duplicate name %q", n)
			}
			seen[n] = true
		}
	}
	check(t)
	t.Run("Weird name: Ünïcode/, spaces & a very long suffix that goes on and on and on", check)
	if n := redistest.UniqueName(t); !strings.HasPrefix(n, "testuniquename-") {
		t.Fatalf("name %q does not start with the test name", n)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	if len(cl.Addrs) != 3 || len(cl.Servers) != 3 {
		t.Fatalf("cluster has %d addrs, %d servers", len(cl.Addrs), len(cl.Servers))
	}
	ctx := context.Background()
	c := cl.Client(t)
	prefix := redistest.UniqueName(t)
	masters := map[string]bool{}
	slots := map[int64]bool{}
	for _, tag := range []string{"a", "b", "c"} {
		key := "{" + prefix + "-" + tag + "}:k"
		if err := c.Set(ctx, key, tag, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if got, err := c.Get(ctx, key).Result(); err != nil || got != tag {
			t.Fatalf("GET %s = %q, %v", key, got, err)
		}
		slot, err := c.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[slot] = true
		node, err := c.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		masters[node.Options().Addr] = true
	}
	if len(slots) < 2 || len(masters) < 2 {
		t.Fatalf("keys landed on slots %v, masters %v; want at least 2 masters", slots, masters)
	}
	if err := cl.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, s := range cl.Servers {
		if err := ping(s.Addr); err == nil {
			t.Fatalf("%s still answers after Stop", s.Addr)
		}
	}
}

func TestRefuseWrites(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.WithArgs("--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"))
	ctx := context.Background()
	c := s.Client(t)
	if err := c.Set(ctx, "before", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	restore := s.RefuseWrites(t)
	err := c.Set(ctx, "k", "v", 0).Err()
	if err == nil || !strings.HasPrefix(err.Error(), "OOM ") {
		t.Fatalf("SET while refusing writes: %v, want an OOM error", err)
	}
	if err := c.XAdd(ctx, &redis.XAddArgs{Stream: "s", Values: []string{"f", "v"}}).Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM ") {
		t.Fatalf("XADD while refusing writes: %v, want an OOM error", err)
	}
	if got, err := c.Get(ctx, "before").Result(); err != nil || got != "v" { // reads work, nothing was evicted
		t.Fatalf("GET while refusing writes = %q, %v", got, err)
	}

	restore()
	restore() // idempotent
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET after restore: %v", err)
	}
	cfg, err := c.ConfigGet(ctx, "maxmemory*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if cfg["maxmemory"] != "104857600" || cfg["maxmemory-policy"] != "allkeys-lru" {
		t.Fatalf("config after restore = %v", cfg)
	}

	// Without an explicit restore, Cleanup restores (the server is private,
	// so this only checks that it does not fail).
	t.Run("cleanup", func(t *testing.T) {
		s.RefuseWrites(t)
	})
	if err := c.Set(ctx, "k2", "v", 0).Err(); err != nil {
		t.Fatalf("SET after the subtest's cleanup: %v", err)
	}
}

func TestTLS(t *testing.T) {
	t.Parallel()
	s := redistest.StartTLS(t)
	ctx := context.Background()
	if s.ClientCertRequired {
		t.Fatal("ClientCertRequired without RequireClientCert")
	}
	if want := "rediss://" + s.Addr + "/0"; s.URL() != want {
		t.Fatalf("URL = %q, want %q", s.URL(), want)
	}
	for _, f := range []string{s.CAFile, s.ServerCertFile, s.ServerKeyFile, s.ClientCertFile, s.ClientKeyFile} {
		if _, err := os.Stat(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Client(t).Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("the ready client: %v", err)
	}

	// A client that trusts only the CA file (no client certificate) connects,
	// by the URL.
	opt, err := redis.ParseURL(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	opt.TLSConfig.RootCAs = caPool(t, s.CAFile)
	opt.MaxRetries = -1
	if got, err := tlsGet(opt, "k"); err != nil || got != "v" {
		t.Fatalf("GET with the CA = %q, %v", got, err)
	}

	// Without the CA the server's certificate does not verify.
	opt, _ = redis.ParseURL(s.URL())
	opt.MaxRetries = -1
	if _, err := tlsGet(opt, "k"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("GET without the CA: %v, want a certificate verification error", err)
	}

	// Plain TCP is not served.
	if err := ping(s.Addr); err == nil {
		t.Fatal("plain-text PING succeeded on the TLS port")
	}

	// Restart keeps TLS and the certificates.
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := s.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
}

func TestTLSRequireClientCert(t *testing.T) {
	t.Parallel()
	s := redistest.StartTLS(t, redistest.RequireClientCert())
	if !s.ClientCertRequired {
		t.Fatal("ClientCertRequired is false")
	}
	ctx := context.Background()
	if err := s.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("the ready client: %v", err)
	}

	noCert := s.TLSConfig()
	noCert.Certificates = nil
	if _, err := tlsGet(&redis.Options{Addr: s.Addr, TLSConfig: noCert, MaxRetries: -1}, "k"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("GET without a client certificate: %v, want a certificate error", err)
	}

	// A client built from the files alone, with the client certificate.
	cert, err := tls.LoadX509KeyPair(s.ClientCertFile, s.ClientKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	withCert := &tls.Config{RootCAs: caPool(t, s.CAFile), Certificates: []tls.Certificate{cert}}
	if _, err := tlsGet(&redis.Options{Addr: s.Addr, TLSConfig: withCert, MaxRetries: -1}, "k"); err != redis.Nil {
		t.Fatalf("GET with the client certificate: %v, want redis.Nil", err)
	}
}

func TestRequireClientCertNeedsTLS(t *testing.T) {
	t.Parallel()
	if s, err := redistest.StartProcess(redistest.RequireClientCert()); err == nil {
		_ = s.Stop()
		t.Fatal("StartProcess(RequireClientCert()) without TLS succeeded")
	}
}

// caPool returns a pool holding the PEM certificates in file.
func caPool(t *testing.T, file string) *x509.CertPool {
	t.Helper()
	pem, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", file)
	}
	return pool
}

// tlsGet runs GET key with a new client made from opt.
// The timeouts are generous on purpose: they bound a hang, never the answer. A 2 s dial
// timeout failed "without the CA" on a loaded machine (two busy loops beside the suite): the
// handshake had not finished, so the error was the deadline, not the certificate.
func tlsGet(opt *redis.Options, key string) (string, error) {
	opt.DialTimeout = 30 * time.Second
	opt.DialerRetries = 1 // fail fast on certificate errors
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return c.Get(ctx, key).Result()
}

func TestSentinel(t *testing.T) {
	t.Parallel()
	start := time.Now()
	ss := redistest.StartSentinel(t)
	t.Logf("topology ready in %v", time.Since(start))
	if ss.MasterName != redistest.SentinelMasterName || len(ss.Sentinels) != 3 || len(ss.SentinelAddrs) != 3 {
		t.Fatalf("set = %+v", ss)
	}
	ctx := context.Background()

	// The URL is in ParseFailoverURL's form and names every sentinel.
	fo, err := redis.ParseFailoverURL(ss.URL())
	if err != nil {
		t.Fatalf("ParseFailoverURL(%q): %v", ss.URL(), err)
	}
	if fo.MasterName != ss.MasterName || strings.Join(fo.SentinelAddrs, ",") != strings.Join(ss.SentinelAddrs, ",") {
		t.Fatalf("ParseFailoverURL(%q) = master %q, sentinels %v", ss.URL(), fo.MasterName, fo.SentinelAddrs)
	}
	byURL := redis.NewFailoverClient(fo)
	defer byURL.Close()
	if err := byURL.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING through the URL's client: %v", err)
	}
	if addr, err := ss.MasterAddr(ctx); err != nil || addr != ss.Master.Addr {
		t.Fatalf("MasterAddr = %q, %v; want %s", addr, err, ss.Master.Addr)
	}

	c := ss.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Wait(ctx, 1, time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 1000 = %d, %v: the replica did not acknowledge", n, err)
	}

	old := ss.Master.Addr
	if err := ss.Master.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	newAddr := ss.WaitFailover(t, old)
	t.Logf("failover in %v", time.Since(killed))
	if newAddr != ss.Replica.Addr {
		t.Fatalf("new master %s, want the replica %s", newAddr, ss.Replica.Addr)
	}

	// The failover client follows: it reads the replicated key from the
	// promoted replica and can write there.
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k after failover = %q, %v", got, err)
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("tcp_port:%d\r\n", ss.Replica.Port); !strings.Contains(info, want) {
		t.Fatalf("the failover client is not on the promoted replica (want %q)", want)
	}
	if err := c.Set(ctx, "k2", "v", 0).Err(); err != nil {
		t.Fatalf("SET after failover: %v", err)
	}
}
