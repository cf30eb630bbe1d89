// Package redistest starts private redis-server processes for tests.
//
// Tests must never use the shared Redis on 127.0.0.1:6379: it may hold
// somebody else's data, it is shared by every package that go test ./...
// runs in parallel, and a test that flushes it (FLUSHDB/FLUSHALL) destroys
// other tests' state. Instead each test binary starts its own redis-server
// (found on PATH) on a free port in a temporary directory, with persistence
// disabled, and stops it by pid when done. The processes are started in
// their own process group with a parent-death signal (on Linux), so they die
// even when the test binary is killed, e.g. by go test -timeout.
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
// own (outage simulation with Kill/Restart, special configuration with
// WithArgs) use Start; tests that need Redis Cluster use StartCluster.
//
// Other helpers, each for a server of the test's own:
//
//   - Server.RefuseWrites makes a server refuse writes with OOM errors
//     (maxmemory 1, noeviction) until the returned restore is called.
//   - StartTLS starts a TLS-only server with a CA, a server certificate and
//     a client certificate generated for the test (crypto/x509); the
//     RequireClientCert option makes client certificates mandatory.
//   - StartSentinel starts a Sentinel topology (master, replica, three
//     sentinels) with a failover client and URL, and WaitFailover for tests
//     that kill the master.
//
// To lose, delay or cut the traffic between a client and a server, put
// internal/faultproxy in between.
package redistest
