package redistest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// shared is the package-wide server managed by Main and Shared.
var shared struct {
	sync.Mutex
	inMain bool    // Main is running the tests
	srv    *Server // started on first Shared call
	err    error   // first start failure, reported to every later caller
}

// Main runs the package's tests with a shared server: use it as
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
// The first Shared or Client call starts the server. So packages whose selected
// tests do not need Redis start none. After m.Run, Main stops the server and
// runs cleanups: what the package's tests shared. (Main exits, so a TestMain's
// defers would not run.) Then it exits with the tests' exit code.
func Main(m *testing.M, cleanups ...func()) {
	shared.Lock()
	shared.inMain = true
	shared.Unlock()

	code := m.Run()

	shared.Lock()
	srv := shared.srv
	shared.srv, shared.inMain = nil, false
	shared.Unlock()
	if srv != nil {
		if err := srv.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "redistest: stopping shared server: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	for _, c := range cleanups {
		c()
	}
	os.Exit(code)
}

// Shared returns the package's shared server, starting it on first use. It
// requires TestMain to call Main, which stops the server; otherwise it fails
// the test. Tests sharing the server must isolate themselves by unique queue
// names or key prefixes (UniqueName), never by FLUSHDB. They must not Stop,
// Kill or Restart it: use Start for that.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	shared.Lock()
	defer shared.Unlock()
	if !shared.inMain {
		tb.Fatal("redistest: Shared/Client need the package's TestMain to call redistest.Main(m)")
	}
	if shared.srv == nil {
		if shared.err == nil {
			shared.srv, shared.err = StartProcess()
		}
		if shared.err != nil {
			tb.Fatalf("redistest: starting shared server: %v", shared.err)
		}
	}
	return shared.srv
}

// Client returns a new go-redis client to the shared server (see Shared),
// closed in tb.Cleanup.
func Client(tb testing.TB) *redis.Client {
	tb.Helper()
	return Shared(tb).Client(tb)
}

// nameSeq makes UniqueName unique within the process.
var nameSeq atomic.Uint64

// maxNameLen is the maximum length of a UniqueName result.
const maxNameLen = 40

// UniqueName returns a short name unique within the process and, with
// overwhelming probability, across runs and processes, for use as a queue
// name or key prefix. It is a sanitized fragment of tb.Name() followed by a
// sequence number and a random suffix, e.g. "testfoo_bar-3f1c2a9b07e1", and
// has at most 40 characters, all in [a-z0-9_-].
func UniqueName(tb testing.TB) string {
	var b [5]byte
	_, _ = rand.Read(b[:]) // never fails
	suffix := strconv.FormatUint(nameSeq.Add(1), 36) + hex.EncodeToString(b[:])
	frag := sanitize(tb.Name())
	if max := maxNameLen - 1 - len(suffix); len(frag) > max {
		frag = strings.Trim(frag[len(frag)-max:], "_-") // the tail names the subtest
	}
	if frag == "" {
		return "t-" + suffix
	}
	return frag + "-" + suffix
}

// sanitize lowercases s, maps characters outside [a-z0-9_-] to '_', collapses
// runs of '_' and trims '_' and '-' at both ends.
func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			b.WriteRune(r)
		case strings.HasSuffix(b.String(), "_"):
		default:
			b.WriteByte('_')
		}
	}
	return strings.Trim(b.String(), "_-")
}
