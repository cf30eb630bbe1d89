// Package redistest starts private redis-server processes for tests.
//
// Tests must never use the shared Redis on 127.0.0.1:6379. It may hold somebody
// else's data. Every package that go test ./... runs in parallel shares it. A
// test that flushes it (FLUSHDB/FLUSHALL) destroys other tests' state.
//
// Instead each test binary starts its own redis-server, found on PATH. It runs
// on a free port in a temporary directory, with persistence disabled, and is
// stopped by pid when done. The processes are started in their own process
// group with a parent-death signal (on Linux). So they die even when the test
// binary is killed, e.g. by go test -timeout.
//
// The common case is one shared server per test package:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		rdb := redistest.Client(t)
//		queue := redistest.UniqueName(t)
//		...
//	}
//
// Tests sharing a server isolate themselves with unique queue names or key
// prefixes (UniqueName), never with FLUSHDB. Tests that need a server of their
// own use Start: outage simulation with Kill/Restart, special configuration
// with WithArgs. Tests that need Redis Cluster use StartCluster.
//
// Other helpers, each for a server of the test's own, follow.
// Server.RefuseWrites makes a server refuse writes with OOM errors (maxmemory
// 1, noeviction) until the returned restore is called.
//
// StartTLS starts a TLS-only server, with a CA, a server certificate and a
// client certificate generated for the test (crypto/x509). The
// RequireClientCert option makes client certificates mandatory.
//
// StartSentinel starts a Sentinel topology (master, replica, three sentinels)
// with a failover client and URL. WaitFailover is for tests that kill the
// master.
//
// To lose, delay or cut the traffic between a client and a server, put
// internal/faultproxy in between.
package redistest
